"""What a per-query selection is, the one-method protocol every selection method implements, and the cost limit
a budget puts on one query's pick (`CostLimit`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

import numpy as np

from morkit.question_pool.ensembles import Ensemble

if TYPE_CHECKING:
    from morkit.reward_models.cost import CostTable


@dataclass(frozen=True)
class Neighbours:
    """The pool questions most similar to the query: row indices, ids and cosine similarities."""

    rows: np.ndarray
    ids: tuple[str, ...]
    similarities: np.ndarray


@dataclass(frozen=True)
class Choice:
    """A method's pick: the ensemble, the feature transform its weights apply to, and its evidence.

    A learned ranker's pick carries its own `scorer` (the ensemble then names its members and their shares
    of importance) and the `calibrator` its cross-validation fitted; others are scored by the weighted sum."""

    ensemble: Ensemble
    transform: str  # "pool-zscore" (the pool's normaliser), "query-zscore", or "features" (a scorer's own)
    score: float  # the method's own criterion for the pick (PRES evidence, CV best-of-n, ...)
    alternatives: tuple[tuple[str, float], ...] = ()  # runner-ups: (name, criterion)
    details: Mapping[str, Any] = field(default_factory=dict)
    scorer: CandidateScorer | None = None
    calibrator: Any = None  # morkit.selection.confidence.Calibrator; None: the Router calibrates the method


@dataclass(frozen=True, eq=False)
class CostLimit:
    """What a query's budget allows a method to pick, per scored candidate: an ensemble (or learned route) whose
    members' costs sum to at most `most`, ranked by the method's criterion less `weight` times that sum; built per
    query from a Budget (morkit.selection.budget.cost_limit).

    Args:
        costs: Each pool RM's cost per candidate (a morkit.reward_models.cost.CostTable in COST_UNIT), the one
            table every route's cost is read from.
        rm_names: The pool's RMs.
        most: The most a pick may cost per candidate (inf: no cap).
        weight: The criterion's penalty per unit of per-candidate cost (the budget's cost weight x candidates).
        candidates: The query's candidates (a pick's per-query cost is its per-candidate cost times this).
    """

    costs: CostTable
    rm_names: tuple[str, ...]
    most: float = float("inf")
    weight: float = 0.0
    candidates: int = 1

    def cost(self, members: Sequence[str]) -> float:
        """What scoring one candidate with every one of `members` costs (`CostTable.of`)."""
        return self.costs.of(members)

    def vector(self) -> np.ndarray:
        """(R,) each pool RM's cost per candidate, in `rm_names` order, from the same table."""
        return self.costs.vector(self.rm_names)

    def affords(self, cost: np.ndarray | float) -> np.ndarray | bool:
        """Whether a per-candidate `cost` fits under `most` (a relative tolerance absorbs float rounding, so a
        share of 1 affords every usable RM)."""
        return np.asarray(cost) <= self.most * (1 + 1e-9) + 1e-12

    def per_query(self, cost: float) -> float:
        """A per-candidate cost as the query's cost."""
        return cost * self.candidates


def chosen_in_place(method: str, reason: str) -> dict[str, str]:
    """Choice details saying that `method` chose in place of the method asked for, and why in a few words; the
    Selection then names it so (`method_label`): "pres (learned needs 20 mixed pool questions)"."""
    return {"chosen_by": method, "chosen_because": reason}


def method_label(method: str, reason: str | None = None) -> str:
    """A selection's method as outputs name it: the method that chose, with why when it chose in another's place."""
    return f"{method} ({reason})" if reason else method


class CandidateScorer(Protocol):
    """Scores candidates from their member and step scores: (Q, N, R) in `rm_names` order, (Q, N, P, 3) in
    `step_rms` order, validity (Q, N) -> (Q, N). `scores_alone`: whether one candidate scored alone gets a score
    that moves with its member scores (routing gives a lone answer only such a scorer)."""

    scores_alone: bool

    def scores(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray, rm_names: Sequence[str],
               step_rms: Sequence[str]) -> np.ndarray: ...


class SelectionMethod(Protocol):
    """Picks an ensemble for one query from its pool neighbours and the RMs available for it; under a budget, the
    chooser also passes the query's `limit` (a method that takes budgets has "budget" in its registry metadata;
    the others are called without one)."""

    name: str

    def choose(self, neighbours: Neighbours, available: frozenset[str],
               limit: CostLimit | None = None) -> Choice: ...
