"""Pair-wise Reward Ranking accuracy (CTTS-MM eq. 11) and best-of-n hits, vectorised over questions and scorers.

A tie counts as wrong; a question without a (correct, incorrect) pair has PRR NaN (docs/pools.md).
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


def prr_matrix(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(Q, E) PRR from scores (Q, N, E) and correct, valid (Q, N): a strict Mann-Whitney U, each (right, wrong)
    pair compared once.

    NaN where a question has no mixed pair or a valid candidate (not padding) lacks a score.
    """
    scores = np.asarray(scores, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    valid = np.asarray(valid, dtype=bool)
    good, bad = correct & valid, ~correct & valid
    n_good, n_bad = good.sum(axis=1), bad.sum(axis=1)
    # Each question is counted from its smaller side (the pivots): one pass per pivot rank, not one per slot, so a
    # question with one right answer costs one pass. Counted from its wrong answers, "a right answer above the
    # pivot" is "below it" once the question's scores are negated (exact); NaN compares false either way.
    by_good = n_good <= n_bad
    pivots = np.where(by_good[:, None], good, bad)
    others = np.where(by_good[:, None], bad, good)[:, :, None]
    signed = scores if by_good.all() else scores * np.where(by_good, 1.0, -1.0)[:, None, None]
    order = np.argsort(~pivots, axis=1, kind="stable")  # each question's pivot slots first
    rows = np.arange(len(scores))
    count_type = np.uint8 if scores.shape[1] < 256 else np.int64  # a count of other answers fits
    wins = np.zeros((scores.shape[0], scores.shape[2]), dtype=np.int64)
    for rank in range(int(np.minimum(n_good, n_bad).max(initial=0))):
        slot = order[:, rank]
        below = signed < signed[rows, slot][:, None, :]
        below &= others
        wins += np.where(pivots[rows, slot][:, None], below.view(np.uint8).sum(axis=1, dtype=count_type), 0)
    missing = np.isnan(scores)
    missing &= valid[:, :, None]
    pairs = (n_good * n_bad)[:, None]  # (Q, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = wins / pairs
    out[(pairs == 0).repeat(out.shape[1], axis=1) | missing.any(axis=1)] = np.nan
    return out


def mixed_questions(correct: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(Q,) questions with both a correct and a wrong valid candidate: the only ones a ranking can get wrong."""
    correct, valid = np.asarray(correct, dtype=bool), np.asarray(valid, dtype=bool)
    return (correct & valid).any(axis=1) & (~correct & valid).any(axis=1)


def top_answers(scores: np.ndarray, present: np.ndarray) -> np.ndarray:
    """(Q, N, C) where a candidate holds its question's top score per column, among the `present` candidates
    (ties: every one of them)."""
    filled = np.where(present, scores, -np.inf)
    return present & (filled == filled.max(axis=1, keepdims=True))


def best_of_n_matrix(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Expected best-of-n correctness for many questions and scorers, ties shared evenly.

    Same shapes as `prr_matrix`; NaN where a valid candidate lacks a score.
    """
    scores = np.asarray(scores, dtype=np.float64)
    valid3 = np.asarray(valid, dtype=bool)[:, :, None]
    correct3 = np.asarray(correct, dtype=bool)[:, :, None]
    missing = (np.isnan(scores) & valid3).any(axis=1)
    top = top_answers(scores, valid3 & ~np.isnan(scores))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (top & correct3).sum(axis=1) / top.sum(axis=1)
    out[missing] = np.nan
    return out
