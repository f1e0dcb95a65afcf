"""Per-query routing as a service: `select` each query's RM ensemble from a pool, and `rank` with it; `router_for`
builds what routes from the options (a `selection.router.Router`, or a `selection.cascade.Cascade`), for
`morkit rank` and `select`, the server's RoutingEngine and the TRL reward alike."""

from __future__ import annotations

from typing import Any, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.selection.cascade import Cascade
from morkit.selection.chooser import Selection
from morkit.selection.methods import SelectOptions
from morkit.selection.router import Filler, Ranking, Router

SELECT_CASCADE = ("select: a cascade decides which queries escalate from the cheap route's scores, and select "
                  "scores nothing; use `morkit rank` with --cascade (each line says whether it escalated), or select "
                  "without it")


def router_for(pool: QuestionPool, options: SelectOptions = SelectOptions(), *, device: str | None = None,
               embedder: Any = None, session: Filler | None = None) -> Router | Cascade:
    """What routes queries as `options` say: a Cascade where `options.cascade` is set (fitted now), else a Router;
    both `route(queries)` into Rankings and fill missing scores in `session` (settable later).

    Args:
        pool: The question pool.
        options: The method, its options, the budget, costs and cascade.
        device: Where the pool's embedder loads; None picks automatically.
        embedder: A caller's embedder (it must be the pool's); None loads the pool's own.
        session: Where missing member scores are filled; None fills nothing.

    Returns:
        The Router or Cascade.

    Raises:
        InputError: As Router.from_options, or Cascade.from_options.
    """
    if options.cascade is not None:
        return Cascade.from_options(pool, options, device=device, embedder=embedder, session=session)
    return Router.from_options(pool, options, device=device, embedder=embedder, session=session)


def select(queries: Sequence[Query], pool: QuestionPool, options: SelectOptions = SelectOptions(),
           device: str | None = None) -> list[Selection]:
    """Each query's chosen ensemble with its evidence (neighbours, criterion, runner-ups, skipped RMs).

    Args:
        queries: The queries to route; no RM runs.
        pool: The question pool.
        options: The method, neighbours per query and the other selection options (`abstain_below` is unused).
        device: Where the pool's embedder loads; None picks automatically.

    Returns:
        One Selection per query, in order (`.to_json()` gives the output contract's form).

    Raises:
        InputError: The pool is empty, or `options` holds a cascade (which needs scores to decide: use `rank`).
    """
    if options.cascade is not None:
        raise InputError(SELECT_CASCADE)
    return Router.from_options(pool, options, device=device).select_many(queries)


def rank(queries: Sequence[Query], pool: QuestionPool, options: SelectOptions = SelectOptions(),
         scoring: ScoringOptions = ScoringOptions(), session: ScoringSession | None = None) -> list[Ranking]:
    """Select each query's ensemble, run its member RMs where candidates lack their scores, pick the best; with a
    cascade in `options`, escalate the queries its cheap route is unsure of (router_for).

    Args:
        queries: The queries whose candidates to rank.
        pool: The question pool.
        options: How ensembles are chosen; with `allow_run`, registered pool RMs that can run here score
            candidates that lack their scores.
        scoring: How those RMs run; its `device` also places the pool's embedder.
        session: A ScoringSession to score in (left open); None opens one over `scoring` for this call.

    Returns:
        One Ranking per query, in order (`best_index`, `scores`, `confidence`, ...; `escalated` with a cascade,
        `cost` where costs are known).

    Raises:
        InputError: The pool is empty, or a candidate lacks a chosen member's score that no RM here can fill.
        UnavailableError: A chosen RM that must run cannot run here.
    """
    router = router_for(pool, options, device=scoring.device, session=session)  # bad input: no session
    if session is not None:
        return router.route(queries)
    with ScoringSession(scoring) as own:
        router.session = own
        return router.route(queries)
