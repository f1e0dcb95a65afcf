"""Plain frozen data types shared by every layer of morkit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class Candidate:
    """One candidate answer to a query; `scores` holds cached RM outputs (float or PRM step list)."""

    text: str | None
    agent: str | None = None
    correct: bool | None = None
    scores: Mapping[str, float | tuple[float, ...]] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Query:
    """A question with its candidate answers, as one line of the JSONL contract."""

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
    """An RM's verdict on one (question, answer) pair; PRMs also fill per-step scores."""

    value: float
    steps: tuple[float, ...] | None = None
    truncated: bool = False
    extra: Mapping[str, Any] | None = field(default=None, hash=False)
    """Optional model-specific outputs besides the score (e.g. QRM's reward quantiles); not cached."""

    def to_json(self) -> float | list[float]:
        """Contract form: a float for ORMs, the step list for PRMs."""
        return list(self.steps) if self.steps is not None else self.value


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement of one answer: a score (comparable within one verify call) and feedback text."""

    score: float
    feedback: str = ""
