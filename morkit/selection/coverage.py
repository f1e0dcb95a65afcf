"""Which pool questions a set of RMs covers: the rows a selector for a query that can use those RMs learns from.

A pool question is covered by some RMs when each of them scored every one of its candidates. In a pool
that mixes domains, an RM that does not apply to a domain (code-tests on math) covers none of its
questions, so a selector over the RMs a math query can use learns from the math questions (and any
other question those RMs all scored), never from rows where a member's score is missing; and PRES weighs
only the neighbours those RMs cover, so an RM that applies everywhere does not collect evidence from
neighbours where the query's other RMs could not compete.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from morkit.question_pool.pool import QuestionPool
from morkit.selection.base import Neighbours
from morkit.selection.learners import mixed


def every_score_present(pool: QuestionPool) -> bool:
    """Whether the pool's build counted no missing score at all: no gap, no RM that skipped a domain."""
    meta = pool.meta
    return not any(meta.get("missing_scores", {}).values()) and not any(meta.get("not_applicable", {}).values())


def covered(pool: QuestionPool, rows: np.ndarray, members: Sequence[str]) -> np.ndarray:
    """Boolean mask over `rows`: the questions on which every member scored every candidate."""
    cols = [pool.rm_names.index(m) for m in members]
    scores = np.asarray(pool.scores[rows])[:, :, cols]
    valid = np.asarray(pool.valid[rows])
    return (~np.isnan(scores) | ~valid[:, :, None]).all(axis=(1, 2))


def covered_rows(pool: QuestionPool, rows: np.ndarray, members: Sequence[str]) -> np.ndarray:
    """The `rows` the members cover (see `covered`)."""
    rows = np.asarray(rows)
    return rows[covered(pool, rows, members)]


def coverage_sets(pool: QuestionPool, rows: np.ndarray, min_mixed: int) -> list[tuple[str, ...]]:
    """The member sets worth a stored selector: each distinct set of RMs that covers a question exactly (the
    RMs that scored all of it), kept when at least `min_mixed` of those questions have both a right and a
    wrong answer; most such questions first. A pool whose RMs score everything has one: all its RMs."""
    rows = np.asarray(rows)
    scores = np.asarray(pool.scores[rows])
    valid = np.asarray(pool.valid[rows])
    full = (~np.isnan(scores) | ~valid[:, :, None]).all(axis=1)  # (rows, RMs)
    is_mixed = mixed(np.asarray(pool.correct[rows]), valid)
    counts: dict[tuple[bool, ...], int] = {}
    for pattern in map(tuple, full[is_mixed]):
        counts[pattern] = counts.get(pattern, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    return [tuple(m for m, keep in zip(pool.rm_names, pattern) if keep)
            for pattern, count in ranked if count >= min_mixed and any(pattern)]


def like_neighbours(pool: QuestionPool, neighbours: Neighbours, members: Sequence[str]) -> Neighbours:
    """The neighbours that every one of `members` (the RMs the query can use) covers, in order; all of them
    when none is covered (nothing better to go on). In a pool whose RMs score everything, all of them."""
    if not len(neighbours.rows) or not members or every_score_present(pool):
        return neighbours
    keep = covered(pool, neighbours.rows, members)
    if keep.all() or not keep.any():
        return neighbours
    return Neighbours(neighbours.rows[keep], tuple(np.asarray(neighbours.ids, dtype=object)[keep]),
                      neighbours.similarities[keep])
