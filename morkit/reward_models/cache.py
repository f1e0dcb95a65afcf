"""A persistent score cache keyed by (RM identity, question hash, answer hash), so no pair is scored twice. SQLite in
WAL mode, each batch committed as it is scored. The RM identity (morkit.reward_models.identity) holds everything
that changes a score, the truncation included, so a row holds under its key alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Iterable, Sequence

from morkit.core.errors import InputError, MorkitError
from morkit.core.types import Score
from morkit.data.jsonl import output_file_problem


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


SQLITE_HEADER = b"SQLite format 3\x00"
COLUMNS = ("rm", "q", "a", "value", "steps", "truncated")
FIT_COLUMNS = (*COLUMNS, "fit")
"""The columns of the caches written while the truncation was kept beside each score rather than in the RM's key:
such a file is read and written as it is (its `fit` left empty); its rows, under the keys of then, simply miss."""


LOCK_WAIT_S = 30.0
"""How long a cache waits for another process that holds its SQLite file."""


def use_wal(db: sqlite3.Connection, wait_s: float = LOCK_WAIT_S) -> None:
    """Put `db` in WAL mode (readers never block the writer), waiting up to `wait_s` while another process holds
    the file: SQLite answers a journal-mode change on a busy file at once, without its busy timeout."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def cache_problem(path: str | os.PathLike) -> str | None:
    """Why `path` cannot hold a score cache (a directory, a file that is not SQLite, a file where a folder
    should be), or None; looks without creating anything."""
    target = Path(path)
    if target.is_dir():
        return "is a directory; the score cache is a SQLite file"
    if not target.exists():
        return output_file_problem(target)
    try:
        with open(target, "rb") as handle:
            head = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if head and head != SQLITE_HEADER:  # SQLite takes an empty file as a new database
        return "is not a SQLite score cache"
    return None


class ScoreCache:
    """Maps (rm key, question text, answer text) -> Score.

    A path that cannot hold the cache (see `cache_problem`), or a SQLite file whose `scores` table has
    other columns, is an InputError naming it.

    Args:
        path: The SQLite file; it and its parent folders are created when absent. Texts are stored as hashes.

    Raises:
        InputError: The path cannot hold a score cache, or the file is not a morkit score cache.
        MorkitError: Another process kept the file locked for 30 s.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        problem = cache_problem(self.path)
        if problem:
            raise InputError(problem, path=str(self.path))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=LOCK_WAIT_S)
        except sqlite3.DatabaseError as exc:  # e.g. a folder without write permission
            raise InputError(f"cannot open the score cache: {exc}", path=str(self.path)) from exc
        try:
            use_wal(self._db)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS scores (rm TEXT, q TEXT, a TEXT, value REAL, steps TEXT, truncated INTEGER,"
                " PRIMARY KEY (rm, q, a))"
            )
            columns = tuple(row[1] for row in self._db.execute("PRAGMA table_info(scores)"))
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            if "locked" in str(exc):  # another process holds it: a runtime condition, not bad input
                raise MorkitError(f"{self.path}: the score cache stayed locked by another process for 30 s; "
                                  "try again") from exc
            raise InputError(f"unusable score cache: {exc}", path=str(self.path)) from exc
        if columns not in (COLUMNS, FIT_COLUMNS):
            self._db.close()
            raise InputError(f"its 'scores' table has columns {', '.join(columns)}, not a morkit score cache's "
                             f"({', '.join(COLUMNS)})", path=str(self.path))
        self.hits = 0
        self.misses = 0

    def get_many(self, rm: str, pairs: Sequence[tuple[str, str]]) -> list[Score | None]:
        """The cached scores of `pairs` (None where absent).

        Args:
            rm: The RM's cache key (catalog.identity_of).
            pairs: The (question, answer) texts to look up.

        Returns:
            One entry per pair, in order: its cached Score, or None.
        """
        keys = [(text_hash(q), text_hash(a)) for q, a in pairs]
        found: dict[tuple[str, str], Score] = {}
        with self._lock:
            for start in range(0, len(keys), 400):
                chunk = keys[start : start + 400]
                where = " OR ".join("(q=? AND a=?)" for _ in chunk)
                args = [rm] + [x for k in chunk for x in k]
                for q, a, value, steps, truncated in self._db.execute(
                    f"SELECT q, a, value, steps, truncated FROM scores WHERE rm=? AND ({where})", args
                ):
                    found[(q, a)] = Score(value, tuple(json.loads(steps)) if steps else None, bool(truncated))
        out = [found.get(k) for k in keys]
        hit = sum(s is not None for s in out)
        self.hits += hit
        self.misses += len(out) - hit
        return out

    def put_many(self, rm: str, pairs: Iterable[tuple[str, str]], scores: Iterable[Score]) -> None:
        """Store scores under the RM's key.

        Args:
            rm: The RM's cache key (catalog.identity_of).
            pairs: The (question, answer) texts scored.
            scores: Their scores, aligned with `pairs`; a pair already cached for `rm` is replaced.
        """
        rows = [
            (rm, text_hash(q), text_hash(a), s.value, json.dumps(list(s.steps)) if s.steps is not None else None,
             int(s.truncated))
            for (q, a), s in zip(pairs, scores)
        ]
        with self._lock:
            self._db.executemany(f"INSERT OR REPLACE INTO scores ({', '.join(COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
                                 rows)
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "ScoreCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
