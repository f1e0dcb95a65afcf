"""Per-query RM selection and MoR ranking against a question pool: `Selector(pool).select(q)` / `.rank(q)`.

It composes the chooser (ensemble per query), the ranker (its candidates) and the calibration (the pick)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.pool import QuestionPool
from morkit.selection.base import Choice, Neighbours, SelectionMethod, method_label
from morkit.selection.calibration import PickCalibrator
from morkit.selection.chooser import EnsembleChooser, Selection
from morkit.selection.confidence import Calibrator
from morkit.selection.coverage import domain_rm_sets
from morkit.selection.methods import DEFAULT_METHOD, DEFAULT_NEIGHBOURHOOD, check_method
from morkit.selection.ranker import Ranker, Ranking

class Selector:
    """Routes queries to ensembles using a pool and ranks their candidates; embeds query questions with the
    pool's own embedder.

    Args:
        pool: The question pool to route against (not empty).
        method: A name registered in SELECTION_METHODS.
        embedder: The embedder for query questions; it must be the pool's (same name). None loads the pool's own
            when first needed.
        k: Pool neighbours per query (positive).
        neighbourhood: Which k: "all" (the k nearest pool questions) or "valid" (the k nearest with a correct
            and a wrong answer; an option of PRES methods), morkit.selection.methods.NEIGHBOURHOODS.
        singles_only: Choose among single RMs only (an option of PRES methods).
        runnable: Pool RMs that may run on candidates without their cached scores; others need them cached.
        device: Where the pool's embedder loads when `embedder` is None; None picks automatically.

    Raises:
        InputError: The pool is empty, the method is unknown or lacks `singles_only` or the `neighbourhood`,
            `k` is not positive, or `embedder` is not the pool's.
    """

    def __init__(self, pool: QuestionPool, method: str = DEFAULT_METHOD, *, embedder: Any = None, k: int = 100,
                 singles_only: bool = False, runnable: Iterable[str] = (), device: str | None = None,
                 neighbourhood: str = DEFAULT_NEIGHBOURHOOD):
        if len(pool) == 0:
            raise InputError("the pool is empty: build it from labelled questions first")
        entry = check_method(method, singles_only, neighbourhood)
        checks.positive_int(k, "k")
        if embedder is not None and embedder.name != pool.embedder:
            raise InputError(f"the pool was built with embedder {pool.embedder!r}; queries were to be embedded "
                             f"with {embedder.name!r}, and similarities across embedders mean nothing")
        self.method: SelectionMethod = entry.load()(pool, **({"singles_only": True} if singles_only else {}))
        self.chooser = EnsembleChooser(pool, self.method, method, k=k, runnable=runnable, embedder=embedder,
                                       device=device, neighbourhood=neighbourhood)
        self.calibration = PickCalibrator(pool, self.method, k, neighbourhood)
        self.ranker = Ranker(pool, self.calibration)

    def use(self, method: SelectionMethod, name: str) -> None:
        """Choose with `method` (named `name`) from now on, e.g. a server's fixed ensemble.

        Args:
            method: The selection method (an object with `choose(neighbours, available)`).
            name: The name selections report for it.
        """
        self.method = self.chooser.method = self.calibration.method = method
        self.chooser.method_name = name

    pool = property(lambda self: self.chooser.pool)
    @property
    def method_name(self) -> str:
        """The method that chooses for a query that can use every RM of a pool domain: the one asked for, or the one
        that chooses in its place, with why ("pres (learned needs 20 mixed pool questions)"); one per distinct
        domain RM set, joined by "; ". Each Selection's `method` says it per query (a lone answer goes to PRES)."""
        asked, chosen_by = self.chooser.method_name, getattr(self.method, "chosen_by", None)
        if chosen_by is None:
            return asked
        sets = domain_rm_sets(self.pool) or [tuple(self.pool.rm_names)]
        return "; ".join(dict.fromkeys(method_label(*chosen_by(frozenset(members))) for members in sets))

    k = property(lambda self: self.chooser.k)
    neighbourhood = property(lambda self: self.chooser.neighbourhood)
    runnable = property(lambda self: self.chooser.runnable)

    @property
    def embedder(self) -> Any:
        return self.chooser.embedder

    def neighbours(self, vectors: np.ndarray) -> list[Neighbours]:
        """The nearest pool questions (up to `k`; in the "valid" neighbourhood, valid ones) of each query embedding.

        Args:
            vectors: (n, d) query embeddings from the pool's embedder.

        Returns:
            One Neighbours (pool rows, ids, cosine similarities) per vector.
        """
        return self.chooser.neighbours(vectors)

    def skipped(self, query: Query) -> dict[str, str]:
        """The pool RMs this query cannot use, each with why (EnsembleChooser.skipped).

        Args:
            query: The query.

        Returns:
            Pool RM name -> why the query cannot use it, in pool order.
        """
        return self.chooser.skipped(query)

    def available(self, query: Query) -> frozenset[str]:
        """Pool RMs that apply to the query and have cached scores on every candidate, or may run on them.

        Args:
            query: The query.

        Returns:
            The names of the pool RMs the query can use.
        """
        return self.chooser.available(query)

    def select_many(self, queries: Sequence[Query], *, vectors: np.ndarray | None = None) -> list[Selection]:
        """The chosen ensemble of each query, with its evidence; one embedding and neighbour search for the batch
        (`vectors`: the queries' embeddings, when the caller has them).

        Args:
            queries: The queries to route.
            vectors: (len(queries), d) embeddings of their questions by the pool's embedder; None embeds them now.

        Returns:
            One Selection per query, in order.
        """
        return self.chooser.select_many(queries, vectors=vectors)

    def select(self, query: Query) -> Selection:
        """The RM ensemble chosen for one query (`.choice.ensemble`), with its neighbours and evidence.

        Args:
            query: The query to route.

        Returns:
            The query's Selection.
        """
        return self.select_many([query])[0]

    def candidate_scores(self, query: Query, choice: Choice, raw: np.ndarray | None = None) -> np.ndarray:
        """The choice's score for each of the query's candidates (Ranker.candidate_scores).

        Args:
            query: The query; its candidates must carry the cached scores of the choice's members.
            choice: A method's pick (an ensemble and the transform its weights apply to).
            raw: The query's member score matrix over the pool's RMs, if already read.

        Returns:
            One score per candidate, in order.

        Raises:
            InputError: A candidate lacks a member's score, or a member score cannot be standardised.
        """
        return self.ranker.candidate_scores(query, choice, raw)

    def confidence(self, query: Query, choice: Choice, scores: np.ndarray, raw: np.ndarray | None = None) -> float:
        """The calibrated probability that the query's top-scored candidate is correct.

        Args:
            query: The query.
            choice: The pick its candidates were scored under; its own calibrator is used when it has one.
            scores: The candidates' scores under `choice` (`candidate_scores`).
            raw: The query's member score matrix over the pool's RMs, if already read.

        Returns:
            A probability in [0, 1].
        """
        return self.calibration.confidence(query, choice, scores, raw)

    def calibrator(self) -> Calibrator:
        """The leave-one-out calibrator for picks whose method has none of its own (fitted when first needed).

        Returns:
            The calibrator.
        """
        return self.calibration.calibrator()

    def rank_selected(self, query: Query, selection: Selection, abstain_below: float | None = None) -> Ranking:
        """MoR scores of the query's candidates under a selection, the pick and its confidence (Ranker).

        Args:
            query: The query whose candidates to rank.
            selection: Its selection (`select`).
            abstain_below: Mark the ranking `abstain` when the confidence is below this; None marks nothing.

        Returns:
            The Ranking; a query without candidates has `best_index` None.
        """
        return self.ranker.rank_selected(query, selection, abstain_below)

    def rank(self, query: Query) -> Ranking:
        """Select, then score the query's candidates with the chosen ensemble (`.best_index`, `.scores`,
        `.confidence`).

        Args:
            query: The query whose candidates to rank; they need the chosen members' cached scores.

        Returns:
            The query's Ranking.
        """
        return self.rank_selected(query, self.select(query))
