"""PRR of every ensemble on a few pool questions, from their member scores, for pools without a dense table.

A float32 product of member-score differences, rechecked exactly near zero: equal to the dense table's values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.question_pool.ensembles import Ensemble, member_slots, weight_matrix
from morkit.runtime.threads import one_blas_thread

_ROUNDING = 1e-6
"""Relative bound on the float32 product's error: an ensemble's column has at most `slots` non-zero weights,
so only that many products and additions round (2^-24 each, plus the cast of each difference), against
the sum of the `slots` largest |differences| times the largest weight; 1e-6 leaves a margin of about 4."""


@dataclass(frozen=True, eq=False)
class EnsembleMatrix:
    """The ensembles as arrays: W (R, E) in float32, each ensemble's members and weights by slot, and which RMs
    each uses; built once per pool."""

    weights32: np.ndarray
    members: np.ndarray  # (slots, E) RM column of each ensemble's k-th member
    member_weights: np.ndarray  # (slots, E) float64, 0 past an ensemble's last member
    uses: np.ndarray  # (R, E) float32, 1 where the ensemble uses the RM
    largest_weight: float

    @classmethod
    def of(cls, ensembles: Sequence[Ensemble], rm_names: Sequence[str]) -> "EnsembleMatrix":
        weights = weight_matrix(ensembles, rm_names)
        members, member_weights = member_slots(weights)  # in the order the builder's `combine` adds them
        return cls(weights.astype(np.float32), members, member_weights, (weights != 0).astype(np.float32),
                   float(np.abs(weights).max(initial=0.0)))


def _exact_scores(normalised: np.ndarray, matrix: EnsembleMatrix, ensembles: np.ndarray) -> np.ndarray:
    """Ensemble scores of candidates (n, R) under ensembles (n,), summed term by term as `combine` does."""
    filled = np.nan_to_num(normalised, nan=0.0)
    out = np.zeros(len(ensembles))
    for slot in range(matrix.members.shape[0]):
        out += matrix.member_weights[slot, ensembles] * filled[np.arange(len(ensembles)), matrix.members[slot, ensembles]]
    return out


_BLOCK = 1 << 20
"""(pair, ensemble) cells compared at a time: about 4 MB of float32 products, which stay in cache. Their small
products run on one BLAS thread: a second one costs more than it saves on blocks this size (and far more when
other processes share the cores)."""


@dataclass(frozen=True)
class _Pairs:
    """Every (correct, incorrect) answer pair of the questions, grouped by question in row order: the two answers'
    normalised member scores, their difference and the bound on its float32 product's rounding."""

    z_good: np.ndarray  # (P, R) float64
    z_bad: np.ndarray
    delta: np.ndarray  # (P, R) float64, a missing score's difference 0
    bound: np.ndarray  # (P,) float32
    pairs: np.ndarray  # (k,) pairs per question
    lacking: np.ndarray  # (k, R) bool: a real candidate lacks this RM's score


def _pairs(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any, rm_names: Sequence[str],
           matrix: EnsembleMatrix, ids: Sequence[str]) -> _Pairs:
    scores = np.asarray(scores, dtype=np.float64)
    correct, valid = np.asarray(correct, dtype=bool), np.asarray(valid, dtype=bool)
    if np.isinf(scores).any():
        q = int(np.argwhere(np.isinf(scores))[0][0])
        raise InputError(f"pool question {ids[q] if len(ids) else q!r} has an infinite member score (scores.npy)")
    normalised = normalizer.apply(rm_names, scores)
    good, bad = correct & valid, ~correct & valid
    q, g, b = np.nonzero(good[:, :, None] & bad[:, None, :])  # grouped by question, in row order
    z_good, z_bad = normalised[q, g], normalised[q, b]
    delta = np.nan_to_num(z_good - z_bad, nan=0.0)
    slots = min(matrix.members.shape[0], delta.shape[1])
    largest = -np.partition(-np.abs(delta), slots - 1, axis=1)[:, :slots].sum(axis=1)  # its members' at most
    bound = (matrix.largest_weight * (_ROUNDING * largest
                                      + 1e-12 * np.nan_to_num(np.abs(z_good) + np.abs(z_bad)).sum(axis=1)))
    return _Pairs(z_good, z_bad, delta, bound.astype(np.float32), good.sum(axis=1) * bad.sum(axis=1),
                  (np.isnan(scores) & valid[:, :, None]).any(axis=1))


def _wins(found: _Pairs, matrix: EnsembleMatrix, part: slice) -> np.ndarray:
    """(p, E) bool for the pairs `part`: the ensemble ranks the correct answer strictly higher. A float32 product
    decides where its rounding cannot flip the sign; the rest are summed exactly, as `combine` does."""
    product = found.delta[part].astype(np.float32) @ matrix.weights32
    bound = found.bound[part, None]
    wins = product > bound
    doubt = np.abs(product, out=product) <= bound
    pair, ens = np.divmod(np.flatnonzero(doubt), doubt.shape[1])  # 1-d: several times faster than nonzero
    if len(pair):
        # Members that all score the two answers alike make an exact tie (a product of exact zeros): no win, and
        # nothing to recheck. Discrete RMs (judges' grades, rules) make many of those.
        delta = found.delta[part][pair]
        moving = np.zeros(len(pair), dtype=bool)
        for slot in range(matrix.members.shape[0]):
            member = matrix.members[slot, ens]
            moving |= (matrix.member_weights[slot, ens] != 0) & (delta[np.arange(len(pair)), member] != 0)
        pair, ens = pair[moving], ens[moving]
        first = part.start
        wins[pair, ens] = (_exact_scores(found.z_good[first + pair], matrix, ens)
                           > _exact_scores(found.z_bad[first + pair], matrix, ens))
    return wins


def _win_counts(found: _Pairs, matrix: EnsembleMatrix) -> np.ndarray:
    """(k, E) int64: each question's pairs that each ensemble ranks right. Questions with equally many pairs are
    counted together in blocks of at most _BLOCK cells, as (questions, pairs, E) summed over pairs."""
    ensembles = matrix.weights32.shape[1]
    counts = np.zeros((len(found.pairs), ensembles), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(found.pairs)])
    with one_blas_thread():
        _count(found, matrix, starts, counts)
    return counts


def _count(found: _Pairs, matrix: EnsembleMatrix, starts: np.ndarray, counts: np.ndarray) -> None:
    ensembles = counts.shape[1]
    for size in np.unique(found.pairs[found.pairs > 0]):
        rows = np.flatnonzero(found.pairs == size)
        step = max(1, _BLOCK // (int(size) * ensembles))
        for at in range(0, len(rows), step):
            block = rows[at:at + step]
            runs = np.split(block, np.flatnonzero(np.diff(block) != 1) + 1)  # rows adjacent in the pair order
            for run in runs:
                wins = _wins(found, matrix, slice(int(starts[run[0]]), int(starts[run[-1] + 1])))
                total = np.uint8 if size < 256 else np.int64
                counts[run] = wins.view(np.uint8).reshape(len(run), int(size), ensembles).sum(axis=1, dtype=total)


def neighbour_prr(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any,
                  rm_names: Sequence[str], matrix: EnsembleMatrix, ids: Sequence[str] = ()) -> np.ndarray:
    """PRR (k, E) float64 of every ensemble on k questions from their raw member scores (k, N, R): the same
    values `rows.ensemble_statistics` gives, NaN where a question has no mixed pair or a member lacks a score.

    Scores read from a memory-mapped pool are checked here: an infinite one is an InputError naming the question."""
    found = _pairs(scores, correct, valid, normalizer, rm_names, matrix, ids)
    out = np.full((len(found.pairs), matrix.weights32.shape[1]), np.nan)
    mixed = found.pairs > 0
    if mixed.any():
        out[mixed] = _win_counts(found, matrix)[mixed] / found.pairs[mixed, None]
    if found.lacking.any():
        out[(found.lacking.astype(np.float32) @ matrix.uses) > 0] = np.nan
    return out


def prr_evidence(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any,
                 rm_names: Sequence[str], matrix: EnsembleMatrix, weights: np.ndarray,
                 ids: Sequence[str] = ()) -> np.ndarray:
    """PRES evidence (E,): sum over the k questions of weights[i] * PRR(i, e), an undefined PRR counting 0: the
    float32 `weights @ table` a dense pool computes, on the float32 PRR table of these questions."""
    table = np.nan_to_num(neighbour_prr(scores, correct, valid, normalizer, rm_names, matrix, ids).astype(np.float32))
    return (np.asarray(weights, dtype=np.float32) @ table).astype(np.float64)
