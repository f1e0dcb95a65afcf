"""PRES on the fly at a size where both paths fit: a 20,000-question pool read from its dense tables and the same
pool forced to compute each query's neighbour PRR from member scores must pick identically."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from morkit.question_pool.pool import PoolConfig, pool_from_rows
from morkit.question_pool.rows import PoolQuestion, pool_rows
from morkit.selection.pres import PRES
from morkit.selection.router import Router

SIZE = 20_000


class _Vectors:
    """An embedder stand-in: clustered unit vectors (a topic per 40 rows), so neighbours are close but not equal."""

    name = "test-clustered"

    def __init__(self, count: int, dim: int = 32, seed: int = 0):
        rng = np.random.default_rng(seed)
        topics = rng.standard_normal((count // 40 + 1, dim))
        vectors = topics[np.arange(count) // 40] + 0.5 * rng.standard_normal((count, dim))
        self.vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)

    def encode(self, texts, progress: bool = False):
        return self.vectors[: len(texts)]


def _tiled(rows, size):
    """`size` rows cycling through `rows` (copy k > 0 with " [copy k]" on its id and text)."""
    n = len(rows.questions)
    order = np.arange(size) % n
    tag = [f" [copy {j // n}]" if j >= n else "" for j in range(size)]
    questions = tuple(PoolQuestion(q.id + tag[j], q.question + tag[j], q.domain, q.n_candidates)
                      for j, q in ((j, rows.questions[j % n]) for j in range(size)))
    return replace(rows, questions=questions, scores=rows.scores[order], correct=rows.correct[order],
                   valid=rows.valid[order], steps=None if rows.steps is None else rows.steps[order])


@pytest.mark.slow
def test_on_the_fly_pres_picks_exactly_what_the_dense_tables_pick_at_20000_questions(data_dir):
    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.reward_models.rules.table import table_names

    base = rewardmath_rm_scores(data_dir)
    rm_names = tuple(table_names(base))
    rows = _tiled(pool_rows(base, rm_names, "min"), SIZE)
    vectors = _Vectors(SIZE)
    dense = pool_from_rows(rows, rm_names, vectors, config=PoolConfig())
    mean_prr, mean_top1, defined = dense.ensemble_means()  # what sampling every question stores (built once)
    means = {"sample": SIZE, "mean_prr": [None if np.isnan(v) else float(v) for v in mean_prr],
             "mean_top1": [None if np.isnan(v) else float(v) for v in mean_top1], "questions": defined.tolist()}
    fly = replace(dense, prr=None, top1=None, config=replace(dense.config, statistics="on-the-fly"),
                  meta={**dense.meta, "statistics": means})
    assert dense.dense and not fly.dense and len(fly.ensembles) == 5335  # small enough for the dense tables
    a, b = PRES(dense), PRES(fly)
    everything = frozenset(dense.rm_names)
    queries = np.random.default_rng(1).choice(SIZE, 150, replace=False)
    neighbours = Router(dense, "pres", embedder=vectors, k=100).chooser.neighbours(vectors.vectors[queries])
    for found in neighbours:
        assert np.array_equal(a.scores(found), b.scores(found))  # the same float32 sums, not merely close
        picked, flown = a.choose(found, everything), b.choose(found, everything)
        assert (picked.ensemble.members, picked.ensemble.weights) == (flown.ensemble.members, flown.ensemble.weights)
        assert picked.score == flown.score and picked.alternatives == flown.alternatives
