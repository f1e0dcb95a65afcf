"""Which pool questions a set of RMs covers (each scored every candidate): what a selector over those RMs learns
from, and the neighbours PRES weighs, so each domain of a mixed pool gets its own evidence."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.rows import sample_rows, skipped_domains
from morkit.selection.base import Neighbours

CHUNK = 65_536
"""Pool rows read at a time when finding the covered ones (a memory-mapped pool is never read whole)."""


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


def covered_rows(pool: QuestionPool, members: Sequence[str], sample: int, seed: int = 0) -> np.ndarray:
    """A seeded sample of at most `sample` of the questions every member covers, in row order: found first and
    sampled after, so a small domain of a large pool keeps all of its questions up to `sample`."""
    if every_score_present(pool):
        return sample_rows(len(pool), sample, seed)
    found = [start + np.flatnonzero(covered(pool, np.arange(start, min(start + CHUNK, len(pool))), members))
             for start in range(0, len(pool), CHUNK)]
    rows = np.concatenate(found) if found else np.zeros(0, dtype=int)
    return rows[sample_rows(len(rows), sample, seed)]


def domain_rm_sets(pool: QuestionPool) -> list[tuple[str, ...]]:
    """Per domain of the pool, largest first, the RMs that apply to it (all but those that skipped every one of
    its questions); each distinct set once. A pool whose RMs apply everywhere has one: all of them."""
    domains = [q.domain for q in pool.questions]
    skipped = skipped_domains(pool.rm_names, domains, pool.meta.get("not_applicable", {}))
    sizes = Counter(domains)
    out: list[tuple[str, ...]] = []
    for domain in sorted(sizes, key=lambda d: (-sizes[d], d)):
        members = tuple(n for n in pool.rm_names if domain not in skipped[n])
        if members and members not in out:
            out.append(members)
    return out


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
