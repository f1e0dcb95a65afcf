"""ATLAS's verifier (morkit's addition: the paper has none): what it scores, when, and in how many calls.

Scores compared come from one call unless the verifier declares them absolute (docs/loops/atlas.md)."""

from __future__ import annotations

from typing import Any, Sequence

from morkit.loops.atlas.state import RunState
from morkit.loops.base import metered_verifier
from morkit.verify.base import scores_are_absolute


def verify(verifier: Any, run: RunState, answers: Sequence[str], context: Sequence[str] = ()) -> list[Any] | None:
    """The verifier's verdicts for `answers` (one call, `context` their siblings), or None (recorded) when it
    fails: a failed verifier loses scores, not the run."""
    try:
        return list(metered_verifier(verifier, run.spend).verify(run.problem, list(answers), list(context)))
    except Exception as err:  # noqa: BLE001 - any verifier backend; recorded, the loop goes on
        run.trace.add("verify_error", error=f"{type(err).__name__}: {err}", answers=len(answers))
        return None


def _shown(verifier: Any, show_scores: bool, absolute: bool) -> bool:
    """Whether scores are shown from `verifier` and its scores are (`absolute`) or are not comparable across
    calls: absolute ones are scored per explore, the others re-scored in one call per turn."""
    return verifier is not None and show_scores and scores_are_absolute(verifier) == absolute


def score_explore(verifier: Any, show_scores: bool, item: dict[str, Any], run: RunState) -> None:
    """An absolute score and feedback for one new candidate, when scores are shown."""
    if not _shown(verifier, show_scores, absolute=True):
        return
    verdicts = verify(verifier, run, [item["text"]])
    if verdicts:
        item["score"], item["feedback"] = float(verdicts[0].score), verdicts[0].feedback


def refresh_table(verifier: Any, show_scores: bool, run: RunState) -> None:
    """Re-score every candidate so far in one call, when scores are shown but not absolute and the candidates
    changed since the last table."""
    answered = [e for e in run.evidence if e["text"]]
    indices = [e["index"] for e in answered]
    if not _shown(verifier, show_scores, absolute=False) or not answered or (run.table is not None and run.table["of"] == indices):
        return
    verdicts = verify(verifier, run, [e["text"] for e in answered])
    run.table = {"of": indices, "scores": [float(v.score) for v in verdicts] if verdicts else None}
    run.trace.add("score_table", of=indices, scores=run.table["scores"])


def table_line(run: RunState) -> str | None:
    """The current table as the orchestrator reads it, or None when there is none."""
    if run.table is None or run.table["scores"] is None:
        return None
    scores = ", ".join(f"#{i} {s:.3f}" for i, s in zip(run.table["of"], run.table["scores"]))
    return (f"Verifier scores, from one call over the {len(run.table['of'])} candidates so far (they compare "
            f"with each other, not with an earlier turn's scores): {scores}.")


def end_scores(verifier: Any, run: RunState, synthesis: str | None,
               answered: Sequence[dict[str, Any]]) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Scores by text of the synthesis (or of the candidates, for the fallback), and what the end call scored.

    One call: the synthesis alone when scores are absolute, else beside every candidate; for the fallback,
    every candidate, unless all have absolute scores already ([] when no call was made)."""
    if verifier is None:
        return {}, []
    absolute = scores_are_absolute(verifier)
    if synthesis is None and answered and absolute and all(e["score"] is not None for e in answered):
        run.trace.add("rescore", reused=[e["index"] for e in answered])
        return {e["text"]: e["score"] for e in answered}, []
    candidates = [("synthesis", synthesis)] if synthesis else []
    if synthesis is None or not absolute:
        candidates += [(e["index"], e["text"]) for e in answered]
    if not candidates:
        return {}, []
    texts = list(dict.fromkeys(text for _, text in candidates))
    # every candidate, repeats included, as the siblings: a set-level member (consensus) counts each copy, as
    # the per-turn table does
    verdicts = verify(verifier, run, texts, [text for _, text in candidates])
    if verdicts is None:
        return {}, []
    scores = {t: float(v.score) for t, v in zip(texts, verdicts)}
    rescored = [{"of": of, "score": scores.get(t)} for of, t in candidates]
    run.trace.add("rescore", scores=rescored)
    return scores, rescored
