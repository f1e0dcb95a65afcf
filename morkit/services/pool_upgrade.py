"""`morkit pool upgrade`: a pool an older morkit wrote (format 1 or 2, its questions in questions.jsonl) rewritten in
place in the format this morkit reads (question_pool.store.FORMAT_COLUMNAR). The one reader of those formats."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from morkit.core.errors import InputError
from morkit.data import staging
from morkit.data.jsonl import read_jsonl
from morkit.question_pool.lock import pool_lock
from morkit.question_pool.pool import QuestionPool, load_pool
from morkit.question_pool.rows import PoolQuestion
from morkit.question_pool.spill import save_array
from morkit.question_pool.store import ARRAYS, FORMAT_COLUMNAR, UPGRADABLE_FORMATS, read_header
from morkit.question_pool.table import QuestionTable

RETIRED_KEYS = ("stacker",)
"""Header slots of older pools that nothing reads now (the stacker's fit, from when it was the default method):
the upgrade drops them."""


@dataclass(frozen=True)
class Upgrade:
    """What `upgrade_pool` found and left: the pool's format before and after (equal: nothing was done)."""

    path: str
    found: int
    format: int

    @property
    def changed(self) -> bool:
        """Whether the pool was rewritten."""
        return self.found != self.format


def upgrade_pool(path: str | os.PathLike) -> Upgrade:
    """Rewrite the pool at `path` from format 1 or 2 in format 3, in place; a format-3 pool is left as it is.

    Under the pool's lock the new directory is written beside it (arrays and index hard-linked where possible),
    opened and checked like any pool, then swapped in: a failure leaves the old pool as it was (docs/pools.md).

    Args:
        path: The pool directory.

    Returns:
        The format found and the format now on disk.

    Raises:
        InputError: No pool at `path`, a format this morkit cannot upgrade, or a file of the old pool missing or
            malformed (the error names it); or another writer held the pool's lock past LOCK_TIMEOUT_S.
    """
    root = Path(path)
    with pool_lock(root):
        staging.recover(root)
        if not root.is_dir():
            raise InputError("no such pool directory", path=str(root))
        if not (root / "pool.json").is_file():
            raise InputError("not a pool directory (no pool.json)", path=str(root))
        header = read_header(root / "pool.json")
        found = header.get("format_version")
        if found == FORMAT_COLUMNAR:
            return Upgrade(str(root), found, found)
        if found not in UPGRADABLE_FORMATS:
            known = " and ".join(map(str, UPGRADABLE_FORMATS))
            raise InputError(f"pool format version {found!r}; `morkit pool upgrade` rewrites formats {known}: "
                             "rebuild the pool", path=str(root / "pool.json"))
        questions = _questions_jsonl(root / "questions.jsonl")
        staged = staging.make_temp(root, directory=True)
        try:
            _write(root, staged, header, questions)
            _check_counts(root, questions, _opened(root, staged))
            os.chmod(staged, 0o755)
            staging.swap_in(staged, root)
        finally:
            staging.remove(staged)
    return Upgrade(str(root), found, FORMAT_COLUMNAR)


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


def _write(root: Path, staged: Path, header: dict, questions: tuple[PoolQuestion, ...]) -> None:
    """The format-3 directory in `staged`: the old arrays and index as they are, the question columns, pool.json
    with the columns' shapes and domain names, the retired slots left out."""
    for name in [f"{a}.npy" for a in ARRAYS] + ["index.faiss"]:
        if (root / name).is_file():
            _link_or_copy(root / name, staged / name)
    table = QuestionTable.of(questions)
    columns = table.arrays()
    for name, array in columns.items():
        save_array(staged / f"{name}.npy", array)
    shapes = header.get("shapes")
    new = {k: v for k, v in header.items() if k not in RETIRED_KEYS}
    new.update(format_version=FORMAT_COLUMNAR, question_domains=list(table.domain_names),
               shapes={**shapes, **{n: list(a.shape) for n, a in columns.items()}} if isinstance(shapes, dict)
               else shapes)
    (staged / "pool.json").write_text(json.dumps(new, indent=1) + "\n", encoding="utf-8")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # the old directory is removed after the swap: the file lives on in the new one
    except OSError:
        shutil.copy2(source, target)


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


def _check_counts(root: Path, questions: tuple[PoolQuestion, ...], pool: QuestionPool) -> None:
    """Each question's number of candidates as questions.jsonl states it, against valid.npy's."""
    counts = pool.valid.sum(axis=1)
    for q, count in zip(questions, counts):
        if q.n_candidates != count:
            raise InputError(f"question {q.id!r} has {q.n_candidates} candidates; valid.npy marks {int(count)}",
                             path=str(root / "questions.jsonl"))
