"""Scoring as a service: name the RMs (registered names, names cached in the input, or RM objects) and score.

    queries = morkit.score(morkit.load_queries("in.jsonl"), rms=["smollm2-orm", "math-consensus"])
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from morkit.core.settings import cache_dir
from morkit.core.types import Query
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.catalog import REWARD_MODELS
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.scoring import lacks_scores
from morkit.reward_models.session import ScoringSession, check_rm_names

DEFAULT_RMS = ("smollm2-orm",)


def default_cache_path() -> Path:
    """The shared score cache the CLI uses: $MORKIT_CACHE_DIR/scores.sqlite."""
    return cache_dir() / "scores.sqlite"


def score(queries: Sequence[Query], rms: Sequence[str | Any] = DEFAULT_RMS, *, options: ScoringOptions | None = None,
          cache: ScoreCache | str | os.PathLike | None = None, **option_fields: Any) -> list[Query]:
    """The queries with every RM's score added to each candidate's `scores` (by RM name). `rms`: registered names,
    names cached in the queries, or RM objects; options as a ScoringOptions or flat flags over it (`device="cpu"`,
    `backend="vllm"`, `ray="auto"`, ...); `cache`: an open ScoreCache, a path, or None for `options.cache`. Model RMs
    run one at a time; the docs page Scoring and backends says how."""
    options = (options or ScoringOptions()).with_flags(**option_fields)
    with ScoringSession(options, cache=cache) as session:
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
