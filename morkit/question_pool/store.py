"""The versioned pool directory on disk (pool.json, .npy arrays and question columns, index.faiss): files, not objects.

Written whole and swapped in under the writers' lock; read with every file checked (format: docs/pools.md).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.data import staging
from morkit.data.jsonl import json_safe, output_file_problem
from morkit.question_pool.index import read_index, write_index
from morkit.question_pool.lock import canonical, pool_lock
from morkit.question_pool.rows import STEP_REDUCTIONS, PoolQuestion
from morkit.question_pool.spill import save_array
from morkit.question_pool.table import TABLE_ARRAYS, QuestionTable, RowCounts

log = logging.getLogger(__name__)

FORMAT_COLUMNAR = 3
"""The pool format this morkit reads and writes: questions in columns (table.py) read on demand; statistics
dense or on the fly by prr.npy's presence."""
UPGRADABLE_FORMATS = (1, 2)
"""Formats of older morkits (questions in questions.jsonl; 1: dense statistics, 2: on the fly): `morkit pool
upgrade` rewrites them as FORMAT_COLUMNAR, and nothing else reads them."""
RETIRED_KEYS = ("stacker",)
"""pool.json slots of older morkits that nothing reads now (the stacker's fit, from when it was the default method):
a pool that has one does not open, and `morkit pool upgrade` drops them."""
DENSE_ARRAYS = ("prr", "top1")
ARRAYS = ("scores", "correct", "valid", "prr", "top1", "embeddings", "steps")
OPTIONAL_ARRAYS = ("steps",)  # process RMs' step reductions: pools written before they were kept lack them
VALUE_CHECK_BYTES = 256 << 20
"""Arrays up to this size have every value checked when a pool is opened; larger ones (a million-question
pool's scores and embeddings) are mapped unread, and checked where read."""
HEADER_KEYS = ("rm_names", "config", "normalizer", "global_prr", "ensembles", "embedder", "shapes", "index",
               "revision", "created", "updated", "morkit_version", "skipped", "missing_scores", "history")
SHAPE_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError)

ANY_REVISION = object()
"""`write_pool_files(replaces=...)`: replace whatever pool is there (a fresh build)."""

_FLOAT_ARRAYS = ("scores", "prr", "top1", "embeddings", "steps")


@dataclass(frozen=True)
class PoolFiles:
    """A pool directory's contents: the header (pool.json), the questions, the arrays by name, the index."""

    header: Mapping[str, Any]
    questions: Sequence[PoolQuestion]  # a QuestionTable, or any sequence of questions to write
    arrays: Mapping[str, np.ndarray]
    index: Any


# ---- writing --------------------------------------------------------------------------------------------

def _disk_token(target: Path) -> Any:
    try:
        header = json.loads((target / "pool.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return ANY_REVISION  # unreadable: matches no revision
    return header.get("token") if isinstance(header, dict) else ANY_REVISION


def pool_target_problem(path: str | os.PathLike) -> str | None:
    """Why a pool cannot be written at `path` (a file or link, a directory that is neither empty nor a pool,
    a file where a folder should be), or None; looks without creating anything."""
    target = Path(path)
    if not os.path.lexists(target):
        return output_file_problem(target)
    if target.is_dir() and ((target / "pool.json").is_file() or not any(target.iterdir())):
        return None
    return "exists and is not a pool directory; refusing to replace it"


def write_pool_files(files: PoolFiles, path: str | os.PathLike, *, replaces: Any = ANY_REVISION) -> Path:
    """Write a pool directory at `path` atomically (replacing an older pool there, never another directory).

    Holds the pool's lock. `replaces`: the token of the revision this pool was derived from; when the
    directory holds another revision by then, nothing is written and an InputError says so."""
    target = canonical(path)
    with pool_lock(target):
        staging.recover(target)
        problem = pool_target_problem(target)
        if problem:
            raise InputError(problem, path=str(target))
        if replaces is not ANY_REVISION and (target / "pool.json").is_file() and _disk_token(target) != replaces:
            raise InputError("another process saved this pool after it was loaded here; nothing was written, "
                             "so no questions were lost: run again to apply the change to the new revision",
                             path=str(target))
        target.parent.mkdir(parents=True, exist_ok=True)
        table = QuestionTable.of(files.questions)
        arrays = {**{name: files.arrays[name] for name in stored_arrays(files.arrays)}, **table.arrays()}
        write_staged(target, files.header, arrays, files.index, domains=table.domain_names)
    return Path(path)


def write_staged(target: Path, header: Mapping[str, Any], arrays: Mapping[str, Any], index: Any, *,
                 domains: Sequence[str], check: Callable[[Path], None] | None = None) -> None:
    """Write a pool directory of FORMAT_COLUMNAR beside `target` and swap it in; the caller holds the pool's lock.

    Args:
        target: The pool directory to create or replace (canonical: lock.canonical).
        header: pool.json's keys; the format version, `domains` and every array's shape are added here.
        arrays: Array name -> the array (saved; a mapped one streams, its pages released), or the .npy file of
            an older directory (hard-linked, or copied where the file system cannot link); the question columns
            included.
        index: The FAISS index, or its file (linked or copied likewise).
        domains: The question columns' domain names.
        check: Called with the staged directory, complete, before the swap; what it raises stops the write.

    Raises:
        InputError: An array file given cannot be read (the error names it), or what `check` raises.
        OSError: Writing or swapping failed; either way the staged directory is removed and `target` is left as
            it was.
    """
    staged = staging.make_temp(target, directory=True)
    try:
        shapes = {name: list(_npy_shape(array) if isinstance(array, Path) else array.shape)
                  for name, array in arrays.items()}
        header = {**header, "format_version": FORMAT_COLUMNAR, "question_domains": list(domains), "shapes": shapes}
        text = json.dumps(json_safe(header), indent=1, allow_nan=False)
        (staged / "pool.json").write_text(text + "\n", encoding="utf-8")
        for name, array in arrays.items():
            if isinstance(array, Path):
                _link_or_copy(array, staged / f"{name}.npy")
            else:
                save_array(staged / f"{name}.npy", array)  # a mapped one streams, its pages released
        if isinstance(index, Path):
            _link_or_copy(index, staged / "index.faiss")
        else:
            write_index(index, staged / "index.faiss")
        if check is not None:
            check(staged)
        os.chmod(staged, 0o755)
        staging.swap_in(staged, target)
    finally:
        staging.remove(staged)


def _npy_shape(file: Path) -> tuple[int, ...]:
    """The shape a .npy file's header states; a missing or unreadable file is an InputError naming it."""
    _check(file.is_file(), file, "missing pool array")
    try:
        return np.load(file, mmap_mode="r", allow_pickle=False).shape
    except Exception as exc:  # numpy parses a damaged header with ast/tokenize: ValueError, SyntaxError, TokenError ...
        raise InputError(f"unreadable array: {_first_line(exc)}", path=str(file)) from exc


def _link_or_copy(source: Path, target: Path) -> None:
    """`source` at `target` too: a hard link (the staged directory outlives the old one), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def stored_arrays(arrays: Mapping[str, Any]) -> tuple[str, ...]:
    """The array files a pool writes: every array, less the dense statistics when it has none (None)."""
    return tuple(n for n in ARRAYS if arrays.get(n) is not None)


# ---- reading --------------------------------------------------------------------------------------------

def _check(condition: bool, path: Path, message: str) -> None:
    if not condition:
        raise InputError(message, path=str(path))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_dict_of(value: Any, check: Callable[[Any], bool]) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and check(v) for k, v in value.items())


def _is_names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_rule(value: Any) -> bool:
    """An RM's stored applicability (reward_models.applicability.Applicability.to_json)."""
    return (isinstance(value, dict) and set(value) <= {"domains", "fields"}
            and (value.get("domains") is None or _is_names(value["domains"])) and _is_names(value.get("fields", [])))


def read_header(path: Path) -> dict[str, Any]:
    """pool.json as a dict, unchecked but for being a readable JSON object (an InputError naming it)."""
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: JSON, too long ints
        raise InputError(f"unreadable: {_first_line(exc)}", path=str(path)) from exc
    _check(isinstance(header, dict), path, "not a JSON object")
    return header


def _header(path: Path) -> dict[str, Any]:
    header = read_header(path)
    version = header.get("format_version")
    upgrade = f"run morkit pool upgrade {shlex.quote(str(path.parent))}"
    if version in UPGRADABLE_FORMATS:
        raise InputError(f"pool format {version}, written by an older morkit: {upgrade}", path=str(path.parent))
    _check(version == FORMAT_COLUMNAR, path, f"pool format version {version!r}; this morkit reads version "
           f"{FORMAT_COLUMNAR}: rebuild the pool")
    retired = [key for key in RETIRED_KEYS if key in header]
    if retired:
        raise InputError(f"pool.json keeps the retired slot {retired[0]!r} of an older morkit: {upgrade}",
                         path=str(path.parent))
    for key in HEADER_KEYS:
        _check(key in header, path, f"missing key {key!r}")

    def expect(key: str, ok: bool, what: str) -> None:
        _check(ok, path, f"malformed key {key!r}: expected {what}")

    names = header["rm_names"]
    expect("rm_names", isinstance(names, list) and bool(names) and all(isinstance(n, str) and n for n in names)
           and len(set(names)) == len(names), "a list of distinct RM names")
    shapes = header["shapes"]
    expect("shapes", isinstance(shapes, dict) and all(
        isinstance(shapes.get(a), list) and all(_is_int(s) and s >= 0 for s in shapes[a]) for a in _arrays_of(header)),
        "the shape of every array")
    if not _dense(header):
        statistics = header.get("statistics")
        expect("statistics", isinstance(statistics, dict) and isinstance(statistics.get("sample"), int) and all(
            isinstance(statistics.get(key), list) and len(statistics[key]) == len(header["ensembles"])
            and all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in statistics[key])
            for key in ("mean_prr", "mean_top1", "questions")), "sampled means of every ensemble")
    embedder = header["embedder"]
    expect("embedder", isinstance(embedder, dict) and isinstance(embedder.get("name"), str) and embedder["name"]
           and _is_int(embedder.get("dim")) and embedder["dim"] >= 1, "{name, dim}")
    expect("index", isinstance(header["index"], dict) and isinstance(header["index"].get("kind"), str),
           "{kind, ...}")
    for key in ("config", "normalizer", "global_prr"):
        expect(key, isinstance(header[key], dict), "an object")
    expect("ensembles", isinstance(header["ensembles"], list) and all(isinstance(e, dict) for e in header["ensembles"]),
           "a list of ensembles")
    expect("revision", _is_int(header["revision"]) and header["revision"] >= 1, "a whole number >= 1")
    for key in ("created", "updated", "morkit_version"):
        expect(key, isinstance(header[key], str), "a string")
    for key in ("skipped", "missing_scores"):
        expect(key, _is_dict_of(header[key], lambda v: _is_int(v) and v >= 0), "counts by name")
    history = header["history"]
    expect("history", isinstance(history, list) and bool(history) and all(
        isinstance(h, dict) and isinstance(h.get("provenance", {}), dict) for h in history), "a list of revisions")
    expect("token", isinstance(header.get("token", ""), str), "a string")
    expect("not_applicable", _is_dict_of(header.get("not_applicable", {}), lambda v: _is_dict_of(
        v, lambda n: _is_int(n) and n >= 0)), "counts by RM and domain")
    expect("applies", _is_dict_of(header.get("applies", {}), _is_rule),
           "rules by RM ({domains: null or a list of names, fields: a list of names})")
    step_rms = header.get("step_rms", [])
    expect("step_rms", isinstance(step_rms, list) and all(isinstance(n, str) and n in names for n in step_rms)
           and len(set(step_rms)) == len(step_rms), "a list of distinct names from rm_names")
    domains = header.get("question_domains")
    expect("question_domains", isinstance(domains, list) and all(isinstance(d, str) for d in domains),
           "a list of domain names")
    expect("learned_subsets", isinstance(header.get("learned_subsets", []), list) and all(
        isinstance(f, dict) for f in header.get("learned_subsets", [])), "a list of fits")
    return header


def _dense(header: Mapping[str, Any]) -> bool:
    """Whether the pool stores dense PRR and best-of-n tables (prr in its shapes)."""
    shapes = header.get("shapes")
    return isinstance(shapes, dict) and "prr" in shapes


def _arrays_of(header: Mapping[str, Any]) -> tuple[str, ...]:
    """The arrays a pool of this header stores (the question columns included)."""
    dense = _dense(header)
    shapes = header.get("shapes")
    present = lambda n: n not in OPTIONAL_ARRAYS or isinstance(shapes, dict) and n in shapes  # noqa: E731
    return tuple(n for n in ARRAYS if (dense or n not in DENSE_ARRAYS) and present(n)) + TABLE_ARRAYS


def _questions(root: Path, header: Mapping[str, Any], arrays: dict[str, np.ndarray]) -> QuestionTable:
    """The question table (checked: table.check)."""
    text, offsets, codes = (arrays.pop(name) for name in TABLE_ARRAYS)
    _check(text.ndim == offsets.ndim == codes.ndim == 1 and text.dtype == np.uint8 and offsets.dtype.kind == "i",
           root / "question_text.npy", "question columns of unexpected dtype or shape")
    table = QuestionTable(text, offsets, codes, header["question_domains"], RowCounts(arrays["valid"]),
                          source=root / "question_text.npy")
    table.check(root)
    return table


def _array(root: Path, name: str, expected: tuple[int, ...]) -> np.ndarray:
    """The array, memory-mapped read-only, its header checked against pool.json; values checked up to
    VALUE_CHECK_BYTES."""
    file = root / f"{name}.npy"
    _check(file.is_file(), file, "missing pool array")
    try:
        mapped = np.load(file, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # numpy parses a damaged header with ast/tokenize: ValueError, SyntaxError, TokenError ...
        raise InputError(f"unreadable array: {_first_line(exc)}", path=str(file)) from exc
    _check(isinstance(mapped, np.ndarray), file, "not a single array")
    _check(mapped.shape == expected, file, f"shape {mapped.shape}, pool.json says {expected}")
    kinds = "f" if name in _FLOAT_ARRAYS else "bui"
    _check(mapped.dtype.kind in kinds and mapped.dtype.fields is None, file, f"unexpected dtype {mapped.dtype}")
    if name == "embeddings":
        array = mapped.astype(np.float32, copy=False)
    elif name in ("correct", "valid"):
        array = mapped.astype(bool, copy=False)
    else:
        array = mapped
    if array.nbytes > VALUE_CHECK_BYTES:
        return array
    if name == "embeddings":
        _check(bool(np.isfinite(array).all()), file, "non-finite embedding values")
    elif name == "scores":
        _check(not np.isinf(array).any(), file, "infinite scores")
    elif name in DENSE_ARRAYS:
        _check(bool(((array >= 0) & (array <= 1) | np.isnan(array)).all()), file, "values outside [0, 1]")
    return array


IDS_CHECKED_UP_TO = 200_000
"""An IVF index of up to this many vectors has every list's ids checked when opened; a larger one's lists stay
unread until searched (index.search checks the ids it returns)."""


def _index(file: Path, n_q: int, dim: int) -> Any:
    import faiss

    _check(file.is_file(), file, "missing FAISS index")
    try:
        index = read_index(file)
    except (RuntimeError, MemoryError, ValueError, OverflowError) as exc:  # faiss reports a corrupt file as RuntimeError
        raise InputError(f"unreadable FAISS index: {_first_line(exc)}", path=str(file)) from exc
    _check(isinstance(index, (faiss.IndexFlat, faiss.IndexHNSWFlat, faiss.IndexIVFFlat, faiss.IndexIVFScalarQuantizer)),
           file,
           f"unexpected index type {type(index).__name__}")
    _check(index.metric_type == faiss.METRIC_INNER_PRODUCT, file, "not an inner-product index")
    _check(index.ntotal == n_q and index.d == dim, file,
           f"index holds {index.ntotal} vectors of dim {index.d}; the pool has {n_q} questions of dim {dim}")
    if isinstance(index, faiss.IndexHNSWFlat):
        _check_hnsw(index, file)
    if isinstance(index, (faiss.IndexIVFFlat, faiss.IndexIVFScalarQuantizer)):
        _check_ivf(index, file)
    return index


def _check_ivf(index: Any, file: Path) -> None:
    """Lists, codes and ids inside an IVF index (a search trusts them)."""
    import faiss

    quantizer, lists = index.quantizer, index.invlists
    if isinstance(index, faiss.IndexIVFScalarQuantizer):  # 8-bit codes: a (min, range) pair per dimension
        code_size = index.d if index.sq.qtype == faiss.ScalarQuantizer.QT_8bit else -1
        code_size = code_size if index.sq.d == index.d and index.sq.trained.size() == 2 * index.d else -1
    else:
        code_size = 4 * index.d
    ok = (quantizer is not None and quantizer.d == index.d and quantizer.ntotal == index.nlist
          and index.is_trained and lists is not None and lists.nlist == index.nlist
          and lists.code_size == index.code_size == code_size)
    _check(ok, file, "corrupt IVF index (quantizer or lists)")
    total = 0
    for number in range(index.nlist):
        size = lists.list_size(number)
        if size and index.ntotal <= IDS_CHECKED_UP_TO:
            ids = faiss.rev_swig_ptr(lists.get_ids(number), size)
            _check(bool(((ids >= 0) & (ids < index.ntotal)).all()), file, "corrupt IVF index (ids out of range)")
        total += size
    _check(total == index.ntotal, file, f"corrupt IVF index: its lists hold {total} vectors, not {index.ntotal}")


def _check_hnsw(index: Any, file: Path) -> None:
    """Graph links inside the index (a search follows them without bounds checks)."""
    import faiss

    hnsw = index.hnsw
    neighbours = faiss.vector_to_array(hnsw.neighbors)
    offsets = faiss.vector_to_array(hnsw.offsets)
    levels = faiss.vector_to_array(hnsw.levels)
    n = index.ntotal
    ok = (len(levels) == n and len(offsets) == n + 1 and (n == 0 or offsets[0] == 0)
          and bool((np.diff(offsets) >= 0).all()) and (n == 0 or offsets[-1] <= len(neighbours))
          and bool(((neighbours >= -1) & (neighbours < n)).all()) and bool((levels >= 1).all())
          and -1 <= hnsw.entry_point < max(n, 1) and (n == 0 or hnsw.max_level <= int(levels.max()))
          and getattr(index, "storage", None) is not None and index.storage.ntotal == n)
    _check(ok, file, "corrupt HNSW graph")


def _fingerprint(path: Path) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def read_pool_files(path: str | os.PathLike) -> PoolFiles:
    """Read and check a pool directory; a missing or corrupt file, another format version, a wrong type, dtype
    or shape is an InputError naming the file. A pool replaced while being read is read again."""
    root = Path(path)
    header_path = root / "pool.json"
    if staging.moved_aside(root):  # a save was interrupted, or is between its two renames: wait for it, or restore
        with pool_lock(root):
            staging.recover(root)
    for _ in range(5):
        before = _fingerprint(header_path)
        try:
            files = _read(root)
        except InputError:
            if _fingerprint(header_path) != before:
                continue
            raise
        if _fingerprint(header_path) == before:
            return files
    raise InputError("kept changing while it was read (another process is saving it); try again", path=str(root))


def _read(root: Path) -> PoolFiles:
    header_path = root / "pool.json"
    _check(root.is_dir(), root, "no such pool directory")
    _check(header_path.is_file(), root, "not a pool directory (no pool.json); build one with `morkit pool build`")
    header = _header(header_path)
    arrays = {name: _array(root, name, tuple(header["shapes"][name])) for name in _arrays_of(header)}
    questions = _questions(root, header, arrays)
    n_q, n_rm, n_ens = len(questions), len(header["rm_names"]), len(header["ensembles"])
    dim = header["embedder"]["dim"]
    expect = {"scores": (n_q, None, n_rm), "correct": (n_q, None), "valid": (n_q, None), "prr": (n_q, n_ens),
              "top1": (n_q, n_ens), "embeddings": (n_q, dim),
              "steps": (n_q, None, len(header.get("step_rms", [])), len(STEP_REDUCTIONS))}
    for name, shape in expect.items():
        if name not in arrays:
            continue
        actual = arrays[name].shape
        ok = len(actual) == len(shape) and all(s is None or s == a for s, a in zip(shape, actual))
        _check(ok, root / f"{name}.npy", f"shape {actual} does not fit {n_q} questions, {n_rm} RMs, "
                                         f"{n_ens} ensembles, dim {dim}")
    width = arrays["scores"].shape[1]
    for name in ("correct", "valid", "steps")[: 3 if "steps" in arrays else 2]:
        _check(arrays[name].shape[1] == width, root / f"{name}.npy",
               f"{arrays[name].shape[1]} candidate columns; scores.npy has {width}")
    index = _index(root / "index.faiss", n_q, dim)
    return PoolFiles(header, questions, arrays, index)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
