"""A persistent embedding cache keyed by (embedder, sha256 of the text): each chunk is committed as it is embedded,
in one process or on Ray alike, so a killed or interrupted pool build embeds only what it had not finished.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from morkit.core.errors import InputError, MorkitError
from morkit.reward_models.cache import text_hash

FILE = "embeddings.sqlite"
LOOKUP = 500
"""Text hashes per SELECT (older SQLite builds allow 999 variables)."""


def cache_path(score_cache: str | Path) -> Path:
    """The embedding cache that goes with a score cache file: embeddings.sqlite in the same folder."""
    return Path(score_cache).parent / FILE


def embedder_key(name: str) -> str:
    """What the cache keys an embedder by: its name, plus for a local model folder a digest of its files' names,
    sizes and modification times, so a model retrained in place never reuses old vectors."""
    try:
        root = Path(name).expanduser()
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    except (OSError, ValueError):  # a name no file system accepts
        files = []
    if not files:
        return name
    digest = hashlib.sha256()
    for path in files:
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return f"{name}@{digest.hexdigest()[:16]}"


COLUMNS = ("embedder", "text", "vector")
"""The columns of the cache's `vectors` table; a file whose table has others is refused, not read."""


class EmbeddingCache:
    """Maps (embedder key, text hash) -> float32 vector in a SQLite file (WAL mode, one commit per chunk).

    A path that cannot hold it (a directory, a file that is not SQLite, a `vectors` table with other columns)
    is an InputError naming it; so is a file found damaged while it is read."""

    def __init__(self, path: str | Path):
        from morkit.reward_models.cache import LOCK_WAIT_S, cache_problem, use_wal

        self.path = Path(path)
        problem = cache_problem(self.path)
        if problem:
            raise InputError(problem.replace("score cache", "embedding cache"), path=str(self.path))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(self.path), timeout=LOCK_WAIT_S)
        except sqlite3.DatabaseError as exc:
            raise InputError(f"cannot open the embedding cache: {exc}", path=str(self.path)) from exc
        try:
            use_wal(self._db)
            self._db.execute("CREATE TABLE IF NOT EXISTS vectors (embedder TEXT NOT NULL, text TEXT NOT NULL, "
                             "vector BLOB NOT NULL, PRIMARY KEY (embedder, text)) WITHOUT ROWID")
            self._db.commit()
            columns = tuple(row[1] for row in self._db.execute("PRAGMA table_info(vectors)"))
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise InputError(f"unusable embedding cache: {exc}", path=str(self.path)) from exc
        if columns != COLUMNS:
            self._db.close()
            raise InputError(f"its 'vectors' table has columns {', '.join(columns)}, not a morkit embedding "
                             f"cache's ({', '.join(COLUMNS)})", path=str(self.path))

    def get_many(self, embedder: str, hashes: Sequence[str]) -> list[np.ndarray | None]:
        """The cached vector of each text hash, None where there is none (or its bytes are no float32 vector)."""
        found: dict[str, bytes] = {}
        try:
            for start in range(0, len(hashes), LOOKUP):
                part = list(hashes[start: start + LOOKUP])
                marks = ",".join("?" * len(part))
                found.update(self._db.execute(
                    f"SELECT text, vector FROM vectors WHERE embedder = ? AND text IN ({marks})",
                    [embedder, *part]).fetchall())
        except sqlite3.DatabaseError as exc:
            raise InputError(f"unusable embedding cache: {exc}", path=str(self.path)) from exc
        return [_vector(found.get(h)) for h in hashes]

    def put_many(self, embedder: str, hashes: Iterable[str], vectors: np.ndarray) -> None:
        """Store one chunk's vectors, committed at once (what a killed run keeps)."""
        rows = [(embedder, h, np.asarray(v, dtype="<f4").tobytes()) for h, v in zip(hashes, vectors)]
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)", rows)
        except sqlite3.Error as exc:
            raise MorkitError(f"cannot write the embedding cache {self.path}: {exc}") from exc

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _vector(blob: object) -> np.ndarray | None:
    """A stored vector, or None for anything that is not whole little-endian float32 values."""
    if not isinstance(blob, bytes) or not blob or len(blob) % 4:
        return None
    return np.frombuffer(blob, dtype="<f4")


class CachedEmbedder:
    """An embedder (`name`, `dim`, `encode_chunks` or `encode`) behind an embedding cache: the distinct texts the
    cache lacks are embedded in one `encode_chunks` call (one actor pool on Ray), each chunk cached as it finishes.
    A cached vector is used only with the embedder's dimension (its `dim`, else its first chunk's width) and finite
    values. `embedded`: how many texts the last call embedded."""

    def __init__(self, inner: Any, cache: EmbeddingCache | None = None):
        self.inner = inner
        self.cache = cache
        self.embedded = 0
        self._key: str | None = None
        self._dim: int | None = None

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int | None:
        """The embedder's dimension: its own `dim`, else the width of the first chunk it returned (None before)."""
        declared = getattr(self.inner, "dim", None)
        return declared if declared is not None else self._dim

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors, in order; `progress` shows one bar in questions."""
        from tqdm import tqdm

        texts = list(texts)
        if not texts:
            return np.zeros((0, self._needed_dim("?")), dtype=np.float32)
        out: np.ndarray | None = None
        filled = 0
        with tqdm(total=len(texts), desc="embed", unit="question", disable=not progress, leave=False) as bar:
            for positions, vectors in self.encode_chunks(texts):
                if out is None:
                    out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
                out[positions] = vectors
                filled += len(positions)
                bar.update(len(positions))
        if out is None or filled != len(texts):
            raise MorkitError(f"embedder {self.name!r} returned {filled} of {len(texts)} vectors")
        return out

    def encode_chunks(self, texts: Sequence[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions in `texts`, float32 vectors) as they are ready, every position exactly once (a repeated text's
        vector at each of its positions): first the texts the cache lacks, embedded chunk by chunk, each chunk
        committed to the cache as it finishes (what a killed run keeps), then the cached ones, read in pieces.
        Memory holds one piece, never all the vectors."""
        texts = list(texts)
        self.embedded = 0
        if not texts:
            return
        rows: dict[str, int] = {}
        order = np.fromiter((rows.setdefault(t, len(rows)) for t in texts), dtype=np.int64, count=len(texts))
        unique = list(rows)
        del rows
        hashes = [text_hash(t) for t in unique]
        spread = _Spread(order, len(unique))
        sizes = self._cached_sizes(hashes)  # per distinct text: its usable cached vector's size, 0 for none
        dim = self.dim
        todo = sizes != dim if dim is not None else sizes == 0
        if todo.any():
            yield from self._embedded(unique, hashes, np.flatnonzero(todo), spread)
        dim = self._needed_dim(unique[0])
        stale = ~todo & (sizes != dim)  # cached under another size than the embedder's (known only now)
        if stale.any():
            yield from self._embedded(unique, hashes, np.flatnonzero(stale), spread)
        gone: list[np.ndarray] = []  # changed in the cache since it was looked at
        for at, vectors, usable in self._cached(hashes, np.flatnonzero(~todo & ~stale), dim):
            yield spread.positions(at[usable], vectors[usable])
            gone.append(at[~usable])
        if gone and sum(map(len, gone)):
            yield from self._embedded(unique, hashes, np.concatenate(gone), spread)

    def _cached_sizes(self, hashes: Sequence[str]) -> np.ndarray:
        """Per text hash, the size of its cached vector where it has finite values; 0 where there is none."""
        sizes = np.zeros(len(hashes), dtype=np.int64)
        if self.cache is None:
            return sizes
        for start in range(0, len(hashes), PIECE):
            for i, vector in enumerate(self.cache.get_many(self.key, hashes[start: start + PIECE]), start):
                if vector is not None and np.isfinite(vector).all():
                    sizes[i] = vector.size
        return sizes

    def _cached(self, hashes: Sequence[str], at: np.ndarray, dim: int
                ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(distinct-text indices, their cached vectors, which are usable) by PIECE, read again from the cache."""
        if self.cache is None:
            return
        for start in range(0, len(at), PIECE):
            part = at[start: start + PIECE]
            vectors = np.zeros((len(part), dim), dtype=np.float32)
            usable = np.zeros(len(part), dtype=bool)
            for j, vector in enumerate(self.cache.get_many(self.key, [hashes[i] for i in part])):
                if vector is not None and vector.size == dim and np.isfinite(vector).all():
                    vectors[j], usable[j] = vector, True
            yield part, vectors, usable

    def _embedded(self, unique: list[str], hashes: list[str], at: np.ndarray, spread: _Spread
                  ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The distinct texts `at` embedded in one `encode_chunks` call, each chunk checked, cached and spread to
        its positions; the embedder's dimension learned from the first chunk where it declares none."""
        done = 0
        for positions, vectors in _chunks(self.inner, [unique[i] for i in at]):
            index = at[positions]
            dim = self.dim
            if vectors.ndim != 2 or len(vectors) != len(index) or dim is not None and vectors.shape[1] != dim:
                raise MorkitError(f"embedder {self.name!r} gave vectors of shape {vectors.shape} for "
                                  f"{len(index)} texts" + (f"; its dimension is {dim}" if dim is not None else ""))
            if dim is None:
                self._dim = int(vectors.shape[1])
            done += len(index)
            self.embedded += len(index)
            if self.cache is not None:
                finite = np.isfinite(vectors).all(axis=1)  # never keep a vector the pool would refuse
                self.cache.put_many(self.key, [hashes[i] for i in index[finite]], vectors[finite])
            yield spread.positions(index, vectors)
        if done != len(at):
            raise MorkitError(f"embedder {self.name!r} returned {done} of {len(at)} vectors")

    def _needed_dim(self, probe: str) -> int:
        """The embedder's dimension; one that has not told it yet (it embedded nothing so far: every text was
        cached) embeds `probe` to learn it (on Ray, a run of one text), caching nothing."""
        if self.dim is None:
            for _, vectors in _chunks(self.inner, [probe]):
                if vectors.ndim == 2:
                    self._dim = int(vectors.shape[1])
        if self.dim is None:
            raise MorkitError(f"embedder {self.name!r} gave no vector for one text")
        return int(self.dim)

    @property
    def key(self) -> str:
        if self._key is None:
            self._key = embedder_key(self.name)
        return self._key


PIECE = 1 << 14
"""Distinct texts per read of the cache (about 25 MB of 384-d vectors)."""


class _Spread:
    """Each distinct text's positions in the texts (a text given twice has two): a chunk of distinct-text vectors
    spread to every position they fill."""

    def __init__(self, order: np.ndarray, distinct: int):
        self.by_text = np.argsort(order, kind="stable")  # positions, grouped by distinct text
        self.starts = np.searchsorted(order[self.by_text], np.arange(distinct + 1))
        self.repeats = len(order) != distinct

    def positions(self, at: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, vectors): `vectors` of distinct texts `at`, one row per position they fill."""
        if not self.repeats:
            return self.by_text[at], vectors
        counts = self.starts[at + 1] - self.starts[at]
        runs = np.repeat(self.starts[at], counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts,
                                                                                            counts))
        return self.by_text[runs], np.repeat(vectors, counts, axis=0)


def _chunks(embedder: Any, texts: list[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(positions, vectors) per finished chunk: the embedder's own `encode_chunks`, else `encode` per CHUNK texts."""
    from morkit.question_pool.embed import CHUNK

    own = getattr(embedder, "encode_chunks", None)
    if own is not None:
        yield from own(texts)
        return
    for start in range(0, len(texts), CHUNK):
        part = texts[start: start + CHUNK]
        yield np.arange(start, start + len(part)), np.asarray(embedder.encode(part), dtype=np.float32)
