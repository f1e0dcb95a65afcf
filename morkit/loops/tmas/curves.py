"""Per-iteration accuracy curves from TMAS output records (the JSON lines of `morkit loop tmas`): best-so-far
(what the loop would answer had it stopped after round t) and round mean (round t's pass@1); definitions and
edge cases: docs/loops/tmas.md, "Per-iteration curves"."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from morkit.core.errors import InputError


def curve_point(iteration: int, rollouts: Sequence[Any], choice: Any) -> dict[str, Any]:
    """One point of a run's `curve`: what the loop would answer had it stopped after this round (a
    morkit.loops.tmas.choice.Choice), and how the round's own solutions did."""
    graded = [r.correct for r in rollouts if r.correct is not None]
    scored = [r.score for r in rollouts if r.score is not None]
    selected = choice.rollout
    return {"iteration": iteration, "selected": {"iteration": selected.iteration, "index": selected.index},
            "answer": selected.answer, "score": choice.score, "rule": choice.rule, "correct": selected.correct,
            "round_size": len(rollouts), "round_accuracy": sum(graded) / len(graded) if graded else None,
            "round_mean_score": sum(scored) / len(scored) if scored else None}


def record_curve(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One record's points: [{"iteration", "correct", "round_accuracy"}], iteration 1 first."""
    state = record.get("state") or {}
    if state.get("curve"):
        return [{"iteration": p["iteration"], "correct": p.get("correct"), "round_accuracy": p.get("round_accuracy")}
                for p in state["curve"]]
    rollouts = state.get("rollouts")
    if rollouts is None:
        raise InputError(f"record {record.get('id', '?')!r} has neither state.curve nor state.rollouts: "
                         "not a TMAS output record")
    points, seen = [], []
    for iteration in sorted({r["iteration"] for r in rollouts}):
        round_ = [r for r in rollouts if r["iteration"] == iteration]
        seen.extend(round_)
        scored = [r for r in seen if r.get("score") is not None]
        best = (max(scored, key=lambda r: (r["score"], -r["iteration"], -r["index"])) if scored
                else round_[0])
        graded = [r["correct"] for r in round_ if r.get("correct") is not None]
        points.append({"iteration": iteration, "correct": best.get("correct"),
                       "round_accuracy": sum(graded) / len(graded) if graded else None})
    return points


def aggregate(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean curves over records: per iteration, best-so-far accuracy and round-mean accuracy, with counts."""
    curves = [record_curve(r) for r in records]
    last = max((len(c) for c in curves), default=0)
    rows = []
    for t in range(1, last + 1):
        best = [(c[t - 1] if len(c) >= t else c[-1])["correct"] for c in curves if c]
        best = [b for b in best if b is not None]
        rounds = [c[t - 1]["round_accuracy"] for c in curves if len(c) >= t]
        rounds = [a for a in rounds if a is not None]
        rows.append({"iteration": t,
                     "best_so_far": sum(best) / len(best) if best else None, "best_n": len(best),
                     "round_mean": sum(rounds) / len(rounds) if rounds else None, "round_n": len(rounds)})
    return rows
