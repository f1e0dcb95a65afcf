"""Graders by domain: whether each candidate answers its query correctly, and why not when it cannot tell.

One registry, GRADERS, serves `label`, `pool build` and `pool add`; what each grader checks: docs/pools.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, Protocol, Sequence

from morkit.core.grading import (
    answers_equivalent,
    equivalence_classes,
    extract_answer,
    program_text,
    reference_answer,
)
from morkit.core.registry import Registry
from morkit.core.types import Query


@dataclass(frozen=True)
class Grade:
    """One candidate's grade: `correct`, and `reason` only when the grader could not decide (then it is False)."""

    correct: bool
    reason: str | None = None


class Grader(Protocol):
    name: str

    def grade(self, query: Query, texts: Sequence[str | None]) -> list[Grade]: ...

    def vote_shares(self, texts: Sequence[str | None]) -> list[float]:
        """Each answer's votes in a majority vote: how many of the answers agree with it (0 abstains)."""
        ...


def key_shares(keys: Sequence[str | None]) -> list[float]:
    """Votes when agreeing means equal keys: each key's count among the keys; a None key abstains (0)."""
    from collections import Counter

    counts = Counter(k for k in keys if k is not None)
    return [float(counts[k]) if k is not None else 0.0 for k in keys]


def _text_key(text: str) -> str | None:
    """Text with its whitespace runs folded to one space; None when nothing is left."""
    return " ".join(text.split()) or None


def text_shares(texts: Sequence[str | None]) -> list[float]:
    """Votes on whitespace-insensitive text, for answers that have no smaller final answer."""
    return key_shares([_text_key(t) if t else None for t in texts])


GRADERS = Registry("grader")
GRADERS.register("math", "morkit.question_pool.graders:MathGrader", "stated final answer == reference (strict)")
GRADERS.register("choice", "morkit.question_pool.graders:ChoiceGrader", "stated option letter == reference")
GRADERS.register("code", "morkit.question_pool.graders:CodeGrader",
                 "candidate passes its tests in the sandbox (test code run to its end; stdin/stdout)")
GRADERS.register("instruction", "morkit.question_pool.ifeval:InstructionGrader",
                 "IFEval's verifiable instructions, all followed (strict)")
_ALIASES = {"mcq": "choice", "gpqa": "choice", "mmlu": "choice", "python": "code", "ifeval": "instruction"}


def grader_name(query: Query) -> str | None:
    """The grader a query gets (see the module doc), or None when nothing can grade it."""
    domain = _ALIASES.get((query.domain or "").lower(), (query.domain or "").lower())
    if domain in GRADERS.names():
        return domain
    if query.tests or query.extra.get("stdio_tests"):
        return "code"
    if query.reference is not None:
        return "math"
    return None


@dataclass(frozen=True)
class MathGrader:
    name: str = "math"
    strict: bool = True

    def grade(self, query: Query, texts: Sequence[str | None]) -> list[Grade]:
        reference = reference_answer(query.reference)
        if reference is None:
            return [Grade(False, "the query has no reference answer")] * len(texts)
        grades = []
        for text in texts:
            answer = extract_answer(text, strict=self.strict)
            grades.append(Grade(False, "no stated final answer") if answer is None
                          else Grade(answers_equivalent(answer, reference)))
        return grades

    def vote_shares(self, texts: Sequence[str | None]) -> list[float]:
        """Answers agree when their final answers are equivalent: math-consensus's classes, as counts."""
        from morkit.reward_models.rules.consensus import consensus_scores

        return [share * len(texts) for share in consensus_scores(texts)]


_LETTER = r"\(?([A-J])\)?"
_STATED_LETTER = (re.compile(r"\\boxed\s*\{\s*\(?([A-J])\)?\s*\}"),
                  re.compile(r"(?i)(?:final answer|the answer|correct answer|answer)\s*(?:is|:)\s*(?:option\s*)?"
                             + _LETTER + r"(?![A-Za-z])"))


def stated_letter(text: str | None) -> str | None:
    """The option letter an answer states last, or None."""
    if not text:
        return None
    found = [(m.start(), m.group(1)) for pattern in _STATED_LETTER for m in pattern.finditer(text)]
    return max(found)[1].upper() if found else None


@dataclass(frozen=True)
class ChoiceGrader:
    name: str = "choice"

    def grade(self, query: Query, texts: Sequence[str | None]) -> list[Grade]:
        reference = (query.reference or "").strip().strip("()").upper()
        if not re.fullmatch(r"[A-J]", reference):
            return [Grade(False, f"the reference {query.reference!r} is not an option letter")] * len(texts)
        letters = [stated_letter(t) for t in texts]
        return [Grade(False, "no stated option letter") if letter is None else Grade(letter == reference)
                for letter in letters]

    def vote_shares(self, texts: Sequence[str | None]) -> list[float]:
        return key_shares([stated_letter(t) for t in texts])


@dataclass(frozen=True)
class CodeGrader:
    name: str = "code"

    def grade(self, query: Query, texts: Sequence[str | None]) -> list[Grade]:
        from dataclasses import replace

        from morkit.core.types import Candidate
        from morkit.reward_models.rules.code_tests import CodeTests

        if not (query.tests or query.extra.get("stdio_tests")):
            return [Grade(False, "the query has no tests")] * len(texts)
        programs = tuple(Candidate(t) for t in texts)
        results = CodeTests().run_tests(replace(query, candidates=programs))
        return [Grade(r.passed) if r.status != "error" else Grade(False, "the sandbox could not run it")
                for r in results]

    def vote_shares(self, texts: Sequence[str | None]) -> list[float]:
        return text_shares([program_text(t) for t in texts])


# -- answer keys: what two answers must share to vote together -----------------------------------------

def _program_key(text: str) -> str | None:
    """A program's text without trailing spaces and blank lines (indentation kept: it is Python syntax)."""
    lines = [line.rstrip() for line in (program_text(text) or "").splitlines() if line.strip()]
    return "\n".join(lines) or None


ANSWER_KEYS: Mapping[str, Callable[[str], Hashable | None]] = {
    "code": _program_key, "choice": stated_letter, "instruction": _text_key}
"""Query kind (a grader name) -> what two answers must share to vote together (ACS's vote, Stream x N).
Any other kind, and none, groups by math final-answer equivalence."""


def answer_keys(texts: Sequence[str], kind: str | None = None) -> list[Hashable | None]:
    """Each answer's group: its normalised program (code), stated option letter (choice), whitespace-normalised
    text (instruction), else its final answer's equivalence class (math: `equivalence_classes`). None: the
    answer states nothing to group by, and abstains."""
    key = ANSWER_KEYS.get(kind or "")
    if key is not None:
        return [key(t) if t and t.strip() else None for t in texts]
    return list(equivalence_classes([extract_answer(t) for t in texts]))
