"""PRES's pick without a full sort: the leading ensembles found by a partition are `ranked`'s first ones, ties,
missing evidence and all; and a cost limit's per-ensemble costs, kept per prices and cap, are a fresh limit's."""

from __future__ import annotations

import numpy as np
import pytest
from fakes.embedder import HashEmbedder

from morkit.core.types import Candidate, Query
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.reward_models.cost import CostTable
from morkit.selection.base import CostLimit, Neighbours
from morkit.selection.pres import PRES, ranked

RMS = ("judge", "prm", "orm", "rule")


@pytest.fixture(scope="module")
def pool():
    rng = np.random.default_rng(0)
    queries = [Query(f"q{i}", f"question {i} about topic {i % 4}",
                     tuple(Candidate(f"answer {c}", correct=c == i % 3,
                                     scores={n: float(rng.integers(0, 3)) if n == "judge" else float(rng.normal())
                                             for n in RMS}) for c in range(4)), domain="math") for i in range(30)]
    return build_pool(queries, HashEmbedder(), config=PoolConfig(max_members=3))


def test_the_leading_ensembles_are_ranked_s_first(pool):
    method = PRES(pool, runner_ups=4)
    rng = np.random.default_rng(1)
    size = len(pool.ensembles)
    for trial in range(200):
        evidence = rng.integers(0, 4, size).astype(np.float32) / 4  # exact ties everywhere
        evidence[rng.random(size) < 0.3] = -np.inf  # ensembles the query cannot use
        if trial % 3 == 0:
            evidence[rng.random(size) < 0.1] = np.nan
        if trial % 5 == 0:
            evidence[:] = -np.inf
        method._overall = rng.integers(0, 3, size).astype(np.float64)  # ties in the tie-break too
        want = ranked(evidence, method._overall)[:5]
        np.testing.assert_array_equal(method._leading(evidence), want)


def test_a_limit_s_costs_are_kept_per_prices_and_cap(pool):
    rows = np.arange(8)
    neighbours = Neighbours(rows, tuple(pool.questions[r].id for r in rows), np.linspace(1.0, 0.5, 8))
    everything = frozenset(RMS)
    cheap = CostTable({"judge": 1.0, "prm": 5.0, "orm": 2.0, "rule": 0.5})
    dear = CostTable({"judge": 9.0, "prm": 1.0, "orm": 2.0, "rule": 0.5})
    limits = [CostLimit(table, RMS, most, weight, 4) for table in (cheap, dear, cheap)
              for most, weight in ((3.0, 0.0), (6.0, 0.1), (np.inf, 0.2))]
    kept, picks = PRES(pool), set()
    for limit in limits + limits[::-1]:
        got, want = kept.choose(neighbours, everything, limit), PRES(pool).choose(neighbours, everything, limit)
        assert (got.ensemble, got.score, got.alternatives) == (want.ensemble, want.score, want.alternatives)
        picks.add(got.ensemble.name)
    assert len(kept._priced) == 6 and len(picks) > 2  # two price lists x three caps; the limits matter
