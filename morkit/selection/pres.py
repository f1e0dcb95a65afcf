"""PRES (CTTS-MM): pick the ensemble with the highest similarity-weighted PRR over the query's neighbours,
score(e) = sum_i sim(query, i) * PRR(i, e); the rule, its top-1 variant and the `gamma` reading of the paper's
appendix D.2 are in docs/selection.md ("PRES")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from morkit.core import checks
from morkit.question_pool.ensembles import Ensemble
from morkit.question_pool.neighbour_prr import EnsembleMatrix, neighbour_prr, weighted_rows
from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.rows import RowIds
from morkit.reward_models.cost import COST_UNIT
from morkit.selection.base import Choice, CostLimit, Neighbours
from morkit.selection.cv import Folds
from morkit.selection.local import NeighbourLists, Neighbourhood

CRITERIA = ("prr", "top1")
CV_CELLS = 10_000_000
"""PRES is weighed in the learned selector's cross-validation when its questions x ensembles table holds at most
this many cells (each fold recomputes it with its own ensemble weights); larger pools leave it out."""


@dataclass
class PRES:
    """The paper's selection rule over a pool's ensembles (or its single RMs only)."""

    pool: QuestionPool
    criterion: str = "prr"
    singles_only: bool = False
    runner_ups: int = 5
    gamma: float | None = None  # None: argmax; else the fewest members among scores >= best - (1 - gamma)|best|
    name: str = "pres"
    _table: np.ndarray | None = field(init=False, repr=False)
    _matrix: EnsembleMatrix | None = field(init=False, repr=False)
    _uses: np.ndarray = field(init=False, repr=False)
    _eligible: np.ndarray = field(init=False, repr=False)
    _overall: np.ndarray = field(init=False, repr=False)
    _masks: dict = field(init=False, repr=False, default_factory=dict)
    _priced: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        checks.one_of(self.criterion, CRITERIA, "PRES criterion")
        checks.optional(checks.probability, self.gamma, "PRES gamma")
        self._table = self._matrix = None
        if self.pool.dense:
            values = self.pool.prr if self.criterion == "prr" else self.pool.top1
            self._table = np.nan_to_num(np.asarray(values, dtype=np.float32), nan=0.0)
        elif self.criterion == "prr":
            self._matrix = EnsembleMatrix.of(self.pool.ensembles, self.pool.rm_names)
            self._matrix.warm()  # the compiled loop, now rather than in the first query
        mean_prr, mean_top1, _ = self.pool.ensemble_means()
        overall = mean_prr if self.criterion == "prr" else mean_top1
        self._overall = np.nan_to_num(overall, nan=-1.0)  # tie-break: the pool-wide mean
        rm_index = {name: r for r, name in enumerate(self.pool.rm_names)}
        self._uses = np.zeros((len(self.pool.ensembles), len(rm_index)), dtype=bool)
        for e, ens in enumerate(self.pool.ensembles):
            self._uses[e, [rm_index[m] for m in ens.members]] = True
        self._eligible = self._uses.sum(axis=1) == 1 if self.singles_only else np.ones(len(self._uses), bool)

    def allowed(self, available: frozenset[str]) -> np.ndarray:
        """Boolean mask of ensembles all of whose members are available (cached per availability set)."""
        mask = self._masks.get(available)
        if mask is None:
            missing = np.array([name not in available for name in self.pool.rm_names])
            mask = self._eligible & ~(self._uses[:, missing]).any(axis=1)
            self._masks[available] = mask
        return mask

    def scores(self, neighbours: Neighbours) -> np.ndarray:
        """PRES evidence for every pool ensemble, (E,)."""
        sims = neighbours.similarities
        if self._table is not None:
            return weighted_rows(sims, self._table[neighbours.rows])
        order = np.argsort(neighbours.rows)  # in row order: a memory-mapped pool reads forward
        pool, rows, back = self.pool, neighbours.rows[order], np.argsort(order)
        if self._matrix is not None:  # the dense table's rows, in the query's order: the dense path's sums exactly
            ids = RowIds(pool.questions, rows=neighbours.rows)
            table = neighbour_prr(pool.scores[rows][back], pool.correct[rows][back], pool.valid[rows][back],
                                  pool.normalizer, pool.rm_names, self._matrix, ids, undefined=0.0)
            return weighted_rows(sims, table)
        return weighted_rows(sims, np.nan_to_num(pool.statistics(rows)[1], nan=0.0)[back])  # query order, as dense

    def choose(self, neighbours: Neighbours, available: frozenset[str], limit: CostLimit | None = None) -> Choice:
        """The ensemble with the best evidence among those the query can use; under a `limit`, among those it can
        afford, by evidence per unit of similarity less the limit's weight times the ensemble's cost.

        Args:
            neighbours: The query's pool neighbours.
            available: The pool RMs the query can use.
            limit: The query's cost limit; None: no budget.

        Returns:
            The Choice, its criterion the (penalised) evidence.

        Raises:
            LookupError: The query can use no ensemble, or can afford none (naming the cheapest and its cost).
        """
        mask = self.allowed(available)
        if not mask.any():
            raise LookupError("no pool ensemble can score this query: its candidates lack every pool RM's scores")
        evidence = self.scores(neighbours)
        details: dict[str, Any] = {"criterion": self.criterion}
        if limit is not None:
            mask, evidence = self._within(mask, evidence, neighbours, limit)
            if limit.weight > 0:
                details["criterion"] = f"{self.criterion} per similarity - cost weight x cost"
        evidence = np.where(mask, evidence, -np.inf)
        order = ranked(evidence, self._overall) if self.gamma is not None else self._leading(evidence)
        best = int(order[0])
        details["skipped_ensembles"] = int((~mask).sum())
        if self.gamma is not None:  # within gamma of the best: fewest members first, then the order above
            near = evidence >= evidence[best] - (1 - self.gamma) * abs(evidence[best])
            kept = order[near[order]]
            best = int(kept[np.argmin(self._uses.sum(axis=1)[kept])])
            details["gamma"] = self.gamma
        others = [int(e) for e in order[: self.runner_ups + 1] if e != best and mask[e]][: self.runner_ups]
        alternatives = tuple((self.pool.ensembles[e].name, float(evidence[e])) for e in others)
        return Choice(self.pool.ensembles[best], "pool-zscore", float(evidence[best]), alternatives, details)

    def _within(self, mask: np.ndarray, evidence: np.ndarray, neighbours: Neighbours,
                limit: CostLimit) -> tuple[np.ndarray, np.ndarray]:
        """The usable ensembles the limit affords, and the criterion under its weight: the evidence as it is with
        no weight, else per unit of similarity (a similarity-weighted mean PRR) less weight x cost per candidate.
        LookupError naming the cheapest usable ensemble when none is affordable."""
        cost, fits = self._costs(limit)
        affordable = mask & fits
        if not affordable.any():
            cheapest = int(np.argmin(np.where(mask, cost, np.inf)))
            raise LookupError(f"no pool ensemble fits the budget of {limit.per_query(limit.most):.4g} "
                              f"{COST_UNIT} per query: the cheapest it can use, {self.pool.ensembles[cheapest].name}, "
                              f"costs {limit.per_query(float(cost[cheapest])):.4g} {COST_UNIT}")
        if limit.weight > 0:
            total = float(np.abs(neighbours.similarities).sum())
            evidence = evidence / (total if total > 0 else 1.0) - limit.weight * cost
        return affordable, evidence

    def _leading(self, evidence: np.ndarray) -> np.ndarray:
        """The first runner_ups + 1 ensembles of `ranked(evidence, self._overall)`, without sorting all of them:
        every ensemble whose evidence reaches the (runner_ups + 1)-th highest, ranked."""
        count = min(self.runner_ups + 1, len(evidence))
        if np.isnan(evidence).any():  # NaN ranks last in `ranked` but first in a partition
            return ranked(evidence, self._overall)[:count]
        cut = np.partition(evidence, len(evidence) - count)[len(evidence) - count]
        near = np.flatnonzero(evidence >= cut)  # in index order, as ranked breaks its last ties
        return near[ranked(evidence[near], self._overall[near])][:count]

    def _costs(self, limit: CostLimit) -> tuple[np.ndarray, np.ndarray]:
        """Each ensemble's cost per candidate under the limit's prices, and which of them its cap affords: the
        same for every query a budget limits alike (a limit is made per query), so kept per prices and cap."""
        vector = limit.vector()
        key = (vector.tobytes(), limit.most)
        found = self._priced.get(key)
        if found is None:
            if len(self._priced) >= 256:  # caps that change with every query: keep the newest few
                self._priced.clear()
            cost = self._uses @ vector
            found = self._priced[key] = (cost, np.asarray(limit.affords(cost)))
        return found


def ranked(evidence: np.ndarray, overall: np.ndarray) -> np.ndarray:
    """Ensemble indices by PRES evidence, highest first, along the last axis; equal evidence (e.g. no neighbour
    with mixed labels) goes to the higher pool-wide mean `overall`, not to position."""
    return np.lexsort((np.broadcast_to(-overall, evidence.shape), -evidence), axis=-1)


def pres(pool: QuestionPool, singles_only: bool = False) -> PRES:
    """The paper's PRES over PRR."""
    return PRES(pool, "prr", singles_only=singles_only)


def pres_top1(pool: QuestionPool, singles_only: bool = False) -> PRES:
    """PRES over each neighbour's best-of-n hit."""
    return PRES(pool, "top1", singles_only=singles_only, name="pres-top1")


def pres_out_of_fold(pool: QuestionPool, data: Any, lists: NeighbourLists, dealt: Folds, k: int) -> np.ndarray | None:
    """(repeats, Q, N) out-of-fold candidate scores of PRES's picks for a fit's questions `data` (a PoolSlice):
    each held-out question routed by its `k` nearest training questions, among ensembles weighted on the
    fold's training part only. None when the table exceeds CV_CELLS."""
    from scipy import sparse

    from morkit.question_pool.ensembles import enumerate_ensembles
    from morkit.question_pool.prr import mixed_questions
    from morkit.question_pool.rows import nanmean_columns
    from morkit.selection.mor import ensemble_scores

    config, members = pool.config, list(data.members)
    q = len(data.correct)
    out = np.full((dealt.repeats, q, data.scores.shape[1]), np.nan)
    steady: dict[tuple, np.ndarray] = {}  # PRR columns no fold's weights move, computed once (`_fold_prr`)
    mixed = mixed_questions(data.correct, data.valid)
    for repeat, train in dealt.splits():
        weights = dict(zip(members, (float(v) for v in nanmean_columns(data.stats[train, 0]))))
        ensembles = enumerate_ensembles(members, weights, max_members=config.max_members,
                                        weightings=config.weightings, temperature=config.temperature)
        if q * len(ensembles) > CV_CELLS:
            return None
        table = _fold_prr(pool, data, ensembles, np.flatnonzero(train & mixed), mixed, steady)
        keep = lists.first(k, train)
        near = sparse.csr_matrix((lists.sims[keep], (np.nonzero(keep)[0], lists.rows[keep])), shape=(q, q))
        held = np.flatnonzero(~train)
        evidence = np.asarray(near[held] @ np.nan_to_num(table, nan=0.0))
        overall = np.nan_to_num(nanmean_columns(table[train]), nan=-1.0)
        best = ranked(evidence, overall)[:, 0]
        for e in np.unique(best):
            ensemble, where = ensembles[e], held[best == e]
            cols = [members.index(m) for m in ensemble.members]
            out[repeat, where] = ensemble_scores(data.scores[where][:, :, cols], ensemble, "pool-zscore",
                                                 pool.normalizer)
    return out


def pres_served_out_of_fold(pool: QuestionPool, data: Any, near: Neighbourhood, dealt: Folds, k: int) -> np.ndarray:
    """(repeats, Q, N) out-of-fold candidate scores of PRES's picks for a fit's questions `data` (a PoolSlice), each
    held-out question routed as a query is served: PRES over the pool's ensembles of the fit's members, from its `k`
    nearest pool questions outside the held-out fold (`near`); the pool's weights and tie-break means count the
    held-out fold too (docs/selection.md, "Repeated cross-validation and the margin rule")."""
    from morkit.selection.mor import ensemble_scores

    method, members = PRES(pool), list(data.members)
    available = frozenset(members)
    out = np.full((dealt.repeats, len(data.correct), data.scores.shape[1]), np.nan)
    for repeat, train in dealt.splits():
        keep = near.lists.first(k, near.allowed(train))
        picked: dict[Ensemble, list[int]] = {}
        for i in np.flatnonzero(~train):
            found = Neighbours(near.reference[near.lists.rows[i][keep[i]]], (), near.lists.sims[i][keep[i]])
            picked.setdefault(method.choose(found, available).ensemble, []).append(int(i))
        for ensemble, where in picked.items():
            cols = [members.index(m) for m in ensemble.members]
            out[repeat, where] = ensemble_scores(data.scores[where][:, :, cols], ensemble, "pool-zscore",
                                                 pool.normalizer)
    return out


def _fold_prr(pool: QuestionPool, data: Any, ensembles: Sequence[Ensemble], rows: np.ndarray, mixed: np.ndarray,
              steady: dict[tuple, np.ndarray]) -> np.ndarray:
    """(Q, E) PRR of a fold's ensembles on `rows` (its mixed training questions; NaN elsewhere, which PRES never
    reads), as ensemble_statistics over every row gives it for a fraction of the work: ensembles no fold's weights
    move (a single RM, equal weights) are computed once over every `mixed` row and kept in `steady`."""
    from morkit.question_pool.rows import ensemble_statistics

    members = list(data.members)

    def prr_of(chosen: Sequence[Ensemble], at: np.ndarray) -> np.ndarray:
        return ensemble_statistics(data.scores[at], data.correct[at], data.valid[at], pool.normalizer, members,
                                   chosen, best_of_n=False)[0]

    key = lambda ens: (ens.members, ens.weights, ens.weighting)  # noqa: E731 - an ensemble's identity
    fixed = [e for e, ens in enumerate(ensembles) if len(ens.members) == 1 or ens.weighting == "sum"]
    new = [ensembles[e] for e in fixed if key(ensembles[e]) not in steady]
    everywhere = np.flatnonzero(mixed)
    if new:
        steady.update(zip(map(key, new), prr_of(new, everywhere).T))
    table = np.full((len(data.correct), len(ensembles)), np.nan, dtype=np.float32)
    for e in fixed:
        table[everywhere, e] = steady[key(ensembles[e])]
    moving = np.setdiff1d(np.arange(len(ensembles)), fixed)
    if len(moving) and len(rows):
        table[np.ix_(rows, moving)] = prr_of([ensembles[e] for e in moving], rows)
    return table
