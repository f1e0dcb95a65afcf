"""Pair-wise Reward Ranking accuracy (CTTS-MM eq. 11) and best-of-n hits, vectorised through ranks.

PRR of one question = share of (correct, incorrect) answer pairs whose scores are ordered strictly
right. A tie counts as wrong (0), so an RM that gives every answer the same score gets 0, not 0.5.
Questions with only correct or only incorrect answers have no pairs: their PRR is NaN.

The batched form is the Mann-Whitney U statistic with strict ties: with "min" ranks (the number of
scores strictly below), U = sum over correct answers of (rank among all answers - rank among the
correct ones), i.e. the incorrect answers strictly below each correct one. No loop over pairs.
"""

from __future__ import annotations

import numpy as np


def prr(scores: np.ndarray, correct: np.ndarray) -> float:
    """PRR of one question from its candidates' scores and boolean labels."""
    scores = np.asarray(scores, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    good, bad = scores[correct], scores[~correct]
    if good.size == 0 or bad.size == 0:
        return float("nan")
    # For each correct answer: how many incorrect answers score strictly below it.
    below = np.searchsorted(np.sort(bad), good, side="left")
    return float(below.sum() / (good.size * bad.size))


def best_of_n_hit(scores: np.ndarray, correct: np.ndarray) -> float:
    """Expected correctness of the top-scored answer, ties shared evenly (never broken by position)."""
    scores = np.asarray(scores, dtype=np.float64)
    top = scores == scores.max()
    return float(np.asarray(correct, dtype=bool)[top].mean())


def _strictly_below(values: np.ndarray) -> np.ndarray:
    """For each entry, how many entries of its row (axis 1) are strictly smaller; +inf never counts."""
    from scipy.stats import (
        rankdata,  # imported here: scipy.stats costs ~1.5 s at import
    )

    return rankdata(values, method="min", axis=1) - 1


def prr_matrix(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """PRR for many questions and many scorers at once.

    scores: (Q, N, E) candidate scores per scorer (NaN where a valid candidate lacks a score);
    correct, valid: (Q, N) booleans (valid marks real candidates in a padded row).
    Returns (Q, E) float64: NaN where a question has no mixed pair or a valid candidate has no score.
    """
    scores = np.asarray(scores, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    valid = np.asarray(valid, dtype=bool)
    good = (correct & valid)[:, :, None]
    bad = (~correct & valid)[:, :, None]
    missing = (np.isnan(scores) & valid[:, :, None]).any(axis=1)
    filled = np.where(valid[:, :, None] & ~np.isnan(scores), scores, np.inf)
    among_all = _strictly_below(filled)
    among_good = _strictly_below(np.where(good, filled, np.inf))
    wins = np.where(good, among_all - among_good, 0).sum(axis=1)
    pairs = good.sum(axis=1) * bad.sum(axis=1)  # (Q, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = wins / pairs
    out[(pairs == 0).repeat(out.shape[1], axis=1) | missing] = np.nan
    return out


def best_of_n_matrix(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Expected best-of-n correctness for many questions and scorers, ties shared evenly.

    Same shapes as `prr_matrix`; NaN where a valid candidate lacks a score.
    """
    scores = np.asarray(scores, dtype=np.float64)
    valid3 = np.asarray(valid, dtype=bool)[:, :, None]
    correct3 = np.asarray(correct, dtype=bool)[:, :, None]
    missing = (np.isnan(scores) & valid3).any(axis=1)
    filled = np.where(valid3 & ~np.isnan(scores), scores, -np.inf)
    top = (filled == filled.max(axis=1, keepdims=True)) & valid3
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (top & correct3).sum(axis=1) / top.sum(axis=1)
    out[missing] = np.nan
    return out
