"""The compiled loop behind on-the-fly PRR: each question's (correct, incorrect) pairs every ensemble ranks right,
both sides summed in float64 exactly as `ensembles.combine` sums them (no FMA, no fast-math; docs/pools.md).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from morkit.core import settings

log = logging.getLogger(__name__)

SIGNATURE = ("void(float64[:, ::1], float64[:, ::1], uint64[::1], int64[:, ::1], float64[:, ::1], int64[::1], "
             "int64[::1], int64[::1], int64[::1], int64[::1], float32[::1], boolean[:, ::1], boolean, float32, "
             "float32[:, ::1])")
"""The one specialisation compiled: arrays C-contiguous, in the dtypes `count_wins` documents."""


def _count_wins(good: Any, bad: Any, offsets: Any, members: Any, weights: Any, sizes: Any, together: Any,
                blocks: Any, rows: Any, base: Any, quotients: Any, lacking: Any, check: bool, undefined: float,
                out: Any) -> None:
    # Per ensemble, one pass over each pair slot's lanes (contiguous, so the loop vectorises: offsets are unsigned,
    # so start + i needs no negative-index check). Each side's score is (w0 x0 + w1 x1) + w2 x2: combine's order.
    lanes = rows.shape[0]
    wins = np.zeros((BLOCK, lanes), np.int32)
    for block in range(blocks.shape[0] - 1):
        first, end = blocks[block], blocks[block + 1]
        wins[:] = 0
        e = first
        while e < end:
            n = sizes[e]
            last = max(n, 1) - 1  # slots past an ensemble's last member are read only by loops that never use them
            m0, m1, m2 = members[0, e], members[min(1, last), e], members[min(2, last), e]
            if together[e] == 3:  # 3 weightings of the same members (n = 2 or 3): each score read once for all 3
                a0, a1, a2 = weights[0, e], weights[1, e], weights[min(2, last), e]
                b0, b1, b2 = weights[0, e + 1], weights[1, e + 1], weights[min(2, last), e + 1]
                d0, d1, d2 = weights[0, e + 2], weights[1, e + 2], weights[min(2, last), e + 2]
                ca, cb, cd = wins[e - first], wins[e - first + 1], wins[e - first + 2]
                for j in range(offsets.shape[0] - 1):
                    start = offsets[j]
                    if n == 2:
                        for i in range(offsets[j + 1] - start):
                            p = start + i
                            x0, x1, y0, y1 = good[m0, p], good[m1, p], bad[m0, p], bad[m1, p]
                            ca[i] += a0 * x0 + a1 * x1 > a0 * y0 + a1 * y1
                            cb[i] += b0 * x0 + b1 * x1 > b0 * y0 + b1 * y1
                            cd[i] += d0 * x0 + d1 * x1 > d0 * y0 + d1 * y1
                    else:
                        for i in range(offsets[j + 1] - start):
                            p = start + i
                            x0, x1, x2 = good[m0, p], good[m1, p], good[m2, p]
                            y0, y1, y2 = bad[m0, p], bad[m1, p], bad[m2, p]
                            ca[i] += a0 * x0 + a1 * x1 + a2 * x2 > a0 * y0 + a1 * y1 + a2 * y2
                            cb[i] += b0 * x0 + b1 * x1 + b2 * x2 > b0 * y0 + b1 * y1 + b2 * y2
                            cd[i] += d0 * x0 + d1 * x1 + d2 * x2 > d0 * y0 + d1 * y1 + d2 * y2
                e += 3
                continue
            w0, w1, w2 = weights[0, e], weights[min(1, last), e], weights[min(2, last), e]
            count = wins[e - first]
            for j in range(offsets.shape[0] - 1):
                start = offsets[j]
                if n <= 1:  # 0 members (every weight 0) ties every pair at +-0, as combine's 0 x member 0 does
                    for i in range(offsets[j + 1] - start):
                        p = start + i
                        count[i] += w0 * good[m0, p] > w0 * bad[m0, p]
                elif n == 2:
                    for i in range(offsets[j + 1] - start):
                        p = start + i
                        count[i] += w0 * good[m0, p] + w1 * good[m1, p] > w0 * bad[m0, p] + w1 * bad[m1, p]
                elif n == 3:
                    for i in range(offsets[j + 1] - start):
                        p = start + i
                        count[i] += (w0 * good[m0, p] + w1 * good[m1, p] + w2 * good[m2, p]
                                     > w0 * bad[m0, p] + w1 * bad[m1, p] + w2 * bad[m2, p])
                else:
                    for i in range(offsets[j + 1] - start):
                        p = start + i
                        high, low = w0 * good[m0, p], w0 * bad[m0, p]
                        for s in range(1, n):
                            high += weights[s, e] * good[members[s, e], p]
                            low += weights[s, e] * bad[members[s, e], p]
                        count[i] += high > low
            e += 1
        for i in range(lanes):  # a row's block of columns at once: a cache line or two, not one per ensemble
            q = rows[i]
            for e in range(first, end):
                missing = False
                if check:
                    for s in range(sizes[e]):
                        missing |= lacking[q, members[s, e]]
                out[q, e] = undefined if missing else quotients[base[i] + wins[e - first, i]]


BLOCK = 18
"""Most ensembles counted before their PRR is written (a row's 18 float32 columns at once): a whole number of
groups of 3 (`groups`)."""


def groups(members: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How the loop walks the ensembles: (E,) 3 where an ensemble starts a run of three with the same 2 or 3
    members in the same slots (one pair of sums read for three weightings), else 1 (0 for the run's other two);
    and the bounds of blocks of at most BLOCK ensembles that split no run.

    Args:
        members: (S, E) each ensemble's members by slot (`ensembles.member_slots`).
        sizes: (E,) members per ensemble.

    Returns:
        `(together, blocks)`, both int64.
    """
    same = (members[:, 1:] == members[:, :-1]).all(axis=0) & (sizes[1:] == sizes[:-1])
    together = np.ones(len(sizes), dtype=np.int64)
    e = 0
    while e < len(sizes):
        if e + 2 < len(sizes) and same[e] and same[e + 1] and sizes[e] in (2, 3):
            together[e : e + 3] = (3, 0, 0)
            e += 3
        else:
            e += 1
    blocks, used = [0], 0
    for e in np.flatnonzero(together):
        if used + together[e] > BLOCK:
            blocks.append(int(e))
            used = 0
        used += int(together[e])
    return together, np.array(blocks + [len(sizes)], dtype=np.int64)


THREADED_FROM = 1 << 20
"""Pair x ensemble cells from which one count is split over threads (k = 100 RewardMATH neighbours: 4.8M; a learned
selector's single-RM columns stay on the calling thread, where a thread's hand-off would cost more)."""

_lock = threading.Lock()
_compiled: list[Any] = []
_workers: dict[str, Any] = {}  # "pool": the ThreadPoolExecutor, "size": its workers; emptied in a forked child


def compiled() -> Any:
    """The loop compiled for `SIGNATURE`, once per process (numba's disk cache makes later processes' first call
    a load instead of a compile). A cache numba cannot use (no writable folder, an unreadable cached copy) costs
    a compile in memory and a warning, never a failed query; a loop that does not compile still raises."""
    with _lock:
        if not _compiled:
            import numba

            try:
                kernel = numba.njit(SIGNATURE, cache=True, nogil=True)(_count_wins)
            except Exception as error:  # noqa: BLE001 - whatever the cache did wrong, compiling afresh is right
                log.warning("numba could not cache the PRR loop (%s: %s); compiling it in memory",
                            type(error).__name__, error)
                kernel = numba.njit(SIGNATURE, nogil=True)(_count_wins)
            _compiled.append(kernel)
        return _compiled[0]


def count_wins(good: np.ndarray, bad: np.ndarray, offsets: np.ndarray, members: np.ndarray, weights: np.ndarray,
               sizes: np.ndarray, together: np.ndarray, blocks: np.ndarray, rows: np.ndarray, pairs: np.ndarray,
               lacking: np.ndarray, undefined: float, out: np.ndarray) -> None:
    """Write each ensemble's PRR on each question with a mixed pair into `out` (k, E) float32; a large count is
    split by ensembles over `settings.prr_threads()` threads (the same values: each ensemble is counted once).

    Args:
        good: (R, P) float64 normalised member scores of each pair's correct answer, a missing score 0; pairs are
            stored by slot: slot j's pairs (the j-th pair of every question with more than j) are the columns
            offsets[j]:offsets[j + 1], the question in lane i at offsets[j] + i.
        bad: (R, P) the same for each pair's incorrect answer.
        offsets: (J + 1,) uint64 slot boundaries; lanes are ordered by pair count, most first.
        members: (S, E) int64 RM of each ensemble's s-th member, in the order `combine` adds them.
        weights: (S, E) float64 their weights (0 past an ensemble's last member).
        sizes: (E,) int64 members per ensemble (those with a non-zero weight).
        together: (E,) int64 and blocks: (B + 1,) int64, how to walk the ensembles (`groups`).
        rows: (L,) int64 the `out` row of each lane.
        pairs: (L,) int64 each lane's pair count (> 0).
        lacking: (k, R) bool: a valid candidate of the question lacks the RM's score.
        undefined: The value written where a member lacks a score (rows without a mixed pair are left as they
            are).
        out: (k, E) float32, written in place: wins / pairs, rounded once to float32 as the dense table is.
    """
    counts, which = np.unique(pairs, return_inverse=True)
    # Every PRR a lane can have, w / n for w = 0..n, divided (float64) and rounded once here, as prr_matrix divides
    # and the dense table stores them: the loop looks its value up rather than dividing 5,335 times per question.
    quotients = np.concatenate([np.arange(n + 1) / n for n in counts.tolist()] or [np.empty(0)]).astype(np.float32)
    base = (np.cumsum(counts + 1) - (counts + 1))[which].astype(np.int64)
    kernel, flag, threads = compiled(), bool(lacking.any()), settings.prr_threads()
    parts = split_blocks(blocks, sizes, threads if good.shape[1] * len(sizes) >= THREADED_FROM else 1)

    def count(part: np.ndarray) -> None:  # the loop releases the GIL; each part writes only its own columns
        kernel(good, bad, offsets, members, weights, sizes, together, part, rows, base, quotients, lacking, flag,
               np.float32(undefined), out)

    helpers = _threads(len(parts) - 1) if len(parts) > 1 else None
    others = [helpers.submit(count, part) for part in parts[1:]]
    try:
        count(parts[0])  # the calling thread takes the first part
    finally:
        wait(others)  # no part still writing `out` once this returns or raises
    for other in others:
        other.result()


def split_blocks(blocks: np.ndarray, sizes: np.ndarray, parts: int) -> list[np.ndarray]:
    """`blocks` cut into at most `parts` runs of whole blocks with about equal member counts (the loop's work), each
    a contiguous bounds array the loop walks alone.

    Args:
        blocks: (B + 1,) int64 block bounds (`groups`).
        sizes: (E,) members per ensemble.
        parts: How many runs wanted.

    Returns:
        The runs' bounds arrays, in order; their ensembles cover `blocks`' once.
    """
    if parts <= 1 or len(blocks) <= 2:
        return [blocks]
    work = np.concatenate([[0], np.cumsum(np.maximum(sizes, 1))])[blocks]  # members before each bound
    targets = work[-1] * np.arange(1, parts) / parts
    above = np.minimum(np.searchsorted(work, targets), len(work) - 1)
    below = np.maximum(above - 1, 0)
    cuts = np.where(targets - work[below] < work[above] - targets, below, above)  # the nearer bound
    cuts = np.unique(np.clip(cuts, 1, len(blocks) - 2))
    edges = [0, *cuts.tolist(), len(blocks) - 1]
    return [np.ascontiguousarray(blocks[lo : hi + 1]) for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo]


def _threads(count: int) -> ThreadPoolExecutor:
    """The process's pool of at least `count` worker threads beside the caller's, kept between queries (no thread
    start per query); a forked child makes its own, since it inherits none of the parent's threads."""
    with _lock:
        if _workers.get("size", 0) < count:
            if not _workers:
                os.register_at_fork(after_in_child=_forget_workers)
            elif _workers.get("pool") is not None:
                _workers["pool"].shutdown(wait=False)
            _workers.update(pool=ThreadPoolExecutor(count, thread_name_prefix="morkit-prr"), size=count)
        return _workers["pool"]


def _forget_workers() -> None:
    """In a forked child: the parent's pool (whose threads did not come along) and lock are dropped."""
    global _lock
    _lock = threading.Lock()
    _workers.update(pool=None, size=0)
