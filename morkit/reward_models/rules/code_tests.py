"""The code-tests rule (kind "rule"): 1 when a candidate program passes the query's tests, else 0, without a model.

CodeTests runs each candidate in a sandboxed subprocess with assert-style test code (`tests`), stdin/stdout
tests (`extra["stdio_tests"]`), or both.
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
from morkit.runtime.sandbox import SandboxLimits, SandboxResult, in_parallel, run_python


def humaneval_program(prompt: str, completion: str) -> str:
    """The candidate program for HumanEval-style data: the prompt (signature + docstring) + body."""
    return prompt + completion


_NOT_RUN = SandboxResult("failed", None, "", "empty answer: not run", 0.0)


def stdio_output_matches(output: str, expected: str) -> bool:
    """LiveCodeBench's stdin/stdout comparison (lcb_runner/evaluation/testing_util.py, grade_stdio).

    Both texts lose leading and trailing whitespace, then are split at "\\n" and each line is stripped at both
    ends; the line counts must agree, and each pair of lines must be equal, or else both split (at
    whitespace) into numbers that are equal as Decimals ("1.0" matches "1", "0.50" matches ".5")."""
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
    """Run `program` once per test, in its own sandbox with the test's input on stdin, until one fails.

    A test passes when the program exits 0 within `limits` and its stdout matches the expected output
    (stdio_output_matches). The result is the failing test's (a wrong answer: status "failed" with the
    reason appended to stderr), else the last test's. The output cap is raised to twice the expected
    output's size (plus 4 KiB) where that is more, so a long right answer is never cut. Each run first checks
    `bound` (DeadlinePassed once its deadline has passed)."""
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
    return result


def prompt_helpers(question: str) -> str:
    """The imports and finished functions a code prompt defines for the tests to use (HumanEval/32's `poly`,
    /38's `encode_cyclic`), as source to run in the tests' namespace after the candidate's names, so that a
    candidate cannot redefine what its tests rely on. A function whose body is only a docstring, `pass`,
    `...` or `raise NotImplementedError` (and imports) is the one to write, and stays the candidate's. ''
    for prose."""
    import ast

    if len(question) > 100_000 or "def " not in question:
        return ""
    try:
        tree = ast.parse(question)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    kept = [ast.get_source_segment(question, node) for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))
            or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_stub(node))]
    return "".join(source + "\n" for source in kept if source is not None)


def _is_stub(function: Any) -> bool:
    import ast

    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                             or isinstance(s, (ast.Import, ast.ImportFrom)))]
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Raise) and "NotImplementedError" in ast.dump(s))
               for s in body)


@dataclass(frozen=True)
class CodeTests:
    """Test verifier: 1.0 if the candidate program passes all of its query's tests in the sandbox, else 0.0.

    The program is the answer's last fenced ```python block when it has one, else the whole text.
    Two kinds of tests, either or both: `query.tests`, assert-style Python test code that must run to its
    end against the candidate imported as module `solution` (its `__main__` block does not run), out of
    its reach: in no file, in a process of their own that takes only plain built-in values from its
    functions (runtime/sandbox_harness.py), with the finished helpers of its prompt (`prompt_helpers`);
    and `extra["stdio_tests"]`, inputs the candidate, run as a program, reads on stdin, each in its own
    sandbox, whose stdout must match the expected output (LiveCodeBench's comparison,
    `stdio_output_matches`); a candidate stops at its first failed test. Exiting early, even with status 0, fails the test code; a stdin/stdout test only needs
    exit 0."""

    name: str = "code-tests"
    limits: SandboxLimits = SandboxLimits()
    workers: int = 2
    kind: ClassVar[str] = "rule"

    def run_tests(self, query: Query) -> list[SandboxResult]:
        """One sandbox result per candidate (why it failed: status, stderr); empty ones are not run."""
        code, stdio = self._tests(query)
        if code is not None:
            code = prompt_helpers(query.question) + code
        bound = budget.current()  # this thread's: the workers below check it before every run

        def run(program: str) -> SandboxResult:
            if code is not None:
                bound.check()
                result = run_python(program, self.limits, tests=code)
                if not result.passed or stdio is None:
                    return result
            return run_stdio_tests(program, stdio or [], self.limits, bound)

        todo = [i for i, c in enumerate(query.candidates) if not is_empty_answer(c.text)]
        ran = in_parallel(run, [program_text(query.candidates[i].text) for i in todo], self.workers)
        results = [_NOT_RUN] * len(query.candidates)
        for i, result in zip(todo, ran):
            results[i] = result
        return results

    @property
    def cache_key(self) -> str:
        """Version 4: test code runs in a process of its own, against the candidate imported as `solution` in
        another (version 3 ran both in one file as `__main__`, where trace hooks, frames, patched built-ins
        or an answer whose `__eq__` always agrees passed wrong programs, and main blocks failed right ones).
        Version 3: the program is the answer's last fenced code block when it has one (version 2 ran the
        whole text, so an LLM's fenced answer always failed); version 2: a run counts only if its tests ran
        to their end (version 1 accepted any exit 0).

        Stdin/stdout tests did not bump it: they extend the cache context (see there), and queries
        with test code only keep the context, and the meaning, their scores were cached under."""
        return f"{self.name}@4"

    def score_query(self, query: Query) -> list[Score]:
        results = self.run_tests(query)
        return [Score(EMPTY_ANSWER_SCORE if is_empty_answer(c.text) else float(r.passed))
                for c, r in zip(query.candidates, results)]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        raise InputError(f"{self.name} needs each query's tests, which (question, answer) pairs do not carry; "
                         "use score_query on queries with a 'tests' or 'stdio_tests' field")

    def cache_context(self, query: Query) -> str | None:
        """The question and test code, as before stdin/stdout tests existed; then those tests, when any."""
        code, stdio = self._tests(query)
        context = query.question + "\x00" + (code or "")
        return context if stdio is None else context + "\x00stdio_tests\x00" + json.dumps(stdio, ensure_ascii=False)

    def _tests(self, query: Query) -> tuple[str | None, list[dict[str, Any]] | None]:
        """(test code or None, stdin/stdout tests or None); at least one of them."""
        code = query.tests if query.tests and query.tests.strip() else None
        stdio = stdio_tests(query)
        if code is None and stdio is None:
            raise InputError(f"query {query.id!r} has no tests; {self.name} needs Python test code in 'tests' "
                             "or stdin/stdout tests in 'stdio_tests'")
        return code, stdio
