"""Plain frozen data types shared by every layer of morkit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Candidate:
    """One candidate answer to a query; `scores` holds cached RM outputs (float or PRM step list).

    Args:
        text: The answer text; None for a candidate that carries only cached scores.
        agent: The name of the agent (LLM) that wrote it, if known.
        correct: Its label (True/False) when graded; None when unlabelled.
        scores: Cached RM outputs by RM name: a float for an ORM, a tuple of step scores for a PRM.
        extra: The candidate's other JSONL keys, kept as they were read and written back on save.
    """

    text: str | None
    agent: str | None = None
    correct: bool | None = None
    scores: Mapping[str, float | tuple[float, ...]] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Query:
    """A question with its candidate answers, as one line of the JSONL contract.

    Args:
        id: The query's id, unique within a file.
        question: The question (prompt) text.
        candidates: Its candidate answers, in order.
        domain: The domain (`math`, `choice`, `code`, `instruction`, ...) that picks the grader and which RMs apply.
        reference: The reference answer, used to grade candidates.
        tests: Python test code run after a candidate program (code queries).
        extra: The query's other JSONL keys, kept as they were read and written back on save.
    """

    id: str
    question: str
    candidates: tuple[Candidate, ...]
    domain: str | None = None
    reference: str | None = None
    tests: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def labelled(self) -> bool:
        return bool(self.candidates) and all(c.correct is not None for c in self.candidates)


@dataclass(frozen=True)
class Score:
    """An RM's verdict on one (question, answer) pair; PRMs also fill per-step scores.

    Args:
        value: The score (for a PRM, its steps reduced to one number).
        steps: A PRM's per-step scores; None for an ORM.
        truncated: True when the pair was cut to fit the model's window before scoring.
        extra: Optional model-specific outputs besides the score; not cached.
    """

    value: float
    steps: tuple[float, ...] | None = None
    truncated: bool = False
    extra: Mapping[str, Any] | None = field(default=None, hash=False)
    """Optional model-specific outputs besides the score (e.g. QRM's reward quantiles); not cached."""

    def to_json(self) -> float | list[float]:
        """Contract form: a float for ORMs, the step list for PRMs.

        Returns:
            The step scores as a list when `steps` is set, else `value`.
        """
        return list(self.steps) if self.steps is not None else self.value


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement of one answer: a score (comparable within one verify call) and feedback text.

    Args:
        score: The answer's score; higher is better, comparable only within one verify call.
        feedback: Text explaining the score (an LLM critique, or which RMs scored it); may be empty.
    """

    score: float
    feedback: str = ""
