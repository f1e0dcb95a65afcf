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
    """An embedder (`name`, `dim`, `encode_chunks` or `encode`) behind an embedding cache: `encode` embeds
    only the distinct texts the cache lacks, and writes each chunk there as it finishes. A cached vector is used
    only when it has the embedder's dimension and finite values (else it is embedded again), and every vector
    returned has that dimension. `embedded`: how many texts the last `encode` embedded."""

    def __init__(self, inner: Any, cache: EmbeddingCache | None = None):
        self.inner = inner
        self.cache = cache
        self.embedded = 0
        self._key: str | None = None

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors, in order; `progress` shows one bar in distinct questions."""
        from tqdm import tqdm

        texts = list(texts)
        self.embedded = 0
        dim = self.dim
        if not texts:
            return np.zeros((0, dim), dtype=np.float32)
        rows: dict[str, int] = {}
        order = np.fromiter((rows.setdefault(t, len(rows)) for t in texts), dtype=np.int64, count=len(texts))
        unique = list(rows)
        hashes = [text_hash(t) for t in unique]
        out = np.empty((len(unique), dim), dtype=np.float32)
        done = np.zeros(len(unique), dtype=bool)
        if self.cache is not None:
            for i, vector in enumerate(self.cache.get_many(self.key, hashes)):
                if vector is not None and vector.size == dim and np.isfinite(vector).all():  # else a miss
                    out[i], done[i] = vector, True
        missing = np.flatnonzero(~done)
        with tqdm(total=len(unique), initial=len(unique) - len(missing), desc="embed", unit="question",
                  disable=not progress, leave=False) as bar:
            if len(missing):
                for positions, vectors in _chunks(self.inner, [unique[i] for i in missing]):
                    at = missing[positions]
                    if vectors.shape != (len(at), dim):
                        raise MorkitError(f"embedder {self.name!r} gave vectors of shape {vectors.shape} for "
                                          f"{len(at)} texts; its dimension is {dim}")
                    out[at], done[at] = vectors, True
                    self.embedded += len(at)
                    if self.cache is not None:
                        finite = np.isfinite(vectors).all(axis=1)  # never keep a vector the pool would refuse
                        self.cache.put_many(self.key, [hashes[i] for i in at[finite]], vectors[finite])
                    bar.update(len(at))
        if not done.all():
            raise MorkitError(f"embedder {self.name!r} returned {int(done.sum())} of {len(unique)} vectors")
        return out if len(unique) == len(texts) else out[order]

    @property
    def key(self) -> str:
        if self._key is None:
            self._key = embedder_key(self.name)
        return self._key


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
