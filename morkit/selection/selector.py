"""Per-query RM selection and MoR ranking against a question pool: `Selector(pool).select(q)` / `.rank(q)`.

It composes the chooser (ensemble per query), the ranker (its candidates) and the calibration (the pick)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.pool import QuestionPool
from morkit.selection.base import Choice, Neighbours, SelectionMethod
from morkit.selection.calibration import (  # noqa: F401 (importable from here, as before)
    LOO_SAMPLE,
    PickCalibrator,
    leave_one_out_calibrator,
    leave_one_out_picks,
)
from morkit.selection.chooser import NO_RM_APPLIES, NOT_APPLICABLE, EnsembleChooser, Selection  # noqa: F401
from morkit.selection.confidence import Calibrator
from morkit.selection.methods import DEFAULT_METHOD, check_method
from morkit.selection.ranker import Ranker, Ranking

__all__ = ["Ranking", "Selection", "Selector"]


class Selector:
    """Routes queries to ensembles using a pool and ranks their candidates; embeds query questions with the
    pool's own embedder."""

    def __init__(self, pool: QuestionPool, method: str = DEFAULT_METHOD, *, embedder: Any = None, k: int = 100,
                 singles_only: bool = False, runnable: Iterable[str] = (), device: str | None = None):
        if len(pool) == 0:
            raise InputError("the pool is empty: build it from labelled questions first")
        entry = check_method(method, singles_only)
        checks.positive_int(k, "k")
        if embedder is not None and embedder.name != pool.embedder:
            raise InputError(f"the pool was built with embedder {pool.embedder!r}; queries were to be embedded "
                             f"with {embedder.name!r}, and similarities across embedders mean nothing")
        self.method: SelectionMethod = entry.load()(pool, **({"singles_only": True} if singles_only else {}))
        self.chooser = EnsembleChooser(pool, self.method, method, k=k, runnable=runnable, embedder=embedder,
                                       device=device)
        self.calibration = PickCalibrator(pool, self.method, k)
        self.ranker = Ranker(pool, self.calibration)

    def use(self, method: SelectionMethod, name: str) -> None:
        """Choose with `method` (named `name`) from now on, e.g. a server's fixed ensemble."""
        self.method = self.chooser.method = self.calibration.method = method
        self.chooser.method_name = name

    pool = property(lambda self: self.chooser.pool)
    method_name = property(lambda self: self.chooser.method_name)
    k = property(lambda self: self.chooser.k)
    runnable = property(lambda self: self.chooser.runnable)

    @property
    def embedder(self) -> Any:
        return self.chooser.embedder

    def neighbours(self, vectors: np.ndarray) -> list[Neighbours]:
        return self.chooser.neighbours(vectors)

    def skipped(self, query: Query) -> dict[str, str]:
        """The pool RMs this query cannot use, each with why (EnsembleChooser.skipped)."""
        return self.chooser.skipped(query)

    def available(self, query: Query) -> frozenset[str]:
        """Pool RMs that apply to the query and have cached scores on every candidate, or may run on them."""
        return self.chooser.available(query)

    def select_many(self, queries: Sequence[Query], *, vectors: np.ndarray | None = None) -> list[Selection]:
        """The chosen ensemble of each query, with its evidence; one embedding and neighbour search for the batch
        (`vectors`: the queries' embeddings, when the caller has them)."""
        return self.chooser.select_many(queries, vectors=vectors)

    def select(self, query: Query) -> Selection:
        """The RM ensemble chosen for one query (`.choice.ensemble`), with its neighbours and evidence."""
        return self.select_many([query])[0]

    def candidate_scores(self, query: Query, choice: Choice, raw: np.ndarray | None = None) -> np.ndarray:
        return self.ranker.candidate_scores(query, choice, raw)

    def confidence(self, query: Query, choice: Choice, scores: np.ndarray, raw: np.ndarray | None = None) -> float:
        return self.calibration.confidence(query, choice, scores, raw)

    def calibrator(self) -> Calibrator:
        return self.calibration.calibrator()

    def rank_selected(self, query: Query, selection: Selection, abstain_below: float | None = None) -> Ranking:
        """MoR scores of the query's candidates under a selection, the pick and its confidence (Ranker)."""
        return self.ranker.rank_selected(query, selection, abstain_below)

    def rank(self, query: Query) -> Ranking:
        """Select, then score the query's candidates with the chosen ensemble (`.best_index`, `.scores`,
        `.confidence`)."""
        return self.rank_selected(query, self.select(query))
