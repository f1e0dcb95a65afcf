"""What a per-query selection is, and the one-method protocol every selection method implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

import numpy as np

from morkit.question_pool.ensembles import Ensemble


@dataclass(frozen=True)
class Neighbours:
    """The pool questions most similar to the query: row indices, ids and cosine similarities."""

    rows: np.ndarray
    ids: tuple[str, ...]
    similarities: np.ndarray


@dataclass(frozen=True)
class Choice:
    """A method's pick: the ensemble, the feature transform its weights apply to, and its evidence."""

    ensemble: Ensemble
    transform: str  # "pool-zscore" (the pool's normaliser) or "query-zscore"
    score: float  # the method's own criterion for the pick (PRES evidence, CV best-of-n, ...)
    alternatives: tuple[tuple[str, float], ...] = ()  # runner-ups: (name, criterion)
    details: Mapping[str, Any] = field(default_factory=dict)


class SelectionMethod(Protocol):
    """Picks an ensemble for one query from its pool neighbours and the RMs available for it."""

    name: str

    def choose(self, neighbours: Neighbours, available: frozenset[str]) -> Choice: ...
