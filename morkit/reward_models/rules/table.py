"""Table-backed RMs: scores already present in the input (`candidates[].scores`), so no model runs.

Each RM name seen in the input becomes one of these. A PRM's step list is reduced by a named rule.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Query, Score
from morkit.reward_models.base import reduce_steps


class TableRewardModel:
    """Reads cached scores by RM name; a candidate without one is an error naming the query."""

    kind = "table"

    def __init__(self, name: str, reduction: str = "min"):
        reduce_steps([0.0], reduction)  # validates the rule name early
        self.name = name
        self.reduction = reduction

    def _score(self, query: Query, index: int) -> Score:
        value = query.candidates[index].scores.get(self.name)
        if value is None:
            raise InputError(f"query {query.id!r} candidate {index} has no cached score for {self.name!r}")
        if isinstance(value, tuple):
            return Score(reduce_steps(value, self.reduction), steps=value)
        return Score(float(value))

    def score_query(self, query: Query) -> list[Score]:
        return [self._score(query, i) for i in range(len(query.candidates))]

    def cache_context(self, query: Query) -> str | None:
        return None  # the input already is the cache

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        raise InputError(f"{self.name!r} is a table of cached scores; it scores queries from the input file, not pairs")


def table_names(queries: Iterable[Query]) -> list[str]:
    """Every RM name that appears in some candidate's cached scores, in first-seen order."""
    seen: dict[str, None] = {}
    for query in queries:
        for candidate in query.candidates:
            for name in candidate.scores:
                seen.setdefault(name, None)
    return list(seen)
