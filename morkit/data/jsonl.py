"""JSONL reading with line-numbered errors, and atomic writing (no partial output files)."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from morkit.core.errors import InputError


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line (of a gzip file too, by its .gz suffix);
    a bad line raises InputError naming it."""
    path = str(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        handle = opener(path, "rt", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=path) from exc
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                yield from _parsed(line, path, number)
        except (OSError, EOFError, UnicodeDecodeError) as exc:  # a corrupt gzip stream or bad bytes
            raise InputError(f"cannot read: {exc}", path=path) from exc


def _parsed(line: str, path: str, number: int) -> Iterator[tuple[int, dict[str, Any]]]:
    if not line.strip():
        return
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=number) from exc
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", path=path, line=number)
    yield number, obj


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Give a temp path next to `path`; it replaces `path` only if the block finishes without error."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_jsonl(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> int:
    """Write records atomically, one JSON object a line; returns how many were written."""
    count = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count
