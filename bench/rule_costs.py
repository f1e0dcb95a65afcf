"""What the rules cost per scored candidate, in CPU seconds: the figures on their cards (`cost=RMCost(cpu_seconds=...)`
in morkit/reward_models/catalog.py).

Each rule scores real queries, query by query as a scoring run does (`score_query`), after one query scored to warm
it up (imports); each of `--repeats` repeats scores queries of its own, so no repeat reads what an earlier one cached
(math-verify keeps parsed answers). A repeat's CPU time is this process's and its finished children's (code-tests
runs every candidate in sandboxed subprocesses), divided by the candidates scored. The median repeat is the figure.
  math-consensus  `--math` GSM8K questions per repeat from gsm8k_model_solutions (4 GPT-3 solutions each)
  code-tests      `--code` HumanEval tasks per repeat from humaneval_davinci_samples (`--per-task` completions each)

    .venv/bin/python bench/rule_costs.py [--data-dir DIR] [--repeats 5] [--math 150] [--code 12] [--per-task 5]

Prints one row per rule: candidates, CPU ms per candidate (median, min, max over repeats), wall ms per candidate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence


def queries_of(rule: str, data_dir: Path, args: argparse.Namespace) -> tuple[Any, list[list[Any]]]:
    """(a warm-up query, the queries of each repeat), all distinct."""
    from morkit.data import datasets

    if rule == "math-consensus":
        every, size = datasets.gsm8k_model_solutions(data_dir), args.math
    else:
        every, size = datasets.humaneval_davinci(data_dir, per_task=args.per_task), args.code
    if len(every) < size * args.repeats + 1:
        raise SystemExit(f"{rule}: {len(every)} queries, fewer than {args.repeats} repeats of {size} and one more")
    return every[-1], [every[i * size : (i + 1) * size] for i in range(args.repeats)]


def repeat_costs(rm: Any, warm_up: Any, repeats: Sequence[Sequence[Any]]) -> list[tuple[float, float, int]]:
    """(CPU seconds, wall seconds, candidates) per candidate for each repeat, each scoring its queries once."""
    from morkit.reward_models.timing import cpu_clock

    rm.score_query(warm_up)
    out = []
    for queries in repeats:
        candidates = sum(len(q.candidates) for q in queries)
        cpu, wall = cpu_clock(), time.perf_counter()
        for query in queries:
            rm.score_query(query)
        out.append(((cpu_clock() - cpu) / candidates, (time.perf_counter() - wall) / candidates, candidates))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from morkit.core.settings import data_dir as default_data_dir
    from morkit.reward_models.catalog import load_rm

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="the data sets' folder (default $MORKIT_DATA_DIR)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--math", type=int, default=150, help="GSM8K questions per repeat for math-consensus")
    parser.add_argument("--code", type=int, default=12, help="HumanEval tasks per repeat for code-tests")
    parser.add_argument("--per-task", type=int, default=5, help="completions per HumanEval task")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    data_dir = default_data_dir(args.data_dir)
    rows = []
    for rule in ("math-consensus", "code-tests"):
        warm_up, repeats = queries_of(rule, data_dir, args)
        costs = repeat_costs(load_rm(rule), warm_up, repeats)
        cpu = sorted(c for c, _, _ in costs)
        rows.append({"rule": rule, "candidates": sum(n for _, _, n in costs), "repeats": args.repeats,
                     "cpu_seconds": statistics.median(cpu), "cpu_min": cpu[0], "cpu_max": cpu[-1],
                     "wall_seconds": statistics.median(w for _, w, _ in costs)})
    print(f"{'rule':<16}{'candidates':>11}{'CPU ms/cand (median)':>22}{'min':>8}{'max':>8}{'wall ms/cand':>14}")
    for r in rows:
        print(f"{r['rule']:<16}{r['candidates']:>11}{r['cpu_seconds'] * 1e3:>22.3f}{r['cpu_min'] * 1e3:>8.3f}"
              f"{r['cpu_max'] * 1e3:>8.3f}{r['wall_seconds'] * 1e3:>14.3f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
