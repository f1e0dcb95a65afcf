"""Scoring as a service: name the RMs (registered names, names cached in the input, or RM objects) and score.

    queries = morkit.score(morkit.load_queries("in.jsonl"), rms=["smollm2-orm", "math-consensus"])
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from morkit.core.errors import UnknownRewardModel
from morkit.core.settings import cache_dir
from morkit.core.types import Query
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.catalog import REWARD_MODELS
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.rm_set import RewardModelSet
from morkit.reward_models.scoring import (
    fill_missing_scores,
    lacks_scores,
    score_queries,
)
from morkit.reward_models.table import TableRewardModel, table_names

DEFAULT_RMS = ("smollm2-orm",)


def default_cache_path() -> Path:
    """The shared score cache the CLI uses: $MORKIT_CACHE_DIR/scores.sqlite."""
    return cache_dir() / "scores.sqlite"


def check_rm_names(names: Sequence[str | Any], queries: Sequence[Query]) -> None:
    """Every RM name must be registered or cached under `scores` in the queries; an unknown one lists the known."""
    known = set(REWARD_MODELS.names()) | set(table_names(queries))
    for name in names:
        if isinstance(name, str) and name not in known:
            raise UnknownRewardModel(name, sorted(known))


def resolve_rms(rms: Sequence[str | Any], queries: Sequence[Query], options: ScoringOptions = ScoringOptions(),
                models: RewardModelSet | None = None) -> list[Any]:
    """RM objects for `rms`: registered names are built, names found only in the queries' cached scores
    become table RMs, objects are used as they are."""
    check_rm_names(rms, queries)
    models = models or RewardModelSet(options)

    def built(rm: str | Any) -> Any:
        if not isinstance(rm, str):
            return rm
        return models[rm] if rm in REWARD_MODELS else TableRewardModel(rm, options.reduction)

    return [built(rm) for rm in rms]


@contextmanager
def cache_scope(cache: ScoreCache | str | os.PathLike | None, options: ScoringOptions) -> Iterator[ScoreCache | None]:
    """A caller's open ScoreCache as it is, or the one a path (else `options.cache`) names, closed after."""
    if isinstance(cache, ScoreCache):
        yield cache
        return
    store = ScoreCache(cache) if cache is not None else options.open_cache()
    try:
        yield store
    finally:
        if store is not None:
            store.close()


def score(queries: Sequence[Query], rms: Sequence[str | Any] = DEFAULT_RMS, *, options: ScoringOptions | None = None,
          cache: ScoreCache | str | os.PathLike | None = None, **option_fields: Any) -> list[Query]:
    """The queries with every RM's score added to each candidate's `scores` (by RM name).

    `rms`: registered names (`morkit.list_rms()`), names cached in the queries, or RM objects.
    Options come as a ScoringOptions, or as flat flags over it (`ScoringOptions.with_flags`: `device="cpu"`,
    `backend="vllm"`, `urls=[...]`, `batch_size=32`, ...).
    `cache` is an open ScoreCache, a path to one, or None for `options.cache`; scored chunks are stored as
    they finish. Model RMs run one at a time: each loads when it has pairs the cache lacks, scores them
    all, and is released before the next one loads. With `ray="auto"` (or a Ray address) each model RM is
    scored by Ray actors instead, and its batches are stored as they come back."""
    options = (options or ScoringOptions()).with_flags(**option_fields)
    models = RewardModelSet(options)
    built = resolve_rms(rms, queries, options, models)
    try:
        with cache_scope(cache, options) as store:
            return score_queries(queries, built, cache=store, chunk=options.chunk, progress=options.progress)
    finally:
        models.release()


def ensure_scores(queries: Sequence[Query], names: Sequence[str], options: ScoringOptions = ScoringOptions(),
                  models: RewardModelSet | None = None) -> list[Query]:
    """Fill in each named RM's score where the queries lack it, by running the registered RM (through the cache).

    A name that is not registered stays a table of whatever the queries cache (the pool counts the gaps);
    a name neither registered nor cached anywhere is an error."""
    check_rm_names(names, queries)
    to_run = [n for n in names if n in REWARD_MODELS and any(lacks_scores(q, n) for q in queries)]
    if not to_run:
        return list(queries)
    owned = models is None
    models = models or RewardModelSet(options)
    try:
        with cache_scope(None, options) as store:
            return fill_missing_scores(queries, [to_run] * len(queries), models, cache=store, chunk=options.chunk,
                                       progress=options.progress)
    finally:
        if owned:
            models.release()
