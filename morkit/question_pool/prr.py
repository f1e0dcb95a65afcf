"""Pair-wise Reward Ranking accuracy (CTTS-MM eq. 11), vectorised through sorted ranks.

PRR of one question = share of (correct, incorrect) answer pairs whose scores are ordered strictly
right. A tie counts as wrong (0), so an RM that gives every answer the same score gets 0, not 0.5.
Questions with only correct or only incorrect answers have no pairs: their PRR is NaN.
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
