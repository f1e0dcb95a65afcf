"""Rule verifiers (kind "rule"): math answer consensus and code unit tests in a sandbox.

Both give scores in [0, 1] without a model. MathConsensus is unsupervised (it never looks at a
reference answer); CodeTests runs each candidate program with the query's tests in a subprocess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

from morkit.core.errors import InputError
from morkit.core.grading import answers_equivalent, extract_answer, normalize_answer
from morkit.core.types import Query, Score
from morkit.reward_models.base import EMPTY_ANSWER_SCORE, is_empty_answer
from morkit.runtime.sandbox import SandboxLimits, SandboxResult, run_many


def consensus_scores(texts: Sequence[str | None]) -> list[float]:
    """Each text's share of all texts whose final answer is equivalent to its own.

    Answers are grouped into equivalence classes by comparing with one representative per
    class (identical normalised answers skip the comparison); empty texts score
    EMPTY_ANSWER_SCORE, texts without an extractable answer 0. The denominator is len(texts).
    """
    n = len(texts)
    answers = [None if is_empty_answer(t) else extract_answer(t) for t in texts]
    reps: list[str] = []  # one answer per class
    sizes: list[int] = []
    by_norm: dict[str, int] = {}  # normalised answer -> class index
    cls: list[int | None] = []
    for answer in answers:
        if answer is None:
            cls.append(None)
            continue
        norm = normalize_answer(answer)
        index = by_norm.get(norm)
        if index is None:
            index = next((i for i, rep in enumerate(reps) if answers_equivalent(rep, answer)), None)
            if index is None:
                index = len(reps)
                reps.append(answer)
                sizes.append(0)
            by_norm[norm] = index
        sizes[index] += 1
        cls.append(index)
    scores = []
    for text, index in zip(texts, cls):
        if is_empty_answer(text):
            scores.append(EMPTY_ANSWER_SCORE)
        else:
            scores.append(0.0 if index is None else sizes[index] / n)
    return scores


@dataclass(frozen=True)
class MathConsensus:
    """Self-consistency verifier: a candidate's score is the share of its siblings agreeing with it."""

    name: str = "math-consensus"
    kind: ClassVar[str] = "rule"

    def score_query(self, query: Query) -> list[Score]:
        return [Score(v) for v in consensus_scores([c.text for c in query.candidates])]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        """Consensus within each group of pairs that share the identical question text.

        Unlike most RMs, a pair's score depends on the other pairs of its question in the batch."""
        groups: dict[str, list[int]] = {}
        for i, (question, _) in enumerate(pairs):
            groups.setdefault(question, []).append(i)
        values = [0.0] * len(pairs)
        for members in groups.values():
            for i, v in zip(members, consensus_scores([pairs[i][1] for i in members])):
                values[i] = v
        return [Score(v) for v in values]

    def cache_context(self, query: Query) -> str | None:
        return None  # depends on the sibling answers, never cache


def humaneval_program(prompt: str, completion: str) -> str:
    """The candidate program for HumanEval-style data: the prompt (signature + docstring) + body."""
    return prompt + completion


_NOT_RUN = SandboxResult("failed", None, "", "empty answer: not run", 0.0)


@dataclass(frozen=True)
class CodeTests:
    """Unit-test verifier: 1.0 if candidate + "\\n\\n" + query.tests runs to its end in the sandbox, else 0.0.

    Exiting early, even with status 0 (`sys.exit(0)`, `os._exit(0)`), fails: the sandbox's harness
    reports completion only after the last test line ran."""

    name: str = "code-tests"
    limits: SandboxLimits = SandboxLimits()
    workers: int = 2
    kind: ClassVar[str] = "rule"

    def run_tests(self, query: Query) -> list[SandboxResult]:
        """One sandbox result per candidate (why it failed: status, stderr); empty ones are not run."""
        tests = self._tests(query)
        todo = [i for i, c in enumerate(query.candidates) if not is_empty_answer(c.text)]
        ran = run_many([query.candidates[i].text + "\n\n" + tests for i in todo], self.limits, self.workers,
                       require_completion=True)
        results = [_NOT_RUN] * len(query.candidates)
        for i, result in zip(todo, ran):
            results[i] = result
        return results

    @property
    def cache_key(self) -> str:
        """Version 2: a run counts only if its tests ran to their end (version 1 accepted any exit 0)."""
        return f"{self.name}@2"

    def score_query(self, query: Query) -> list[Score]:
        results = self.run_tests(query)
        return [Score(EMPTY_ANSWER_SCORE if is_empty_answer(c.text) else float(r.passed))
                for c, r in zip(query.candidates, results)]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        raise InputError(f"{self.name} needs each query's unit tests, which (question, answer) pairs "
                         "do not carry; use score_query on queries with a 'tests' field")

    def cache_context(self, query: Query) -> str | None:
        return query.question + "\x00" + self._tests(query)

    def _tests(self, query: Query) -> str:
        if not query.tests or not query.tests.strip():
            raise InputError(f"query {query.id!r} has no tests; {self.name} needs Python test code in 'tests'")
        return query.tests
