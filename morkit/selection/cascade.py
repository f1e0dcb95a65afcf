"""A cascade of two routes over one pool: the learned selector over CHEAP RMs ranks each query, and where its pick's
calibrated confidence is below a threshold, the one over CHEAP and EXPENSIVE RMs ranks it again, each route's
confidence calibrated on the picks it answers (docs/selection.md, "Cascade: escalate when unsure")."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.ensembles import Ensemble
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.cost import CostTable
from morkit.selection import confidence as conf
from morkit.selection.base import Choice, Neighbours, chosen_in_place
from morkit.selection.budget import resolve_costs, stored_costs
from morkit.selection.calibration import pick_signals
from morkit.selection.cascade_options import CascadeOptions  # the options, imported from here too
from morkit.selection.chooser import NO_RM_APPLIES, Selection
from morkit.selection.learned import LearnedFit, OutOfFold, fit_learned
from morkit.selection.learned_method import Learned
from morkit.selection.methods import DEFAULT_NEIGHBOURHOOD, SelectOptions
from morkit.selection.mor import member_matrix
from morkit.selection.router import Filler, Ranking, Router, runnable_rms

MIN_ROWS = 20
"""Pool picks a conditional calibrator is fitted on at least; with fewer, that side keeps its route's own."""
NO_ROUTE_RM = "none of this route's RMs applies to this query"


NONE_OF_THE_ROUTE = Choice(Ensemble((), (), "none"), "raw", float("nan"), (),
                           {"criterion": None, "fallback": f"{NO_ROUTE_RM}: its candidates tie",
                            **chosen_in_place("none", NO_ROUTE_RM)})
"""The choice of a route none of whose RMs applies to the query: a tie without confidence (the cascade escalates it)."""


@dataclass
class Restricted:
    """A selection method that chooses among some pool RMs only (`members`): one route of a cascade."""

    method: Any  # a SelectionMethod
    members: frozenset[str]
    name: str = "learned"

    def choose(self, neighbours: Neighbours, available: frozenset[str]) -> Choice:
        within = available & self.members
        return self.method.choose(neighbours, within) if within else NONE_OF_THE_ROUTE

    def chosen_by(self, available: frozenset[str]) -> tuple[str, str | None]:
        """The method that chooses for queries that can use the `available` RMs, as the wrapped method says."""
        within = available & self.members
        if not within:
            return "none", NO_ROUTE_RM
        chosen_by = getattr(self.method, "chosen_by", None)
        return chosen_by(within) if chosen_by is not None else (self.name, None)


@dataclass
class LearnedWithPicks(Learned):
    """The learned selector whose fits carry their out-of-fold picks (LearnedFit.out_of_fold): a fit stored with the
    pool keeps none, so it is fitted again here as fit_learned fits it."""

    _with_picks: dict = field(init=False, repr=False, default_factory=dict)

    def fit_for(self, available: frozenset[str]) -> LearnedFit | None:
        if available not in self._with_picks:
            fit = super().fit_for(available)
            if fit is not None and fit.out_of_fold is None:
                members = tuple(m for m in self.pool.rm_names if m in available)
                fit = fit_learned(self.pool, members, folds=self.folds, settings=self.settings,
                                  baselines=self.baselines, min_mixed=self.min_mixed)
            self._with_picks[available] = fit
        return self._with_picks[available]


@dataclass(frozen=True)
class Stage:
    """The cascade for the queries that can use the same RMs: the calibrator that decides escalation and those of
    the kept and the escalated picks (None: the route's own, as Router.rank reports it), with a `report`. `cheap`
    and `escalated` are each route's fit's members (empty without one): a route with a fit runs and reads them
    all, as its out-of-fold picks' signals did, even where CV chose PRES and its pick names fewer."""

    cheap: tuple[str, ...]
    escalated: tuple[str, ...]
    decide: conf.Calibrator | None
    kept: conf.Calibrator | None
    raised: conf.Calibrator | None
    report: Mapping[str, Any] = field(default_factory=dict)


def spend_threshold(fit: LearnedFit, spend: float) -> float:
    """The confidence below which a `spend` share of the fit's out-of-fold picks fall (midway between the two picks
    either side of that share).

    Args:
        fit: The cheap route's fit, with its out-of-fold picks.
        spend: The share of queries to escalate, in (0, 1).

    Returns:
        The threshold.
    """
    decided = np.sort(fit.calibrator.predict(fit.out_of_fold.signals))
    n = len(decided)
    k = min(n, max(0, int(round(spend * n))))
    if n == 0:
        return 0.0
    if k == 0:
        return float(decided[0])
    if k == n:
        return float(np.nextafter(decided[-1], 2.0))
    return float((decided[k - 1] + decided[k]) / 2)


def _conditional(x: np.ndarray, hits: np.ndarray, own: conf.Calibrator, every: bool,
                 side: str) -> tuple[conf.Calibrator, str | None]:
    """A side's conditional calibrator: the route's `own` shifted to its picks (Calibrator.shifted); `own` itself
    where they are all of the route's picks (`every`), or fewer than MIN_ROWS (then with a note saying so)."""
    if every:
        return own, None
    if len(hits) < MIN_ROWS:
        return own, f"{side}: {len(hits)} pool picks, fewer than {MIN_ROWS}: the route's own calibrator"
    return own.shifted(x, hits), None


@dataclass(frozen=True, eq=False)
class _Picks:
    """A route's out-of-fold picks on the pool (OutOfFold) and, per fold, its calibrator fitted on the other folds'
    picks: what the report's honest (cross-fitted) confidences come from."""

    picks: OutOfFold
    by_fold: Mapping[int, conf.Calibrator]

    @classmethod
    def of(cls, picks: OutOfFold) -> "_Picks":
        folds = picks.folds
        return cls(picks, {int(f): conf.Calibrator.fit(picks.signals[folds != f], picks.hits[folds != f])
                           for f in np.unique(folds)})

    def unconditional(self, at: np.ndarray) -> np.ndarray:
        """The cross-fitted confidence of the picks `at` (indices) from the route's calibrator."""
        out = np.empty(len(at))
        folds = self.picks.folds[at]
        for f in np.unique(folds):
            out[folds == f] = self.by_fold[int(f)].predict(self.picks.signals[at[folds == f]])
        return out

    def conditional(self, at: np.ndarray) -> np.ndarray:
        """The cross-fitted confidence of the picks `at` (indices) from the route's calibrator shifted to them: each
        fold's from the other folds' calibrator, shifted on the other folds' picks among `at`."""
        out = np.empty(len(at))
        folds = self.picks.folds[at]
        for f in np.unique(folds):
            train, test = at[folds != f], folds == f
            shifted = self.by_fold[int(f)].shifted(self.picks.signals[train], self.picks.hits[train])
            out[test] = shifted.predict(self.picks.signals[at[test]])
        return out

    def side(self, at: np.ndarray, conditioned: bool) -> dict[str, Any]:
        """The picks `at` (a side of the cascade): how many, their accuracy, and the mean confidence and ECE on them
        of the route's calibrator and (`conditioned`) of it shifted to the side, both cross-fitted."""
        hits = self.picks.hits[at]
        out: dict[str, Any] = {"picks": len(at)}
        if not len(at):
            return out
        out["accuracy"] = float(hits.mean())
        for name, confidence in (("unconditional", self.unconditional(at)),
                                 *((("conditional", self.conditional(at)),) if conditioned else ())):
            out[name] = {"confidence": float(confidence.mean()), "ece": conf.reliability(confidence, hits)["ece"]}
        return out


def fit_stage(cheap: LearnedFit | None, escalated: LearnedFit | None, threshold: float) -> Stage:
    """The stage of a pair of route fits: the cheap fit's calibrator decides (its confidence < `threshold`
    escalates); the kept side's calibrator is the cheap route's shifted to the out-of-fold picks it keeps, the
    escalated side's the escalated route's shifted to its picks of the questions both routes cover that the cheap
    one escalates (Calibrator.shifted).

    Args:
        cheap: The cheap route's fit (None: too few pool questions; the route's own calibrator decides).
        escalated: The escalated route's fit (None: its own calibrator).
        threshold: The confidence below which a query escalates.

    Returns:
        The stage, with a report: picks, escalation share, accuracies and ECEs on the pool.
    """
    members = (cheap.members if cheap else (), escalated.members if escalated else ())
    report: dict[str, Any] = {"threshold": threshold, "notes": []}
    if cheap is None or cheap.out_of_fold is None:
        report["notes"].append("cheap route: no learned fit; its own calibrator decides and reports")
        raised = escalated.calibrator if escalated is not None else None
        return Stage(*members, None, None, raised, report)
    picks = cheap.out_of_fold
    low = cheap.calibrator.predict(picks.signals) < threshold
    report.update(picks=len(low), escalated_share=float(low.mean()) if len(low) else 0.0)
    kept, note = _conditional(picks.signals[~low], picks.hits[~low], cheap.calibrator, not low.any(), "kept")
    report["notes"] += [note] if note else []
    report["kept"] = _Picks.of(picks).side(np.flatnonzero(~low), kept is not cheap.calibrator)
    if escalated is None or escalated.out_of_fold is None:
        report["notes"].append("escalated route: no learned fit; its own calibrator reports")
        return Stage(*members, cheap.calibrator, kept, None, report)
    above = escalated.out_of_fold
    _, at_cheap, at_above = np.intersect1d(picks.rows, above.rows, assume_unique=True, return_indices=True)
    up = low[at_cheap]
    raised, note = _conditional(above.signals[at_above[up]], above.hits[at_above[up]], escalated.calibrator,
                                bool(up.all()) and len(at_above) == len(above.rows), "escalated")
    report["notes"] += [note] if note else []
    report["escalated"] = _Picks.of(above).side(at_above[up], raised is not escalated.calibrator)
    cheap_hits, above_hits = picks.hits[at_cheap], above.hits[at_above]
    report["accuracy"] = {"questions": len(at_cheap), **({} if not len(at_cheap) else {
        "cheap": float(cheap_hits.mean()), "escalated": float(above_hits.mean()),
        "cascade": float(np.where(up, above_hits, cheap_hits).mean())})}
    return Stage(*members, cheap.calibrator, kept, raised, report)


def _signals(query: Query, ranking: Ranking, members: Sequence[str], reduction: str) -> np.ndarray:
    """(1, len(SIGNALS)) the confidence signals of a ranking's pick over the raw scores of `members`."""
    return pick_signals(np.asarray(ranking.scores), member_matrix(query, members, reduction))


def _reads(selection: Selection, route: Sequence[str]) -> tuple[str, ...]:
    """The RMs a route runs for a query: its pick's members, and every member of the route's fit (`route`)."""
    return tuple(dict.fromkeys([*selection.choice.ensemble.members, *route]))


class Cascade:
    """Ranks queries with a cheap route and escalates the unsure ones to an expensive route; build it with
    `Cascade.fit`, which sets `report` (what the cascade is expected to do on the pool).

    Args:
        pool: The question pool.
        options: The RMs of each route and the threshold or spend.
        cheap: The cheap route: a Router choosing with the learned selector restricted to the cheap RMs.
        escalated: The escalated route: the same restricted to the cheap and the expensive RMs.
        learned: The learned selector both routes choose with (its fits carry their out-of-fold picks).
        threshold: The confidence below which a query escalates.
        costs: Each RM's cost per candidate; None: rankings carry no cost.
        abstain_below: Mark a ranking `abstain` when its confidence is below this; None marks nothing.
    """

    def __init__(self, pool: QuestionPool, options: CascadeOptions, cheap: Router, escalated: Router,
                 learned: LearnedWithPicks, threshold: float, costs: CostTable | None = None,
                 abstain_below: float | None = None):
        self.pool, self.options = pool, options
        self.cheap, self.escalated, self.learned = cheap, escalated, learned
        self.threshold, self.costs, self.abstain_below = threshold, costs, abstain_below
        self._stages: dict[frozenset[str], Stage | None] = {}
        self.report: dict[str, Any] = {}

    @classmethod
    def fit(cls, pool: QuestionPool, options: CascadeOptions, *, k: int = 100, runnable: Iterable[str] = (),
            embedder: Any = None, device: str | None = None, neighbourhood: str = DEFAULT_NEIGHBOURHOOD,
            session: Filler | None = None, abstain_below: float | None = None,
            costs: CostTable | None = None, learned: LearnedWithPicks | None = None) -> "Cascade":
        """A cascade over `pool`: both routes' learned fits over every cheap and every cascade RM (with their
        out-of-fold picks), the threshold (`options.below`, or the `options.spend` quantile of the cheap route's
        confidence on its out-of-fold picks) and the conditional calibrators.

        Args:
            pool: The question pool.
            options: The RMs of each route and the threshold or spend.
            k: Pool neighbours per query.
            runnable: Pool RMs that may run on candidates without their cached scores.
            embedder: The pool's embedder for query questions; None loads it when first needed.
            device: Where the pool's embedder loads when `embedder` is None.
            neighbourhood: Which k pool questions a query reads (morkit.selection.methods.NEIGHBOURHOODS).
            session: Where `route` fills the chosen members' missing scores; None fills nothing.
            abstain_below: Mark a ranking `abstain` when its confidence is below this; None marks nothing.
            costs: Each RM's cost per candidate: rankings then carry the cost of what ran for them.
            learned: The learned selector over this pool whose fits to reuse (another cascade's `learned`, e.g. at
                another threshold); None fits them here.

        Returns:
            The cascade; its `report` holds the threshold, the expected escalation share, the cheap, escalated and
            cascade accuracy on the pool's out-of-fold picks, and each conditional calibrator's ECE beside the
            unconditional one's.

        Raises:
            InputError: An RM named is not the pool's, `costs` lacks one, `spend` is given where the cheap RMs have
                too few pool questions to learn from, `learned` is over another pool, or a Router option is bad.
        """
        options.check(pool.rm_names)
        if costs is not None and costs.covers(options.members):
            raise InputError(f"no cost for {', '.join(costs.covers(options.members))}: the cascade's costs need "
                             "every RM of both routes")
        if learned is not None and learned.pool is not pool:
            raise InputError("learned: its fits are over another pool")
        learned = learned or LearnedWithPicks(pool)
        routers = []
        for members in (options.cheap, options.members):
            router = Router(pool, "learned", k=k, runnable=runnable, embedder=embedder, device=device,
                            neighbourhood=neighbourhood, session=session, abstain_below=abstain_below)
            router.use(Restricted(learned, frozenset(members)), "learned")
            routers.append(router)
        cheap = learned.fit_for(frozenset(options.cheap))
        if options.below is not None:
            threshold = float(options.below)
        elif cheap is None or cheap.out_of_fold is None:
            raise InputError(f"--spend: the cheap RMs ({', '.join(options.cheap)}) have too few pool questions to "
                             "learn from, so no confidence to set a threshold by; give --below instead")
        else:
            threshold = spend_threshold(cheap, options.spend)
        cascade = cls(pool, options, *routers, learned, threshold, costs, abstain_below)
        stage = cascade.stage(frozenset(pool.rm_names))
        cascade.report = {"rms": {"cheap": list(options.cheap), "then": list(options.then)},
                          "below": options.below, "spend": options.spend, **stage.report}
        if costs is not None:
            cascade.report["cost_per_candidate"] = cascade._expected_cost(stage)
        return cascade

    @classmethod
    def from_options(cls, pool: QuestionPool, options: SelectOptions, *, device: str | None = None,
                     embedder: Any = None, session: Filler | None = None) -> "Cascade":
        """The cascade `options.cascade` describes over `pool` (Cascade.fit), with the rest of `options`: the
        neighbours, the confidence to mark `abstain` below, and (with `allow_run`) the RMs that may run here. Its
        rankings carry `cost` where costs are known: given in `options.costs`, or stored with the pool
        (resolve_costs, cards filling in the RMs neither names).

        Args:
            pool: The question pool.
            options: The selection options; `cascade` must be set.
            device: Where the pool's embedder loads, when it first embeds; None picks automatically.
            embedder: A caller's embedder (it must be the pool's); None loads the pool's own.
            session: Where `route` fills missing member scores; None fills nothing.

        Returns:
            The fitted cascade.

        Raises:
            InputError: `options` has no cascade, or as Cascade.fit and resolve_costs.
        """
        if options.cascade is None:
            raise InputError("no cascade in the options: give --cascade NAME ... --then NAME ...")
        options.cascade.check(pool.rm_names)  # before any cost file is read
        known = bool(options.costs) or stored_costs(pool) is not None
        costs = resolve_costs(pool, options.costs, needed=known)
        return cls.fit(pool, options.cascade, k=options.k, runnable=runnable_rms(pool) if options.allow_run else (),
                       embedder=embedder, device=device, neighbourhood=options.neighbourhood, session=session,
                       abstain_below=options.abstain_below, costs=costs)

    # ------------------------------------------------------------------------------------------ as a Router
    @property
    def session(self) -> Filler | None:
        """Where both routes fill missing member scores (None: nowhere); setting it sets both."""
        return self.cheap.session

    @session.setter
    def session(self, session: Filler | None) -> None:
        self.cheap.session = self.escalated.session = session

    @property
    def embedder(self) -> Any:
        """The pool's embedder for query questions (both routes share it)."""
        return self.cheap.embedder

    @property
    def method_name(self) -> str:
        """What chooses, in a few words: each route's method (Router.method_name) and the threshold."""
        return (f"cascade: {self.cheap.method_name} over {', '.join(self.options.cheap)}, below "
                f"{self.threshold:.3g} escalated to {self.escalated.method_name} adding {', '.join(self.options.then)}")

    def describe(self) -> dict[str, Any]:
        """The cascade's settings as `/health` reports them: its options, the threshold, the share of the pool's
        out-of-fold picks it escalates, and the costs' unit (None: rankings carry no cost).

        Returns:
            {"cheap", "then", "below", "spend", "threshold", "escalated_share", "cost_unit"}.
        """
        return {**self.options.to_json(), "threshold": self.threshold,
                "escalated_share": self.report.get("escalated_share"),
                "cost_unit": self.costs.unit if self.costs is not None else None}

    def _expected_cost(self, stage: Stage) -> dict[str, Any]:
        """Per candidate, what the cheap route's RMs cost, what escalating adds, and the cascade's expectation at
        the pool's escalation share (each route charged for all of its RMs)."""
        cheap = self.costs.of(stage.cheap)
        extra = self.costs.of([m for m in stage.escalated if m not in stage.cheap])
        share = stage.report.get("escalated_share", float("nan"))
        return {"unit": self.costs.unit, "cheap": cheap, "escalated": cheap + extra, "cascade": cheap + share * extra}

    def stage(self, available: frozenset[str]) -> Stage | None:
        """The stage for queries that can use some pool RMs (fitted once per set of RMs the routes read).

        Args:
            available: The pool RMs the queries can use.

        Returns:
            Their stage; None where the escalated route would read no RM the cheap one does not.
        """
        cheap_rms = available & frozenset(self.options.cheap)
        above = available & frozenset(self.options.members)
        if above == cheap_rms:
            return None
        if above not in self._stages:
            cheap = self.learned.fit_for(cheap_rms) if cheap_rms else None
            stage = fit_stage(cheap, self.learned.fit_for(above), self.threshold)
            if not cheap_rms:
                stage = replace(stage, report={**stage.report, "notes": [*stage.report["notes"], NO_ROUTE_RM]})
            self._stages[above] = stage
        return self._stages[above]

    def _stage_of(self, query: Query, selection: Selection) -> Stage | None:
        """The stage of a query by its cheap selection; None where it cannot escalate: no candidates to compare
        (none, or one: its pick cannot change), or no pool RM applies to it."""
        if len(query.candidates) < 2 or selection.choice is NO_RM_APPLIES:
            return None
        return self.stage(frozenset(self.pool.rm_names) - set(selection.skipped_rms))

    # ------------------------------------------------------------------------------------------ route
    # route() runs the phases below over a list of queries; RoutingEngine runs the same phases over a micro-batch,
    # job by job: cheap select -> fill cheap_reads -> cheap rank -> decide; then, for the queries decide leaves
    # undecided, escalated select -> fill escalated_reads -> escalated rank -> finish.
    def route(self, queries: Sequence[Query]) -> list[Ranking]:
        """Rank each query with the cheap route; escalate those whose cheap pick's confidence (its route's calibrator)
        is below the threshold: fill the escalated route's RMs and rank them again with it.

        Args:
            queries: The queries whose candidates to rank.

        Returns:
            One Ranking per query, in order; `escalated` says which route ranked it, `confidence` comes from that
            route's calibrator conditioned on the escalation decision, `cost` (with costs) is what ran for it.

        Raises:
            InputError: A query cannot be routed, or a candidate lacks a chosen member's score that the session
                does not fill.
        """
        queries = list(queries)
        if not queries:
            return []
        vectors = self.cheap.embedder.encode([q.question for q in queries])
        selections = self.cheap.select_many(queries, vectors=vectors)
        if self.cheap.session is not None:
            queries = self.cheap.session.fill(queries, [self.cheap_reads(q, s) for q, s in zip(queries, selections)])
        out: list[Ranking | None] = [self.decide(q, s, self.cheap.rank(q, s)) for q, s in zip(queries, selections)]
        up = [i for i, ranking in enumerate(out) if ranking is None]
        if up:
            raised = [queries[i] for i in up]
            chosen = self.escalated.select_many(raised, vectors=vectors[up])
            if self.escalated.session is not None:
                raised = self.escalated.session.fill(raised, [self.escalated_reads(q, selections[i], s)
                                                              for i, q, s in zip(up, raised, chosen)])
            for i, query, selection in zip(up, raised, chosen):
                out[i] = self.finish(query, selections[i], selection, self.escalated.rank(query, selection))
        return out  # type: ignore[return-value]  # every slot is filled

    def cheap_reads(self, query: Query, selection: Selection) -> tuple[str, ...]:
        """The RMs the cheap route fills for a query before its rank: its pick's members and, where the query can
        escalate, every member of the cheap route's fit (the decision reads their signals).

        Args:
            query: The query.
            selection: Its cheap route's selection.

        Returns:
            The pool RMs to fill, in order.
        """
        stage = self._stage_of(query, selection)
        return _reads(selection, stage.cheap if stage else ())

    def decide(self, query: Query, selection: Selection, ranking: Ranking) -> Ranking | None:
        """Whether the cheap route's ranking stands: the ranking as the cascade reports it (confidence from the kept
        side's calibrator, not escalated, its cost), or None where the query escalates (its cheap pick's calibrated
        confidence is below the threshold, or no cheap RM applies to it).

        Args:
            query: The query, its cheap RMs' scores filled (cheap_reads).
            selection: Its cheap route's selection.
            ranking: The cheap route's ranking of it.

        Returns:
            The final ranking, or None: escalate.
        """
        stage = self._stage_of(query, selection)
        reads = _reads(selection, stage.cheap if stage else ())
        if stage is None:
            return self._done(ranking, query, reads, False, ranking.confidence)
        if not selection.choice.ensemble.members:
            return None
        x = _signals(query, ranking, stage.cheap, self.pool.config.reduction) if stage.decide is not None else None
        sure = ranking.confidence if x is None else float(stage.decide.predict(x)[0])
        if sure < self.threshold:
            return None
        kept = ranking.confidence if x is None else float(stage.kept.predict(x)[0])
        return self._done(ranking, query, reads, False, kept)

    def escalated_reads(self, query: Query, cheap: Selection, selection: Selection) -> tuple[str, ...]:
        """The RMs the escalated route fills for an escalated query: its pick's members and every member of the
        escalated route's fit.

        Args:
            query: The query.
            cheap: Its cheap route's selection (which stage it is in).
            selection: Its escalated route's selection.

        Returns:
            The pool RMs to fill, in order.
        """
        stage = self._stage_of(query, cheap)
        return _reads(selection, stage.escalated if stage else ())

    def finish(self, query: Query, cheap: Selection, selection: Selection, ranking: Ranking) -> Ranking:
        """An escalated query's ranking as the cascade reports it: the escalated route's, its confidence from the
        escalated side's calibrator, escalated, costing both routes' RMs.

        Args:
            query: The query, the escalated route's RMs' scores filled (escalated_reads).
            cheap: Its cheap route's selection.
            selection: Its escalated route's selection.
            ranking: The escalated route's ranking of it.

        Returns:
            The final ranking.
        """
        stage = self._stage_of(query, cheap)
        confidence = ranking.confidence
        if stage is not None and stage.raised is not None and stage.escalated:
            x = _signals(query, ranking, stage.escalated, self.pool.config.reduction)
            confidence = float(stage.raised.predict(x)[0])
        ran = dict.fromkeys([*self.cheap_reads(query, cheap), *self.escalated_reads(query, cheap, selection)])
        return self._done(ranking, query, tuple(ran), True, confidence)

    def _done(self, ranking: Ranking, query: Query, ran: Sequence[str], escalated: bool | None,
              confidence: float) -> Ranking:
        """The ranking with its reported confidence (marked `abstain` below `abstain_below`), whether it escalated,
        and (with costs) the cost of the RMs that ran for it."""
        abstain = ranking.abstain
        if self.abstain_below is not None and np.isfinite(confidence):
            abstain = bool(confidence < self.abstain_below)
        cost = None if self.costs is None else self.costs.of(ran, len(query.candidates))
        return replace(ranking, confidence=confidence, abstain=abstain, escalated=escalated, cost=cost)
