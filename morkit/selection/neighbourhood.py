"""A query's pool neighbours, found in this one place, in either neighbourhood of the CTTS-MM paper's "top-k
questions": the k nearest pool questions ("all"), or the k nearest valid ones, with both a correct and a wrong
answer ("valid"; PRR is defined on them only). docs/selection.md, "Which k questions", has both."""

from __future__ import annotations

import weakref
from typing import Any, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.question_pool.index import id_filter, search
from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.prr import mixed_questions
from morkit.question_pool.rows import RowIds
from morkit.selection.base import Neighbours
from morkit.selection.coverage import CHUNK  # pool rows read at a time: a memory-mapped pool is never read whole
from morkit.selection.methods import DEFAULT_NEIGHBOURHOOD, NEIGHBOURHOODS

_VALID: "weakref.WeakKeyDictionary[QuestionPool, tuple[np.ndarray, Any]]" = weakref.WeakKeyDictionary()


def _valid(pool: QuestionPool) -> tuple[np.ndarray, Any]:
    """The pool's valid-question flags and the FAISS ID filter admitting them, made once per pool."""
    found = _VALID.get(pool)
    if found is None:
        n = len(pool)
        flags = np.zeros(n, dtype=bool)
        for start in range(0, n, CHUNK):
            stop = min(n, start + CHUNK)
            flags[start:stop] = mixed_questions(np.asarray(pool.correct[start:stop]),
                                                np.asarray(pool.valid[start:stop]))
        found = _VALID[pool] = (flags, id_filter(flags))  # the filter holds its bitmap (Q / 8 bytes)
    return found


def valid_questions(pool: QuestionPool) -> np.ndarray:
    """(Q,) bool: the pool questions with both a correct and a wrong candidate, read once per pool (in chunks).

    Args:
        pool: The question pool.

    Returns:
        One flag per pool row; True where PRR is defined by the labels.
    """
    return _valid(pool)[0]


class NeighbourSearch:
    """Finds queries' pool neighbours, most similar first: the `k` nearest pool questions, or in `neighbourhood`
    "valid" the `k` nearest valid ones, from one FAISS search filtered to them (on an approximate index, the valid
    ones its search reaches: possibly fewer). docs/selection.md, "Which k questions".

    Args:
        pool: The question pool.
        k: Neighbours per query (positive).
        neighbourhood: One of NEIGHBOURHOODS.

    Raises:
        InputError: `k` is not positive or `neighbourhood` is not one of NEIGHBOURHOODS.
    """

    def __init__(self, pool: QuestionPool, k: int, neighbourhood: str = DEFAULT_NEIGHBOURHOOD):
        self.pool = pool
        self.k = checks.positive_int(k, "k")
        self.neighbourhood = checks.one_of(neighbourhood, NEIGHBOURHOODS, "neighbourhood")

    def find(self, vectors: np.ndarray, exclude: Sequence[int] | None = None) -> list[Neighbours]:
        """The neighbours of each query embedding.

        Args:
            vectors: (n, d) query embeddings from the pool's embedder.
            exclude: One pool row per vector never to return (a pool question's own row); None: none.

        Returns:
            One Neighbours (pool rows, ids, cosine similarities) per vector, at most `k` each.

        Raises:
            InputError: `exclude` does not hold one row per vector.
        """
        vectors = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        if exclude is not None and len(exclude) != len(vectors):
            raise InputError(f"exclude holds {len(exclude)} pool rows for {len(vectors)} query vectors; give one "
                             "row per vector")
        allowed = _valid(self.pool)[1] if self.neighbourhood == "valid" else None
        sims, rows = search(self.pool.index, vectors, self.k + (exclude is not None), allowed)
        out = []
        for i, (s, r) in enumerate(zip(sims, rows)):
            keep = r >= 0
            if exclude is not None:
                keep &= r != exclude[i]
            chosen = np.flatnonzero(keep)[: self.k]
            ids = tuple(RowIds(self.pool.questions, rows=r[chosen]))  # ids alone: no neighbour's text decoded
            out.append(Neighbours(r[chosen], ids, s[chosen]))
        return out
