"""Local evidence: each RM's similarity-weighted PRR and best-of-n hit on the pool questions nearest a query, read
by the learned selector's "local" features; within a fit, neighbours come from each fold's training part only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

STATS = ("prr", "hit")
"""The per-neighbour statistics, in the order of an evidence array's middle axis."""

_CHUNK = 1024  # query rows per brute-force similarity block


def single_stats(pool: object, rows: np.ndarray, members: Sequence[str]) -> np.ndarray:
    """(len(rows), 2, M): each member's PRR and best-of-n hit on each pool row (NaN where undefined)."""
    prr, hit = pool.statistics(np.asarray(rows, dtype=np.int64), singles_only=True)
    cols = [list(pool.rm_names).index(m) for m in members]
    return np.stack([np.asarray(prr, np.float64)[:, cols], np.asarray(hit, np.float64)[:, cols]], axis=1)


def weighted(stats: np.ndarray, sims: np.ndarray) -> np.ndarray:
    """Similarity-weighted means (..., 2, M) of neighbour statistics (..., K, 2, M) under weights (..., K);
    NaN where no neighbour defines a value. Negative similarities weigh nothing."""
    w = np.clip(np.asarray(sims, np.float64), 0.0, None)[..., None, None]
    defined = ~np.isnan(stats)
    total = np.where(defined, w, 0.0).sum(axis=-3)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, np.where(defined, stats * w, 0.0).sum(axis=-3) / total, np.nan)


@dataclass(frozen=True)
class NeighbourLists:
    """Each fit question's nearest other fit questions (row positions within the fit, most similar first)."""

    rows: np.ndarray  # (Q, K) int64, -1 = none
    sims: np.ndarray  # (Q, K) float32

    @classmethod
    def among(cls, vectors: np.ndarray, k: int, groups: np.ndarray | None = None) -> "NeighbourLists":
        """The `k` nearest of the other rows for every row (exact inner product over unit vectors); with
        `groups` (one id per row, e.g. its question text), never a row of the same group: a repeated question
        would otherwise be its own neighbour."""
        vectors = np.asarray(vectors, np.float32)
        groups = None if groups is None else np.asarray(groups)
        n = len(vectors)
        k = max(0, min(k, n - 1))
        rows = np.full((n, k), -1, np.int64)
        sims = np.zeros((n, k), np.float32)
        for start in range(0, n, _CHUNK):
            block = vectors[start:start + _CHUNK] @ vectors.T
            block[np.arange(len(block)), np.arange(start, start + len(block))] = -np.inf  # never itself
            if groups is not None:
                block[groups[start:start + len(block), None] == groups[None, :]] = -np.inf
            if k == 0:
                continue
            top = np.argpartition(-block, k - 1, axis=1)[:, :k]
            order = np.argsort(-np.take_along_axis(block, top, axis=1), axis=1, kind="stable")
            rows[start:start + len(block)] = np.take_along_axis(top, order, axis=1)
            sims[start:start + len(block)] = np.take_along_axis(block, rows[start:start + len(block)], axis=1)
        rows[~np.isfinite(sims)] = -1  # fewer rows than k outside the row's group
        return cls(rows, np.where(np.isfinite(sims), sims, 0.0).astype(np.float32))

    def first(self, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
        """(Q, K) mask of each row's first `k` neighbours among the `allowed` rows (None: all)."""
        ok = self.rows >= 0
        if allowed is not None:
            ok &= np.asarray(allowed, bool)[np.where(ok, self.rows, 0)]
        return ok & (np.cumsum(ok, axis=1) <= k)

    def evidence(self, stats: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
        """(Q, 2, M) local evidence of every row from its first `k` neighbours among the `allowed` rows (a
        fold's training part; None: all), their statistics being `stats` (Q, 2, M)."""
        keep = self.first(k, allowed)
        front = np.argsort(~keep, axis=1, kind="stable")[:, :k]  # each row's kept neighbours first, in order
        keep = np.take_along_axis(keep, front, axis=1)
        rows, sims = np.take_along_axis(self.rows, front, axis=1), np.take_along_axis(self.sims, front, axis=1)
        gathered = np.asarray(stats)[np.where(keep, rows, 0)]  # (Q, k, 2, M)
        gathered = np.where(keep[:, :, None, None], gathered, np.nan)
        return weighted(gathered, np.where(keep, sims, 0.0))


def query_evidence(pool: object, rows: np.ndarray, sims: np.ndarray, members: Sequence[str], k: int) -> np.ndarray:
    """(1, 2, M) local evidence of one query from its pool neighbours (rows, similarities, most similar first)."""
    rows, sims = np.asarray(rows)[:k], np.asarray(sims)[:k]
    if not len(rows):
        return np.full((1, len(STATS), len(members)), np.nan)
    return weighted(single_stats(pool, rows, members)[None], sims[None])
