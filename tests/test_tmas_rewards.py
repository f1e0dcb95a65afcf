"""The TMAS hybrid RL reward functions (morkit.loops.tmas.rewards), as TRL's GRPOTrainer calls them."""

from __future__ import annotations

import pytest

from morkit.core.grading import reference_answer
from morkit.loops.tmas.rewards import (
    NOVELTY_TABLE,
    bank_bonus_reward,
    completion_text,
    correctness_reward,
    hybrid_reward,
    novelty_reward,
)

AS_TEXT = ["So 3 x 4 = 12. The answer is 12.", "The answer is 7.", "\\boxed{12}", "no idea"]


def as_messages(texts):
    return [[{"role": "assistant", "content": "draft"}, {"role": "assistant", "content": t}] for t in texts]


@pytest.mark.parametrize("fmt", [list, as_messages])
def test_correctness_reward_both_completion_formats(fmt):
    completions = fmt(AS_TEXT)
    assert correctness_reward(["q"] * 4, completions, answer=["Tom has 12.\n#### 12"] * 4) == [1.0, -1.0, 1.0, -1.0]
    assert correctness_reward(None, completions, reference=["12"] * 4) == [1.0, -1.0, 1.0, -1.0]
    assert completion_text(completions[1]) == "The answer is 7."
    with pytest.raises(ValueError, match="answer"):
        correctness_reward(["q"] * 4, completions)


def test_reference_answer_reads_bare_and_worked_references():
    assert reference_answer("\\frac{1}{2}") == "\\frac{1}{2}" and reference_answer("#### 1,200") == "1,200"
    assert reference_answer("So x = 5.\nThe answer is 5") == "5" and reference_answer(None) is None


@pytest.mark.parametrize("fmt", [list, as_messages])
def test_novelty_reward_follows_the_table(fmt):
    completions = fmt(["The answer is 12.", "The answer is 12.", "The answer is 9.", "The answer is 7."])
    novel = [True, False, True, False]
    assert novelty_reward(None, completions, answer=["12"] * 4, novel=novel) == [1.0, 0.2, -0.5, -1.0]
    seen = [["7"], ["12.0", "3"], [], ["7"]]
    assert novelty_reward(None, completions, answer=["12"] * 4, seen_answers=seen) == [1.0, 0.2, -0.5, -1.0]
    assert novelty_reward(None, fmt(["no answer"]), answer=["12"], seen_answers=[[]]) == [NOVELTY_TABLE[(False, False)]]
    with pytest.raises(ValueError, match="novel"):
        novelty_reward(None, completions, answer=["12"] * 4)


def test_bank_bonus_arithmetic_per_prompt_group():
    # prompt A: bank-free rollouts 1 of 3 correct -> p_base = 1/3, bonus 0.5 * 2/3 for correct bank users
    # prompt B: bank-free rollout correct -> p_base = 1, bonus 0; prompt C: no bank-free rollout -> 0
    prompts = ["A"] * 6 + ["B"] * 2 + ["C"] * 2
    right, wrong = "The answer is 12.", "The answer is 5."
    completions = [right, wrong, wrong, right, right, wrong, right, right, right, right]
    used = [False, False, False, True, True, True, False, True, True, True]
    out = bank_bonus_reward(beta=0.5)(prompts, completions, answer=["12"] * 10, used_bank=used)
    assert out == pytest.approx([0, 0, 0, 1 / 3, 1 / 3, 0, 0, 0, 0, 0])
    conversational = [[{"role": "user", "content": p}] for p in prompts]
    assert bank_bonus_reward(0.5)(conversational, as_messages(completions), answer=["12"] * 10, used_bank=used) == out
    whole_batch = bank_bonus_reward(1.0)(None, completions[:6], answer="12", used_bank=used[:6])
    assert whole_batch == pytest.approx([0, 0, 0, 2 / 3, 2 / 3, 0])
    assert bank_bonus_reward().__name__ == "bank_bonus_reward"


def test_hybrid_reward_is_the_sum():
    prompts = ["A"] * 4
    completions = ["The answer is 12.", "The answer is 12.", "The answer is 5.", "The answer is 12."]
    columns = dict(answer=["12"] * 4, used_bank=[False, False, False, True], novel=[True, False, True, True],
                   completion_ids=[[1]] * 4, trainer_state=None)
    # p_base = 2/3 -> bonus 0.3 * 1/3 = 0.1 for the last rollout
    expected = [1 + 0 + 1.0, 1 + 0 + 0.2, -1 + 0 - 0.5, 1 + 0.1 + 1.0]
    assert hybrid_reward(beta=0.3)(prompts, completions, **columns) == pytest.approx(expected)
    parts = [reward(prompts, completions, **columns)
             for reward in (correctness_reward, bank_bonus_reward(0.3), novelty_reward)]
    assert [sum(p) for p in zip(*parts)] == pytest.approx(expected)
    assert hybrid_reward().__name__ == "hybrid_reward"


