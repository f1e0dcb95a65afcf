"""Grader agreement with labels recorded by the data sets' authors, on the shared data.

  gsm8k_model_solutions      4,000 graded model solutions (math grader, strict and lenient)
  humaneval_davinci_samples  recorded pass/fail of davinci completions (code grader, sandboxed tests)

    .venv/bin/python bench/graders.py [--humaneval-per-task 20]

Prints per data set: candidates compared, agreement, undecided (no stated answer), seconds.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def agreement(dataset: str, grader: str, per_query: int | None = None, **options) -> tuple[int, int, int, float]:
    """(agreeing, compared, undecided, seconds) of the grader against the recorded `correct` labels."""
    from morkit.data.datasets import load_spec
    from morkit.question_pool.graders import GRADERS

    data_dir = os.environ.get("MORKIT_DATA_DIR") or str(Path(__file__).resolve().parents[2] / "shared" / "data")
    queries = load_spec(dataset, data_dir)
    grade = GRADERS.load(grader)(**options).grade
    agree = compared = undecided = 0
    start = time.perf_counter()
    for query in queries:
        candidates = [c for c in query.candidates if c.correct is not None][:per_query]
        for candidate, result in zip(candidates, grade(query, [c.text for c in candidates])):
            compared += 1
            agree += result.correct == candidate.correct
            undecided += result.reason is not None
    return agree, compared, undecided, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--humaneval-per-task", type=int, default=20, help="completions per task (default 20)")
    args = parser.parse_args()
    rows = [("gsm8k_model_solutions", "math (strict)", agreement("gsm8k_model_solutions", "math", strict=True)),
            ("gsm8k_model_solutions", "math (lenient)", agreement("gsm8k_model_solutions", "math", strict=False)),
            ("humaneval_davinci_samples", "code", agreement("humaneval_davinci_samples", "code",
                                                              per_query=args.humaneval_per_task))]
    print(f"{'data set':27} {'grader':15} {'agree':>7} {'of':>6} {'rate':>7} {'undecided':>9} {'seconds':>8}")
    for dataset, grader, (agree, compared, undecided, seconds) in rows:
        print(f"{dataset:27} {grader:15} {agree:7d} {compared:6d} {agree / max(compared, 1):7.2%} {undecided:9d} "
              f"{seconds:8.1f}")


if __name__ == "__main__":
    main()
