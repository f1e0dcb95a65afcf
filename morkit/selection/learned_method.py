"""The learned selection method: the fits a pool stores in pool.json (over every RM, and per domain's RMs), and
`Learned`, which picks by them (under a budget, among them and the pool's budget routes); `stacker` is it
restricted to the former stacker's grid (docs/selection.md)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from morkit.question_pool.pool import QuestionPool
from morkit.selection.base import Choice, CostLimit, Neighbours, chosen_in_place
from morkit.selection.coverage import domain_rm_sets
from morkit.selection.local import query_evidence
from morkit.selection.learned import (
    MIN_MIXED,
    SETTINGS,
    STACKER_SETTINGS,
    LearnedFit,
    Setting,
    TooFewMixed,
    fit_learned,
    stored_problem,
)

log = logging.getLogger(__name__)

MAX_STORED_SUBSETS = 8
"""At most this many fits over RM subsets are stored with a pool (those of its largest domains)."""


def stored_members(obj: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The members of a stored fit; None when it is too damaged to tell."""
    try:
        if obj.get("pres_members"):
            return tuple(obj["pres_members"])
        return tuple(obj["components"][0]["spec"]["members"])
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def _stored(obj: Mapping[str, Any], pool: QuestionPool) -> LearnedFit:
    """The fit kept in pool.json, checked (LearnedFit.from_json, check_pool); a damaged one is an InputError
    naming the pool file and the field, not a traceback."""
    from pathlib import Path

    from morkit.core.errors import InputError
    from morkit.question_pool.store import SHAPE_ERRORS

    subsets = pool.meta.get("learned_subsets") or []
    key = "learned" if obj is pool.meta.get("learned") else next(
        (f"learned_subsets[{i}]" for i, s in enumerate(subsets) if s is obj), "learned")
    try:
        fit = LearnedFit.from_json(obj)
        fit.check_pool(pool.rm_names, pool.step_rms)
        return fit
    except (*SHAPE_ERRORS, LookupError) as exc:
        raise InputError(f"malformed learned selector {key}: {stored_problem(exc)}; rebuild the pool, or refit with "
                         "`morkit pool add`",
                         path=str(Path(pool.origin[0]) / "pool.json") if pool.origin else None) from exc


def stored_full_fit(pool: QuestionPool) -> LearnedFit | None:
    """The fit over every RM kept in pool.json, checked; None when the pool keeps none."""
    full = pool.meta.get("learned")
    return _stored(full, pool) if full else None


def stored_fits(pool: QuestionPool) -> list[Mapping[str, Any]]:
    """The fits kept in pool.json as stored: the one over every RM first (if any), then the subsets'."""
    full = pool.meta.get("learned")
    subsets = pool.meta.get("learned_subsets") or []
    return ([full] if full else []) + [s for s in subsets if isinstance(s, Mapping)]


def with_stored_learned(pool: QuestionPool) -> QuestionPool:
    """The pool with its learned fits kept in its metadata (saved in pool.json): over every RM, and over the
    RMs of each domain where some RMs skip some domains. A pool too small to learn from is returned without
    them (selection then falls back to PRES)."""
    sets = domain_rm_sets(pool)
    full = tuple(pool.rm_names)
    meta = {k: v for k, v in pool.meta.items() if k not in ("learned", "learned_subsets")}
    subsets = []
    for members in [full] + [s for s in sets if s != full][:MAX_STORED_SUBSETS]:
        try:
            fit = fit_learned(pool, members)
        except TooFewMixed as exc:
            if members != full or full in sets or not sets:  # a mixed-domain pool has no question with every RM
                log.warning("learned selector over %s: %s; selection will fall back to PRES", ", ".join(members), exc)
            continue
        if members == full:
            meta["learned"] = fit.to_json()
        else:
            subsets.append(fit.to_json())
    if subsets:
        meta["learned_subsets"] = subsets
    return replace(pool, meta=meta)


def with_budget_routes(pool: QuestionPool, options: Any = None, progress: bool = False
                       ) -> QuestionPool:
    """The pool with its costs (`meta["costs"]`: the stored table updated by `options`) and the budget routes
    fitted on them (`meta["budget_routes"]`), kept in pool.json; unchanged where `options` is None and the pool
    keeps no costs. Routes need the fit over every RM (`meta["learned"]`): without one none are stored.

    Args:
        pool: The pool, its learned fits already stored (with_stored_learned).
        options: Cost files and costs per RM (morkit.selection.budget.CostOptions); None: the stored costs as
            they are.
        progress: A line on stderr per route fitted.

    Returns:
        The pool (not saved).

    Raises:
        InputError: A pool RM has no cost anywhere.
    """
    from morkit.selection.budget import CostOptions, fit_budget_routes, resolve_costs

    if options is None and "costs" not in pool.meta:
        return pool
    costs = resolve_costs(pool, options or CostOptions(), needed=True)
    full = stored_full_fit(pool)
    routes = fit_budget_routes(pool, costs, full, progress) if full is not None else []
    return replace(pool, meta={**pool.meta, "costs": costs.to_json(),
                               "budget_routes": [r.to_json() for r in routes]})


def _grid_settings(obj: Mapping[str, Any]) -> list[Setting] | None:
    """The settings behind a stored fit; None when it is too damaged to tell."""
    try:
        return [Setting(c["setting"]["learner"], c["setting"]["features"], c["setting"]["params"])
                for c in obj["components"]]
    except (KeyError, IndexError, TypeError):
        return None


def _grid_key(setting: Setting) -> tuple:
    """A setting as the grid knows it: learner, features and every parameter."""
    return setting.learner, setting.features, tuple(sorted(setting.params.items()))


@dataclass
class Learned:
    """Selection method: the pool-learned candidate ranker over the available RMs (a fit per availability set,
    stored with the pool or fitted once here); PRES when too few questions to learn from. A stored fit is used
    only when its settings are in this grid (`settings`, `baselines`, `min_mixed`: see fit_learned)."""

    pool: QuestionPool
    folds: int = 5
    name: str = "learned"
    settings: tuple[Setting, ...] = SETTINGS
    baselines: bool = True
    min_mixed: int = MIN_MIXED
    _fits: dict = field(init=False, repr=False, default_factory=dict)
    _choices: dict = field(init=False, repr=False, default_factory=dict)
    _pres_method: Any = field(init=False, repr=False, default=None)  # the fallback, and CV's pick where PRES won
    _routes: list | None = field(init=False, repr=False, default=None)  # the budget routes, once read or fitted

    def fit_for(self, available: frozenset[str]) -> LearnedFit | None:
        """The fit over the available RMs (stored with the pool, else fitted here on the questions they
        cover); None when too few questions."""
        if available not in self._fits:
            members = tuple(m for m in self.pool.rm_names if m in available)
            if not members:
                raise LookupError("no pool RM can score this query: its candidates lack every pool RM's scores")
            fits = [s for s in stored_fits(self.pool) if self._in_grid(s)]
            stored = ([s for s in fits if stored_members(s) == members]
                      or [s for s in fits if stored_members(s) is None])  # a damaged fit says so, not refitted
            if stored:
                self._fits[available] = _stored(stored[0], self.pool)
            else:
                try:
                    self._fits[available] = fit_learned(self.pool, members, folds=self.folds, settings=self.settings,
                                                        baselines=self.baselines, min_mixed=self.min_mixed)
                except TooFewMixed as exc:
                    log.warning("%s; falling back to PRES", exc)
                    self._fits[available] = None
        return self._fits[available]

    def _in_grid(self, obj: Mapping[str, Any]) -> bool:
        """Whether a stored fit is one this grid could have chosen (a damaged one is, so it says so)."""
        settings = _grid_settings(obj)
        if settings is None:
            return True
        if not settings:  # CV chose PRES, a baseline
            return self.baselines
        grid = {_grid_key(s) for s in self.settings}
        return all(_grid_key(s) in grid or (self.baselines and s.learner == "single") for s in settings)

    def chosen_by(self, available: frozenset[str]) -> tuple[str, str | None]:
        """Which method chooses for queries that can use the `available` RMs, and why when it is not this one:
        PRES where too few pool questions to learn from, or where the cross-validation chose PRES over them.

        Args:
            available: The pool RMs the queries can use.

        Returns:
            (method, reason): (`name`, None) where the learned ranker chooses, else ("pres", a few words why).
        """
        fit = self.fit_for(available)
        if fit is None:
            needed = max(1, self.min_mixed)
            return "pres", f"{self.name} needs {needed} mixed pool question{'s' if needed > 1 else ''}"
        if fit.is_pres:
            return "pres", f"{self.name}'s cross-validation chose it"
        return self.name, None

    def choose(self, neighbours: Neighbours, available: frozenset[str], limit: CostLimit | None = None) -> Choice:
        """The pick by the fit over the available RMs (PRES where it has none, or where its CV chose PRES); under
        a `limit`, by the best affordable route (`_within`).

        Args:
            neighbours: The query's pool neighbours.
            available: The pool RMs the query can use.
            limit: The query's cost limit; None: no budget.

        Returns:
            The Choice.

        Raises:
            LookupError: No pool RM can score the query, or (under a limit) PRES finds nothing affordable.
        """
        fit = self.fit_for(available)
        if limit is not None:
            return self._within(fit, neighbours, available, limit)
        if fit is None:
            return self._fallback(neighbours, available)
        return self._by(fit, neighbours, available)

    def _fallback(self, neighbours: Neighbours, available: frozenset[str], limit: CostLimit | None = None,
                  reason: str | None = None) -> Choice:
        """PRES's pick where no fit chooses: too few mixed pool questions, or (`reason`) none within the budget."""
        choice = self._pres().choose(neighbours, available, limit)
        if reason is None:
            return Choice(choice.ensemble, choice.transform, choice.score, choice.alternatives,
                          {**choice.details,
                           "fallback": f"pres: fewer than {max(1, self.min_mixed)} mixed pool questions",
                           **chosen_in_place(*self.chosen_by(available))})
        return replace(choice, details={**choice.details, "fallback": f"pres: {reason}",
                                        **chosen_in_place("pres", reason)})

    def _by(self, fit: LearnedFit, neighbours: Neighbours, available: frozenset[str],
            limit: CostLimit | None = None) -> Choice:
        """The pick by one fit: its ranker (built once per fit and availability set), or PRES over its members
        where its CV chose PRES."""
        if fit.is_pres:  # CV chose the paper's rule for these RMs: PRES picks per query, calibrated as PRES is
            choice = self._pres().choose(neighbours, available & frozenset(fit.members), limit)
            return replace(choice, details={**choice.details, "learner": fit.label,
                                            **chosen_in_place("pres", f"{self.name}'s cross-validation chose it")})
        key = (available, fit.members)
        choice = self._choices.get(key)
        if choice is None:  # the same for every query with these RMs: built once
            alternatives = tuple((label, score) for label, score, _ in fit.cv_table if label != fit.label)
            skipped = [m for m in self.pool.rm_names if m not in fit.members]
            choice = Choice(fit.ensemble(), "features", fit.cv_best_of_n, alternatives,
                            {"criterion": "cv_best_of_n", "learner": fit.label, "skipped_members": skipped},
                            scorer=fit, calibrator=fit.calibrator)
            self._choices[key] = choice
        if fit.local_k:  # its features read how each RM did on this query's neighbours
            local = query_evidence(self.pool, neighbours.rows, neighbours.similarities, fit.members, fit.local_k)
            return replace(choice, scorer=fit.at(local))
        return choice

    def _within(self, fit: LearnedFit | None, neighbours: Neighbours, available: frozenset[str],
                limit: CostLimit) -> Choice:
        """The pick under a cost limit: of the fit over the available RMs and the budget routes whose members the
        query can use, those the limit affords, the best by CV best-of-n less the limit's weight times the
        route's cost (ties: the cheaper, then the full fit); PRES with the limit where none is affordable."""
        routes = [fit] if fit is not None else []
        routes += [r.fit for r in self.budget_routes(limit)
                   if set(r.members) <= available and (fit is None or set(r.members) != set(fit.members))]
        affordable = [f for f in routes if limit.affords(limit.cost(f.members))]
        if not affordable:
            reason = None if fit is None and not routes else "no learned route fits the budget"
            return self._fallback(neighbours, available, limit, reason)
        best = max(affordable, key=lambda f: (f.cv_best_of_n - limit.weight * limit.cost(f.members),
                                              -limit.cost(f.members)))
        return self._by(best, neighbours, available, limit)

    def budget_routes(self, limit: CostLimit) -> list[Any]:
        """The pool's budget routes this grid could have chosen (morkit.selection.budget.BudgetRoute): stored with
        the pool, else fitted here once on the limit's costs (an INFO line says so and how long)."""
        from morkit.selection.budget import fit_budget_routes, stored_routes

        if self._routes is None:
            routes = stored_routes(self.pool)
            if routes is None:
                full = self.fit_for(frozenset(self.pool.rm_names))
                started = time.perf_counter()
                routes = [] if full is None else fit_budget_routes(
                    self.pool, limit.costs, full, folds=self.folds, settings=self.settings, baselines=self.baselines,
                    min_mixed=self.min_mixed)
                log.info("the pool stores no budget routes: fitted %d on first use in %.1fs (`morkit pool build "
                         "--costs` or `morkit pool add --costs` stores them)", len(routes),
                         time.perf_counter() - started)
            self._routes = [r for r in routes if self._in_grid(r.fit.to_json())]
        return self._routes

    def _pres(self) -> Any:
        from morkit.selection.pres import PRES

        self._pres_method = self._pres_method or PRES(self.pool)
        return self._pres_method


def stacker(pool: QuestionPool, folds: int = 5) -> Learned:
    """The "stacker" name: the learned selector restricted to the former stacker's grid (a conditional logit
    over one z-scored score per RM, penalty and z-score chosen by CV), with no single-RM baselines, no blend
    and no margin rule, learning from any pool with a mixed question, as the stacker did."""
    return Learned(pool, folds, "stacker", STACKER_SETTINGS, baselines=False, min_mixed=1)
