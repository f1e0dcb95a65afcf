"""Backend core without torch: batch planning, pair encoding with truncation, step reduction, PRR."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from morkit.core.errors import InputError, ScoreError
from morkit.question_pool.prr import best_of_n_hit, prr
from morkit.reward_models.base import REDUCTIONS, reduce_steps
from morkit.reward_models.hf import Batching, Truncation, encode_pair

# ---- Batching.plan ----------------------------------------------------------------------------------


def _check_plan(lengths, batching):
    plan = batching.plan(lengths)
    flat = [i for batch in plan for i in batch]
    assert sorted(flat) == list(range(len(lengths)))  # every index exactly once
    assert all(batch for batch in plan)
    for batch in plan:
        assert len(batch) <= batching.max_batch
        width = max(lengths[i] for i in batch)
        if len(batch) > 1:
            assert len(batch) * width <= batching.max_tokens
        assert [lengths[i] for i in batch] == sorted((lengths[i] for i in batch), reverse=True)
    # longest first across batches
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
    return plan


@pytest.mark.parametrize("seed", range(20))
def test_plan_random(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 300) for _ in range(rng.randint(0, 120))]
    batching = Batching(max_batch=rng.randint(1, 20), max_tokens=rng.randint(300, 3000))
    _check_plan(lengths, batching)


def test_plan_hand_case():
    lengths = [10, 50, 30, 50, 20]
    plan = Batching(max_batch=2, max_tokens=1000).plan(lengths)
    assert plan == [[1, 3], [2, 4], [0]]
    plan = Batching(max_batch=16, max_tokens=100).plan(lengths)
    # 2 x 50 = 100 fits the budget; a third row would pad to 3 x 50 = 150. Then 3 x 30 = 90 fits.
    assert plan == [[1, 3], [2, 4, 0]]


def test_plan_overlong_sequence_gets_own_batch():
    plan = _check_plan([500, 10, 10], Batching(max_batch=8, max_tokens=100))
    assert plan[0] == [0]
    assert plan[1] == [1, 2]


def test_plan_first_batch_holds_longest():
    lengths = [5, 7, 100, 3]
    plan = Batching(max_batch=4, max_tokens=10_000).plan(lengths)
    assert plan == [[2, 1, 0, 3]]


def test_plan_empty():
    assert Batching().plan([]) == []


# ---- encode_pair / Truncation -----------------------------------------------------------------------


class WordTokenizer:
    """One token per whitespace-separated word; ids are assigned on first sight."""

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.words: dict[int, str] = {}
        self.calls = 0

    def __call__(self, text, add_special_tokens=False, verbose=True):  # the HF tokenizer signature
        assert add_special_tokens is False
        self.calls += 1
        ids = []
        for word in text.split():
            if word not in self.vocab:
                self.vocab[word] = len(self.vocab) + 10
                self.words[self.vocab[word]] = word
            ids.append(self.vocab[word])
        return {"input_ids": ids}

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids)


BOS, SEP, EOS = 1, 2, 3


def make_render(tok):
    def render(question, answer):
        return [BOS] + tok(question)["input_ids"] + [SEP] + tok(answer)["input_ids"] + [EOS]

    return render


def answer_words(tok, ids):
    sep = ids.index(SEP)
    end = ids.index(EOS) if EOS in ids else len(ids)
    return tok.decode(list(ids[sep + 1 : end])).split()


QUESTION = "what is the sum"  # 4 tokens -> framing 4 + 3 = 7 tokens
ANSWER = " ".join(f"w{i}" for i in range(20))  # 20 tokens -> 27 in all


def test_fits_not_truncated():
    tok = WordTokenizer()
    enc = encode_pair(make_render(tok), tok, QUESTION, ANSWER, Truncation(max_tokens=27))
    assert not enc.truncated
    assert len(enc.ids) == 27
    assert answer_words(tok, enc.ids) == ANSWER.split()
    assert isinstance(enc.ids, tuple)


def test_right_keeps_beginning():
    tok = WordTokenizer()
    enc = encode_pair(make_render(tok), tok, QUESTION, ANSWER, Truncation(max_tokens=17, policy="right"))
    assert enc.truncated
    assert len(enc.ids) <= 17
    assert answer_words(tok, enc.ids) == [f"w{i}" for i in range(10)]
    assert enc.ids[-1] == EOS and enc.ids[0] == BOS  # framing intact


def test_left_keeps_end():
    tok = WordTokenizer()
    enc = encode_pair(make_render(tok), tok, QUESTION, ANSWER, Truncation(max_tokens=17, policy="left"))
    assert enc.truncated
    assert len(enc.ids) <= 17
    assert answer_words(tok, enc.ids) == [f"w{i}" for i in range(10, 20)]
    assert enc.ids[-1] == EOS


@pytest.mark.parametrize("policy", ["right", "left"])
@pytest.mark.parametrize("limit", [8, 9, 12, 26])
def test_truncation_within_limit(policy, limit):
    tok = WordTokenizer()
    enc = encode_pair(make_render(tok), tok, QUESTION, ANSWER, Truncation(max_tokens=limit, policy=policy))
    assert enc.truncated and len(enc.ids) == limit  # whole-token cuts fill the budget exactly here
    words = answer_words(tok, enc.ids)
    expected = ANSWER.split()[: limit - 7] if policy == "right" else ANSWER.split()[20 - (limit - 7):]
    assert words == expected


def test_question_too_long_cuts_whole_sequence():
    tok = WordTokenizer()
    question = " ".join(f"q{i}" for i in range(30))
    enc = encode_pair(make_render(tok), tok, question, "a b c", Truncation(max_tokens=10))
    assert enc.truncated
    assert len(enc.ids) == 10
    assert SEP not in enc.ids


def test_policy_error_raises():
    tok = WordTokenizer()
    with pytest.raises(InputError, match="27 tokens.*17"):
        encode_pair(make_render(tok), tok, QUESTION, ANSWER, Truncation(max_tokens=17, policy="error"))
    # fitting pairs are fine under the same policy
    enc = encode_pair(make_render(tok), tok, QUESTION, "short", Truncation(max_tokens=17, policy="error"))
    assert not enc.truncated


def test_truncation_validation():
    with pytest.raises(ValueError, match="policy"):
        Truncation(policy="middle")
    with pytest.raises(ValueError, match="max_tokens"):
        Truncation(max_tokens=7)
    assert Truncation().policy == "right"


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
