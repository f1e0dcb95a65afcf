"""The question pool: per pool question, member RM scores, PRR and best-of-n of every ensemble, embedding.

Built from labelled queries with cached scores; dense tables or on-the-fly statistics (docs/pools.md).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from morkit import __version__
from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool import rowfiles, spill, validity
from morkit.question_pool.embed import SentenceEmbedder
from morkit.question_pool.ensembles import (
    NORMALIZERS,
    WEIGHTINGS,
    Ensemble,
    Normalizer,
    enumerate_ensembles,
)
from morkit.question_pool.index import (
    RECALL_K,
    IndexConfig,
    in_memory,
    index_vectors,
    recall_at_k,
    reranked,
)
from morkit.question_pool.leakage import leak_warnings, rm_evidence
from morkit.question_pool.lock import canonical
from morkit.question_pool.rows import (
    PoolQuestion,
    PoolRows,
    RowIds,
    added_counts,
    ensemble_statistics,
    nanmean_columns,
    pool_rows,
    rm_rules,
    sampled_means,
)
from morkit.question_pool.store import (
    ANY_REVISION,
    ARRAYS,
    SHAPE_ERRORS,
    PoolFiles,
    read_pool_files,
    write_pool_files,
)
from morkit.question_pool.table import QuestionTable
from morkit.reward_models.base import REDUCTIONS

log = logging.getLogger(__name__)

STATISTICS = ("auto", "dense", "on-the-fly")
DENSE_CELLS = 250_000_000
"""Under statistics "auto", pools up to this many (question, ensemble) cells store dense PRR and best-of-n
tables (2 GB of float32 at the limit); larger ones compute them on the fly."""
SAMPLE_ROWS = spill.CHUNK
"""`QuestionPool.statistics` of at least this many rows at once (a fit's sample, never a query's neighbours) releases
the pool's memory-mapped pages once computed (`QuestionPool.release`)."""
_STORED_APART = ("rm_names", "config", "normalizer", "global_prr", "ensembles", "shapes", "format_version", "token",
                 "question_domains")


@dataclass(frozen=True)
class PoolConfig:
    """How a pool is built; stored in pool.json so `pool add` and selection reuse it exactly.

    Args:
        normalizer: Per-RM score normalisation fitted on the pool: `zscore`, or `raw` (scores as they are).
        max_members: The largest ensemble size.
        weightings: The ensemble weightings to enumerate: `linear`, `softmax` and/or `sum`.
        temperature: The softmax weighting's temperature (positive).
        reduction: How a PRM's step scores become one score: `min`, `last`, `mean` or `prod`.
        index: The FAISS index over the question embeddings (`kind`: `auto`, `flat`, `ivf` or `hnsw`).
        statistics: `dense` PRR and best-of-n tables, `on-the-fly`, or `auto` (dense up to DENSE_CELLS cells).

    Raises:
        InputError: A field is out of range or not one of its choices.
    """

    normalizer: str = "zscore"
    max_members: int = 3
    weightings: tuple[str, ...] = WEIGHTINGS
    temperature: float = 1.0
    reduction: str = "min"
    index: IndexConfig = IndexConfig()
    statistics: str = "auto"  # dense tables, on the fly, or by size (DENSE_CELLS)

    def __post_init__(self) -> None:
        checks.one_of(self.statistics, STATISTICS, "statistics")
        checks.one_of(self.normalizer, NORMALIZERS, "normalizer")
        checks.positive_int(self.max_members, "max_members")
        if not self.weightings:
            raise InputError("weightings must name at least one of " + ", ".join(WEIGHTINGS))
        for weighting in self.weightings:
            checks.one_of(weighting, WEIGHTINGS, "weighting")
        checks.positive(self.temperature, "temperature")
        checks.one_of(self.reduction, REDUCTIONS, "reduction")

    def to_json(self) -> dict[str, Any]:
        """The config as pool.json stores it.

        Returns:
            A JSON-ready dict of every field (`index` as a dict of its fields).
        """
        return {"normalizer": self.normalizer, "max_members": self.max_members, "weightings": list(self.weightings),
                "temperature": self.temperature, "reduction": self.reduction, "index": vars(self.index).copy(),
                "statistics": self.statistics}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "PoolConfig":
        """The config pool.json stored (`to_json`'s form).

        Args:
            obj: The stored dict; one without `statistics` (an older pool) gets `auto`.

        Returns:
            The config.
        """
        return cls(obj["normalizer"], int(obj["max_members"]), tuple(obj["weightings"]), float(obj["temperature"]),
                   obj["reduction"], IndexConfig(**obj["index"]), obj.get("statistics", "auto"))

    def dense(self, questions: int, ensembles: int) -> bool:
        """Whether a pool of this size stores dense PRR and best-of-n tables.

        Args:
            questions: The pool's questions.
            ensembles: Its ensembles.

        Returns:
            True for dense tables, False for statistics computed on the fly.
        """
        if self.statistics == "auto":
            return questions * ensembles <= DENSE_CELLS
        return self.statistics == "dense"


@dataclass(frozen=True, eq=False)
class QuestionPool:
    """Everything selection needs, as arrays aligned by question row and ensemble column.

    Pools come from `build_pool` or `load_pool`; below, Q is questions, N candidates, R RMs, E ensembles.

    Args:
        questions: The pool questions, one per row (a QuestionTable when opened from disk).
        rm_names: The member RMs, in column order.
        scores: (Q, N, R) raw member scores; NaN for padding or a missing score.
        correct: (Q, N) bool labels.
        valid: (Q, N) bool: a real candidate, not padding.
        normalizer: The per-RM normalisation fitted at build time.
        global_prr: Each RM's mean single-RM PRR at build time; ensemble weights come from it.
        ensembles: Every ensemble, the single RMs first.
        prr: (Q, E) float32 PRR (NaN where undefined); None when computed on the fly.
        top1: (Q, E) float32 expected best-of-n correctness; None when computed on the fly.
        embeddings: (Q, d) float32 unit vectors of the questions.
        index: The FAISS index over `embeddings`.
        config: How the pool was built.
        meta: pool.json's other fields (revision, embedder, history, ...).
        steps: (Q, N, P, 3) the step RMs' scores under each step reduction; None when not stored.
        origin: (pool directory, revision token) it was loaded from or last saved to; None for a fresh build.
    """

    questions: Sequence[PoolQuestion]  # a QuestionTable when opened from disk: rows made when indexed
    rm_names: tuple[str, ...]
    scores: np.ndarray  # (Q, N, R) raw member scores; NaN = padding or missing
    correct: np.ndarray  # (Q, N) bool
    valid: np.ndarray  # (Q, N) bool: a real candidate, not padding
    normalizer: Normalizer
    global_prr: Mapping[str, float]  # mean single-RM PRR at build time; ensemble weights come from it
    ensembles: tuple[Ensemble, ...]
    prr: np.ndarray | None  # (Q, E) float32, NaN = no mixed pair or a member score missing; None: on the fly
    top1: np.ndarray | None  # (Q, E) float32, expected best-of-n correctness; None: on the fly
    embeddings: np.ndarray  # (Q, d) float32 unit vectors
    index: Any  # FAISS index over `embeddings`
    config: PoolConfig
    meta: Mapping[str, Any] = field(default_factory=dict)
    steps: np.ndarray | None = None  # (Q, N, P, 3) step RMs' scores under STEP_REDUCTIONS; None: not stored
    origin: tuple[str, str | None] | None = field(default=None, repr=False)
    """(pool directory, revision token) this pool was loaded from or last saved to, and pools derived from it
    keep: saving there again checks that the directory still holds that revision. None: a fresh build."""

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def embedder(self) -> str:
        return self.meta["embedder"]["name"]

    @property
    def step_rms(self) -> tuple[str, ...]:
        """The process RMs whose step scores are kept under every STEP_REDUCTIONS rule (`steps`)."""
        return tuple(self.meta.get("step_rms", ())) if self.steps is not None else ()

    @property
    def dense(self) -> bool:
        """Whether PRR and best-of-n are stored tables (else computed for the rows asked, on the fly)."""
        return self.prr is not None

    def statistics(self, rows: np.ndarray, *, singles_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(PRR, best-of-n) of every ensemble (or of the single RMs, the first columns) on the pool rows `rows`,
        each (len(rows), E) float32.

        Args:
            rows: Pool row indices.
            singles_only: Only the single-RM columns (the first len(rm_names) ensembles).

        Returns:
            `(prr, best_of_n)`, each of shape (len(rows), columns): read from the tables, or computed now.
        """
        rows = np.asarray(rows, dtype=np.int64)
        columns = len(self.rm_names) if singles_only else len(self.ensembles)
        if self.dense:
            out = np.asarray(self.prr[rows, :columns]), np.asarray(self.top1[rows, :columns])
        else:
            out = ensemble_statistics(np.asarray(self.scores[rows]), np.asarray(self.correct[rows]),
                                      np.asarray(self.valid[rows]), self.normalizer, self.rm_names,
                                      self.ensembles[:columns], ids=RowIds(self.questions, rows=rows))
        if len(rows) >= SAMPLE_ROWS:
            self.release()
        return out

    def release(self) -> None:
        """Drop this pool's memory-mapped pages from the process; they stay in the page cache and are mapped again
        where read. Reading rows maps the pages around each one too (the kernel's fault-around, 64 KiB), so a 2%
        sample of a million questions maps about half of every array it reads from: a pass over a sample calls
        this once it has copied the sample (`statistics` does for SAMPLE_ROWS rows or more). A no-op in memory."""
        for name in ARRAYS:
            array = getattr(self, name)
            if array is not None:
                spill.release(array)
        if isinstance(self.questions, QuestionTable):
            self.questions.release()

    def ensemble_means(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per ensemble: mean PRR, mean best-of-n, and the questions where each is defined; an on-the-fly pool's
        come from the seeded sample taken at build time (`meta["statistics"]`).

        Returns:
            `(mean_prr, mean_best_of_n, questions)`, each with one entry per ensemble.
        """
        if self.dense:
            return nanmean_columns(self.prr), nanmean_columns(self.top1), (~np.isnan(self.prr)).sum(axis=0)
        stored = self.meta["statistics"]
        as_array = lambda key: np.array([np.nan if v is None else v for v in stored[key]], dtype=np.float64)  # noqa: E731
        return as_array("mean_prr"), as_array("mean_top1"), as_array("questions").astype(np.int64)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the pool directory atomically under the pool's lock; afterwards this object is that revision.

        A pool loaded from `path` saves there only while `path` still holds that revision, else InputError and
        nothing written (`add_to_saved_pool` redoes an addition on the newest revision instead).

        Args:
            path: The pool directory to write (created, or replaced).

        Returns:
            The path of the directory written.

        Raises:
            InputError: `path` holds another revision than the one this pool was loaded from, or cannot be written.
        """
        token = uuid.uuid4().hex
        header = {**self.meta, "rm_names": list(self.rm_names), "config": self.config.to_json(),
                  "normalizer": self.normalizer.to_json(), "global_prr": dict(self.global_prr),
                  "ensembles": [e.to_json() for e in self.ensembles], "token": token}
        validity.check_header(header)
        arrays = {name: getattr(self, name) for name in ARRAYS}  # prr and top1 are None when on the fly
        target = str(canonical(path))
        replaces = self.origin[1] if self.origin is not None and self.origin[0] == target else ANY_REVISION
        written = write_pool_files(PoolFiles(header, self.questions, arrays, self.index), path, replaces=replaces)
        object.__setattr__(self, "origin", (target, token))  # frozen, but this is where the object now lives
        return written

    def add(self, queries: Sequence[Query], *, embedder: SentenceEmbedder | None = None,
            progress: bool = False) -> "QuestionPool":
        """A new revision with labelled queries appended; their candidates must carry every pool RM's scores.

        Normaliser, ensembles, weights and stored costs stay as built. Stored learned fits and budget routes are
        dropped as stale (a Router refits them when asked); `morkit.add_to_pool` also labels, scores and refits.

        Args:
            queries: Labelled queries whose candidates carry every pool RM's scores; ids must be new to the pool.
            embedder: The embedder for their questions; None loads the pool's own (by name).
            progress: Show progress bars.

        Returns:
            The new pool revision (this pool is unchanged; save it to keep it).

        Raises:
            InputError: An id is already in the pool, no query is usable, or the embedder is not the pool's.
        """
        from morkit.question_pool.embed import load_embedder

        return add_questions(self, queries, embedder or load_embedder(self.embedder), progress=progress)

    def check_dim(self, dim: int) -> None:
        """InputError naming the pool file unless its embedder's vectors (of `dim` values) fit its own: a pool
        whose pool.json and arrays say another dimension was not built by that embedder.

        Args:
            dim: The dimension of the vectors the pool's embedder makes.

        Raises:
            InputError: `dim` differs from the pool's embeddings.
        """
        if dim != self.embeddings.shape[1]:
            where = str(Path(self.origin[0]) / "pool.json") if self.origin else None
            raise InputError(f"embedder.dim: the pool holds vectors of dimension {self.embeddings.shape[1]}, but "
                             f"its embedder {self.embedder!r} makes vectors of dimension {dim}; rebuild the pool",
                             path=where)

    def ensemble_table(self) -> list[dict[str, Any]]:
        """Per ensemble: mean PRR and best-of-n over the questions where it is defined, and their count (over the
        build-time sample in an on-the-fly pool).

        Returns:
            One dict per ensemble with keys `ensemble`, `mean_prr`, `best_of_n` and `questions`.
        """
        mean_prr, mean_top1, counts = self.ensemble_means()
        return [{"ensemble": e, "mean_prr": float(p), "best_of_n": float(t), "questions": int(c)}
                for e, p, t, c in zip(self.ensembles, mean_prr, mean_top1, counts)]


    def summary(self, top: int = 10) -> dict[str, Any]:
        """What `morkit pool info` shows: sizes, domains, embedder, index, skips, the single-RM table sorted by
        mean PRR (with each RM's agreement with the others and accuracy alone, see leakage), the `top` ensembles
        by mean PRR (NaN where undefined), and the warnings of RMs far ahead of all others.

        Args:
            top: How many of the best ensembles to list.

        Returns:
            A JSON-ready dict (`revision`, `questions`, `domains`, `rms`, `best`, `warnings`, ...).
        """
        table, evidence = self.ensemble_table(), rm_evidence(self)
        by_prr = lambda r: -(r["mean_prr"] if r["mean_prr"] == r["mean_prr"] else -1)  # noqa: E731 - NaN last
        singles = sorted(table[: len(self.rm_names)], key=by_prr)
        meta = self.meta
        return {
            "revision": meta["revision"], "created": meta["created"], "updated": meta["updated"],
            "morkit_version": meta["morkit_version"], "questions": len(self),
            "domains": dict(_domain_counts(self.questions).most_common()),
            "max_candidates": int(self.scores.shape[1]), "embedder": meta["embedder"], "index": meta["index"],
            "normalizer": self.normalizer.kind, "reduction": self.config.reduction, "ensembles": len(self.ensembles),
            "statistics": "dense" if self.dense else f"on the fly (means over {meta['statistics']['sample']:,} "
                                                     "sampled questions)",
            "skipped": meta["skipped"], "missing_scores": meta["missing_scores"],
            "not_applicable": meta.get("not_applicable", {}),
            "rms": {r["ensemble"].name: {"mean_prr": r["mean_prr"], "best_of_n": r["best_of_n"],
                                         "questions": r["questions"],
                                         "agreement": evidence[r["ensemble"].name].agreement,
                                         "accuracy_alone": evidence[r["ensemble"].name].accuracy_alone}
                    for r in singles},
            "warnings": leak_warnings(evidence),
            "best": [{"name": r["ensemble"].name, **r["ensemble"].to_json(), "mean_prr": r["mean_prr"],
                      "best_of_n": r["best_of_n"]}
                     for r in sorted(table, key=by_prr)[:top]],
        }


def _domain_counts(questions: Sequence[PoolQuestion]) -> Counter[str]:
    if isinstance(questions, QuestionTable):
        return questions.domain_counts()  # from the codes, no row made
    return Counter(q.domain for q in questions)


def fit_normalizer(kind: str, rm_names: Sequence[str], scores: np.ndarray, valid: np.ndarray) -> Normalizer:
    """`Normalizer.fit`; memory-mapped scores are read a few RMs' columns at a time (rowfiles.column_groups), which
    gives each RM the same values in the same order, so the same fit to the last bit."""
    if not rowfiles.is_mapped(scores):
        return Normalizer.fit(kind, rm_names, scores, valid)
    shift, scale = {}, {}
    for first, group in rowfiles.column_groups(scores):
        part = Normalizer.fit(kind, rm_names[first : first + group.shape[-1]], group, valid)
        shift.update(part.shift)
        scale.update(part.scale)
        del group, part
    return Normalizer(kind, shift, scale)


def whole_pool_statistics(rows: PoolRows, normalizer: Normalizer, rm_names: Sequence[str],
                          ensembles: Sequence[Ensemble], *, progress: bool = False, best_of_n: bool = True
                          ) -> tuple[np.ndarray, np.ndarray | None]:
    """`ensemble_statistics` over every row; memory-mapped scores by chunks of rows whose pages are released as
    read (each row's statistics depend on that row alone, so chunks change nothing)."""
    if not rowfiles.is_mapped(rows.scores):
        return ensemble_statistics(rows.scores, rows.correct, rows.valid, normalizer, rm_names, ensembles,
                                   progress=progress, ids=RowIds(rows.questions), best_of_n=best_of_n)
    from tqdm import tqdm

    prr = np.empty((len(rows.scores), len(ensembles)), dtype=np.float32)
    top1 = np.empty_like(prr) if best_of_n else None
    mapped = spill.plain(rows.scores)
    for start in tqdm(range(0, len(prr), spill.CHUNK), desc="PRR", unit="chunk", disable=not progress, leave=False):
        part = slice(start, start + spill.CHUNK)
        scores = mapped[part]
        ids = RowIds(rows.questions, range(start, start + len(scores)))
        tables = ensemble_statistics(scores, rows.correct[part], rows.valid[part], normalizer, rm_names, ensembles,
                                     ids=ids, best_of_n=best_of_n)
        prr[part] = tables[0]
        if top1 is not None:
            top1[part] = tables[1]
        spill.release(scores)
    return prr, top1


def fit_ensembles(rows: PoolRows, rm_names: Sequence[str], config: PoolConfig
                  ) -> tuple[Normalizer, dict[str, float], list[Ensemble]]:
    """Build phase 2: the normaliser, each RM's global PRR, and the ensembles weighted by it."""
    normalizer = fit_normalizer(config.normalizer, rm_names, rows.scores, rows.valid)
    validity.check_normalizer(normalizer, rows, rm_names)
    singles = [Ensemble((name,), (1.0,)) for name in rm_names]
    single_prr, _ = whole_pool_statistics(rows, normalizer, rm_names, singles, best_of_n=False)
    global_prr = dict(zip(rm_names, (float(v) for v in nanmean_columns(single_prr))))
    ensembles = enumerate_ensembles(rm_names, global_prr, max_members=config.max_members,
                                    weightings=config.weightings, temperature=config.temperature)
    return normalizer, global_prr, ensembles


def build_pool(queries: Sequence[Query], embedder: SentenceEmbedder, *, rm_names: Sequence[str] | None = None,
               config: PoolConfig = PoolConfig(), provenance: Mapping[str, Any] | None = None,
               progress: bool = False) -> QuestionPool:
    """Build a pool from labelled queries with cached member scores (`rm_names`: default all cached RMs)."""
    from morkit.reward_models.rules.table import table_names

    rm_names = tuple(rm_names or table_names(queries))
    if not rm_names:
        raise InputError("no RM scores in the input: score the candidates first (morkit score, or pool build --rm)")
    rows = pool_rows(queries, rm_names, config.reduction)
    if not rows.questions:
        raise InputError("no usable questions: a pool needs labelled queries with at least two candidates")
    rows = replace(rows, scores=rowfiles.moved_to_disk(rows.scores), steps=rowfiles.moved_to_disk(rows.steps))
    return pool_from_rows(rows, rm_names, embedder, config=config, provenance=provenance, progress=progress)


def pool_from_rows(rows: PoolRows, rm_names: Sequence[str], embedder: SentenceEmbedder, *,
                   config: PoolConfig = PoolConfig(), provenance: Mapping[str, Any] | None = None,
                   progress: bool = False) -> QuestionPool:
    """Build phases 2-4 on arrays: the ensembles, their statistics (dense, or sampled means), the embeddings and
    their index; anything with a `name` and `encode(texts)` embeds. Memory-mapped row arrays (rowfiles) are read
    by chunks, their pages released, and stay mapped until the pool is saved."""
    timings: dict[str, float] = {}
    started = time.perf_counter()
    rows = replace(rows, scores=rowfiles.sampled_by_batch(rows.scores), steps=rowfiles.sampled_by_batch(rows.steps))
    normalizer, global_prr, ensembles = fit_ensembles(rows, rm_names, config)
    extra: dict[str, Any] = {}
    prr = top1 = None
    if config.dense(len(rows.questions), len(ensembles)):
        prr, top1 = whole_pool_statistics(rows, normalizer, rm_names, ensembles, progress=progress)
    else:
        extra["statistics"] = sampled_means(rows, rm_names, normalizer, ensembles, progress=progress)
        spill.release(rows.scores)  # the sampled rows' pages
    timings["prr_s"] = time.perf_counter() - started
    started = time.perf_counter()
    vectors = rowfiles.sampled_by_batch(spill.embed(embedder, rows.questions, progress=progress))
    index, index_info = index_vectors(vectors, config.index)
    timings["embed_index_s"] = time.perf_counter() - started
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta = {
        "revision": 1,
        "created": now,
        "updated": now,
        "morkit_version": __version__,
        "embedder": {"name": embedder.name, "dim": int(vectors.shape[1])},
        "index": index_info,
        "skipped": {k: len(v) for k, v in rows.skipped.items()},
        "missing_scores": dict(rows.missing),
        "not_applicable": {name: dict(domains) for name, domains in rows.not_applicable.items()},
        "applies": dict(rows.applies),
        "history": [{"revision": 1, "action": "build", "time": now, "questions": len(rows.questions),
                     "provenance": dict(provenance or {}), "timings": timings}],
        "step_rms": list(rows.step_rms),
        **extra,
    }
    return QuestionPool(rows.questions, tuple(rm_names), rows.scores, rows.correct, rows.valid, normalizer,
                        global_prr, tuple(ensembles), prr, top1, vectors, index, config, meta, rows.steps)


def add_questions(pool: QuestionPool, queries: Sequence[Query], embedder: SentenceEmbedder, *,
                  provenance: Mapping[str, Any] | None = None, progress: bool = False) -> QuestionPool:
    """A new pool revision with `queries` appended; normaliser, ensembles and weights stay as built."""
    if embedder.name != pool.embedder:
        raise InputError(f"the pool was built with embedder {pool.embedder!r}, not {embedder.name!r}")
    known = set(pool.questions.ids() if isinstance(pool.questions, QuestionTable) else (q.id for q in pool.questions))
    clashes = [q.id for q in queries if q.id in known]
    if clashes:
        raise InputError(f"{len(clashes)} ids are already in the pool, e.g. {clashes[0]!r}")
    rows = pool_rows(queries, pool.rm_names, pool.config.reduction, width=pool.scores.shape[1],
                     step_rms=pool.step_rms, rules=rm_rules(pool.rm_names, pool.meta.get("applies"), adding=True))
    if not rows.questions:
        raise InputError("nothing to add: no labelled query with at least two candidates")
    prr = top1 = None
    if pool.dense:
        prr, top1 = ensemble_statistics(rows.scores, rows.correct, rows.valid, pool.normalizer, pool.rm_names,
                                        pool.ensembles, progress=progress, ids=RowIds(rows.questions))
    vectors = spill.embed(embedder, rows.questions, progress=progress)
    pool.check_dim(vectors.shape[1])
    index = in_memory(pool.index)  # a memory-mapped index is read-only
    index.add(vectors)
    embeddings = np.concatenate([pool.embeddings, vectors])
    index = reranked(index, embeddings, pool.config.index)
    old_width = pool.scores.shape[1]
    width = rows.scores.shape[1]

    def widen(a: np.ndarray, fill: Any) -> np.ndarray:
        if width == old_width:
            return a
        pad = [(0, 0), (0, width - old_width)] + [(0, 0)] * (a.ndim - 2)
        return np.pad(a, pad, constant_values=fill)

    stale = ("learned", "learned_subsets", "budget_routes")  # selectors fitted on the old rows; the costs stay
    meta = {k: v for k, v in pool.meta.items() if k not in stale}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta["revision"] = pool.meta["revision"] + 1
    meta["updated"] = now
    meta["skipped"] = {k: pool.meta["skipped"].get(k, 0) + len(v) for k, v in rows.skipped.items()}
    meta["missing_scores"] = {k: pool.meta["missing_scores"].get(k, 0) + v for k, v in rows.missing.items()}
    meta["not_applicable"] = added_counts(pool.meta.get("not_applicable", {}), rows.not_applicable)
    if meta["index"]["kind"] != "flat":
        meta["index"] = {**meta["index"], f"recall@{RECALL_K}": recall_at_k(index, embeddings, RECALL_K)}
    meta["history"] = list(pool.meta["history"]) + [{"revision": meta["revision"], "action": "add", "time": now,
                                                     "questions": len(rows.questions),
                                                     "provenance": dict(provenance or {})}]
    return replace(pool, questions=pool.questions + rows.questions,
                   scores=np.concatenate([widen(pool.scores, np.nan), rows.scores]),
                   correct=np.concatenate([widen(pool.correct, False), rows.correct]),
                   valid=np.concatenate([widen(pool.valid, False), rows.valid]),
                   prr=np.concatenate([pool.prr, prr]) if pool.dense else None,
                   top1=np.concatenate([pool.top1, top1]) if pool.dense else None,
                   steps=None if pool.steps is None else np.concatenate([widen(pool.steps, np.nan), rows.steps]),
                   embeddings=embeddings, index=index, meta=meta)


def load_pool(path: str | os.PathLike) -> QuestionPool:
    """Read a pool directory (morkit pool build); every problem is an InputError naming the file.

    Args:
        path: The pool directory (pool.json, its arrays and index).

    Returns:
        The pool; saving it back to `path` later checks that `path` still holds this revision.

    Raises:
        InputError: A file is missing or malformed (the message names it).
    """
    files = read_pool_files(path)
    header, arrays = files.header, files.arrays
    header_path = str(Path(path) / "pool.json")
    try:
        rm_names = tuple(header["rm_names"])
        normalizer = Normalizer.from_json(header["normalizer"])
        global_prr = {k: float("nan") if v is None else float(v) for k, v in header["global_prr"].items()}
        ensembles = tuple(Ensemble.from_json(e) for e in header["ensembles"])
        config = PoolConfig.from_json(header["config"])
        validity.check_loaded(rm_names, normalizer, global_prr, ensembles)
        return QuestionPool(
            questions=files.questions,
            rm_names=rm_names,
            scores=arrays["scores"],
            correct=arrays["correct"],
            valid=arrays["valid"],
            normalizer=normalizer,
            global_prr=global_prr,
            ensembles=ensembles,
            prr=arrays.get("prr"),
            top1=arrays.get("top1"),
            embeddings=arrays["embeddings"],
            index=reranked(files.index, arrays["embeddings"], config.index),
            config=config,
            meta={k: v for k, v in header.items() if k not in _STORED_APART},
            steps=arrays.get("steps"),
            origin=(str(canonical(path)), header.get("token")),
        )
    except InputError as exc:
        if exc.path is not None:
            raise
        raise InputError(f"malformed pool header: {exc}", path=header_path) from exc
    except SHAPE_ERRORS as exc:
        raise InputError(f"malformed pool header ({type(exc).__name__}: {exc})", path=header_path) from exc
