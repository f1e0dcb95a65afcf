"""Pools as a service: labelled queries in (files or registered data sets), a saved question pool out.

    pool = morkit.build_pool(morkit.load_queries("validation.jsonl"), rms=["smollm2-orm", "math-consensus"])
    pool.save("pools/mine")

Labels missing on candidates come from `reference` or `tests`; RM scores missing on candidates come from
running the registered RMs (through the score cache); the pool stores its stacker fit for `select`.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.embed import load_embedder
from morkit.question_pool.labels import fill_labels
from morkit.question_pool.pool import PoolConfig, QuestionPool, add_questions
from morkit.question_pool.pool import build_pool as build_question_pool
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.table import table_names
from morkit.selection.stacker import with_stored_stacker
from morkit.services.scoring import DEFAULT_RMS, check_rm_names, ensure_scores


def _sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_inputs(paths: Sequence[str | os.PathLike] = (), datasets: Sequence[str] = (),
                data_dir: str | os.PathLike | None = None) -> tuple[list[Query], list[dict[str, Any]]]:
    """Queries from JSONL files and registered data sets ('NAME' or 'NAME:N'), with provenance per input.

    An id seen in two inputs is an error."""
    from morkit.data.contract import load_queries
    from morkit.data.datasets import load_spec

    queries: list[Query] = []
    provenance: list[dict[str, Any]] = []
    for path in paths:
        loaded = load_queries(path)
        queries.extend(loaded)
        provenance.append({"file": str(Path(path).resolve()), "sha256": _sha256(path), "queries": len(loaded)})
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
               options: ScoringOptions = ScoringOptions(), provenance: Mapping[str, Any] | None = None
               ) -> QuestionPool:
    """A question pool from labelled queries: PRR of every RM and ensemble, embeddings, the stacker fit.

    `rms`: pool RMs (default: every RM cached in the queries, else smollm2-orm); registered ones are run
    where scores are missing. `embedder`: a sentence-transformers name or path (default all-MiniLM-L6-v2).
    How labels were filled is recorded in the pool's history."""
    names = list(rms or table_names(labelled_queries) or DEFAULT_RMS)
    check_rm_names(names, labelled_queries)  # fail early: before the embedder loads or anything is scored
    if not any(len(q.candidates) >= 2 for q in labelled_queries):
        raise InputError("no usable questions: a pool needs labelled queries with at least two candidates")
    model = load_embedder(embedder, options.device)
    queries, labels = _prepared(labelled_queries, names, options)
    pool = build_question_pool(queries, model, rm_names=names, config=config,
                               provenance={**(provenance or {}), "labels": labels}, progress=options.progress)
    return with_stored_stacker(pool)


def add_to_pool(pool: QuestionPool, labelled_queries: Sequence[Query], *, options: ScoringOptions = ScoringOptions(),
                provenance: Mapping[str, Any] | None = None) -> QuestionPool:
    """A new pool revision with the queries appended (labelled, scored with the pool's RMs, embedded with its
    embedder, normalised and weighted as the pool was built), and its stacker refitted."""
    model = load_embedder(pool.embedder, options.device)
    options = replace(options, reduction=pool.config.reduction)
    queries, labels = _prepared(labelled_queries, list(pool.rm_names), options)
    grown = add_questions(pool, queries, model, provenance={**(provenance or {}), "labels": labels},
                          progress=options.progress)
    return with_stored_stacker(grown)
