"""Per-query routing as a service: `select` each query's RM ensemble from a pool, and `rank` with it (a
`selection.router.Router` over a scoring session)."""

from __future__ import annotations

from typing import Sequence

from morkit.core.types import Query
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.selection.chooser import Selection
from morkit.selection.methods import SelectOptions
from morkit.selection.router import Ranking, Router


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
        InputError: The pool is empty.
    """
    return Router.from_options(pool, options, device=device).select_many(queries)


def rank(queries: Sequence[Query], pool: QuestionPool, options: SelectOptions = SelectOptions(),
         scoring: ScoringOptions = ScoringOptions(), session: ScoringSession | None = None) -> list[Ranking]:
    """Select each query's ensemble, run its member RMs where candidates lack their scores, pick the best.

    Args:
        queries: The queries whose candidates to rank.
        pool: The question pool.
        options: How ensembles are chosen; with `allow_run`, registered pool RMs that can run here score
            candidates that lack their scores.
        scoring: How those RMs run; its `device` also places the pool's embedder.
        session: A ScoringSession to score in (left open); None opens one over `scoring` for this call.

    Returns:
        One Ranking per query, in order (`best_index`, `scores`, `confidence`, ...).

    Raises:
        InputError: The pool is empty, or a candidate lacks a chosen member's score that no RM here can fill.
        UnavailableError: A chosen RM that must run cannot run here.
    """
    router = Router.from_options(pool, options, device=scoring.device, session=session)  # bad input: no session
    if session is not None:
        return router.route(queries)
    with ScoringSession(scoring) as own:
        router.session = own
        return router.route(queries)
