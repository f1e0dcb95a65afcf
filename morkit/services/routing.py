"""Per-query routing as a service: `select` each query's RM ensemble from a pool, and `rank` with it.

`Routing` is the one select -> fill -> rank path, shared by `rank` and the server's micro-batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from morkit.core.types import Query
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.catalog import REWARD_MODELS, missing
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.selection.chooser import Selection
from morkit.selection.methods import SelectOptions
from morkit.selection.ranker import Ranking
from morkit.selection.selector import Selector


def runnable_rms(pool: QuestionPool) -> list[str]:
    """Pool RMs that are registered and can run here (packages, heads and weights present)."""
    return [n for n in pool.rm_names if n in REWARD_MODELS and missing(REWARD_MODELS.get(n)) is None]


def make_selector(pool: QuestionPool, options: SelectOptions = SelectOptions(), device: str | None = None,
                  embedder: Any = None) -> Selector:
    """A Selector over `pool` that embeds with the pool's own embedder on `device`, loaded when it first embeds
    (or with a caller's embedder, which must be the pool's)."""
    return Selector(pool, options.method, embedder=embedder, device=device, k=options.k,
                    neighbourhood=options.neighbourhood, singles_only=options.singles_only,
                    runnable=runnable_rms(pool) if options.allow_run else ())


@dataclass
class Routing:
    """Select each query's ensemble, fill its members' missing scores in the session, rank the candidates."""

    selector: Selector
    session: ScoringSession
    abstain_below: float | None = None

    def select(self, queries: Sequence[Query], vectors: Any = None) -> list[Selection]:
        return self.selector.select_many(queries, vectors=vectors)

    def fill(self, queries: Sequence[Query], selections: Sequence[Selection]) -> list[Query]:
        return self.session.fill(queries, [s.choice.ensemble.members for s in selections])

    def rank(self, query: Query, selection: Selection) -> Ranking:
        return self.selector.rank_selected(query, selection, self.abstain_below)

    def __call__(self, queries: Sequence[Query]) -> list[Ranking]:
        selections = self.select(queries)
        return [self.rank(q, s) for q, s in zip(self.fill(queries, selections), selections)]


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
    return make_selector(pool, options, device).select_many(queries)


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
    selector = make_selector(pool, options, scoring.device)
    if session is not None:
        return Routing(selector, session, options.abstain_below)(queries)
    with ScoringSession(scoring) as own:
        return Routing(selector, own, options.abstain_below)(queries)
