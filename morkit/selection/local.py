"""Local evidence: each RM's similarity-weighted PRR and best-of-n hit on the pool questions nearest a query, read
by the learned selector's "local" features; within a fit, from the pool questions its RMs cover (found in the pool's
index, as a query's are), never from the fold held out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from morkit.question_pool.index import id_filter, search

STATS = ("prr", "hit")
"""The per-neighbour statistics, in the order of an evidence array's middle axis."""

_CHUNK = 1024  # query rows per brute-force similarity block
STATS_CHUNK = 65_536
"""Pool rows whose statistics are computed at a time (an on-the-fly pool computes them from member scores)."""
SEARCH_CHUNK = 2048
"""Fit questions whose pool neighbours are searched at a time."""
SAME_TEXT_SIMILARITY = 0.99
"""Pool neighbours at least this similar have their text compared with the question's (one with the same text is
left out). A pool's vectors are its embedder's of its texts, so a repeated text lies at similarity 1 (within the
embedder's rounding); reading every neighbour's text instead would cost a million-question fit half a minute."""


def single_stats(pool: object, rows: np.ndarray, members: Sequence[str], dtype: type = np.float64) -> np.ndarray:
    """(len(rows), 2, M): each member's PRR and best-of-n hit on each pool row (NaN where undefined), computed
    STATS_CHUNK rows at a time; `dtype` float32 holds the pool's values exactly in half the memory."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = [list(pool.rm_names).index(m) for m in members]
    out = np.empty((len(rows), len(STATS), len(cols)), dtype=dtype)
    for start in range(0, len(rows), STATS_CHUNK):
        prr, hit = pool.statistics(rows[start:start + STATS_CHUNK], singles_only=True)
        out[start:start + STATS_CHUNK] = np.stack([np.asarray(prr, np.float64)[:, cols],
                                                   np.asarray(hit, np.float64)[:, cols]], axis=1)
    return out


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


@dataclass(frozen=True)
class Neighbourhood:
    """A fit's questions' neighbour lists with what they read: `lists` index the pool rows `reference`, whose
    statistics are `stats`; `place` gives each such row's position among the fit's questions, -1 for a pool
    question outside them (which no fold holds out)."""

    lists: NeighbourLists
    reference: np.ndarray  # (R,) pool rows
    stats: np.ndarray  # (R, 2, M)
    place: np.ndarray  # (R,) int64

    @classmethod
    def among(cls, rows: np.ndarray, vectors: np.ndarray, groups: np.ndarray, stats: np.ndarray,
              k: int) -> "Neighbourhood":
        """Neighbours among the fit's own questions (pool `rows`, with their `vectors`, `groups` and `stats`):
        NeighbourLists.among's `k` nearest."""
        return cls(NeighbourLists.among(vectors, k, groups), np.asarray(rows, np.int64), stats,
                   np.arange(len(rows), dtype=np.int64))

    @classmethod
    def in_pool(cls, pool: object, rows: np.ndarray, members: Sequence[str], k: int,
                within: np.ndarray | None = None, folds: np.ndarray | None = None) -> "Neighbourhood":
        """Neighbours of the fit's questions (pool `rows`) among the pool's questions, found in its index as a
        query's are (morkit.question_pool.index.search), never the question itself or one with its text (among
        those at SAME_TEXT_SIMILARITY or closer).

        Args:
            pool: The question pool.
            rows: The fit's questions, pool rows.
            members: The RMs whose statistics the lists read.
            k: Neighbours each question needs.
            within: (len(pool),) bool, the pool rows a neighbour may be (those the members cover); None: all.
            folds: (repeats, len(rows)) the fit's fold deals: each list then reaches far enough for `k`
                neighbours outside any one fold of the fit's questions (fewer only where the pool has no more).

        Returns:
            The Neighbourhood, its reference the pool rows the lists hold.
        """
        rows = np.asarray(rows, dtype=np.int64)
        vectors = np.asarray(pool.embeddings[rows], dtype=np.float32)
        text = lambda row: pool.questions[int(row)].question  # noqa: E731 - read only where a neighbour is close
        allowed = None if within is None else id_filter(within)
        place = _positions(rows)
        spare = 0 if folds is None else k // 4 + 1  # room for one fold's rows: most lists then need one search
        found: list[tuple[np.ndarray, np.ndarray]] = []
        for start in range(0, len(rows), SEARCH_CHUNK):
            part, done = np.arange(start, min(start + SEARCH_CHUNK, len(rows))), {}
            fetch = k + 2 + spare  # itself, and one more
            while len(part):
                sims, near = search(pool.index, vectors[part], fetch, allowed)
                short = []
                for i, s, r in zip(part, sims, near):
                    more = len(r) == fetch and r[-1] >= 0  # the search may hold further rows
                    keep = (r >= 0) & (r != rows[i])
                    close = np.flatnonzero(keep & (s >= SAME_TEXT_SIMILARITY))
                    if len(close):
                        keep[close] = [text(j) != text(rows[i]) for j in r[close]]
                    r, s = r[keep], s[keep]
                    at = None if folds is None else place(r)  # each one's fold in every deal, -1 outside
                    need = _reach(k, None if at is None else np.where(at >= 0, folds[:, np.maximum(at, 0)], -1),
                                  len(r))
                    if need is None and more:
                        short.append(i)
                    else:
                        done[int(i)] = (r[:need], s[:need])
                part, fetch = np.asarray(short, dtype=np.int64), 2 * fetch
            found += [done[i] for i in sorted(done)]
        width = max((len(r) for r, _ in found), default=0)
        near_rows, near_sims = np.full((len(rows), width), -1, np.int64), np.zeros((len(rows), width), np.float32)
        for i, (r, s) in enumerate(found):
            near_rows[i, :len(r)], near_sims[i, :len(r)] = r, s
        held = near_rows >= 0
        reference, positions = np.unique(near_rows[held], return_inverse=True)
        lists_rows = np.full(near_rows.shape, -1, np.int64)
        lists_rows[held] = positions
        return cls(NeighbourLists(lists_rows, near_sims), reference,
                   single_stats(pool, reference, members, np.float32), place(reference))

    def allowed(self, train: np.ndarray | None) -> np.ndarray | None:
        """(R,) the reference rows a split allows: all but the fit's questions outside `train` (None: all)."""
        if train is None:
            return None
        return np.where(self.place >= 0, np.asarray(train, dtype=bool)[np.maximum(self.place, 0)], True)

    def evidence(self, k: int, train: np.ndarray | None = None) -> np.ndarray:
        """(Q, 2, M) each fit question's local evidence from its first `k` neighbours outside the fit's questions
        that `train` holds out (None: all of them)."""
        return self.lists.evidence(self.stats, k, self.allowed(train))


def _positions(rows: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A function giving each of some pool rows' position in `rows`, -1 where absent."""
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]

    def positions(found: np.ndarray) -> np.ndarray:
        if not len(rows):
            return np.full(len(found), -1, np.int64)
        at = np.minimum(np.searchsorted(ordered, found), len(rows) - 1)
        return np.where(ordered[at] == found, order[at], -1).astype(np.int64)

    return positions


def _reach(k: int, folds: np.ndarray | None, found: int) -> int | None:
    """How many of a question's `found` neighbours (most similar first) hold `k` outside each fold of each deal
    (`folds`: (repeats, found) each one's fold, -1 outside the fit's questions; None: `k` of them); None when
    they do not."""
    if found < k:
        return None
    need = k
    for deal in () if folds is None else folds:
        for fold in np.unique(deal[deal >= 0]):
            outside = np.cumsum(deal != fold)
            if outside[-1] < k:
                return None
            need = max(need, int(np.searchsorted(outside, k)) + 1)
    return need


def query_evidence(pool: object, rows: np.ndarray, sims: np.ndarray, members: Sequence[str], k: int) -> np.ndarray:
    """(1, 2, M) local evidence of one query from its pool neighbours (rows, similarities, most similar first)."""
    rows, sims = np.asarray(rows)[:k], np.asarray(sims)[:k]
    if not len(rows):
        return np.full((1, len(STATS), len(members)), np.nan)
    return weighted(single_stats(pool, rows, members)[None], sims[None])
