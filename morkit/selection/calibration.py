"""Calibrating a pick: the probability that a ranking's top candidate is correct.

Methods without a cross-validation of their own are calibrated on leave-one-out picks (docs/selection.md)."""

from __future__ import annotations

import numpy as np

from morkit.question_pool.pool import QuestionPool
from morkit.selection.base import SelectionMethod
from morkit.selection.confidence import SIGNALS, Calibrator, signals
from morkit.selection.coverage import like_neighbours
from morkit.selection.methods import DEFAULT_NEIGHBOURHOOD
from morkit.selection.mor import scores_under
from morkit.selection.neighbourhood import NeighbourSearch

LOO_SAMPLE = 1000
"""Pool questions whose leave-one-out picks calibrate a method that has no cross-validation of its own."""


def pick_confidence(calibrator: Calibrator, scores: np.ndarray, members: np.ndarray) -> float:
    """The calibrated probability that the top-scored of one query's candidates is correct.

    Args:
        calibrator: The pick's calibrator (its method's own, or the leave-one-out one).
        scores: (N,) the candidates' scores under the pick.
        members: (N, M) the candidates' raw scores of the pick's members.

    Returns:
        A probability in [0, 1].
    """
    return float(calibrator.predict(pick_signals(scores, members))[0])


def pick_signals(scores: np.ndarray, members: np.ndarray) -> np.ndarray:
    """(1, len(SIGNALS)) the confidence signals of one query's pick, which its calibrator reads.

    Args:
        scores: (N,) the candidates' scores under the pick.
        members: (N, M) the candidates' raw scores of the pick's members.

    Returns:
        The signals.
    """
    valid = np.ones((1, len(scores)), dtype=bool)
    return signals(np.asarray(scores)[None], np.asarray(members)[None], valid)


def leave_one_out_calibrator(pool: QuestionPool, method: SelectionMethod, k: int, seed: int = 1,
                             neighbourhood: str = DEFAULT_NEIGHBOURHOOD) -> Calibrator:
    """A Calibrator fitted on the method's leave-one-out picks (`leave_one_out_picks`)."""
    return Calibrator.fit(*leave_one_out_picks(pool, method, k, seed, neighbourhood))


def leave_one_out_picks(pool: QuestionPool, method: SelectionMethod, k: int, seed: int = 1,
                        neighbourhood: str = DEFAULT_NEIGHBOURHOOD) -> tuple[np.ndarray, np.ndarray]:
    """(signals, hits) of the method's picks for a seeded sample of LOO_SAMPLE pool questions, each chosen from
    its neighbours other than itself (in the `neighbourhood`) and scored from the pool's stored member
    scores; a hit is the expected best-of-n correctness of the pick (ties shared)."""
    from morkit.question_pool.prr import best_of_n_matrix
    from morkit.question_pool.rows import sample_rows
    rows = sample_rows(len(pool), LOO_SAMPLE, seed)
    found = NeighbourSearch(pool, k, neighbourhood).find(np.asarray(pool.embeddings[rows]), exclude=rows)
    features, hits = [], []
    for row, near in zip(rows, found):
        scores, valid, correct = (np.asarray(a[row]) for a in (pool.scores, pool.valid, pool.correct))
        available = frozenset(n for j, n in enumerate(pool.rm_names) if not np.isnan(scores[valid, j]).any())
        near = like_neighbours(pool, near, [n for n in pool.rm_names if n in available])
        if not available or not near.rows.size:
            continue
        try:
            choice = method.choose(near, available)
        except LookupError:
            continue
        members = scores[:, [pool.rm_names.index(m) for m in choice.ensemble.members]]
        steps = None if pool.steps is None else np.asarray(pool.steps[row])[None]
        picked = scores_under(choice, scores[None], steps, valid[None], pool.normalizer, pool.rm_names,
                              pool.step_rms)
        picked = np.where(valid[None], picked, np.nan)
        features.append(signals(picked, members[None], valid[None])[0])
        hits.append(best_of_n_matrix(picked[:, :, None], correct[None], valid[None])[0, 0])
    hits_array = np.nan_to_num(np.asarray(hits, dtype=np.float64), nan=0.0)
    return np.asarray(features).reshape(-1, len(SIGNALS)), hits_array
