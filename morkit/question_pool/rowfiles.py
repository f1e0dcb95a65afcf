"""A pool build's member and step scores in unlinked temporary .npy files, memory-mapped read-only and read by
chunks or batches whose pages are released, so a million-question build holds one chunk of them (docs/pools.md).
"""

from __future__ import annotations

import mmap
from typing import Any, Iterator

import numpy as np

from morkit.question_pool import spill

ON_DISK_BYTES = spill.SPILL_BYTES
"""Row arrays larger than this (the member scores of 150,000 questions of 10 candidates and 22 RMs) are written
to disk as they are filled; the temporary files live in the temp folder (TMPDIR), unlinked, so a killed build
leaves none behind."""
GROUP_BYTES = 256 << 20
"""Bytes of whole-pool columns (e.g. a few RMs' scores over every question) gathered from a mapped array at once."""
READ_BATCH = 1024
"""Rows a read of scattered rows of a MappedRows array copies between two releases of its pages: the kernel maps
up to 64 KiB around each row read (fault-around), so at most 64 MiB stay mapped, where a 2% sample of a million
rows read at once would map about half the file."""


class MappedRows(np.memmap):
    """A read-only memory-mapped row array whose reads of scattered rows (an integer array of rows, then slices)
    are copied READ_BATCH rows at a time, the mapping's pages dropped after each batch (spill.release); any other
    read that copies drops them after it. Slices stay views: whole-array passes read `plain` views by chunks."""

    def __getitem__(self, index: Any) -> Any:
        rows, rest = (index[0], index[1:]) if isinstance(index, tuple) and index else (index, ())
        batched = isinstance(rows, (list, np.ndarray)) and all(isinstance(x, slice) or x is Ellipsis for x in rest)
        if batched:
            rows = np.asarray(rows)
            batched = rows.ndim == 1 and rows.dtype.kind in "iu" and len(rows) > 0
        if not batched:
            out = super().__getitem__(index)
            if not np.may_share_memory(out, self):  # a copy: what it read may go
                self._release()
            return out
        view = np.asarray(self)
        parts = []
        for start in range(0, len(rows), READ_BATCH):
            parts.append(view[(rows[start : start + READ_BATCH], *rest)])
            self._release()
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _release(self) -> None:
        mapping = getattr(self, "_mmap", None)
        if isinstance(mapping, mmap.mmap):
            mapping.madvise(mmap.MADV_DONTNEED)  # the whole mapping: its pages stay in the page cache


class RowArray:
    """A (rows, ...) array filled in order by row ranges (`part`), in memory or, beyond ON_DISK_BYTES, on disk.

    Args:
        shape: The whole array's shape; its first axis is the rows.
        dtype: Its dtype.
        fill: The value every new part starts with.
        on_disk: Force the place (None: by size).
    """

    def __init__(self, shape: tuple[int, ...], dtype: Any = np.float64, fill: Any = 0,
                 on_disk: bool | None = None) -> None:
        self.shape, self.dtype, self.fill = tuple(shape), np.dtype(dtype), fill
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.on_disk = bool(nbytes) and (nbytes > ON_DISK_BYTES if on_disk is None else on_disk)
        self._file: spill.TemporaryRows | None = None
        self._memory: np.ndarray | None = None
        self._pending: tuple[int, np.ndarray] | None = None
        self._written = 0
        if self.on_disk:
            self._file = spill.TemporaryRows(self.shape, self.dtype)
        else:
            self._memory = np.full(self.shape, fill, dtype=self.dtype)

    def part(self, start: int, stop: int) -> np.ndarray:
        """The rows [start, stop) to fill in place, starting at `fill`; parts come in order, each after the last.

        Args:
            start: The first row (where the previous part stopped).
            stop: One past the last row.

        Returns:
            A writable array of shape (stop - start, ...): a view of the array in memory, else a buffer written
            out when the next part is asked for or the array is finished.
        """
        if start != self._written or not start <= stop <= self.shape[0]:
            raise ValueError(f"rows {start}-{stop}: parts must follow each other from row 0 to {self.shape[0]}")
        self._written = stop
        if self._memory is not None:
            return self._memory[start:stop]
        self._flush()
        buffer = np.full((stop - start, *self.shape[1:]), self.fill, dtype=self.dtype)
        self._pending = (start, buffer)
        return buffer

    def _flush(self) -> None:
        if self._pending is not None:
            self._file.write(*self._pending)
            self._pending = None

    def finish(self) -> np.ndarray:
        """The filled array: in memory, or memory-mapped read-only from its file (rows never asked for keep `fill`).

        Returns:
            The array (read-only MappedRows when on disk; the file goes when the last view of it does).
        """
        if self._memory is not None:
            return self._memory
        if self._written < self.shape[0]:
            self.part(self._written, self.shape[0])
        self._flush()
        return self._file.mapped(MappedRows)  # the mapping keeps the unlinked file's pages


def moved_to_disk(array: np.ndarray | None, chunk: int | None = None) -> np.ndarray | None:
    """`array` copied by chunks of rows into an unlinked temporary file and memory-mapped read-only when larger than
    ON_DISK_BYTES (the same values); a smaller one (or None) as it is.

    Args:
        array: Row arrays of a build (member or step scores), or None.
        chunk: Rows copied at a time (None: spill.CHUNK).

    Returns:
        The array, in memory or mapped; the in-memory original is freed once its caller lets go of it.
    """
    if array is None or is_mapped(array):
        return array
    out = RowArray(array.shape, array.dtype)
    if not out.on_disk:
        return array
    chunk = chunk or spill.CHUNK
    for start in range(0, len(array), chunk):
        source = array[start : start + chunk]
        out.part(start, start + len(source))[...] = source
    return out.finish()


def sampled_by_batch(array: Any) -> Any:
    """A memory-mapped array as MappedRows (reads of scattered rows by batches, their pages released), a view of
    the same mapping; anything else as it is.

    Args:
        array: E.g. the question vectors a build spilled to disk (spill.embed).

    Returns:
        The array.
    """
    if isinstance(array, np.memmap) and not isinstance(array, MappedRows) and getattr(array, "mode", None) == "r":
        return array.view(MappedRows)
    return array


def is_mapped(array: Any) -> bool:
    """Whether `array` is (a view of) a memory-mapped file, whose pages a whole-pool pass reads by chunk."""
    return spill.memmap_base(array) is not None


def column_groups(array: np.ndarray, chunk: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """Groups of the last axis of a (rows, ..., columns) array, each gathered whole into memory by chunks of rows
    (mapped pages released as read): a few columns over every row, never all of them at once.

    Args:
        array: The array, memory-mapped or not.
        chunk: Rows read at a time (None: spill.CHUNK).

    Yields:
        (first column, the group's columns as an array (rows, ..., group size)), at most GROUP_BYTES each.
    """
    columns, chunk, array = array.shape[-1], chunk or spill.CHUNK, spill.plain(array)
    per_column = max(1, array.nbytes // max(1, columns))
    size = max(1, min(columns, GROUP_BYTES // per_column))
    for first in range(0, columns, size):
        group = np.empty((*array.shape[:-1], min(size, columns - first)), dtype=array.dtype)
        for start in range(0, len(array), chunk):
            source = array[start : start + chunk]
            group[start : start + len(source)] = source[..., first : first + group.shape[-1]]
            spill.release(source)
        yield first, group
