"""PRR of every ensemble on a few pool questions, from their member scores, for pools without a dense table.

A float32 product of member-score differences, rechecked exactly near zero: equal to the dense table's values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.question_pool.ensembles import Ensemble, member_slots, weight_matrix

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


@dataclass(frozen=True)
class _PairWins:
    """For each (correct, incorrect) answer pair of the questions: which ensembles rank the correct one strictly
    higher; plus each pair's question and the questions' pair counts and missing member scores."""

    wins: np.ndarray  # (P, E) bool
    question: np.ndarray  # (P,) row of each pair, grouped in row order
    pairs: np.ndarray  # (k,) pairs per question
    lacking: np.ndarray  # (k, R) bool: a real candidate lacks this RM's score


def _pair_wins(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any,
               rm_names: Sequence[str], matrix: EnsembleMatrix, ids: Sequence[str]) -> _PairWins:
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
    product = delta.astype(np.float32) @ matrix.weights32
    slots = min(matrix.members.shape[0], delta.shape[1])
    largest = -np.partition(-np.abs(delta), slots - 1, axis=1)[:, :slots].sum(axis=1)  # its members' at most
    bound = (matrix.largest_weight * (_ROUNDING * largest
                                      + 1e-12 * np.nan_to_num(np.abs(z_good) + np.abs(z_bad)).sum(axis=1))
             ).astype(np.float32)[:, None]
    wins = product > bound
    doubt = (product <= bound) & (product >= -bound)  # signs the rounding could have flipped
    if doubt.any():
        # Members that all score the two answers alike make an exact tie (a product of exact zeros): no win, and
        # nothing to recheck. Discrete RMs (judges' grades, rules) make many of those.
        doubt &= ((delta != 0).astype(np.float32) @ matrix.uses) > 0
        pair, ens = np.divmod(np.flatnonzero(doubt), doubt.shape[1])  # 1-d: several times faster than nonzero
        wins[pair, ens] = _exact_scores(z_good[pair], matrix, ens) > _exact_scores(z_bad[pair], matrix, ens)
    return _PairWins(wins, q, good.sum(axis=1) * bad.sum(axis=1), (np.isnan(scores) & valid[:, :, None]).any(axis=1))


def neighbour_prr(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any,
                  rm_names: Sequence[str], matrix: EnsembleMatrix, ids: Sequence[str] = ()) -> np.ndarray:
    """PRR (k, E) float64 of every ensemble on k questions from their raw member scores (k, N, R): the same
    values `rows.ensemble_statistics` gives, NaN where a question has no mixed pair or a member lacks a score.

    Scores read from a memory-mapped pool are checked here: an infinite one is an InputError naming the question."""
    found = _pair_wins(scores, correct, valid, normalizer, rm_names, matrix, ids)
    out = np.full((len(found.pairs), matrix.weights32.shape[1]), np.nan)
    if len(found.question):
        mixed, starts = np.unique(found.question, return_index=True)
        out[mixed] = np.add.reduceat(found.wins, starts, axis=0, dtype=np.int64) / found.pairs[mixed, None]
    if found.lacking.any():
        out[(found.lacking.astype(np.float32) @ matrix.uses) > 0] = np.nan
    return out


def prr_evidence(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Any,
                 rm_names: Sequence[str], matrix: EnsembleMatrix, weights: np.ndarray,
                 ids: Sequence[str] = ()) -> np.ndarray:
    """PRES evidence (E,): sum over the k questions of weights[i] * PRR(i, e), an undefined PRR counting 0;
    equal to `weights @ nan_to_num(neighbour_prr(...))` up to float32 rounding, without the (k, E) table."""
    found = _pair_wins(scores, correct, valid, normalizer, rm_names, matrix, ids)
    if not len(found.question):
        return np.zeros(matrix.weights32.shape[1])
    wins = found.wins
    if found.lacking.any():  # a question's PRR is undefined for the ensembles using a member it lacks
        wins = wins & ~((found.lacking.astype(np.float32) @ matrix.uses) > 0)[found.question]
    share = (np.asarray(weights, dtype=np.float64)[found.question] / found.pairs[found.question]).astype(np.float32)
    return (share @ wins.view(np.uint8).astype(np.float32)).astype(np.float64)
