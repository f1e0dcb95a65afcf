"""Pools as a service: labelled queries in (files or registered data sets), a saved question pool out.

Missing labels and scores are filled first; the pool keeps its learned selector's fits (and budget routes).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.data.fetch import sha256_of
from morkit.question_pool.embed import load_embedder
from morkit.question_pool.embed_cache import CachedEmbedder, EmbeddingCache, cache_path
from morkit.question_pool.embed_ray import RayEmbedder, RayEmbedOptions
from morkit.question_pool.labels import fill_labels
from morkit.question_pool.lock import pool_lock
from morkit.question_pool.pool import PoolConfig, QuestionPool, add_questions, load_pool
from morkit.question_pool.pool import build_pool as build_question_pool
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.rules.table import table_names
from morkit.selection.budget import CostOptions
from morkit.selection.learned_method import with_budget_routes, with_stored_learned
from morkit.services.scoring import DEFAULT_RMS, check_rm_names, ensure_scores


def load_inputs(paths: Sequence[str | os.PathLike] = (), datasets: Sequence[str] = (),
                data_dir: str | os.PathLike | None = None, *, bare: bool = False
                ) -> tuple[list[Query], list[dict[str, Any]]]:
    """Queries from JSONL files and registered data sets ('NAME' or 'NAME:N'), with provenance per input.

    An id seen in two inputs is an error. `bare`: a file's queries may leave `candidates` out (questions to
    answer, as `generate` takes).

    Args:
        paths: Contract JSONL files.
        datasets: Registered data sets (DATASETS), each as `NAME` or `NAME:N` (its first N questions).
        data_dir: The folder the data sets are read from; None: $MORKIT_DATA_DIR, else data/ in the cache folder.
        bare: Accept file lines without `candidates`.

    Returns:
        `(queries, provenance)`: the queries of every input in order, and one dict per input (a file's resolved
        path, SHA-256 and query count, or a data set's spec and count).

    Raises:
        InputError: No input is given, an input cannot be read, or an id appears twice.
    """
    from morkit.data.contract import load_queries
    from morkit.data.datasets import load_spec

    queries: list[Query] = []
    provenance: list[dict[str, Any]] = []
    for path in paths:
        loaded = load_queries(path, bare=bare)
        queries.extend(loaded)
        provenance.append({"file": str(Path(path).resolve()), "sha256": sha256_of(path), "queries": len(loaded)})
    for spec in datasets:
        loaded = load_spec(spec, data_dir)
        queries.extend(loaded)
        provenance.append({"dataset": spec, "queries": len(loaded)})
    if not provenance:
        raise InputError("no input: give JSONL files and/or --dataset NAME")
    seen: set[str] = set()
    for query in queries:
        if query.id in seen:
            raise InputError(f"duplicate id {query.id!r} across the inputs")
        seen.add(query.id)
    return queries, provenance


def _prepared(queries: Sequence[Query], names: Sequence[str], options: ScoringOptions
              ) -> tuple[list[Query], dict[str, int]]:
    """Labels filled where a reference or tests allow, and every named RM's scores present."""
    labelled, report = fill_labels(queries, progress=options.progress)
    return ensure_scores(labelled, names, options), asdict(report)


def build_pool(labelled_queries: Sequence[Query], rms: Sequence[str] | None = None, *,
               config: PoolConfig = PoolConfig(), embedder: str | None = None,
               options: ScoringOptions = ScoringOptions(), provenance: Mapping[str, Any] | None = None,
               embed_ray: RayEmbedOptions = RayEmbedOptions(), costs: CostOptions | None = None) -> QuestionPool:
    """A question pool from labelled queries: PRR of every RM and ensemble, embeddings, the learned selectors
    (and, with `costs`, the RMs' cost table and budget routes).

    Args:
        labelled_queries: The queries; candidates are labelled where a reference or tests allow.
        rms: The member RMs (registered ones run where scores are missing); None takes every RM cached in the
            queries, else smollm2-orm.
        config: How the pool is built (normaliser, ensembles, index, statistics).
        embedder: A sentence-transformers name or path for the questions; None is all-MiniLM-L6-v2.
        options: How missing scores are computed; with `options.cache`, embeddings are cached beside it, and with
            `options.ray` the embedder runs on Ray actors.
        provenance: Extra facts recorded in the pool's history for this build.
        embed_ray: The embedder actors' resources; only with `options.ray`.
        costs: Where the RMs' costs come from (cost files, costs per RM; cards for the others): the pool then
            stores its CostTable and fits the budget routes (docs/selection.md); None: neither.

    Returns:
        The pool (not saved: call `save`).

    Raises:
        InputError: An RM name is unknown, a pool RM has no cost (with `costs`), or no query has two or more
            candidates.
        UnavailableError: An RM or the embedder cannot run here.
    """
    names = list(rms or table_names(labelled_queries) or DEFAULT_RMS)
    check_rm_names(names, labelled_queries)  # fail early: before the embedder loads or anything is scored
    if costs is not None:
        from morkit.reward_models.cost import cost_table

        cost_table(names, given=costs.priced)  # fail early: an RM without a cost (the files read once, here)
    if not any(len(q.candidates) >= 2 for q in labelled_queries):
        raise InputError("no usable questions: a pool needs labelled queries with at least two candidates")
    with question_embedder(embedder, options, embed_ray) as model:
        queries, labels = _prepared(labelled_queries, names, options)
        pool = build_question_pool(queries, model, rm_names=names, config=config,
                                   provenance={**(provenance or {}), "labels": labels}, progress=options.progress)
    return with_budget_routes(with_stored_learned(pool), costs, options.progress)


@contextmanager
def question_embedder(name: str | None, options: ScoringOptions = ScoringOptions(),
                      embed_ray: RayEmbedOptions = RayEmbedOptions()) -> Iterator[CachedEmbedder]:
    """The embedder a build or an add uses, ready before any scoring: on Ray actors when `options.ray` is set
    (attached now: an unreachable address fails at once), else loaded here; behind the embedding cache beside
    `options.cache` (none without one), so a killed run embeds only what it had not finished."""
    if options.ray is None and embed_ray != RayEmbedOptions():
        raise InputError("the embedder actor options (--embed-actors, --embed-gpus, --embed-cpus) apply only with "
                         "ray (--ray)")
    if options.ray is not None:
        inner: Any = RayEmbedder(name, address=options.ray.address, device=options.device, options=embed_ray)
        inner.connect()
    else:
        inner = load_embedder(name, options.device)
    score_cache = options.cache_file()  # DEFAULT_CACHE resolved: embeddings beside the shared score cache
    cache = EmbeddingCache(cache_path(score_cache)) if score_cache is not None else None
    try:
        yield CachedEmbedder(inner, cache)
    finally:
        if cache is not None:
            cache.close()


def add_to_pool(pool: QuestionPool, labelled_queries: Sequence[Query], *, options: ScoringOptions = ScoringOptions(),
                provenance: Mapping[str, Any] | None = None, embed_ray: RayEmbedOptions = RayEmbedOptions(),
                costs: CostOptions | None = None) -> QuestionPool:
    """A new pool revision with the queries appended (labelled, scored with the pool's RMs, embedded with its
    embedder, normalised and weighted as the pool was built), and its learned selectors refitted (and its budget
    routes, where it stores costs or `costs` are given).

    Args:
        pool: The pool to add to (unchanged).
        labelled_queries: The queries to append; ids must be new to the pool.
        options: How missing scores are computed; its `reduction` is replaced by the pool's.
        provenance: Extra facts recorded in the pool's history for this addition.
        embed_ray: The embedder actors' resources; only with `options.ray`.
        costs: Cost files and costs per RM updating the pool's stored table (with_budget_routes); None: the
            stored one, if any.

    Returns:
        The new pool revision (not saved: call `save`, or use `add_to_saved_pool`).

    Raises:
        InputError: An id is already in the pool, no query is usable, or a pool RM has no cost (with costs).
    """
    options = replace(options, reduction=pool.config.reduction)
    with question_embedder(pool.embedder, options, embed_ray) as model:
        queries, labels = _prepared(labelled_queries, list(pool.rm_names), options)
        return _grown(pool, queries, labels, model, provenance, options.progress, costs)


def add_to_saved_pool(path: str | os.PathLike, labelled_queries: Sequence[Query], *,
                      options: ScoringOptions = ScoringOptions(), provenance: Mapping[str, Any] | None = None,
                      lock_timeout: float | None = None, embed_ray: RayEmbedOptions = RayEmbedOptions(),
                      costs: CostOptions | None = None) -> tuple[QuestionPool, QuestionPool]:
    """Append queries to the pool saved at `path` without losing another writer's additions.

    Labels and scores first, unlocked; then, under the pool's lock (`lock_timeout`, default LOCK_TIMEOUT_S),
    append to the newest revision and save. Returns (the revision added to, the new revision).

    Args:
        path: The saved pool's directory.
        labelled_queries: The queries to append; ids must be new to the pool.
        options: How missing scores are computed; its `reduction` is replaced by the pool's.
        provenance: Extra facts recorded in the pool's history for this addition.
        lock_timeout: Seconds to wait for another writer of the pool; None is LOCK_TIMEOUT_S (600).
        embed_ray: The embedder actors' resources; only with `options.ray`.
        costs: Cost files and costs per RM updating the pool's stored table; None: the stored one, if any.

    Returns:
        `(current, grown)`: the newest revision found under the lock, and the new revision now saved at `path`.

    Raises:
        InputError: The pool cannot be read, an id is already in it, no query is usable, a pool RM has no cost
            (with costs), or another writer held the pool's lock past `lock_timeout`.
    """
    pool = load_pool(path)
    if costs is not None:
        from morkit.selection.budget import resolve_costs

        resolve_costs(pool, costs, needed=True)  # fail early: an RM without a cost, before anything is scored
    options = replace(options, reduction=pool.config.reduction)
    with question_embedder(pool.embedder, options, embed_ray) as model:
        queries, labels = _prepared(labelled_queries, list(pool.rm_names), options)
        with pool_lock(path, lock_timeout):
            current = load_pool(path)
            if (current.rm_names, current.config.reduction) != (pool.rm_names, pool.config.reduction):
                options = replace(options, reduction=current.config.reduction)  # rebuilt meanwhile: score the rest
                queries = ensure_scores(queries, list(current.rm_names), options)
            grown = _grown(current, queries, labels, model, provenance, options.progress, costs)
            grown.save(path)
    return current, grown


def _grown(pool: QuestionPool, queries: Sequence[Query], labels: Mapping[str, int], model: CachedEmbedder,
           provenance: Mapping[str, Any] | None, progress: bool, costs: CostOptions | None = None) -> QuestionPool:
    grown = add_questions(pool, queries, model, provenance={**(provenance or {}), "labels": labels},
                          progress=progress)
    return with_budget_routes(with_stored_learned(grown), costs, progress)
