"""Aggregators that pick one of the set's answers instead of writing a new one (`best`, `vote`); no LLM call.

The vote's softmax weights, and why under ACS both return best-of-N's pick at k=2: docs/search.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Hashable, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.question_pool.graders import answer_keys


def vote_weights(scores: Sequence[float], temperature: float = 1.0) -> np.ndarray:
    """Softmax of the scores over `temperature` (see the module doc); uniform when they are all equal."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return s
    if not np.isfinite(s).all():
        raise InputError(f"vote weights need finite scores, got {list(scores)}")
    e = np.exp((s - s.max()) / temperature)
    return e / e.sum()


def top_index(scores: Sequence[float]) -> int:
    """The highest score's index; the first one on a tie (answers are in the caller's order)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def _checked(name: str, response_sets: Sequence[Sequence[str]],
             scores: Sequence[Sequence[float]] | None) -> list[list[float]]:
    if scores is None:
        raise InputError(f"the {name!r} aggregator picks by the verifier's scores; none were given")
    if len(scores) != len(response_sets) or any(len(a) != len(b) for a, b in zip(scores, response_sets)):
        raise InputError(f"the {name!r} aggregator needs one score per answer of every set")
    if any(not rs for rs in response_sets):
        raise InputError(f"the {name!r} aggregator was given an empty set of answers")
    return [[float(v) for v in row] for row in scores]


@dataclass(frozen=True)
class BestAggregator:
    """The set's answer the verifier scores highest (the first on a tie); no LLM call."""

    name: str = "best"
    calls: ClassVar[int] = 0
    tokens: ClassVar[int] = 0

    def aggregate_many(self, question: str, response_sets: Sequence[Sequence[str]],
                       scores: Sequence[Sequence[float]] | None = None) -> list[str]:
        rows = _checked(self.name, response_sets, scores)
        return [texts[top_index(row)] for texts, row in zip(response_sets, rows)]

    def aggregate(self, question: str, responses: Sequence[str], scores: Sequence[float] | None = None) -> str:
        return self.aggregate_many(question, [responses], None if scores is None else [scores])[0]


@dataclass(frozen=True)
class VoteAggregator:
    """The highest-scoring answer of the group with the most verifier-weighted votes; no LLM call.

    `kind` (the query's grader name) picks how answers are grouped (`answer_keys`); tied groups go to the best
    score, then to first appearance; with nothing to group by, the top-scoring answer wins."""

    kind: str | None = None
    temperature: float = 1.0
    name: str = "vote"
    calls: ClassVar[int] = 0
    tokens: ClassVar[int] = 0

    def __post_init__(self) -> None:
        checks.positive(self.temperature, "temperature")

    def pick(self, texts: Sequence[str], scores: Sequence[float]) -> int:
        """The index of the answer the vote returns."""
        keys = answer_keys(texts, self.kind)
        weights = vote_weights(scores, self.temperature)
        votes: dict[Hashable, float] = {}
        best: dict[Hashable, int] = {}
        for i, key in enumerate(keys):
            if key is None:
                continue
            votes[key] = votes.get(key, 0.0) + float(weights[i])
            if key not in best or scores[i] > scores[best[key]]:
                best[key] = i
        if not votes:
            return top_index(scores)
        order = list(votes)  # first appearance
        winner = max(order, key=lambda k: (round(votes[k], 12), scores[best[k]], -order.index(k)))
        return best[winner]

    def aggregate_many(self, question: str, response_sets: Sequence[Sequence[str]],
                       scores: Sequence[Sequence[float]] | None = None) -> list[str]:
        rows = _checked(self.name, response_sets, scores)
        return [texts[self.pick(texts, row)] for texts, row in zip(response_sets, rows)]

    def aggregate(self, question: str, responses: Sequence[str], scores: Sequence[float] | None = None) -> str:
        return self.aggregate_many(question, [responses], None if scores is None else [scores])[0]
