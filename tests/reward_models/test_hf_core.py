"""Backend core without torch: batch planning, step reduction, PRR (truncation: test_truncation)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from morkit.core.errors import InputError, ScoreError
from morkit.question_pool.prr import best_of_n_hit, prr
from morkit.reward_models.base import REDUCTIONS, reduce_steps
from morkit.reward_models.backends.hf import Batching

# ---- Batching.plan ----------------------------------------------------------------------------------


def _check_plan(lengths, batching, shared=0):
    plan = batching.plan(lengths, shared=shared)
    flat = [i for batch in plan for i in batch]
    assert sorted(flat) == list(range(len(lengths)))  # every index exactly once
    assert all(batch for batch in plan)
    for batch in plan:
        assert len(batch) <= batching.max_batch
        width = max(lengths[i] for i in batch)
        if len(batch) > 1:
            assert len(batch) * width <= batching.max_tokens
        assert [lengths[i] for i in batch] == sorted((lengths[i] for i in batch), reverse=True)
        if len(batch) > 1 and batching.max_padding is not None:  # the cap: padded share of the computed tokens
            computed = len(batch) * (width - shared)
            assert computed - sum(lengths[i] - shared for i in batch) <= batching.max_padding * computed
    # longest first across batches
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
    return plan


@pytest.mark.parametrize("seed", range(20))
def test_plan_random(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(rng.randint(0, 120))]
    batching = Batching(max_batch=rng.randint(1, 20), max_tokens=rng.randint(300, 3000),
                        max_padding=rng.choice([None, 0.0, 0.02, 0.05, 0.3]))
    _check_plan(lengths, batching)
    if lengths:
        _check_plan(lengths, batching, shared=rng.randint(0, min(lengths) - 1))


def test_plan_hand_case():  # no padding cap: the batch size and token budget alone
    lengths = [10, 50, 30, 50, 20]
    plan = Batching(max_batch=2, max_tokens=1000, max_padding=None).plan(lengths)
    assert plan == [[1, 3], [2, 4], [0]]
    plan = Batching(max_batch=16, max_tokens=100, max_padding=None).plan(lengths)
    # 2 x 50 = 100 fits the budget; a third row would pad to 3 x 50 = 150. Then 3 x 30 = 90 fits.
    assert plan == [[1, 3], [2, 4, 0]]


def test_plan_overlong_sequence_gets_own_batch():
    plan = _check_plan([500, 10, 10], Batching(max_batch=8, max_tokens=100, max_padding=None))
    assert plan[0] == [0]
    assert plan[1] == [1, 2]


def test_plan_first_batch_holds_longest():
    lengths = [5, 7, 100, 3]
    plan = Batching(max_batch=4, max_tokens=10_000, max_padding=None).plan(lengths)
    assert plan == [[2, 1, 0, 3]]


def test_plan_caps_padding_by_default():
    # 100 then 97, 96: 3 + 4 = 7 padded of 300 (2.3%); 80 would pad 27 of 400 (6.8% > 5%): a new batch
    lengths = [80, 97, 100, 96, 78, 10]
    assert Batching().max_padding == 0.05
    assert Batching(max_batch=16).plan(lengths) == [[2, 1, 3], [0, 4], [5]]
    assert Batching(max_batch=16, max_padding=None).plan(lengths) == [[2, 1, 3, 0, 4, 5]]
    assert Batching(max_padding=0.0).plan([4, 4, 3, 3, 3]) == [[0, 1], [2, 3, 4]]


def test_plan_padding_cap_counts_only_the_computed_tokens():
    # a 90-token prefix already ran: suffixes of 10 and 8 pad 2 of 20 computed tokens (10%), not 2 of 200 (1%)
    assert Batching().plan([100, 98]) == [[0, 1]]
    assert Batching().plan([100, 98], shared=90) == [[0], [1]]
    assert Batching(max_padding=0.1).plan([100, 98], shared=90) == [[0, 1]]


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2])
def test_plan_padding_cap_out_of_range_is_an_input_error(bad):
    with pytest.raises(InputError, match=r"Batching.max_padding must be in \[0, 1\) or None"):
        Batching(max_padding=bad)


def test_plan_empty():
    assert Batching().plan([]) == []


# ---- reduce_steps -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rule, expected", [
    ("min", 0.25), ("last", 1.0), ("mean", (0.5 + 0.25 + 1.0) / 3), ("prod", 0.125),
])
def test_reduce_steps(rule, expected):
    assert reduce_steps((0.5, 0.25, 1.0), rule) == pytest.approx(expected)
    assert isinstance(reduce_steps([0.5, 0.25, 1.0], rule), float)


def test_reduce_steps_default_and_errors():
    assert reduce_steps([0.7, 0.3]) == 0.3
    assert REDUCTIONS == ("min", "last", "mean", "prod")
    with pytest.raises(ValueError, match="step reduction must be one of min, last, mean, prod, got 'median'"):
        reduce_steps([0.1], "median")
    with pytest.raises(ScoreError, match="empty"):
        reduce_steps([], "min")
    assert reduce_steps([3], "prod") == 3.0


# ---- PRR / best-of-n --------------------------------------------------------------------------------


@pytest.mark.parametrize("scores, correct, expected", [
    ([0.9, 0.1, 0.5], [True, False, False], 1.0),
    ([0.1, 0.9, 0.5], [True, False, False], 0.0),
    ([0.5, 0.5], [True, False], 0.0),  # a tie counts as wrong
    ([0.3, 0.6, 0.6, 0.1], [True, True, False, False], 0.5),
    ([0.2, 0.4, 0.4, 0.4], [False, True, True, False], 0.5),
    ([1, 2, 3, 4, 5], [False, True, False, True, False], 3 / 6),
])
def test_prr_hand(scores, correct, expected):
    assert prr(np.array(scores), np.array(correct)) == pytest.approx(expected)


@pytest.mark.parametrize("correct", [[True, True], [False, False, False], []])
def test_prr_single_label_is_nan(correct):
    assert math.isnan(prr(np.arange(len(correct), dtype=float), np.array(correct, dtype=bool)))


def test_prr_constant_scores_zero():
    assert prr([0.5] * 6, [True, False] * 3) == 0.0


@pytest.mark.parametrize("seed", range(10))
def test_prr_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 15))
    scores = rng.integers(0, 4, size=n).astype(float)  # many ties
    correct = rng.random(n) < 0.5
    correct[0], correct[1] = True, False
    pairs = [(g, b) for g in scores[correct] for b in scores[~correct]]
    expected = sum(g > b for g, b in pairs) / len(pairs)
    assert prr(scores, correct) == pytest.approx(expected)


@pytest.mark.parametrize("scores, correct, expected", [
    ([0.2, 0.8], [False, True], 1.0),
    ([0.8, 0.2], [False, True], 0.0),
    ([0.9, 0.9, 0.1], [True, False, True], 0.5),
    ([0.9, 0.9, 0.9, 0.1], [True, True, False, False], 2 / 3),
    ([1.0, 1.0], [True, True], 1.0),
])
def test_best_of_n_hit(scores, correct, expected):
    assert best_of_n_hit(np.array(scores), np.array(correct)) == pytest.approx(expected)
