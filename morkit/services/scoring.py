"""Scoring as a service: name the RMs (registered names, names cached in the input, or RM objects) and score.

    queries = morkit.score(morkit.load_queries("in.jsonl"), rms=["smollm2-orm", "math-consensus"])
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from morkit.core.types import Query
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.catalog import REWARD_MODELS
from morkit.reward_models.options import DEFAULT_CACHE, CacheDefault, ScoringOptions
from morkit.reward_models.scoring import lacks_scores
from morkit.reward_models.session import ScoringSession, check_rm_names

DEFAULT_RMS = ("smollm2-orm",)


def score(queries: Sequence[Query], rms: Sequence[str | Any] = DEFAULT_RMS, *, options: ScoringOptions | None = None,
          cache: ScoreCache | str | os.PathLike | CacheDefault | None = DEFAULT_CACHE, **option_fields: Any
          ) -> list[Query]:
    """The queries with every RM's score added to each candidate's `scores` (by RM name); options as a ScoringOptions
    or flat flags over it (`device="cpu"`, `placement="vllm"`, `ray="auto"`, ...). Model RMs run one at a time; the
    docs page Scoring and backends says how.

    Args:
        queries: The queries whose candidates to score.
        rms: Registered RM names, names cached in the queries' `scores` (table RMs), or RM objects.
        options: The scoring options; None is the defaults.
        cache: An open ScoreCache (left open), a cache file path, None to cache nothing, or DEFAULT_CACHE (left
            out) for `options.cache`, whose default is the shared cache the CLI uses (`default_cache_path()`).
        **option_fields: Flat scoring flags (`ScoringOptions.with_flags`) applied over `options`.

    Returns:
        New queries whose candidates' `scores` hold each RM's score under its name (an RM that does not apply to a
        query leaves it unscored and says why under the query's `skipped_rms`).

    Raises:
        InputError: An RM name is unknown or a flag is invalid.
        UnavailableError: An RM cannot run here, or does not fit in memory.
    """
    options = (options or ScoringOptions()).with_flags(**option_fields)
    if cache is None:
        options = options.with_flags(cache=None)
    with ScoringSession(options, cache=None if cache is DEFAULT_CACHE else cache) as session:
        return session.score(queries, rms)


def ensure_scores(queries: Sequence[Query], names: Sequence[str], options: ScoringOptions = ScoringOptions(),
                  session: ScoringSession | None = None) -> list[Query]:
    """Fill in each named RM's score where the queries lack it, by running the registered RM (through the cache) in
    `session` (else one over `options`). An unregistered name stays a table of what the queries cache; a name
    neither registered nor cached anywhere is an error."""
    check_rm_names(names, queries)
    to_run = [n for n in names if n in REWARD_MODELS and any(lacks_scores(q, n) for q in queries)]
    if not to_run:
        return list(queries)
    if session is not None:
        return session.fill(queries, [to_run] * len(queries))
    with ScoringSession(options) as own:
        return own.fill(queries, [to_run] * len(queries))
