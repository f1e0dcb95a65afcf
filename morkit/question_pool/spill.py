"""Large arrays kept on disk while a pool is built and saved: vectors spilled to a temporary .npy as they are made,
and memory-mapped arrays read or written in chunks whose pages are released, so RSS stays near one chunk.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from morkit.core.errors import MorkitError
from morkit.question_pool import validity

SPILL_BYTES = 256 << 20
"""Vectors beyond this size (170,000 questions at 384 dims) are written to disk as they are embedded."""
CHUNK = 1 << 14
"""Rows per chunk (a multiple of the embedder's batch of 64, so chunked embedding gives the same vectors)."""


def memmap_base(array: Any) -> np.memmap | None:
    """The np.memmap `array` is, or is a view of; None for an array in memory."""
    base = array
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base
    return base if isinstance(base, np.memmap) else None


def plain(array: Any) -> Any:
    """A memory-mapped array as a plain ndarray view of its mapping (anything else as it is): a whole-array pass
    reads it by chunks and releases each, without a MappedRows' release of the whole mapping per read."""
    return np.asarray(array) if isinstance(array, np.memmap) else array


def _mapped(array: np.ndarray) -> tuple[mmap.mmap, int] | None:
    """(the read-only mapping behind `array`, the mapping offset of its first byte), or None. The offset is taken
    from the mapping's own address, so a slice of an np.memmap (itself an np.memmap) is placed where it lies."""
    base = memmap_base(array)
    if base is None or getattr(base, "mode", None) != "r" or not isinstance(getattr(base, "_mmap", None), mmap.mmap):
        return None
    start = array.ctypes.data - np.frombuffer(base._mmap, np.uint8).ctypes.data
    return base._mmap, start


def release(array: np.ndarray) -> None:
    """Drop a read-only memory-mapped array's pages from this process (they stay in the page cache)."""
    found = _mapped(array)
    if found is None or not array.nbytes:
        return
    mapping, start = found
    first = start - start % mmap.PAGESIZE
    mapping.madvise(mmap.MADV_DONTNEED, first, min(len(mapping), start + array.nbytes) - first)


def chunks(array: np.ndarray, size: int = CHUNK) -> Iterator[tuple[int, np.ndarray]]:
    """(start row, rows as float32 in memory) of `array` by `size` rows, each chunk's mapped pages released."""
    array = plain(array)
    for start in range(0, len(array), size):
        part = array[start : start + size]
        yield start, np.ascontiguousarray(part, dtype=np.float32)
        release(part)


class TemporaryRows:
    """A (rows, ...) array in an unlinked temporary .npy (a kill leaves none), written by row ranges at any place and
    memory-mapped back read-only: the one on-disk form of a build's spilled vectors and row arrays."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, prefix: str = "morkit-rows-") -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize
        self.file = tempfile.TemporaryFile(prefix=prefix, suffix=".npy")  # noqa: SIM115 - open until `mapped`
        np.lib.format.write_array_header_1_0(self.file, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                         "fortran_order": False, "shape": self.shape})
        self.file.flush()
        self.header = self.file.tell()

    def write(self, start: int, rows: np.ndarray) -> None:
        """Write `rows` as the array's rows from `start` on."""
        data = np.ascontiguousarray(rows, dtype=self.dtype).tobytes()
        os.pwrite(self.file.fileno(), data, self.header + start * self.row_bytes)

    def mapped(self, kind: type = np.memmap) -> np.ndarray:
        """The array memory-mapped read-only as `kind` (an np.memmap class); the file closes, its pages stay."""
        with self.file:
            return kind(self.file, dtype=self.dtype, mode="r", offset=self.header, shape=self.shape)

    def close(self) -> None:
        """Drop what was written (a failed build)."""
        self.file.close()


def encode_to_disk(encode: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str],
                   check: Callable[[np.ndarray, int], None]) -> np.ndarray:
    """`encode(texts)` by CHUNK texts into an unlinked temporary .npy, memory-mapped back read-only; `check(vectors,
    start)` sees each chunk. Returns the vectors (float32)."""
    if not len(texts):
        return np.ascontiguousarray(encode(texts), dtype=np.float32)
    spill: TemporaryRows | None = None
    try:
        for start in range(0, len(texts), CHUNK):
            vectors = np.ascontiguousarray(encode(texts[start : start + CHUNK]), dtype=np.float32)
            check(vectors, start)
            if spill is None:
                spill = TemporaryRows((len(texts), vectors.shape[1]), "<f4", prefix="morkit-vectors-")
            spill.write(start, vectors)
    except BaseException:
        if spill is not None:
            spill.close()
        raise
    return spill.mapped()  # outlives the file


def save_array(path: os.PathLike | str, array: Any) -> None:
    """np.save, streaming a memory-mapped array in chunks whose pages are released (no RSS for a 1.5 GB array)."""
    array = plain(array) if isinstance(array, np.ndarray) else np.asarray(array)
    if _mapped(array) is None or not array.flags.c_contiguous:
        np.save(path, array, allow_pickle=False)
        return
    with open(path, "wb") as out:
        np.lib.format.write_array_header_1_0(out, np.lib.format.header_data_from_array_1_0(array))
        rows = max(1, (64 << 20) // max(1, array[:1].nbytes))
        for start in range(0, len(array), rows):
            part = array[start : start + rows]
            out.write(part.tobytes())
            release(part)


def embed(embedder: Any, questions: Sequence[Any], *, progress: bool = False) -> np.ndarray:
    """The questions' vectors, checked: one row per question, finite, of the embedder's dimension; beyond SPILL_BYTES
    written to disk as they are made. An embedder with `encode_chunks` is read as one stream (on Ray: one actor pool),
    each chunk written at its rows as it arrives; any other `encode`s (by CHUNK once spilled). Nothing else reaches a
    pool file."""
    if len(questions) and getattr(embedder, "encode_chunks", None) is not None:
        return _streamed(embedder, questions, progress)
    dim = _declared_dim(embedder)
    spilled = dim is not None and len(questions) * dim * 4 > SPILL_BYTES

    def check(vectors: np.ndarray, start: int) -> None:
        expected = min(CHUNK, len(questions) - start) if spilled else len(questions)
        if vectors.ndim != 2 or len(vectors) != expected or dim is not None and vectors.shape[1] != dim:
            raise MorkitError(f"embedder {embedder.name!r} gave vectors of shape {vectors.shape} for {expected} "
                              "questions" + (f" of dimension {dim}" if dim is not None else ""))
        validity.check_embeddings(vectors, questions[start : start + len(vectors)], embedder.name)

    if spilled:
        return encode_to_disk(lambda part: embedder.encode(part, progress=progress), _Texts(questions), check)
    vectors = np.asarray(embedder.encode([q.question for q in questions], progress=progress))
    check(vectors, 0)
    return vectors


def _declared_dim(embedder: Any) -> int | None:
    dim = getattr(embedder, "dim", None)
    return dim if isinstance(dim, int) and not isinstance(dim, bool) else None


def _streamed(embedder: Any, questions: Sequence[Any], progress: bool) -> np.ndarray:
    """`embedder.encode_chunks` over every question's text, each (positions, vectors) chunk checked and written
    at its rows: in memory, or, where the vectors pass SPILL_BYTES (known from the first chunk's width), into an
    unlinked temporary .npy memory-mapped back read-only."""
    from tqdm import tqdm

    count = len(questions)
    rows = _Rows(count)
    try:
        with tqdm(total=count, desc="embed", unit="question", disable=not progress, leave=False) as bar:
            for positions, vectors in embedder.encode_chunks(_Texts(questions)[0:count]):
                positions = np.asarray(positions, dtype=np.int64)
                dim = _declared_dim(embedder) or rows.dim
                if vectors.ndim != 2 or len(vectors) != len(positions) or dim and vectors.shape[1] != dim:
                    raise MorkitError(f"embedder {embedder.name!r} gave vectors of shape {vectors.shape} for "
                                      f"{len(positions)} questions" + (f" of dimension {dim}" if dim else ""))
                validity.check_embeddings(vectors, _At(questions, positions), embedder.name)
                rows.write(positions, np.ascontiguousarray(vectors, dtype=np.float32))
                bar.update(len(positions))
    except BaseException:
        rows.close()
        raise
    if rows.filled != count:
        rows.close()
        raise MorkitError(f"embedder {embedder.name!r} gave {rows.filled} of {count} vectors")
    return rows.vectors()


class _Rows:
    """The vectors as they come, each chunk at its rows: an array in memory, or past SPILL_BYTES an unlinked
    temporary file (a kill leaves none) written in place, never held in this process."""

    def __init__(self, count: int):
        self.count, self.filled, self.dim = count, 0, None
        self.seen = np.zeros(count, dtype=bool)
        self.memory: np.ndarray | None = None
        self.file: TemporaryRows | None = None

    def write(self, positions: np.ndarray, vectors: np.ndarray) -> None:
        if self.dim is None:
            self._open(vectors.shape[1])
        if len(positions) and (positions.min() < 0 or positions.max() >= self.count or self.seen[positions].any()
                               or len(np.unique(positions)) != len(positions)):
            raise MorkitError("the embedder gave a question's vector twice or for no question")
        self.seen[positions] = True
        self.filled += len(positions)
        if self.memory is not None:
            self.memory[positions] = vectors
            return
        order = np.argsort(positions, kind="stable")
        positions, vectors = positions[order], vectors[order]
        breaks = np.flatnonzero(np.diff(positions) != 1) + 1  # runs of consecutive rows: one write each
        for lo, hi in zip(np.r_[0, breaks], np.r_[breaks, len(positions)]):
            self.file.write(int(positions[lo]), vectors[lo:hi])

    def _open(self, dim: int) -> None:
        self.dim = dim
        if self.count * dim * 4 <= SPILL_BYTES:
            self.memory = np.empty((self.count, dim), dtype=np.float32)
            return
        self.file = TemporaryRows((self.count, dim), "<f4", prefix="morkit-vectors-")  # until `vectors` or `close`

    def close(self) -> None:
        """Drop what was written (a failed build)."""
        if self.file is not None:
            self.file.close()
        self.memory = None

    def vectors(self) -> np.ndarray:
        """The vectors: the array, or the file memory-mapped read-only (it outlives the closed file)."""
        if self.file is None:
            assert self.memory is not None  # every row was written
            return self.memory
        return self.file.mapped()


class _At:
    """The questions at `positions`, looked up only when asked (a non-finite vector names its question)."""

    def __init__(self, questions: Sequence[Any], positions: np.ndarray):
        self.questions, self.positions = questions, positions

    def __getitem__(self, i: int) -> Any:
        return self.questions[int(self.positions[i])]


class _Texts:
    """The questions' texts, sliced without a list of a million strings."""

    def __init__(self, questions: Sequence[Any]) -> None:
        self.questions = questions

    def __len__(self) -> int:
        return len(self.questions)

    def __getitem__(self, part: slice) -> list[str]:
        return [q.question for q in self.questions[part]]
