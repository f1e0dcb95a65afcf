"""PRR of every ensemble on a few pool questions from their member scores, for pools without a dense table: the
dense table's values bit for bit (each pair's scores summed as its builder sums them, `pair_wins`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.question_pool.ensembles import Ensemble, member_slots, weight_matrix
from morkit.question_pool.pair_wins import compiled, count_wins, groups


@dataclass(frozen=True, eq=False)
class EnsembleMatrix:
    """The ensembles as arrays, built once per pool: each one's members and weights by slot, in the order the
    builder's `combine` adds them, how many members each has, and how the counting loop walks them."""

    members: np.ndarray  # (slots, E) int64 RM column of each ensemble's k-th member
    member_weights: np.ndarray  # (slots, E) float64, 0 past an ensemble's last member
    sizes: np.ndarray  # (E,) int64 members with a non-zero weight
    together: np.ndarray  # (E,) int64, and blocks: see pair_wins.groups
    blocks: np.ndarray

    @classmethod
    def of(cls, ensembles: Sequence[Ensemble], rm_names: Sequence[str]) -> "EnsembleMatrix":
        members, member_weights = member_slots(weight_matrix(ensembles, rm_names))
        members = np.ascontiguousarray(members, dtype=np.int64)
        sizes = (member_weights != 0).sum(axis=0).astype(np.int64)
        return cls(members, np.ascontiguousarray(member_weights), sizes, *groups(members, sizes))

    def warm(self) -> None:
        """Compile (or load from numba's cache) the loop that counts wins, so no query waits for it."""
        compiled()


@dataclass(frozen=True)
class _Pairs:
    """Every (correct, incorrect) answer pair of the questions with one, laid out for `pair_wins.count_wins`: by
    pair slot, each slot's pairs one per question (lane), the questions with the most pairs first."""

    good: np.ndarray  # (R, P) float64 normalised scores of each pair's correct answer, a missing one 0
    bad: np.ndarray
    offsets: np.ndarray  # (J + 1,) uint64
    rows: np.ndarray  # (L,) int64 question of each lane
    pairs: np.ndarray  # (L,) int64
    lacking: np.ndarray  # (k, R) bool: a valid candidate lacks this RM's score


def _pairs(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any, rm_names: Sequence[str],
           ids: Sequence[str]) -> _Pairs:
    scores = np.asarray(scores, dtype=np.float64)
    correct, valid = np.asarray(correct, dtype=bool), np.asarray(valid, dtype=bool)
    if np.isinf(scores).any():
        q = int(np.argwhere(np.isinf(scores))[0][0])
        raise InputError(f"pool question {ids[q] if len(ids) else q!r} has an infinite member score (scores.npy)")
    normalised = normalizer.apply(rm_names, scores)
    missing = np.isnan(normalised)
    filled = np.where(missing, 0.0, normalised)  # as combine fills a missing score
    good, bad = correct & valid, ~correct & valid
    per_question = good.sum(axis=1) * bad.sum(axis=1)
    lanes = np.argsort(-per_question, kind="stable")[: np.count_nonzero(per_question)]
    lane = np.empty(len(per_question), dtype=np.int64)
    lane[lanes] = np.arange(len(lanes))
    q, g, b = np.nonzero(good[:, :, None] & bad[:, None, :])  # grouped by question, in row order
    slot = np.arange(len(q)) - (np.cumsum(per_question) - per_question)[q]  # the pair's place in its question
    offsets = np.zeros(int(per_question.max(initial=0)) + 1, dtype=np.uint64)
    np.cumsum(np.bincount(slot, minlength=len(offsets) - 1), out=offsets[1:])
    at = offsets[slot].astype(np.int64) + lane[q]
    high, low = np.empty((scores.shape[2], len(q))), np.empty((scores.shape[2], len(q)))
    high[:, at], low[:, at] = filled[q, g].T, filled[q, b].T
    return _Pairs(high, low, offsets, lanes.astype(np.int64), per_question[lanes].astype(np.int64),
                  (missing & valid[:, :, None]).any(axis=1))


def neighbour_prr(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any,
                  rm_names: Sequence[str], matrix: EnsembleMatrix, ids: Sequence[str] = (), *,
                  undefined: float = np.nan) -> np.ndarray:
    """PRR (k, E) float32 of every ensemble on k questions from raw member scores (k, N, R): `rows.ensemble_statistics`'
    values bit for bit, `undefined` where a question has no mixed pair or a member lacks a score. An infinite score
    (a memory-mapped pool is checked here) is an InputError naming the question (`ids`, by position)."""
    found = _pairs(scores, correct, valid, normalizer, rm_names, ids)
    out = np.full((len(found.lacking), matrix.members.shape[1]), undefined, dtype=np.float32)
    if len(found.rows):
        count_wins(found.good, found.bad, found.offsets, matrix.members, matrix.member_weights, matrix.sizes,
                   matrix.together, matrix.blocks, found.rows, found.pairs, np.ascontiguousarray(found.lacking),
                   undefined, out)
    return out


def weighted_rows(weights: np.ndarray, table: np.ndarray) -> np.ndarray:
    """(E,) float32 sum over rows i of weights[i] * table[i]: PRES's evidence from its neighbours' rows, dense or
    computed here, summed the one way. numpy's einsum, not a BLAS product: it runs on this thread (a threaded
    BLAS call this small waits for its threads far longer than it computes when other work shares the cores,
    e.g. 6 ms for 0.07 ms on 2 busy cores) and its bits do not depend on how many threads BLAS has."""
    return np.einsum("i,ij->j", np.asarray(weights, dtype=np.float32), np.asarray(table, dtype=np.float32))


def prr_evidence(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any,
                 rm_names: Sequence[str], matrix: EnsembleMatrix, weights: np.ndarray,
                 ids: Sequence[str] = ()) -> np.ndarray:
    """PRES evidence (E,): sum over the k questions of weights[i] * PRR(i, e), an undefined PRR counting 0: what
    a dense pool computes from its float32 PRR table's rows of these questions (`weighted_rows`)."""
    table = neighbour_prr(scores, correct, valid, normalizer, rm_names, matrix, ids, undefined=0.0)
    return weighted_rows(weights, table).astype(np.float64)
