"""Per-query routing as a service: choose each query's RM ensemble from a pool (select), and rank with it.

    selections = morkit.select(queries, pool)            # ensemble + evidence per query
    rankings = morkit.rank(queries, pool)                # best candidate per query
"""

from __future__ import annotations

from typing import Sequence

from morkit.core.types import Query
from morkit.question_pool.embed import load_embedder
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.catalog import REWARD_MODELS, missing
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.rm_set import RewardModelSet
from morkit.reward_models.scoring import fill_missing_scores
from morkit.selection.methods import SelectOptions
from morkit.selection.selector import Ranking, Selection, Selector
from morkit.services.scoring import cache_scope


def runnable_rms(pool: QuestionPool) -> list[str]:
    """Pool RMs that are registered and can run here (packages, heads and weights present)."""
    return [n for n in pool.rm_names if n in REWARD_MODELS and missing(REWARD_MODELS.get(n)) is None]


def make_selector(pool: QuestionPool, options: SelectOptions = SelectOptions(), device: str | None = None) -> Selector:
    """A Selector over `pool` with the pool's own embedder."""
    return Selector(pool, options.method, embedder=load_embedder(pool.embedder, device), k=options.k,
                    singles_only=options.singles_only, runnable=runnable_rms(pool) if options.allow_run else ())


def select(queries: Sequence[Query], pool: QuestionPool, options: SelectOptions = SelectOptions(),
           device: str | None = None) -> list[Selection]:
    """Each query's chosen ensemble with its evidence (neighbours, criterion, runner-ups, skipped RMs)."""
    return make_selector(pool, options, device).select_many(queries)


def rank(queries: Sequence[Query], pool: QuestionPool, options: SelectOptions = SelectOptions(),
         scoring: ScoringOptions = ScoringOptions(), models: RewardModelSet | None = None) -> list[Ranking]:
    """Select each query's ensemble, run its member RMs where candidates lack their scores, pick the best."""
    selector = make_selector(pool, options, scoring.device)
    selections = selector.select_many(queries)
    members = [s.choice.ensemble.members for s in selections]
    owned = models is None
    models = models or RewardModelSet(scoring)
    try:
        with cache_scope(None, scoring) as store:
            scored = fill_missing_scores(queries, members, models, cache=store, chunk=scoring.chunk,
                                         progress=scoring.progress)
    finally:
        if owned:
            models.release()
    return [selector.rank_selected(q, s, options.abstain_below) for q, s in zip(scored, selections)]

