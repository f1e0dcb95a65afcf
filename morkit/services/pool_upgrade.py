"""`morkit pool upgrade`: a pool an older morkit wrote rewritten in place in the format this morkit reads
(question_pool.store.FORMAT_COLUMNAR): formats 1 and 2 (questions in questions.jsonl) in columns, and the header
slots nothing reads now (store.RETIRED_KEYS) dropped. The one reader of those formats and slots."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from morkit.core.errors import InputError
from morkit.data import staging
from morkit.data.jsonl import read_jsonl
from morkit.question_pool.lock import canonical, pool_lock
from morkit.question_pool.pool import QuestionPool, load_pool
from morkit.question_pool.rows import PoolQuestion
from morkit.question_pool.store import (
    ARRAYS,
    FORMAT_COLUMNAR,
    RETIRED_KEYS,
    UPGRADABLE_FORMATS,
    read_header,
    write_staged,
)
from morkit.question_pool.table import TABLE_ARRAYS, QuestionTable


@dataclass(frozen=True)
class Upgrade:
    """What `upgrade_pool` found and did: the pool's format before and after, and the retired header slots it
    dropped (formats equal and none dropped: nothing was done)."""

    path: str
    found: int
    format: int
    removed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the pool was rewritten."""
        return self.found != self.format or bool(self.removed)


def upgrade_pool(path: str | os.PathLike) -> Upgrade:
    """Rewrite the pool at `path` in place in format 3 without retired header slots (docs/pools.md): staged
    beside it under its lock, checked like any pool, then swapped in, so a failure leaves the old pool as it was.

    Args:
        path: The pool directory.

    Returns:
        The format found and the format now on disk, and the retired slots dropped.

    Raises:
        InputError: No pool at `path`, a format this morkit cannot upgrade, a file of the old pool missing or
            malformed (the error names it), the new directory could not be written or swapped in (disk full, a
            read-only folder: the error names the pool, left as it was); or another writer held the pool's lock
            past LOCK_TIMEOUT_S.
    """
    root = canonical(path)  # "." has no name to put a directory beside
    with pool_lock(root):
        staging.recover(root)
        if not root.is_dir():
            raise InputError("no such pool directory", path=str(root))
        if not (root / "pool.json").is_file():
            raise InputError("not a pool directory (no pool.json)", path=str(root))
        header = read_header(root / "pool.json")
        found = header.get("format_version")
        removed = tuple(key for key in RETIRED_KEYS if key in header)
        if found == FORMAT_COLUMNAR and not removed:
            return Upgrade(str(root), found, found)
        if found != FORMAT_COLUMNAR and found not in UPGRADABLE_FORMATS:
            known = " and ".join(map(str, UPGRADABLE_FORMATS))
            raise InputError(f"pool format version {found!r}; `morkit pool upgrade` rewrites formats {known}: "
                             "rebuild the pool", path=str(root / "pool.json"))
        kept = {k: v for k, v in header.items() if k not in RETIRED_KEYS}
        shapes = header.get("shapes")
        if not isinstance(shapes, dict):
            raise InputError("malformed key 'shapes': expected the shape of every array", path=str(root / "pool.json"))
        arrays: dict[str, Any] = {name: root / f"{name}.npy" for name in ARRAYS if name in shapes}
        if not (root / "index.faiss").is_file():
            raise InputError("missing FAISS index", path=str(root / "index.faiss"))
        if found == FORMAT_COLUMNAR:
            arrays.update({name: root / f"{name}.npy" for name in TABLE_ARRAYS})
            domains, questions = _domains(header, root), None
        else:
            questions = _questions_jsonl(root / "questions.jsonl")
            _check_rows(root, questions, shapes)
            table = QuestionTable.of(questions)
            arrays.update(table.arrays())
            domains = table.domain_names
        try:
            write_staged(root, kept, arrays, root / "index.faiss", domains=domains,
                         check=lambda staged: _check_counts(root, questions, _opened(root, staged)))
        except OSError as exc:
            raise InputError(f"could not write the upgraded pool ({exc.strerror or exc}); the old pool is unchanged",
                             path=str(root)) from exc
    return Upgrade(str(root), found, FORMAT_COLUMNAR, removed)


def _domains(header: Mapping[str, Any], root: Path) -> list[str]:
    """A format-3 header's domain names, as they are (a list of strings, else an error naming pool.json)."""
    domains = header.get("question_domains")
    if not (isinstance(domains, list) and all(isinstance(d, str) for d in domains)):
        raise InputError("malformed key 'question_domains': expected a list of domain names",
                         path=str(root / "pool.json"))
    return domains


def _check_rows(root: Path, questions: tuple[PoolQuestion, ...], shapes: Mapping[str, Any]) -> None:
    """As many questions as the arrays have rows (pool.json's shape of scores), else an error naming
    questions.jsonl."""
    rows = shapes.get("scores")
    if isinstance(rows, list) and rows and isinstance(rows[0], int) and rows[0] != len(questions):
        raise InputError(f"{len(questions)} questions; pool.json says the arrays hold {rows[0]}",
                         path=str(root / "questions.jsonl"))


def _questions_jsonl(path: Path) -> tuple[PoolQuestion, ...]:
    """Formats 1 and 2's questions: one {id, question, domain, n_candidates} per line, ids distinct."""
    out = []
    for line, o in read_jsonl(path):
        try:
            question = PoolQuestion(o["id"], o["question"], o["domain"], o["n_candidates"])
        except KeyError as exc:
            raise InputError(f"not a pool question (missing {exc})", path=str(path), line=line) from exc
        if not (all(isinstance(v, str) for v in (question.id, question.question, question.domain))
                and isinstance(question.n_candidates, int) and not isinstance(question.n_candidates, bool)
                and question.n_candidates >= 1):
            raise InputError("not a pool question (id, question and domain are strings, n_candidates a whole "
                             "number)", path=str(path), line=line)
        out.append(question)
    ids = [q.id for q in out]
    if len(set(ids)) != len(ids):
        raise InputError("a question id appears twice", path=str(path))
    return tuple(out)


def _opened(root: Path, staged: Path) -> QuestionPool:
    """The staged pool opened with every check of a format-3 pool; an error names the old pool's file."""
    try:
        return load_pool(staged)
    except InputError as exc:
        if exc.path is None:
            raise
        where = f"{exc.path}:{exc.line}: " if exc.line is not None else f"{exc.path}: "
        message = str(exc)[len(where):]
        named = Path(exc.path)
        old = root if named == staged else root / named.relative_to(staged) if staged in named.parents else named
        raise InputError(message, path=str(old), line=exc.line) from None


def _check_counts(root: Path, questions: tuple[PoolQuestion, ...] | None, pool: QuestionPool) -> None:
    """Each question's number of candidates as questions.jsonl states it, against valid.npy's (None: format 3,
    nothing to compare)."""
    if questions is None:
        return
    counts = pool.valid.sum(axis=1)
    for q, count in zip(questions, counts):
        if q.n_candidates != count:
            raise InputError(f"question {q.id!r} has {q.n_candidates} candidates; valid.npy marks {int(count)}",
                             path=str(root / "questions.jsonl"))
