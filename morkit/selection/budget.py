"""Routing under a budget: a per-query cost cap and a cost weight (`Budget`), where costs come from (`CostOptions`),
each query's `CostLimit`, and the learned selector's "budget routes", fits over RM subsets along a cost ladder
that a pool stores beside its full fit (docs/selection.md, "Routing under a budget")."""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from morkit.core import checks
from morkit.core.errors import InputError

if TYPE_CHECKING:  # imported where used: SelectOptions reads this module, and listing methods stays light
    from morkit.question_pool.pool import QuestionPool
    from morkit.reward_models.cost import CostTable, RMCost
    from morkit.selection.base import CostLimit

log = logging.getLogger(__name__)

MAX_RUNGS = 16
"""The cost ladder halves the budget at most this many times (a pool whose RMs cost nothing never reaches one RM)."""
SINGLE_PREFIX = "single RM: "
"""How a single RM's baseline row is labelled in a learned fit's cv_table."""


@dataclass(frozen=True)
class Budget:
    """What a query may spend on scoring: at most `per_query` (in COST_UNIT, GFLOP-equivalents, for all its
    candidates) or a `share` of its full route's cost (every pool RM it can use), not both; and `cost_weight`,
    the accuracy (best-of-n, PRR) a method gives up per unit of per-query cost. Neither cap nor weight: no budget.

    Args:
        per_query: The most one query's scoring may cost, > 0; None: no absolute cap.
        share: The most as a share in (0, 1] of the query's full route; None: no relative cap.
        cost_weight: lambda >= 0: the criterion is accuracy - lambda x per-query cost.

    Raises:
        InputError: Both caps are given, or a value is out of range.
    """

    per_query: float | None = None
    share: float | None = None
    cost_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.per_query is not None and self.share is not None:
            raise InputError("a budget is per query or a share of the full route's cost, not both")
        checks.optional(checks.positive, self.per_query, "budget per_query")
        if self.share is not None and not 0.0 < checks.finite(self.share, "budget share") <= 1.0:
            raise InputError(f"budget share must be in (0, 1] (a share of the full route's cost), got {self.share!r}")
        checks.non_negative(self.cost_weight, "cost_weight")

    @property
    def active(self) -> bool:
        """Whether it limits anything: a cap or a positive cost weight."""
        return self.per_query is not None or self.share is not None or self.cost_weight > 0

    @classmethod
    def parse(cls, text: str, cost_weight: float = 0.0, where: str = "--budget") -> "Budget":
        """A budget as the command line gives it: "25%" (of the full route's cost) or "3e5" (GFLOP-equivalents per
        query; a trailing "GFLOP" is allowed).

        Args:
            text: The value.
            cost_weight: The cost weight beside it.
            where: The flag, for errors.

        Returns:
            The Budget.

        Raises:
            InputError: The value is neither form, or out of range (naming `where`).
        """
        parsed = checks.quantity(text)
        if parsed is None or parsed[0] or parsed[2].lower() not in ("", "%", "gflop"):
            raise InputError(f"{where} {text!r}: give GFLOP-equivalents per query (3e5) or a share of the full "
                             "route's cost (25%)")
        _, value, unit = parsed
        try:
            if unit == "%":
                return cls(share=value / 100, cost_weight=cost_weight)
            return cls(per_query=value, cost_weight=cost_weight)
        except InputError as exc:
            raise InputError(f"{where} {text!r}: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        """The budget's values that are set.

        Returns:
            {"per_query", "share", "cost_weight"}, a cap left out where it is None.
        """
        return {k: v for k, v in (("per_query", self.per_query), ("share", self.share),
                                  ("cost_weight", self.cost_weight)) if v is not None}


def limiting(budget: Budget | None) -> Budget | None:
    """`budget` where it limits anything (`Budget.active`), else None: a budget with neither cap nor cost weight
    is no budget (no costs are resolved for it and no method refuses it)."""
    return budget if budget is not None and budget.active else None


@dataclass(frozen=True)
class CostOptions:
    """Where RM costs come from beyond the pool's stored table: cost files (packaged names or paths, read by
    morkit.reward_models.cost.read_cost_file) and costs given per RM (`--cost NAME=VALUE`), which come first.

    Args:
        files: Cost files, in order (a later one wins for an RM both name).
        given: (RM name, cost) pairs.
    """

    files: tuple[str, ...] = ()
    given: tuple[tuple[str, RMCost], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(str(f) for f in self.files))
        object.__setattr__(self, "given", tuple((str(n), c) for n, c in self.given))

    def __bool__(self) -> bool:
        return bool(self.files or self.given)

    @staticmethod
    def parse_given(text: str, where: str = "--cost") -> tuple[str, RMCost]:
        """One `NAME=VALUE` of the command line: the RM and its cost (RMCost.parse: 8B, $0.02, 3ms, 40GFLOP).

        Args:
            text: The `NAME=VALUE` given.
            where: The flag, for errors.

        Returns:
            (the RM's name, its RMCost).

        Raises:
            InputError: No "=", no name, or a value RMCost.parse refuses (naming `where` and the RM).
        """
        from morkit.reward_models.cost import RMCost

        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise InputError(f"{where} {text!r}: expected NAME=VALUE, e.g. {where} internlm2=7B")
        return name.strip(), RMCost.parse(value, f"{where} {name.strip()}")

    @cached_property
    def priced(self) -> dict[str, RMCost]:
        """RM name -> its cost as these options give it: the files in order, then `given` (a later one wins).
        Read once per options object, so a resolution and its early check read each file once."""
        from morkit.reward_models.cost import read_cost_file

        out: dict[str, RMCost] = {}
        for source in self.files:
            out.update(read_cost_file(source))
        out.update(self.given)
        return out


def stored_costs(pool: QuestionPool) -> CostTable | None:
    """The CostTable kept in pool.json (`meta["costs"]`); None when it keeps none.

    Raises:
        InputError: The stored table is damaged (naming pool.json and the field).
    """
    from morkit.reward_models.cost import CostTable

    obj = pool.meta.get("costs")
    if obj is None:
        return None
    try:
        return CostTable.from_json(obj)
    except InputError as exc:
        raise _damaged(pool, "costs", exc) from None


def budget_costs(costs: CostTable, where: str = "costs") -> CostTable:
    """`costs`, which a budget or cost weight reads: budgets are in GFLOP-equivalents (COST_UNIT), so a table in
    another unit (measured seconds) is refused rather than compared with them.

    Args:
        costs: The table.
        where: What it is, for the error.

    Returns:
        `costs`.

    Raises:
        InputError: Its unit is not COST_UNIT.
    """
    from morkit.reward_models.cost import COST_UNIT

    if costs.unit != COST_UNIT:
        raise InputError(f"{where} are in {costs.unit}, but a budget and a cost weight are in {COST_UNIT}-equivalents "
                         f"per query: give a {COST_UNIT} table (cost_table's default unit)")
    return costs


def resolve_costs(pool: QuestionPool, options: CostOptions = CostOptions(), needed: bool = False
                  ) -> CostTable | None:
    """Each pool RM's cost per candidate: the pool's stored table, updated by `options` for the RMs they price; an
    RM that neither prices is costed from its card (cost_table). The stored table is read only for the RMs the
    options leave unpriced, so options that price every pool RM replace a damaged one. None where costs are
    neither `needed` (a budget is set) nor given.

    Args:
        pool: The question pool.
        options: Cost files and costs given per RM (each file read once: `CostOptions.priced`).
        needed: Whether a budget needs them.

    Returns:
        The table over the pool's RMs, in pool order, in COST_UNIT, or None.

    Raises:
        InputError: A pool RM has no cost anywhere (cost_table's error), a file is damaged, or the stored table is
            read and is damaged or not in COST_UNIT.
    """
    from morkit.reward_models.cost import CostTable, cost_table

    if not needed and not options:
        return None
    priced = options.priced if options else {}
    unpriced = [n for n in pool.rm_names if n not in priced]
    stored = stored_costs(pool) if unpriced else None
    if stored is not None:
        budget_costs(stored, f"the costs {_pool_json(pool) or 'the pool'} stores")
    kept = {n: stored.per_candidate[n] for n in unpriced if stored is not None and n in stored.per_candidate}
    fresh_names = [n for n in pool.rm_names if n not in kept]
    fresh = cost_table(fresh_names, given=priced) if fresh_names else None
    sources = {**(dict(stored.sources) if stored else {}), **(dict(fresh.sources) if fresh else {})}
    per = {**kept, **(dict(fresh.per_candidate) if fresh else {})}
    return CostTable({n: per[n] for n in pool.rm_names}, {n: sources.get(n, "") for n in pool.rm_names})


def cost_limit(budget: Budget, costs: CostTable, rm_names: Sequence[str], usable: Iterable[str],
               candidates: int) -> CostLimit:
    """A query's CostLimit: `most` per candidate is the per-query budget over its candidates, or the share of
    what every `usable` RM costs per candidate; `weight` is the cost weight times its candidates (so the
    penalty is the weight times the per-query cost).

    Args:
        budget: The budget.
        costs: Each pool RM's cost per candidate.
        rm_names: The pool's RMs, in order.
        usable: The pool RMs the query can use (its full route).
        candidates: The query's candidates.

    Returns:
        The limit.
    """
    from morkit.selection.base import CostLimit

    costs.vector(list(rm_names))  # every pool RM priced, or an error naming those that are not
    most = math.inf
    if budget.per_query is not None and candidates:
        most = budget.per_query / candidates
    elif budget.share is not None:
        most = budget.share * costs.of(n for n in rm_names if n in set(usable))
    return CostLimit(costs, tuple(rm_names), most, budget.cost_weight * candidates, candidates)


def budget_details(limit: CostLimit, members: Sequence[str], budget: Budget) -> dict[str, Any]:
    """A choice's `budget` details: its per-query cost, the per-query limit (None: no cap), its route's members."""
    most = limit.per_query(limit.most)
    return {"cost": limit.per_query(limit.cost(members)), "limit": most if math.isfinite(most) else None,
            "cost_weight": budget.cost_weight, "route": list(members)}


def cost_summary(costs: Iterable[tuple[float | None, float | None]]) -> str:
    """A run's cost in a few words, from each query's (cost, full route's cost): "mean cost 1.2e+04 GFLOP per
    query, 23% of the full route's"; "" when no cost is known."""
    from morkit.reward_models.cost import COST_UNIT

    pairs = [(c, f) for c, f in costs if c is not None]
    if not pairs:
        return ""
    mean = sum(c for c, _ in pairs) / len(pairs)
    full = sum(f or 0.0 for _, f in pairs)
    share = f", {sum(c for c, _ in pairs) / full:.0%} of the full route's" if full > 0 else ""
    return f"mean cost {mean:.4g} {COST_UNIT} per query{share}"


# ---------------------------------------------------------------------------------------------- budget routes
@dataclass(frozen=True)
class BudgetRoute:
    """A learned fit over a subset of the pool's RMs, one rung of the cost ladder.

    Args:
        members: Its RMs, in pool order.
        cost: What they cost per candidate when it was fitted.
        fit: The learned fit over them (morkit.selection.learned.LearnedFit).
    """

    members: tuple[str, ...]
    cost: float
    fit: Any

    def to_json(self) -> dict[str, Any]:
        return {"members": list(self.members), "cost": self.cost, "fit": self.fit.to_json()}


def single_values(full_fit: Any, pool: QuestionPool) -> dict[str, float]:
    """Each RM's value for the ladder: its single-RM cross-validated best-of-n in the full fit's cv_table less
    chance (the mean share of correct answers over the pool's questions)."""
    import numpy as np

    valid = np.asarray(pool.valid, dtype=bool)
    correct = np.asarray(pool.correct, dtype=bool) & valid
    counts = valid.sum(axis=1)
    chance = float(np.mean(correct.sum(axis=1)[counts > 0] / counts[counts > 0])) if (counts > 0).any() else 0.0
    return {label[len(SINGLE_PREFIX):]: float(mean) - chance for label, mean, _ in full_fit.cv_table
            if label.startswith(SINGLE_PREFIX)}


def ladder(rm_names: Sequence[str], costs: CostTable, values: Mapping[str, float]) -> list[tuple[str, ...]]:
    """The RM subsets of the cost ladder: for shares 1/2, 1/4, ... of what every RM costs, RMs of positive value
    taken greedily by value per cost while the subset's cost stays within the share, until a subset has one RM
    (or none fits); distinct subsets, in pool order, the full set left out.

    Args:
        rm_names: The pool's RMs.
        costs: Their costs per candidate.
        values: RM -> its value (single_values); an RM without one is never taken.

    Returns:
        The subsets, costliest first.
    """
    cost = {n: float(costs.per_candidate[n]) for n in rm_names}
    full = sum(cost.values())
    useful = [n for n in rm_names if values.get(n, 0.0) > 0]
    order = sorted(useful, key=lambda n: (-(values[n] / cost[n]) if cost[n] > 0 else -math.inf, -values[n],
                                          list(rm_names).index(n)))
    floor = min((c for c in cost.values() if c > 0), default=0.0)
    out: list[tuple[str, ...]] = []
    share = 0.5
    for _ in range(MAX_RUNGS):
        cap = share * full * (1 + 1e-9)
        chosen: list[str] = []
        spent = 0.0
        for name in order:
            if spent + cost[name] <= cap:
                chosen.append(name)
                spent += cost[name]
        if not chosen:
            break
        subset = tuple(n for n in rm_names if n in chosen)
        if subset != tuple(rm_names) and subset not in out:
            out.append(subset)
        if len(chosen) == 1 or cap < floor:
            break
        share /= 2
    return out


def fit_budget_routes(pool: QuestionPool, costs: CostTable, full_fit: Any, progress: bool = False,
                      **fit_options: Any) -> list[BudgetRoute]:
    """The learned fits along the cost ladder of `pool` (ladder, single_values from `full_fit`, the fit over
    every RM), each fitted by fit_learned on the questions its RMs cover; a subset too small to learn from is
    left out.

    Args:
        pool: The question pool.
        costs: Each pool RM's cost per candidate.
        full_fit: The learned fit over every pool RM (its cv_table's single-RM rows value the RMs).
        progress: A line on stderr per fit.
        **fit_options: fit_learned's options (folds, settings, baselines, min_mixed); none: its defaults.

    Returns:
        The routes, costliest first.
    """
    from morkit.reward_models.cost import COST_UNIT
    from morkit.selection.learned import TooFewMixed, fit_learned

    subsets = ladder(pool.rm_names, costs, single_values(full_fit, pool))
    full = costs.of(pool.rm_names)
    routes = []
    for i, members in enumerate(subsets, 1):
        started = time.perf_counter()
        try:
            fit = fit_learned(pool, members, **fit_options)
        except TooFewMixed as exc:
            log.warning("budget route over %s: %s; left out", ", ".join(members), exc)
            continue
        cost = costs.of(members)
        routes.append(BudgetRoute(members, cost, fit))
        if progress:
            share = f" ({cost / full:.0%} of every RM's)" if full > 0 else ""
            print(f"budget route {i}/{len(subsets)}: {len(members)} RM{'s' if len(members) > 1 else ''} "
                  f"({', '.join(members)}), {cost:.4g} {COST_UNIT} per candidate{share}, {fit.label}: fitted in "
                  f"{time.perf_counter() - started:.1f}s", file=sys.stderr)
    return routes


def stored_routes(pool: QuestionPool) -> list[BudgetRoute] | None:
    """The budget routes kept in pool.json, each checked; None when it keeps none (not fitted yet).

    Raises:
        InputError: A route is damaged, naming pool.json and the field (`budget_routes[i].fit: ...`).
    """
    from morkit.question_pool.store import SHAPE_ERRORS
    from morkit.selection.learned import LearnedFit, stored_problem

    raw = pool.meta.get("budget_routes")
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise _damaged(pool, "budget_routes", ValueError("expected a list of routes"))
    out = []
    for i, obj in enumerate(raw):
        field = f"budget_routes[{i}]"
        try:
            if not isinstance(obj, Mapping):
                raise ValueError("expected an object {members, cost, fit}")
            members = obj["members"]
            if (not isinstance(members, list) or not members or len(set(members)) != len(members)
                    or not all(isinstance(m, str) and m in pool.rm_names for m in members)):
                raise ValueError("members: expected distinct RMs of the pool")
            cost = checks.finite_float(obj["cost"])
            if cost is None or cost < 0:
                raise ValueError("cost: expected a non-negative number")
            try:
                fit = LearnedFit.from_json(obj["fit"])
                fit.check_pool(pool.rm_names, pool.step_rms)
            except SHAPE_ERRORS as exc:
                raise ValueError(f"fit: {stored_problem(exc)}") from exc
            if set(fit.members) != set(members):
                raise ValueError("fit: it reads other RMs than the route's members")
        except SHAPE_ERRORS as exc:
            raise _damaged(pool, field, exc) from exc
        out.append(BudgetRoute(tuple(members), cost, fit))
    return out


def _damaged(pool: QuestionPool, field: str, exc: BaseException) -> InputError:
    """The one-line error for a damaged stored field, naming pool.json, the field and what repairs it."""
    from morkit.selection.learned import stored_problem

    repair = ("`morkit pool add POOL FILES --costs NAME --cost RM=VALUE` pricing every pool RM replaces it"
              if field == "costs" else "`morkit pool add POOL FILES` refits the budget routes of a pool that stores "
              "costs (with `--costs NAME` or `--cost RM=VALUE`: of one that does not)")
    return InputError(f"malformed {field}: {stored_problem(exc)}; {repair}, or rebuild the pool",
                      path=_pool_json(pool))


def _pool_json(pool: QuestionPool) -> str | None:
    """The pool.json a loaded pool came from; None for a pool built in memory."""
    return str(Path(pool.origin[0]) / "pool.json") if pool.origin else None
