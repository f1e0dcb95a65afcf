"""What a too-long answer loses: PRR and best-of-n of an RM under each truncation policy, in one run.

Data (shared, labelled, with long answers):
- qwen25_math_rm8: 70 MATH problems x 8 Qwen2.5-Math answers, each labelled correct or not. PRR is the
  share of (correct, wrong) pairs of a question the RM orders right (ties count as wrong), averaged over
  the questions with both labels; best-of-n is the accuracy of the top-scored answer (ties shared).
- ifeval_gpt4: the IFEval prompts with the one GPT-4 response each, labelled by morkit's instruction
  grader (strict). With one answer per prompt there is no PRR or best-of-n: the figure there is the same
  pairwise accuracy over every (followed, not followed) pair of responses across prompts (an AUC).
- gsm8k_model_solutions questions 601-1000 (held out from both packaged heads) x 4 GPT-3 solutions, whose
  final answer is their last line ("#### 42"), in a window of --gsm8k-tokens (default 128) that cuts most.

Each RM runs with a window of --max-tokens (default 256, where most answers are cut) under the
`middle`, `right` and `left` policies; `error` is reported as the number of pairs it would refuse. The
differences against `right` (the policy before `middle` became the default) come with a paired standard
error over questions. No score cache is used. The packaged minilm-probe head was fitted on all 70
Qwen2.5-Math problems (at 256 tokens, cut on the right) and smollm2-orm's on the first 30 (at 768).

    .venv/bin/python bench/truncation.py [--rms minilm-probe smollm2-orm] [--max-tokens 256] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

POLICIES = ("middle", "right", "left")


GSM8K_HELD_OUT = slice(600, 1000)  # neither packaged head saw these questions


def load_sets(data_dir: str | None, ifeval: bool) -> dict[str, list[Any]]:
    """The labelled data sets: Qwen2.5-Math samples, held-out GSM8K solutions and, when asked, the graded
    IFEval GPT-4 responses."""
    from dataclasses import replace

    from morkit.core import settings
    from morkit.data.datasets import gsm8k_model_solutions, ifeval_gpt4, qwen25_math_rm8

    root = settings.data_dir(data_dir)
    sets = {"qwen25_math_rm8": qwen25_math_rm8(root),
            "gsm8k_model_solutions[600:1000]": gsm8k_model_solutions(root)[GSM8K_HELD_OUT]}
    if ifeval:
        from morkit.question_pool.ifeval import InstructionGrader

        grader = InstructionGrader()
        graded = []
        for query in ifeval_gpt4(root):
            (grade,) = grader.grade(query, [query.candidates[0].text])
            graded.append(replace(query, candidates=(replace(query.candidates[0], correct=grade.correct),)))
        sets["ifeval_gpt4"] = graded
    return sets


def paired_se(diffs: Sequence[float]) -> float:
    n = len(diffs)
    if n < 2:
        return float("nan")
    mean = sum(diffs) / n
    return math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1) / n)


def per_question(queries: Sequence[Any], scores: Sequence[Sequence[float]]) -> dict[str, list[float]]:
    """PRR (questions with both labels), best-of-n hit (every question) and tied (correct, wrong) pairs."""
    import numpy as np

    from morkit.question_pool.prr import best_of_n_hit, prr

    out: dict[str, list[float]] = {"prr": [], "best": [], "ties": []}
    for query, row in zip(queries, scores):
        values = np.asarray(row, dtype=np.float64)
        correct = np.asarray([c.correct for c in query.candidates], dtype=bool)
        out["best"].append(best_of_n_hit(values, correct))
        value = prr(values, correct)
        out["prr"].append(value)
        good, bad = values[correct], values[~correct]
        out["ties"].append(float((good[:, None] == bad[None, :]).sum()))
    return out


def across(queries: Sequence[Any], scores: Sequence[Sequence[float]]) -> float:
    """Pairwise accuracy over every (correct, wrong) pair of answers across all queries (ties count as wrong)."""
    from morkit.question_pool.prr import prr

    flat = [s for row in scores for s in row]
    labels = [c.correct for q in queries for c in q.candidates]
    return prr(flat, labels)


def score_all(name: str, queries: Sequence[Any], max_tokens: int, policy: str) -> tuple[list[list[float]], int, float]:
    """Every candidate's score under `policy`, how many answers were cut, and the seconds it took."""
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.catalog import resolve_rm
    from morkit.reward_models.scoring import score_queries

    rm = resolve_rm(name, ScoringOptions(max_tokens=max_tokens, truncation=policy)).load()
    started = time.perf_counter()
    scored = score_queries(queries, [rm])
    seconds = time.perf_counter() - started
    rows = [[float(c.scores[name]) for c in q.candidates] for q in scored]
    cut = sum(name in c.extra.get("truncated", ()) for q in scored for c in q.candidates)
    return rows, cut, seconds


def refused(name: str, queries: Sequence[Any], max_tokens: int) -> int:
    """How many pairs `--truncation error` would refuse: those whose rendered pair is over the limit."""
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.catalog import resolve_rm

    rm = resolve_rm(name, ScoringOptions(max_tokens=max_tokens, truncation="error")).load()
    return sum(len(rm.render(q.question, c.text)) > max_tokens for q in queries for c in q.candidates)


def measure(name: str, data: str, queries: Sequence[Any], max_tokens: int) -> dict[str, Any]:
    total = sum(len(q.candidates) for q in queries)
    result: dict[str, Any] = {"rm": name, "data": data, "max_tokens": max_tokens, "answers": total,
                              "error_refuses": refused(name, queries, max_tokens), "policies": {}}
    stats = {}
    for policy in POLICIES:
        rows, cut, seconds = score_all(name, queries, max_tokens, policy)
        entry: dict[str, Any] = {"cut": cut, "seconds": round(seconds, 1)}
        if data == "ifeval_gpt4":
            entry["pairwise_accuracy"] = across(queries, rows)
        else:
            stats[policy] = per_question(queries, rows)
            mixed = [p for p in stats[policy]["prr"] if not math.isnan(p)]
            entry.update(prr=sum(mixed) / len(mixed), prr_questions=len(mixed),
                         best_of_n=sum(stats[policy]["best"]) / len(queries),
                         tied_pairs=int(sum(stats[policy]["ties"])))
        result["policies"][policy] = entry
        print(f"  {name} on {data}, {policy}: {json.dumps(entry)}", file=sys.stderr)
    if stats:
        for policy in ("middle", "left"):
            for key in ("prr", "best"):
                diffs = [a - b for a, b in zip(stats[policy][key], stats["right"][key])
                         if not (math.isnan(a) or math.isnan(b))]
                result["policies"][policy][f"{key}_vs_right"] = [sum(diffs) / len(diffs), paired_se(diffs)]
    return result


def shipped_row(queries: Sequence[Any]) -> dict[str, float]:
    """The Qwen2.5-Math-RM-72B scores the data set ships (made on whole answers), for scale."""
    rows = [[c.scores["qwen2.5-math-rm-72b"] for c in q.candidates] for q in queries]
    stats = per_question(queries, rows)
    mixed = [p for p in stats["prr"] if not math.isnan(p)]
    return {"prr": sum(mixed) / len(mixed), "best_of_n": sum(stats["best"]) / len(queries)}


def print_table(results: Sequence[dict[str, Any]], shipped: dict[str, float] | None) -> None:
    print("| data | RM @ tokens | policy | answers cut | PRR | vs right | best-of-n | vs right | tied pairs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for result in results:
        for policy, e in result["policies"].items():
            cut = f"{e['cut']}/{result['answers']}"
            where = f"{result['rm']} @ {result['max_tokens']}"
            if "pairwise_accuracy" in e:
                print(f"| {result['data']} | {where} | {policy} | {cut} | {e['pairwise_accuracy']:.3f} (across "
                      f"prompts) | | | | |")
                continue
            vs = {k: (f"{e[k][0]:+.3f} ± {e[k][1]:.3f}" if k in e else "") for k in ("prr_vs_right", "best_vs_right")}
            print(f"| {result['data']} | {where} | {policy} | {cut} | {e['prr']:.3f} | {vs['prr_vs_right']} | "
                  f"{e['best_of_n']:.3f} | {vs['best_vs_right']} | {e['tied_pairs']} |")
        print(f"| {result['data']} | {result['rm']} @ {result['max_tokens']} | error | refuses "
              f"{result['error_refuses']}/{result['answers']} | | | | | |")
    if shipped:
        print(f"| qwen25_math_rm8 | qwen2.5-math-rm-72b (scores shipped with the data, whole answers) | - | - | "
              f"{shipped['prr']:.3f} | | {shipped['best_of_n']:.3f} | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rms", nargs="+", default=["minilm-probe"], help="RMs to run (default minilm-probe)")
    parser.add_argument("--max-tokens", type=int, default=256,
                        help="the window every RM gets on the Qwen2.5-Math and IFEval answers (default 256)")
    parser.add_argument("--gsm8k-tokens", type=int, default=128,
                        help="the window on the shorter GSM8K solutions (default 128)")
    parser.add_argument("--no-ifeval", action="store_true", help="skip the IFEval GPT-4 responses")
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()

    sets = load_sets(args.data_dir, not args.no_ifeval)
    for data, queries in sets.items():
        labels = [c.correct for q in queries for c in q.candidates]
        print(f"{data}: {len(queries)} queries, {len(labels)} answers, {sum(labels)} correct", file=sys.stderr)
    windows = {data: args.gsm8k_tokens if data.startswith("gsm8k") else args.max_tokens for data in sets}
    results = [measure(name, data, queries, windows[data]) for name in args.rms for data, queries in sets.items()]
    shipped = shipped_row(sets["qwen25_math_rm8"])
    print_table(results, shipped)
    if args.json:
        from morkit.data.jsonl import atomic_path

        with atomic_path(args.json) as tmp:
            tmp.write_text(json.dumps({"results": results, "shipped": shipped}, indent=1))


if __name__ == "__main__":
    main()
