"""The pool's question table in columns (UTF-8 ids and texts with offsets, domain codes), read per row on demand.

Opening a million-question pool then parses nothing: a PoolQuestion is made when its row is indexed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence, overload

import numpy as np

from morkit.core.errors import InputError
from morkit.question_pool import spill
from morkit.question_pool.rows import PoolQuestion

TABLE_ARRAYS = ("question_text", "question_offsets", "question_domains")
"""The table's files (NAME.npy): ids and texts as one UTF-8 byte string, their 2Q+1 offsets (row r's id is
bytes [o[2r], o[2r+1]), its text [o[2r+1], o[2r+2])), and each row's domain as a code into pool.json's
`question_domains`. A row's number of candidates is its count of valid.npy."""
CHECK_ALL_UP_TO = 100_000
"""Tables up to this many questions are decoded whole and their ids checked distinct when opened (0.3 s at this
size); larger ones are decoded row by row where read (a million ids take 3 s)."""


class QuestionTable(Sequence[PoolQuestion]):
    """The pool's questions as columns; `table[r]` makes row r's PoolQuestion, `table[a:b]` a tuple of them.

    Equal to any sequence of the same questions (a tuple included)."""

    def __init__(self, text: np.ndarray, offsets: np.ndarray, codes: np.ndarray, domains: Sequence[str],
                 counts: Any, source: Path | None = None) -> None:
        self._text, self._offsets, self._codes = text, offsets, codes
        self.domain_names = tuple(domains)
        self._counts = counts  # anything indexable by row: an array, or valid.npy's rows summed on demand
        self._source = source  # the question_text.npy read from, for errors
        self._ids: list[str] | None = None

    @classmethod
    def of(cls, questions: Sequence[PoolQuestion]) -> "QuestionTable":
        """The table of these questions, in memory (a table is returned as it is)."""
        if isinstance(questions, QuestionTable):
            return questions
        return cls.from_columns(len(questions), (q.id for q in questions), (q.question for q in questions),
                                (q.domain for q in questions), [q.n_candidates for q in questions])

    @classmethod
    def from_columns(cls, size: int, ids: Iterable[str], texts: Iterable[str], domains: Iterable[str],
                     counts: Any) -> "QuestionTable":
        """An in-memory table of `size` rows from its columns, without a PoolQuestion per row."""
        parts, lengths, names, codes = [], np.empty(2 * size, dtype=np.int64), {}, np.empty(size, dtype=np.int32)
        for row, (qid, text, domain) in enumerate(zip(ids, texts, domains)):
            for j, value in enumerate((qid.encode("utf-8"), text.encode("utf-8"))):
                parts.append(value)
                lengths[2 * row + j] = len(value)
            codes[row] = names.setdefault(domain, len(names))
        offsets = np.zeros(2 * size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        text = np.frombuffer(b"".join(parts), dtype=np.uint8)
        return cls(text, offsets, codes, list(names), np.asarray(counts, dtype=np.int64))

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays a pool writes (TABLE_ARRAYS), by name."""
        return dict(zip(TABLE_ARRAYS, (self._text, self._offsets, self._codes)))

    def __len__(self) -> int:
        return len(self._codes)

    def _string(self, start: int, stop: int) -> str:
        try:
            return bytes(self._text[start:stop]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 at bytes {start}-{stop}: {exc.reason}", path=str(self._source)) from exc

    def _id(self, row: int) -> str:
        o = self._offsets
        return self._string(int(o[2 * row]), int(o[2 * row + 1]))

    def _row(self, row: int) -> PoolQuestion:
        o = self._offsets
        return PoolQuestion(self._id(row), self._string(int(o[2 * row + 1]), int(o[2 * row + 2])),
                            self.domain_names[int(self._codes[row])], int(self._counts[row]))

    def _checked(self, row: Any) -> int:
        row = int(row)  # numpy integers from a search
        if not -len(self) <= row < len(self):
            raise IndexError(f"question row {row} out of range for a pool of {len(self)}")
        return row % len(self)

    @overload
    def __getitem__(self, row: int) -> PoolQuestion: ...
    @overload
    def __getitem__(self, row: slice) -> tuple[PoolQuestion, ...]: ...

    def __getitem__(self, row):
        if isinstance(row, slice):
            return tuple(self._row(r) for r in range(*row.indices(len(self))))
        return self._row(self._checked(row))

    def __iter__(self) -> Iterator[PoolQuestion]:
        return (self._row(r) for r in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        if isinstance(other, (str, bytes)) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Sequence[PoolQuestion]) -> "QuestionTable":
        """A new in-memory table: these rows, then `other`'s (`pool add`)."""
        extra = QuestionTable.of(other)
        names = {name: code for code, name in enumerate(self.domain_names)}
        remap = np.array([names.setdefault(n, len(names)) for n in extra.domain_names], dtype=np.int32)
        text = np.concatenate([np.asarray(self._text), np.asarray(extra._text)])
        offsets = np.concatenate([np.asarray(self._offsets), np.asarray(extra._offsets[1:]) + len(self._text)])
        codes = np.concatenate([np.asarray(self._codes, dtype=np.int32), remap[np.asarray(extra._codes)]])
        counts = np.concatenate([self.counts(), extra.counts()])
        return QuestionTable(text, offsets, codes, list(names), counts)

    def __repr__(self) -> str:
        return f"QuestionTable({len(self)} questions)"

    def release(self) -> None:
        """Drop the columns' memory-mapped pages from the process (spill.release; a no-op in memory)."""
        for column in (self._text, self._offsets, self._codes):
            spill.release(column)

    def counts(self) -> np.ndarray:
        """Every row's number of candidates."""
        return np.asarray(self._counts[:], dtype=np.int64)

    def id_of(self, row: int) -> str:
        """Row `row`'s id alone (its text is not decoded, its candidates not counted)."""
        row = self._checked(row)
        return self._ids[row] if self._ids is not None else self._id(row)

    def ids(self) -> list[str]:
        """Every row's id (decoded once, then kept)."""
        if self._ids is None:
            self._ids = [self._id(r) for r in range(len(self))]
        return self._ids

    def domain_counts(self) -> Counter:
        """Questions per domain, from the codes alone."""
        counts = np.bincount(np.asarray(self._codes), minlength=len(self.domain_names))
        return Counter({name: int(n) for name, n in zip(self.domain_names, counts) if n})

    def check(self, path: Path) -> None:
        """Offsets and codes in range (always); at most CHECK_ALL_UP_TO rows: every string decoded and ids distinct.
        `path`: the pool directory, for errors."""
        o, n = self._offsets, len(self._codes)
        file = lambda name: str(path / f"{name}.npy")  # noqa: E731
        if len(o) != 2 * n + 1 or (len(o) and (o[0] != 0 or o[-1] != len(self._text))) or bool((np.diff(o) < 0).any()):
            raise InputError(f"offsets do not cut question_text.npy ({len(self._text)} bytes) into {n} ids and "
                             "texts", path=file("question_offsets"))
        if n and (int(np.min(self._codes)) < 0 or int(np.max(self._codes)) >= len(self.domain_names)):
            raise InputError(f"domain codes outside the {len(self.domain_names)} names of pool.json's "
                             "question_domains", path=file("question_domains"))
        if n <= CHECK_ALL_UP_TO:
            for q in self:  # decodes every id and text
                pass
            ids = self.ids()
            if len(set(ids)) != len(ids):
                raise InputError("a question id appears twice", path=file("question_text"))


class RowCounts:
    """valid.npy's rows summed on demand: a lazily opened table's numbers of candidates."""

    def __init__(self, valid: np.ndarray) -> None:
        self.valid = valid

    def __getitem__(self, row: Any) -> Any:
        return np.asarray(self.valid[row]).sum(axis=-1)
