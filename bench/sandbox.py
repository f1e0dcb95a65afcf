"""What the sandbox's isolation costs per run, against a bare interpreter start measured in the same run.

Paths, each run `--runs` times one after another, then `run_many` with 2 workers:
  bare python     `python -I -S -B -c "pass"` in a subprocess (no isolation: the floor)
  sandbox         morkit's sandbox on the same trivial program (namespaces, new root, limits, seccomp)
  humaneval       code-tests on real HumanEval completions (program + tests, completion report)

    .venv/bin/python bench/sandbox.py [--runs 40]

Last line: `sandbox: <ms> ms per run, <r>x a bare interpreter start; <n> HumanEval candidates/s with 2 workers`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def bare_start(runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        subprocess.run([sys.executable, "-I", "-S", "-B", "-c", "pass"], check=True)
    return (time.perf_counter() - start) / runs


def sandbox_start(runs: int) -> float:
    from morkit.runtime.sandbox import run_python

    start = time.perf_counter()
    for _ in range(runs):
        assert run_python("pass").passed
    return (time.perf_counter() - start) / runs


def humaneval_rate(data_dir: Path, per_task: int = 10) -> tuple[int, float]:
    from morkit.core.types import Candidate, Query
    from morkit.reward_models.rules import CodeTests, humaneval_program

    path = data_dir / "humaneval_davinci_samples" / "humaneval_py_davinci_200.tasks_lt130.jsonl"
    if not path.exists():
        return 0, 0.0
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(4), f)]
    queries = [Query(id=r["task_id"], question=r["prompt"], tests=r["tests"],
                     candidates=tuple(Candidate(humaneval_program(r["prompt"], c)) for c in r["completions"][:per_task]))
               for r in rows]
    rm = CodeTests(workers=2)
    start = time.perf_counter()
    n = sum(len(rm.run_tests(q)) for q in queries)
    return n, n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40, help="runs per path (default 40)")
    args = parser.parse_args()
    data_dir = Path(os.environ.get("MORKIT_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
    bare = bare_start(args.runs)
    boxed = sandbox_start(args.runs)
    n, rate = humaneval_rate(data_dir)
    print(f"bare python  {bare * 1000:7.1f} ms per run")
    print(f"sandbox      {boxed * 1000:7.1f} ms per run")
    print(f"humaneval    {n} candidates, {rate:.1f}/s with 2 workers" if n else "humaneval    data set missing")
    print(f"sandbox: {boxed * 1000:.1f} ms per run, {boxed / bare:.2f}x a bare interpreter start; "
          f"{rate:.1f} HumanEval candidates/s with 2 workers")


if __name__ == "__main__":
    main()
