"""The versioned pool directory on disk: pool.json, questions.jsonl, arrays as .npy, index.faiss.

This module knows files, not pool objects: `write_pool_files` writes a PoolFiles atomically (a
complete temporary directory beside the target, renamed into place, so a reader sees the old pool or
the new one, never half of each), and `read_pool_files` checks the format version, the header's keys,
every array's shape and the index, naming the file that is wrong. morkit.question_pool.pool turns
them into a QuestionPool and back.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from morkit.core.errors import InputError
from morkit.data.jsonl import read_jsonl
from morkit.question_pool.index import read_index, write_index
from morkit.question_pool.rows import PoolQuestion

FORMAT_VERSION = 1
ARRAYS = ("scores", "correct", "valid", "prr", "top1", "embeddings")
HEADER_KEYS = ("rm_names", "config", "normalizer", "global_prr", "ensembles", "embedder", "shapes", "index",
               "revision", "created", "updated", "morkit_version", "skipped", "missing_scores", "history")
SHAPE_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError)


@dataclass(frozen=True)
class PoolFiles:
    """A pool directory's contents: the header (pool.json), the questions, the arrays by name, the index."""

    header: Mapping[str, Any]
    questions: tuple[PoolQuestion, ...]
    arrays: Mapping[str, np.ndarray]
    index: Any


def write_pool_files(files: PoolFiles, path: str | os.PathLike) -> Path:
    """Write a pool directory at `path` atomically (replacing an older pool there, never another directory)."""
    target = Path(path)
    if target.exists() and not (target / "pool.json").is_file() and any(target.iterdir()):
        raise InputError("exists and is not a pool directory; refusing to replace it", path=str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        header = {**files.header, "format_version": FORMAT_VERSION,
                  "shapes": {name: list(files.arrays[name].shape) for name in ARRAYS}}
        text = json.dumps(_json_safe(header), indent=1, allow_nan=False)
        (staging / "pool.json").write_text(text + "\n", encoding="utf-8")
        with open(staging / "questions.jsonl", "w", encoding="utf-8") as out:
            for q in files.questions:
                out.write(json.dumps({"id": q.id, "question": q.question, "domain": q.domain,
                                      "n_candidates": q.n_candidates}, ensure_ascii=False) + "\n")
        for name in ARRAYS:
            np.save(staging / f"{name}.npy", files.arrays[name], allow_pickle=False)
        write_index(files.index, staging / "index.faiss")
        os.chmod(staging, 0o755)
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / "pool")
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _json_safe(value: Any) -> Any:
    """NaN and infinities become null, so pool.json stays standard JSON."""
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _check(condition: bool, path: Path, message: str) -> None:
    if not condition:
        raise InputError(message, path=str(path))


def _header(path: Path) -> dict[str, Any]:
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"unreadable: {exc}", path=str(path)) from exc
    _check(isinstance(header, dict), path, "not a JSON object")
    version = header.get("format_version")
    _check(version == FORMAT_VERSION, path,
           f"pool format version {version!r}; this morkit reads version {FORMAT_VERSION}: rebuild the pool")
    for key in HEADER_KEYS:
        _check(key in header, path, f"missing key {key!r}")
    return header


def _questions(path: Path) -> tuple[PoolQuestion, ...]:
    out = []
    for line, o in read_jsonl(path):
        try:
            out.append(PoolQuestion(str(o["id"]), str(o["question"]), str(o["domain"]), int(o["n_candidates"])))
        except SHAPE_ERRORS as exc:
            raise InputError(f"not a pool question ({type(exc).__name__}: {exc})", path=str(path), line=line) from exc
    return tuple(out)


def _array(root: Path, name: str, expected: tuple[int, ...]) -> np.ndarray:
    file = root / f"{name}.npy"
    _check(file.is_file(), file, "missing pool array")
    try:
        array = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"unreadable array: {exc}", path=str(file)) from exc
    _check(array.shape == expected, file, f"shape {array.shape}, pool.json says {expected}")
    return array


def read_pool_files(path: str | os.PathLike) -> PoolFiles:
    """Read and check a pool directory; a missing or corrupt file, another format version or a wrong shape
    is an InputError naming the file."""
    root = Path(path)
    header_path = root / "pool.json"
    _check(root.is_dir(), root, "no such pool directory")
    _check(header_path.is_file(), root, "not a pool directory (no pool.json); build one with `morkit pool build`")
    header = _header(header_path)
    questions = _questions(root / "questions.jsonl")
    try:
        arrays = {name: _array(root, name, tuple(header["shapes"][name])) for name in ARRAYS}
        n_q, n_rm, n_ens = len(questions), len(header["rm_names"]), len(header["ensembles"])
        dim = int(header["embedder"]["dim"])
    except SHAPE_ERRORS as exc:
        raise InputError(f"malformed shapes, RM names, ensembles or embedder: {exc}", path=str(header_path)) from exc
    expect = {"scores": (n_q, None, n_rm), "correct": (n_q, None), "valid": (n_q, None), "prr": (n_q, n_ens),
              "top1": (n_q, n_ens), "embeddings": (n_q, dim)}
    for name, shape in expect.items():
        actual = arrays[name].shape
        ok = len(actual) == len(shape) and all(s is None or s == a for s, a in zip(shape, actual))
        _check(ok, root / f"{name}.npy", f"shape {actual} does not fit {n_q} questions, {n_rm} RMs, "
                                         f"{n_ens} ensembles, dim {dim}")
    index_file = root / "index.faiss"
    _check(index_file.is_file(), index_file, "missing FAISS index")
    try:
        index = read_index(index_file)
    except RuntimeError as exc:  # faiss reports a corrupt file this way
        raise InputError(f"unreadable FAISS index: {_first_line(exc)}", path=str(index_file)) from exc
    _check(index.ntotal == n_q and index.d == dim, index_file,
           f"index holds {index.ntotal} vectors of dim {index.d}; the pool has {n_q} questions of dim {dim}")
    return PoolFiles(header, questions, arrays, index)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
