"""The code-tests rule (kind "rule"): 1 when a candidate program passes the query's tests (`tests`, `stdio_tests` or
both) in a sandboxed subprocess, else 0, without a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar, Mapping, Sequence

from morkit.core import budget
from morkit.core.errors import InputError
from morkit.core.grading import program_text
from morkit.core.types import Query, Score
from morkit.reward_models.base import EMPTY_ANSWER_SCORE, is_empty_answer
from morkit.reward_models.rules.prompt_code import TaskCode, declared_entry_point, task_code
from morkit.runtime.sandbox import SandboxLimits, SandboxResult, in_parallel, run_python


def humaneval_program(prompt: str, completion: str) -> str:
    """The candidate program for HumanEval-style data: the prompt (signature + docstring) + body."""
    return prompt + completion


_NOT_RUN = SandboxResult("failed", None, "", "empty answer: not run", 0.0)


def stdio_output_matches(output: str, expected: str) -> bool:
    """LiveCodeBench's stdin/stdout comparison (grade_stdio): stripped texts, stripped lines, equal line counts, and
    each pair of lines equal as text or as Decimal numbers ("1.0" matches "1")."""
    mine, theirs = _stripped_lines(output), _stripped_lines(expected)
    return len(mine) == len(theirs) and all(a == b or _same_numbers(a, b) for a, b in zip(mine, theirs))


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _same_numbers(a: str, b: str) -> bool:
    try:
        return [Decimal(x) for x in a.split()] == [Decimal(x) for x in b.split()]
    except (InvalidOperation, ValueError):  # not numbers (or a signalling NaN)
        return False


def stdio_tests(query: Query) -> list[dict[str, str]] | None:
    """The query's stdin/stdout tests (`extra["stdio_tests"]`: [{"input": str, "output": str}, ...]), or None."""
    tests = query.extra.get("stdio_tests")
    if tests is None:
        return None
    if not (isinstance(tests, list) and tests and all(
            isinstance(t, Mapping) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)
            for t in tests)):
        raise InputError(f"query {query.id!r}: 'stdio_tests' must be a non-empty list of "
                         "{\"input\": string, \"output\": string}")
    return [{"input": t["input"], "output": t["output"]} for t in tests]


def run_stdio_tests(program: str, tests: Sequence[Mapping[str, str]], limits: SandboxLimits,
                    bound: budget.WorkBound = budget.WorkBound()) -> SandboxResult:
    """Run `program` once per test, each in its own sandbox with the test's input on stdin, until one fails; the result
    is the failing test's, else the last one's, whose `checks` is the number of tests. The output cap grows to fit
    twice the expected output (plus 4 KiB); each run first checks `bound`."""
    result = _NOT_RUN
    for number, test in enumerate(tests, start=1):
        bound.check()
        room = max(limits.max_output_bytes, 2 * len(test["output"].encode("utf-8")) + 4096)
        result = run_python(program, replace(limits, max_output_bytes=room), stdin=test["input"])
        where = f"morkit: stdin/stdout test {number} of {len(tests)}"
        if not result.passed:
            return replace(result, stderr=(result.stderr + f"\n{where}: the program did not exit 0").lstrip())
        if not stdio_output_matches(result.stdout, test["output"]):
            return replace(result, status="failed", stderr=(result.stderr + f"\n{where}: wrong output").lstrip())
    return replace(result, checks=len(tests))


@dataclass(frozen=True)
class CodeTests:
    """Test verifier: 1.0 if the candidate program (an answer's fenced block that defines something, else the whole
    text) passes all of its query's tests in the sandbox, with at least one check run, else 0.0: test code as
    `__main__` against the candidate imported as `solution`, in a process of its own, and stdin/stdout tests
    compared as LiveCodeBench does. Docs: Reward models, code-tests."""

    name: str = "code-tests"
    limits: SandboxLimits = SandboxLimits()
    workers: int = 2
    kind: ClassVar[str] = "rule"

    def run_tests(self, query: Query) -> list[SandboxResult]:
        """One sandbox result per candidate (why it failed: status, stderr; how many checks ran); empty ones are not
        run."""
        code, stdio = self._tests(query)
        bound = budget.current()  # this thread's: the workers below check it before every run
        bound.check()
        task = task_code(query, code) if code is not None else TaskCode("", "", None)

        def run(program: str) -> SandboxResult:
            if code is None:
                return run_stdio_tests(program, stdio or [], self.limits, bound)
            bound.check()
            result = run_python(program, self.limits, tests=task.tests, helpers=task.helpers)
            if not result.passed or stdio is None:
                return result
            ran = run_stdio_tests(program, stdio, self.limits, bound)
            return replace(ran, checks=(result.checks or 0) + ran.checks) if ran.passed else ran

        todo = [i for i, c in enumerate(query.candidates) if not is_empty_answer(c.text)]
        ran = in_parallel(run, [program_text(query.candidates[i].text, task.under_test) for i in todo], self.workers)
        results = [_NOT_RUN] * len(query.candidates)
        for i, result in zip(todo, ran):
            results[i] = result
        return results

    def score_query(self, query: Query) -> list[Score]:
        results = self.run_tests(query)
        return [Score(EMPTY_ANSWER_SCORE if is_empty_answer(c.text) else float(r.passed))
                for c, r in zip(query.candidates, results)]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        raise InputError(f"{self.name} needs each query's tests, which (question, answer) pairs do not carry; "
                         "use score_query on queries with a 'tests' or 'stdio_tests' field")

    def cache_context(self, query: Query) -> str | None:
        """What besides the answer decides a score: the question, the test code, the stdin/stdout tests and the
        entry point the query names (None where it has none), as one JSON object."""
        code, stdio = self._tests(query)
        return json.dumps({"question": query.question, "tests": code, "stdio_tests": stdio,
                           "entry_point": declared_entry_point(query)}, ensure_ascii=False, sort_keys=True)

    def _tests(self, query: Query) -> tuple[str | None, list[dict[str, Any]] | None]:
        """(test code or None, stdin/stdout tests or None); at least one of them."""
        code = query.tests if query.tests and query.tests.strip() else None
        stdio = stdio_tests(query)
        if code is None and stdio is None:
            raise InputError(f"query {query.id!r} has no tests; {self.name} needs Python test code in 'tests' "
                             "or stdin/stdout tests in 'stdio_tests'")
        return code, stdio
