"""The RewardModel protocol every scorer implements, plus step reduction for PRMs."""

from __future__ import annotations

import math
from typing import Callable, Protocol, Sequence, runtime_checkable

from morkit.core import checks
from morkit.core.errors import ScoreError
from morkit.core.types import Query, Score

KINDS = ("orm", "prm", "judge", "rule", "table")

_REDUCTIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "min": min,
    "last": lambda steps: steps[-1],
    "mean": lambda steps: sum(steps) / len(steps),
    "prod": math.prod,
}
REDUCTIONS = tuple(_REDUCTIONS)


def reduce_steps(steps: Sequence[float], rule: str = "min") -> float:
    """Collapse a PRM's per-step scores into one value by a named rule (min, last, mean, prod)."""
    checks.one_of(rule, REDUCTIONS, "step reduction")
    if not steps:
        raise ScoreError("cannot reduce an empty list of step scores")
    return float(_REDUCTIONS[rule](list(steps)))


@runtime_checkable
class RewardModel(Protocol):
    """Scores a batch of (question, answer) pairs. The same pair gets the same score in any batch."""

    name: str
    kind: str

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        """One Score per (question, answer) pair, in order.

        Args:
            pairs: The (question, answer) texts to score.

        Returns:
            One Score per pair, in the order of `pairs`.
        """
        ...


@runtime_checkable
class QueryRewardModel(Protocol):
    """An RM that needs the whole query (sibling answers, tests, cached tables), not pairs alone."""

    name: str
    kind: str

    def score_query(self, query: Query) -> list[Score]: ...

    def cache_context(self, query: Query) -> str | None:
        """The text the score depends on besides the answer (None = never cache these scores)."""
        ...


EMPTY_ANSWER_SCORE = 0.0
"""Every embedded RM reports a probability-like score in [0, 1]; an empty or whitespace-only
answer is never shown to a model and gets this floor, so it ranks below any real answer."""


def is_empty_answer(text: str | None) -> bool:
    return text is None or not text.strip()
