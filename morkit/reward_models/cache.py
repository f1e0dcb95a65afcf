"""A persistent score cache keyed by (RM, question hash, answer hash), so no pair is scored twice.

SQLite in WAL mode: safe for several morkit processes at once, and each batch is committed as soon
as it is scored, so a later failure loses nothing already computed.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Iterable, Sequence

from morkit.core.types import Score


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ScoreCache:
    """Maps (rm key, question text, answer text) -> Score."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS scores (rm TEXT, q TEXT, a TEXT, value REAL, steps TEXT, truncated INTEGER,"
            " PRIMARY KEY (rm, q, a))"
        )
        self._db.commit()
        self.hits = 0
        self.misses = 0

    def get_many(self, rm: str, pairs: Sequence[tuple[str, str]]) -> list[Score | None]:
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
        rows = [
            (rm, text_hash(q), text_hash(a), s.value, json.dumps(list(s.steps)) if s.steps is not None else None,
             int(s.truncated))
            for (q, a), s in zip(pairs, scores)
        ]
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "ScoreCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
