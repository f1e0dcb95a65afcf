"""What the sandbox's isolation costs per run, against a bare interpreter start measured in the same run.

Paths, each run `--runs` times one after another, then `run_many` with 2 workers:
  bare python     `python -I -S -B -c "pass"` in a subprocess (no isolation: the floor)
  sandbox         morkit's sandbox on the same trivial program (namespaces, new root, limits, seccomp)
  test harness    a one-line function and one assert through `run_python(tests=...)`: the candidate's and the
                  tests' processes, one call across the pipe, the completion report
  humaneval       code-tests on real HumanEval completions (program + tests, completion report)

    .venv/bin/python bench/sandbox.py [--runs 40] [--references]

--references also runs every HumanEval and sanitized MBPP reference solution against its tests through
code-tests (591 programs, about half a minute) and lists those that fail: the harness's false negatives; it also
counts the checks the passing ones ran (asserts passed, unittest tests run).

Last line: `sandbox: <ms> ms per run, <r>x a bare interpreter start; test harness <ms> ms per run;
<n> HumanEval candidates/s with 2 workers`.
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


def harness_start(runs: int) -> float:
    from morkit.runtime.sandbox import run_python

    start = time.perf_counter()
    for _ in range(runs):
        assert run_python("def f():\n    return 1\n", tests="assert f() == 1\n").passed
    return (time.perf_counter() - start) / runs


def humaneval_rate(data_dir: Path, per_task: int = 10) -> tuple[int, float]:
    from morkit.core.types import Candidate, Query
    from morkit.reward_models.rules.code_tests import CodeTests, humaneval_program

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


def reference_failures(data_dir: Path) -> tuple[int, list[tuple[str, str]], int]:
    """(programs run, [(task id, last line of why)], checks the passing ones ran) for the benchmarks' own solutions
    under code-tests."""
    import gzip
    from dataclasses import replace

    from morkit.core.types import Candidate
    from morkit.data.datasets import load_spec
    from morkit.reward_models.rules.code_tests import CodeTests

    with gzip.open(data_dir / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        solutions = {row["task_id"]: row["prompt"] + row["canonical_solution"] for row in map(json.loads, f)}
    mbpp = json.loads((data_dir / "mbpp_sanitized" / "sanitized-mbpp.json").read_text(encoding="utf-8"))
    solutions.update({f"mbpp-{row['task_id']}": row["code"] for row in mbpp})
    queries = load_spec("humaneval", str(data_dir)) + load_spec("mbpp", str(data_dir))
    rm = CodeTests(workers=2)
    failed, checks = [], 0
    for query in queries:
        result = rm.run_tests(replace(query, candidates=(Candidate(solutions[query.id]),)))[0]
        checks += result.checks or 0
        if not result.passed:
            failed.append((query.id, (result.stderr.strip().splitlines() or [result.status])[-1]))
    return len(queries), failed, checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40, help="runs per path (default 40)")
    parser.add_argument("--references", action="store_true",
                        help="also run the 591 HumanEval and MBPP reference solutions and list those that fail")
    args = parser.parse_args()
    data_dir = Path(os.environ.get("MORKIT_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
    bare = bare_start(args.runs)
    boxed = sandbox_start(args.runs)
    harness = harness_start(args.runs)
    n, rate = humaneval_rate(data_dir)
    print(f"bare python  {bare * 1000:7.1f} ms per run")
    print(f"sandbox      {boxed * 1000:7.1f} ms per run")
    print(f"test harness {harness * 1000:7.1f} ms per run")
    print(f"humaneval    {n} candidates, {rate:.1f}/s with 2 workers" if n else "humaneval    data set missing")
    if args.references:
        count, failed, checks = reference_failures(data_dir)
        for task, why in failed:
            print(f"reference fails: {task}: {why}")
        print(f"references   {count - len(failed)} of {count} pass, {checks:,} checks run")
    print(f"sandbox: {boxed * 1000:.1f} ms per run, {boxed / bare:.2f}x a bare interpreter start; "
          f"test harness {harness * 1000:.1f} ms per run; {rate:.1f} HumanEval candidates/s with 2 workers")


if __name__ == "__main__":
    main()
