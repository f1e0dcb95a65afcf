"""JSONL reading with line-numbered errors, and atomic writing (no partial output files)."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from morkit.core import checks
from morkit.core.errors import InputError

MAX_DEPTH = 100
"""Deepest nesting of objects and lists a line may have (the contract needs 5; this leaves room for metadata)."""

_BAD_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape decoding makes of bytes that are not UTF-8
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate in a decoded string (a pair decodes to one character)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a line that may hold one (a cheap test before the walk)


class _NotFinite(Exception):
    """Raised from inside the JSON decoder at NaN, Infinity, or a number too large for a float."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _no_constant(text: str) -> float:
    raise _NotFinite(text)


_DECODER = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant)


def read_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line (of a gzip file too, by its .gz suffix).

    A bad line (not UTF-8, malformed, not an object, non-finite, too deep, a lone surrogate: docs/jsonl.md)
    raises InputError naming the file, line and, where it has one, the query id."""
    path = str(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:  # surrogateescape: bad bytes become lone surrogates, so the line that holds them can be named
        handle = opener(path, "rt", encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                yield from _parsed(line, path, number)
        except (OSError, EOFError) as exc:  # a corrupt gzip stream, a folder, a read error
            raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from exc


def _query_id(obj: Any) -> str:
    """'query ID: ' for messages when `obj` is an object with a usable id, else ''."""
    qid = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(qid, str) and not _SURROGATE.search(qid) or isinstance(qid, int) and not isinstance(qid, bool):
        return f"query {checks.shown(str(qid))}: "
    return ""


def _lenient_id(line: str) -> str:
    try:
        return _query_id(json.loads(line))
    except (ValueError, RecursionError):
        return ""


def _parsed(line: str, path: str, number: int) -> Iterator[tuple[int, dict[str, Any]]]:
    if not line.strip():
        return
    bad = _BAD_BYTE.search(line)
    if bad:
        raise InputError(f"not valid UTF-8: byte 0x{ord(bad.group()) - 0xDC00:02x} at column {bad.start() + 1}",
                         path=path, line=number)
    try:
        obj = _DECODER.decode(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=number) from exc
    except _NotFinite as exc:
        text = exc.args[0] if len(exc.args[0]) <= 40 else exc.args[0][:37] + "..."
        raise InputError(f"{_lenient_id(line)}{text} is not a finite number (JSON has no NaN or infinities)",
                         path=path, line=number) from None
    except ValueError as exc:  # an integer longer than Python will read (sys.get_int_max_str_digits)
        raise InputError(f"unreadable number: an integer of more than {sys.get_int_max_str_digits()} digits",
                         path=path, line=number) from exc
    except RecursionError:
        raise InputError(f"nested more than {MAX_DEPTH} levels deep", path=path, line=number) from None
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}", path=path, line=number)
    deep = line.count("[") + line.count("{") > MAX_DEPTH
    if deep or _SURROGATE_ESCAPE.search(line):
        problem = _structure_problem(obj)
        if problem:
            raise InputError(_query_id(obj) + problem, path=path, line=number)
    yield number, obj


def _structure_problem(obj: dict[str, Any]) -> str | None:
    """Nesting deeper than MAX_DEPTH, or a string (key or value) with a lone surrogate; walked without recursion."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            for text in (key, item):
                if isinstance(text, str) and _SURROGATE.search(text):
                    return (f"the string {checks.shown(text)} holds a lone surrogate escape, which is not "
                            "Unicode text (it cannot be written as UTF-8)")
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1))
    return None


def logged_records(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The objects of a resume log (`OUT.partial`, appended to line by line); a torn last line from a killed
    run, or any line that is not a JSON object, is skipped. Nothing when the log does not exist."""
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def json_safe(value: Any) -> Any:
    """`value` as standard JSON can hold it: NaN and infinities (undefined PRR, CV figures) become null, numpy
    scalars plain numbers, tuples lists."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:  # a numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def output_file_problem(path: str | os.PathLike) -> str | None:
    """Why a file cannot be written at `path` (it is a folder, or a folder on its way is a file), or None."""
    target = Path(path)
    if target.is_dir():
        return "is a directory; a file path was expected"
    for folder in target.parents:
        if folder.exists():
            return None if folder.is_dir() else f"cannot be created: {folder} is a file, not a directory"
    return None


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Give a temp path next to `path`; it replaces `path` only if the block finishes without error.

    The temp is named after the writer's process (morkit.data.staging), and the temps of earlier writers
    of `path` that were killed before they finished are removed first."""
    from morkit.data import staging

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = staging.make_temp(target)
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
    """Write records atomically, one JSON object a line (UTF-8, standard JSON: no NaN or infinities); returns
    how many were written. A record JSON or UTF-8 cannot hold, or a path that cannot be a file, is an InputError
    naming the file, and no file is written."""
    problem = output_file_problem(path)
    if problem:
        raise InputError(problem, path=str(path))
    count = 0
    with _writing(path), atomic_path(path) as tmp, open(tmp, "wb") as out:
        for record in records:
            count += 1
            out.write(encoded_line(record, str(path), count))
    return count


@contextmanager
def _writing(path: str | os.PathLike) -> Iterator[None]:
    """Errors of the target path as one-line errors naming it (the records' own errors pass through)."""
    try:
        yield
    except (PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", path=str(path)) from exc


def encoded_line(record: dict[str, Any], path: str, number: int) -> bytes:
    """One record as a standard-JSON UTF-8 line; an InputError naming `path` and the record when it cannot be."""
    try:
        return (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    except ValueError as exc:  # NaN or an infinity (json), or a lone surrogate (UnicodeEncodeError)
        what = ("a lone surrogate, which is not Unicode text" if isinstance(exc, UnicodeEncodeError)
                else "NaN or an infinity, which JSON cannot represent")
        of = _query_id(record).removesuffix(": ")
        raise InputError(f"record {number}{f' ({of})' if of else ''} holds {what}; nothing was written",
                         path=path) from exc
