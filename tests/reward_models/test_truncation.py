"""Truncation without torch: which tokens a pair over the window loses, for ORMs and PRMs, under every policy."""

from __future__ import annotations

import pytest

from morkit.core.errors import InputError
from morkit.core.types import Score
from morkit.reward_models.truncation import (
    TRUNCATION_POLICIES,
    Encoded,
    Truncation,
    encode_pair,
    kept_units,
    mark_cut,
)


class WordTokenizer:
    """One token per whitespace-separated word; ids are assigned on first sight."""

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.words: dict[int, str] = {}

    def __call__(self, text, add_special_tokens=False, verbose=True):  # the HF tokenizer signature
        assert add_special_tokens is False
        ids = []
        for word in text.split():
            if word not in self.vocab:
                self.vocab[word] = len(self.vocab) + 10
                self.words[self.vocab[word]] = word
            ids.append(self.vocab[word])
        return {"input_ids": ids}

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids)


BOS, SEP, EOS, TAG = 1, 2, 3, 4


def orm_render(tok):
    """[BOS] question [SEP] answer [EOS]: three framing tokens."""
    return lambda q, a: [BOS] + tok(q)["input_ids"] + [SEP] + tok(a)["input_ids"] + [EOS]


def split_steps(answer):
    return [s.strip() for s in answer.split("\n\n") if s.strip()]


def prm_render(tok):
    """[BOS] question [SEP] step [TAG] step [TAG] ... [EOS]: a tag closes every step, as Qwen's PRM's <extra_0>."""
    def render(q, a):
        steps = [t for s in split_steps(a) for t in tok(s)["input_ids"] + [TAG]]
        return [BOS] + tok(q)["input_ids"] + [SEP] + steps + [EOS]
    return render


def question_words(tok, ids):
    return tok.decode(list(ids[1: ids.index(SEP)])).split()


def answer_words(tok, ids):
    return tok.decode([i for i in ids[ids.index(SEP) + 1:] if i not in (TAG, EOS)]).split()


def shown_steps(tok, ids):
    """The steps a PRM sees: the words between tags."""
    steps, current = [], []
    for i in ids[ids.index(SEP) + 1:]:
        if i == TAG:
            steps.append(tok.decode(current))
            current = []
        elif i != EOS:
            current.append(i)
    return steps


QUESTION = "what is the sum"  # 4 tokens: 7 with the framing
WORDS = [f"w{i}" for i in range(20)]
ANSWER = " ".join(WORDS)  # 27 tokens in all


def encode(question, answer, limit, policy=None, prm=False):
    tok = WordTokenizer()
    render = prm_render(tok) if prm else orm_render(tok)
    truncation = Truncation(limit) if policy is None else Truncation(limit, policy)
    return tok, encode_pair(render, tok, question, answer, truncation, split_steps if prm else None)


# -- outcome RMs: tokens ---------------------------------------------------------------------------

def test_a_pair_that_fits_is_untouched():
    tok, enc = encode(QUESTION, ANSWER, 27)
    assert enc == Encoded(enc.ids) and len(enc.ids) == 27 and answer_words(tok, enc.ids) == WORDS


def test_the_default_policy_keeps_the_start_and_the_end_of_the_answer():
    assert Truncation().policy == "middle" and Truncation().max_tokens is None
    tok, enc = encode(QUESTION, ANSWER, 17)
    assert enc.truncated and not enc.question_cut and len(enc.ids) == 17
    assert answer_words(tok, enc.ids) == WORDS[:5] + WORDS[15:]  # the middle ten are dropped
    assert question_words(tok, enc.ids) == QUESTION.split()
    assert enc.ids[0] == BOS and enc.ids[-1] == EOS  # the template's ends survive


@pytest.mark.parametrize("policy", ["middle", "right", "left"])
@pytest.mark.parametrize("limit", [12, 15, 20, 26])  # the answer may have half of each: the question stays whole
def test_each_policy_drops_its_own_tokens_and_fills_the_window(policy, limit):
    tok, enc = encode(QUESTION, ANSWER, limit, policy)
    assert enc.truncated and len(enc.ids) == limit and enc.ids[-1] == EOS
    k = limit - 7
    expected = {"right": WORDS[:k], "left": WORDS[20 - k:], "middle": WORDS[:k // 2] + WORDS[20 - (k - k // 2):]}
    assert answer_words(tok, enc.ids) == expected[policy]


@pytest.mark.parametrize("policy", ["middle", "right", "left"])
def test_a_question_longer_than_the_window_is_cut_keeping_its_end(policy):
    question = " ".join(f"q{i}" for i in range(30))  # 33 tokens with the framing, over a window of 20
    tok, enc = encode(question, ANSWER, 20, policy)
    assert enc.truncated and enc.question_cut and len(enc.ids) == 20 and enc.ids[-1] == EOS
    # the answer keeps half of the 17 tokens the framing leaves (8); the question the rest, from its end
    assert question_words(tok, enc.ids) == [f"q{i}" for i in range(21, 30)]
    expected = {"right": WORDS[:8], "left": WORDS[12:], "middle": WORDS[:4] + WORDS[16:]}
    assert answer_words(tok, enc.ids) == expected[policy]


def test_a_short_answer_stays_whole_beside_a_long_question():
    question = " ".join(f"q{i}" for i in range(30))
    tok, enc = encode(question, "a b c", 10)
    assert enc.truncated and enc.question_cut and len(enc.ids) == 10
    assert answer_words(tok, enc.ids) == ["a", "b", "c"]
    assert question_words(tok, enc.ids) == ["q26", "q27", "q28", "q29"]


def test_error_refuses_and_a_template_over_the_window_is_an_error():
    with pytest.raises(InputError, match="27 tokens.*17"):
        encode(QUESTION, ANSWER, 17, "error")
    assert not encode(QUESTION, "short", 17, "error")[1].truncated
    tok = WordTokenizer()
    framing = lambda q, a: [BOS] * 9 + tok(q)["input_ids"] + tok(a)["input_ids"]  # noqa: E731
    for policy in ("middle", "right", "left"):
        with pytest.raises(InputError, match="cannot be cut to 8 tokens: the model's prompt template takes 9 of them"):
            encode_pair(framing, tok, QUESTION, ANSWER, Truncation(8, policy))


class GrowingTokenizer(WordTokenizer):
    """Decoding adds a word after every fourth, so a cut answer takes more tokens once rendered again."""

    def decode(self, ids):
        words = super().decode(ids).split()
        return " ".join(w + (" ~" if i % 4 == 3 else "") for i, w in enumerate(words))


@pytest.mark.parametrize("policy", ["middle", "right", "left"])
def test_a_cut_that_grows_when_rendered_again_is_cut_further(policy):
    tok = GrowingTokenizer()
    enc = encode_pair(orm_render(tok), tok, QUESTION, ANSWER, Truncation(17, policy))
    assert enc.truncated and 15 <= len(enc.ids) <= 17 and enc.ids[-1] == EOS


def test_a_window_without_room_for_one_token_of_a_step_is_an_error_not_a_crash():
    tok = WordTokenizer()
    framed = lambda q, a: [BOS] * 3 + prm_render(tok)(q, a)  # noqa: E731  (6 framing tokens: 1 for the step)
    with pytest.raises(InputError, match="not one token of a step fits"):
        encode_pair(framed, tok, QUESTION, PRM_ANSWER, Truncation(8), split_steps)
    with pytest.raises(InputError, match="template takes 9 of them"):
        encode_pair(lambda q, a: [BOS] * 6 + prm_render(tok)(q, a), tok, QUESTION, PRM_ANSWER, Truncation(8),
                    split_steps)


def test_truncation_values():
    with pytest.raises(ValueError, match="policy"):
        Truncation(policy="bogus")
    with pytest.raises(ValueError, match="max_tokens"):
        Truncation(max_tokens=7)
    with pytest.raises(ValueError, match="max_model_len \\(--max-model-len\\) must be at least 8"):
        Truncation(ceiling=4)
    assert TRUNCATION_POLICIES == ("middle", "right", "left", "error")
    assert Truncation().limit is None and Truncation().within(512).limit == 512
    assert Truncation(64).within(512).limit == 64 and Truncation(64, ceiling=32).within(512).limit == 32
    assert Truncation(ceiling=256).within(512).limit == 256 and Truncation(ceiling=256).within(128).limit == 128
    # the signature is what the user set, so it is known before the model (and its window) is
    assert Truncation(4096, "left").within(512).signature == "left@4096"
    assert Truncation().within(512).signature == Truncation().signature == "middle@window"
    assert Truncation(ceiling=1024).signature == "middle@window<=1024"
    assert Truncation(4096, ceiling=1024).signature == "middle@1024"
    with pytest.raises(ValueError, match="limit is known"):
        encode_pair(orm_render(WordTokenizer()), WordTokenizer(), "q", "a", Truncation())


# -- process RMs: whole steps ----------------------------------------------------------------------

STEPS = [f"s{i}a s{i}b s{i}c" for i in range(6)]  # 4 tokens each with its tag
PRM_ANSWER = "\n\n".join(STEPS)  # 31 tokens in all


@pytest.mark.parametrize("policy, kept", [("middle", (0, 1, 4, 5)), ("right", (0, 1, 2, 3)), ("left", (2, 3, 4, 5))])
def test_a_prm_answer_loses_whole_steps(policy, kept):
    tok, enc = encode(QUESTION, PRM_ANSWER, 23, policy, prm=True)
    assert enc.truncated and enc.kept_steps == kept and len(enc.ids) == 23 and enc.ids[-1] == EOS
    assert shown_steps(tok, enc.ids) == [STEPS[i] for i in kept]  # one tag per shown step, none split


def test_the_last_step_survives_the_default_policy_and_a_step_too_long_is_cut_as_one_step():
    steps = ["x0 x1 x2", " ".join(f"y{i}" for i in range(30))]
    tok, enc = encode(QUESTION, "\n\n".join(steps), 20, prm=True)
    assert enc.truncated and enc.kept_steps == (1,) and len(enc.ids) == 20
    assert shown_steps(tok, enc.ids) == [" ".join([f"y{i}" for i in range(6)] + [f"y{i}" for i in range(24, 30)])]
    tok, enc = encode(QUESTION, "\n\n".join(steps), 20, "right", prm=True)
    assert enc.kept_steps == (0,) and shown_steps(tok, enc.ids) == ["x0 x1 x2"]


@pytest.mark.parametrize("policy, kept", [("middle", (0, 5)), ("right", (0, 1)), ("left", (4, 5))])
def test_a_prm_question_longer_than_the_window_is_cut_too(policy, kept):
    question = " ".join(f"q{i}" for i in range(30))
    tok, enc = encode(question, PRM_ANSWER, 20, policy, prm=True)
    assert enc.truncated and enc.question_cut and enc.kept_steps == kept and len(enc.ids) == 20
    assert question_words(tok, enc.ids) == [f"q{i}" for i in range(21, 30)]
    assert shown_steps(tok, enc.ids) == [STEPS[i] for i in kept]


@pytest.mark.parametrize("weights, budget, policy, kept", [
    ([1] * 10, 4, "middle", [0, 1, 8, 9]),
    ([1] * 10, 5, "middle", [0, 1, 7, 8, 9]),
    ([1] * 10, 4, "right", [0, 1, 2, 3]),
    ([1] * 10, 4, "left", [6, 7, 8, 9]),
    ([1] * 3, 9, "middle", [0, 1, 2]),
    ([2, 2, 2, 9], 10, "middle", [3]),  # the last step needs 9 of the 10: it is kept, the start has no room
    ([2, 2, 2, 5], 10, "middle", [0, 1, 3]),
    ([9, 1, 1], 4, "middle", [1, 2]),  # a long first step is dropped, the end stays
    ([9, 1, 1], 4, "right", []),
])
def test_kept_units(weights, budget, policy, kept):
    assert kept_units(weights, budget, policy) == kept


def test_mark_cut_marks_scores_and_records_a_prms_shown_steps():
    assert mark_cut(Score(0.5), Encoded((1,))) == Score(0.5)
    cut = mark_cut(Score(0.5, steps=(0.5, 0.9)), Encoded((1,), True, kept_steps=(0, 4)))
    assert cut.truncated and cut.extra == {"kept_steps": (0, 4)}
    assert mark_cut(Score(0.5, extra={"q": 1}), Encoded((1,), True)).extra == {"q": 1}
    assert mark_cut(Score(0.5), Encoded((1,), True, question_cut=True)).extra == {"question_cut": True}
    assert mark_cut(Score(0.5), Encoded((1,), True)).extra is None
