"""Routing queries against a question pool: `Router(pool).route(queries)` selects each query's RM ensemble, fills
its members' missing scores in a scoring session, and ranks the candidates with it (MoR scores, the pick and its
calibrated confidence). `morkit rank`, the server, search, loops and the TRL reward all route through one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.catalog import REWARD_MODELS, missing
from morkit.reward_models.cost import CostTable
from morkit.selection.base import SelectionMethod, method_label
from morkit.selection.budget import Budget, limiting, resolve_costs
from morkit.selection.calibration import leave_one_out_calibrator, pick_confidence
from morkit.selection.chooser import EnsembleChooser, Selection
from morkit.selection.confidence import Calibrator
from morkit.selection.coverage import domain_rm_sets
from morkit.selection.methods import DEFAULT_METHOD, DEFAULT_NEIGHBOURHOOD, SelectOptions, check_method
from morkit.selection.mor import ranked_candidates


class Filler(Protocol):
    """Where a Router fills the member scores that a query's candidates lack: a ScoringSession."""

    def fill(self, queries: Sequence[Query], wanted: Sequence[Iterable[str]]) -> list[Query]: ...


@dataclass(frozen=True)
class Ranking:
    """A query's best candidate under its selection, with the calibrated probability that it is correct;
    `abstain` is set when the caller asked to flag picks below a confidence, `cost` when the Router knows the RMs'
    costs, `escalated` by a cascade that spent more on the query (None otherwise)."""

    selection: Selection
    scores: tuple[float, ...]
    best_index: int | None  # None: the query had no candidates
    tied: tuple[int, ...]
    confidence: float = float("nan")
    abstain: bool | None = None
    cost: float | None = None  # what scoring the query under its route cost, in COST_UNIT (GFLOP-equivalents)
    escalated: bool | None = None

    def to_json(self) -> dict[str, Any]:
        sel = self.selection.to_json()
        out = {"id": self.selection.query_id, "best_index": self.best_index, "ensemble": sel["ensemble"],
               "scores": list(self.scores), "tied": list(self.tied), "method": self.selection.method,
               "confidence": round(self.confidence, 6) if np.isfinite(self.confidence) else None}
        details = self.selection.choice.details
        if "learner" in details:
            out["learner"] = details["learner"]
        if details.get("fallback"):
            out["fallback"] = details["fallback"]
        if self.selection.missing_rms:
            out["missing_rms"] = list(self.selection.missing_rms)
            out["skipped_rms"] = dict(self.selection.skipped_rms)
        if self.abstain is not None:
            out["abstain"] = self.abstain
        if self.cost is not None:
            out["cost"] = self.cost
        if "budget" in details:
            out["budget"] = dict(details["budget"])
        if self.escalated is not None:
            out["escalated"] = self.escalated
        return out


def runnable_rms(pool: QuestionPool) -> list[str]:
    """Pool RMs that are registered and can run here (packages, heads and weights present)."""
    return [n for n in pool.rm_names if n in REWARD_MODELS and missing(REWARD_MODELS.get(n)) is None]


class Router:
    """Routes queries to ensembles using a pool and ranks their candidates: select (the `chooser`, an
    EnsembleChooser), fill (the `session`), rank (MoR scores and the calibrated confidence). Query questions are
    embedded with the pool's own embedder.

    Args:
        pool: The question pool to route against (not empty).
        method: A name registered in SELECTION_METHODS.
        rms: The pool RMs of the `fixed` method's ensemble; empty for the other methods.
        embedder: The embedder for query questions; it must be the pool's (same name). None loads the pool's own
            when first needed.
        k: Pool neighbours per query (positive).
        singles_only: Choose among single RMs only (an option of PRES methods).
        runnable: Pool RMs that may run on candidates without their cached scores; others need them cached.
        device: Where the pool's embedder loads when `embedder` is None; None picks automatically.
        neighbourhood: Which k: "all" (the k nearest pool questions) or "valid" (the k nearest with a correct
            and a wrong answer; an option of PRES methods), morkit.selection.methods.NEIGHBOURHOODS.
        session: Where `route` fills the chosen members' missing scores (a ScoringSession, left open); None fills
            nothing, so candidates must carry them.
        abstain_below: Mark a ranking `abstain` when its confidence is below this; None marks nothing.
        budget: Each query's cost cap and cost weight (an option of the methods with "budget" in their registry
            metadata); None, or one that limits nothing (`Budget.active` false): no budget.
        costs: Each pool RM's cost per candidate, which prices every ranking (`cost`); None: the pool's stored
            table where a budget needs one (cards for RMs it lacks), else no costs.

    Raises:
        InputError: The pool is empty, the method is unknown or lacks `singles_only`, the `neighbourhood`,
            `rms` or a budget, `k` is not positive, `abstain_below` is not a probability, `embedder` is not
            the pool's, or a budget is set and a pool RM has no cost.
    """

    def __init__(self, pool: QuestionPool, method: str = DEFAULT_METHOD, *, rms: Sequence[str] = (),
                 embedder: Any = None, k: int = 100, singles_only: bool = False, runnable: Iterable[str] = (),
                 device: str | None = None, neighbourhood: str = DEFAULT_NEIGHBOURHOOD,
                 session: Filler | None = None, abstain_below: float | None = None, budget: Budget | None = None,
                 costs: CostTable | None = None):
        if len(pool) == 0:
            raise InputError("the pool is empty: build it from labelled questions first")
        budget = limiting(budget)
        entry = check_method(method, singles_only, neighbourhood, rms, budget=budget is not None)
        checks.positive_int(k, "k")
        checks.optional(checks.probability, abstain_below, "abstain_below")
        if embedder is not None and embedder.name != pool.embedder:
            raise InputError(f"the pool was built with embedder {pool.embedder!r}; queries were to be embedded "
                             f"with {embedder.name!r}, and similarities across embedders mean nothing")
        if budget is not None and costs is None:
            costs = resolve_costs(pool, needed=True)
        if costs is not None and costs.covers(pool.rm_names):
            raise InputError(f"no cost for {', '.join(costs.covers(pool.rm_names))}: give one (--cost NAME=8B, "
                             "--costs FILE)")
        options = {**({"singles_only": True} if singles_only else {}), **({"rms": tuple(rms)} if rms else {})}
        self.pool = pool
        self.costs = costs
        self.chooser = EnsembleChooser(pool, entry.load()(pool, **options), method, k=k, runnable=runnable,
                                       embedder=embedder, device=device, neighbourhood=neighbourhood,
                                       budget=budget, costs=costs)
        self.session = session
        self.abstain_below = abstain_below
        self._calibrator: Calibrator | None = None

    @classmethod
    def from_options(cls, pool: QuestionPool, options: SelectOptions = SelectOptions(), *, device: str | None = None,
                     embedder: Any = None, session: Filler | None = None) -> "Router":
        """A Router over `pool` as `options` say; with `allow_run`, the registered pool RMs that can run here
        may fill missing scores.

        Args:
            pool: The question pool.
            options: The method, its options, the neighbours, the confidence to mark `abstain` below, the
                budget and where costs come from (the pool's stored table, updated by `options.costs`; resolved
                only with a budget or costs given).
            device: Where the pool's embedder loads, when it first embeds; None picks automatically.
            embedder: A caller's embedder (it must be the pool's); None loads the pool's own.
            session: Where `route` fills missing member scores; None fills nothing.

        Returns:
            The Router.

        Raises:
            InputError: As Router's, or a pool RM has no cost where costs are needed (resolve_costs).
        """
        budget = limiting(options.budget)
        check_method(options.method, options.singles_only, options.neighbourhood, options.rms,
                     budget=budget is not None)  # before any cost file is read
        costs = resolve_costs(pool, options.costs, needed=budget is not None)
        return cls(pool, options.method, rms=options.rms, embedder=embedder, device=device, k=options.k,
                   neighbourhood=options.neighbourhood, singles_only=options.singles_only,
                   runnable=runnable_rms(pool) if options.allow_run else (), session=session,
                   abstain_below=options.abstain_below, budget=budget, costs=costs)

    # ------------------------------------------------------------------------------------------ the method
    method = property(lambda self: self.chooser.method)
    k = property(lambda self: self.chooser.k)
    neighbourhood = property(lambda self: self.chooser.neighbourhood)
    runnable = property(lambda self: self.chooser.runnable)
    budget = property(lambda self: self.chooser.budget)

    @property
    def embedder(self) -> Any:
        """The pool's embedder for query questions (loaded when first asked for)."""
        return self.chooser.embedder

    def use(self, method: SelectionMethod, name: str) -> None:
        """Choose with `method` (named `name`) from now on, e.g. a learned ranker fitted by the caller.

        Args:
            method: The selection method (an object with `choose(neighbours, available)`).
            name: The name selections report for it.
        """
        self.chooser.method, self.chooser.method_name = method, name
        self._calibrator = None

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

    # ------------------------------------------------------------------------------------------ route
    def route(self, queries: Sequence[Query]) -> list[Ranking]:
        """Select each query's ensemble, fill its members' missing scores in the session, rank the candidates.

        Args:
            queries: The queries whose candidates to rank.

        Returns:
            One Ranking per query, in order (`best_index`, `scores`, `confidence`, ...).

        Raises:
            InputError: A query cannot be routed, or a candidate lacks a chosen member's score that the session
                does not fill.
        """
        selections = self.select_many(queries)
        if self.session is not None:
            queries = self.session.fill(queries, [s.choice.ensemble.members for s in selections])
        return [self.rank(q, s) for q, s in zip(queries, selections)]

    def select_many(self, queries: Sequence[Query], *, vectors: np.ndarray | None = None) -> list[Selection]:
        """The chosen ensemble of each query, with its evidence; one embedding and neighbour search for the batch.

        Args:
            queries: The queries to route.
            vectors: (len(queries), d) embeddings of their questions by the pool's embedder; None embeds them now.

        Returns:
            One Selection per query, in order.
        """
        return self.chooser.choose_many(queries, vectors=vectors)

    def select(self, query: Query) -> Selection:
        """The RM ensemble chosen for one query (`.choice.ensemble`), with its neighbours and evidence.

        Args:
            query: The query to route.

        Returns:
            The query's Selection.
        """
        return self.select_many([query])[0]

    def rank(self, query: Query, selection: Selection) -> Ranking:
        """MoR scores of the query's candidates under a selection, the pick (ties broken by a seeded shuffle) and
        its confidence; a query without candidates has no pick (best_index None), as `score` passes it through.

        Args:
            query: The query whose candidates to rank; they need the chosen members' scores.
            selection: Its selection (`select`).

        Returns:
            The Ranking, marked `abstain` below the router's `abstain_below`, with its `cost` where the router
            knows the RMs' costs.

        Raises:
            InputError: A candidate lacks a member's score, or a member score cannot be standardised.
        """
        undecided = None if self.abstain_below is None else True
        choice, pool = selection.choice, self.pool
        cost = None if self.costs is None else self.costs.of(choice.ensemble.members, len(query.candidates))
        if not query.candidates:
            return Ranking(selection, (), None, (), float("nan"), undecided, cost)
        picked, members = ranked_candidates(query, choice, pool.normalizer, pool.config.reduction, pool.rm_names,
                                            pool.step_rms)
        if not choice.ensemble.members:  # no pool RM applies: every candidate ties, nothing to trust
            return Ranking(selection, picked.scores, picked.best_index, picked.tied, float("nan"), undecided, cost)
        confidence = pick_confidence(choice.calibrator or self.calibrator(), np.asarray(picked.scores), members)
        abstain = None if self.abstain_below is None else bool(confidence < self.abstain_below)
        return Ranking(selection, picked.scores, picked.best_index, picked.tied, confidence, abstain, cost)

    # ------------------------------------------------------------------------------------------ confidence
    def calibrator(self) -> Calibrator:
        """The leave-one-out calibrator for picks whose method has none of its own (fitted when first needed, on
        picks from the router's k and neighbourhood).

        Returns:
            The calibrator.
        """
        if self._calibrator is None:
            self._calibrator = leave_one_out_calibrator(self.pool, self.method, self.k,
                                                        neighbourhood=self.neighbourhood)
        return self._calibrator
