"""The TMAS hybrid RL reward (morkit.loops.tmas.rewards, .novelty), called the way TRL's GRPOTrainer calls it."""

from __future__ import annotations

import re

import pytest

from morkit.core.errors import LLMError
from morkit.core.grading import reference_answer
from morkit.llm.base import ScriptedLLM
from morkit.loops.tmas.banks import GuidelineBank
from morkit.loops.tmas.novelty import (
    JUDGE_SYSTEM,
    NoveltyJudge,
    answer_novelty,
    parse_novelty,
    strategies_of,
)
from morkit.loops.tmas.rewards import (
    HybridRewardConfig,
    bank_bonus_reward,
    completion_text,
    correctness_reward,
    hybrid_reward,
    novelty_reward,
)

RIGHT, WRONG = "So 3 x 4 = 12. The answer is 12.", "The answer is 7."
AS_TEXT = [RIGHT, WRONG, "\\boxed{12}", "no idea"]
TRL_EXTRAS = dict(completion_ids=None, trainer_state=None, log_extra=lambda column, values: None)


def as_messages(texts):
    return [[{"role": "assistant", "content": "draft"}, {"role": "assistant", "content": t}] for t in texts]


class Metrics(dict):
    """Stands in for TRL's `log_metric` kwarg."""

    def __call__(self, name, value):
        self.setdefault(name, []).append(value)


def judge_replying(classes_by_solution, record=None):
    """A scripted judge: the class for the first key found in the solution part of the prompt."""

    def reply(conversation, _):
        if record is not None:
            record.append(conversation)
        solution = conversation[-1]["content"].split("<student_solution>")[-1]
        return next(f"The approach... NOVELTY: {c}" for key, c in classes_by_solution.items() if key in solution)

    return ScriptedLLM(reply)


def test_completion_and_prompt_text_read_trl_messages():
    assert completion_text([{"role": "assistant", "content": "The answer is 12."},
                            {"role": "tool", "content": None}]) == "The answer is 12."  # the last assistant turn
    assert completion_text([{"role": "assistant", "content": None}]) == "" and completion_text(None) == ""
    assert completion_text({"role": "assistant", "content": "x"}) == "x" and completion_text("plain") == "plain"
    with pytest.raises(ValueError, match="role"):
        completion_text([1, 2])


@pytest.mark.parametrize("fmt", [list, as_messages])
def test_correctness_reward_both_completion_formats(fmt):
    completions = fmt(AS_TEXT)
    assert correctness_reward(["q"] * 4, completions, answer=["Tom has 12.\n#### 12"] * 4) == [1.0, -1.0, 1.0, -1.0]
    assert correctness_reward(None, completions, reference=["12"] * 4) == [1.0, -1.0, 1.0, -1.0]
    assert completion_text(completions[1]) == "The answer is 7."
    types = ["base", "bank", "explore", "exploit"]
    assert correctness_reward(None, completions, answer="12", rollout_type=types) == [1.0, -1.0, None, -1.0]
    with pytest.raises(ValueError, match="answer"):
        correctness_reward(["q"] * 4, completions)


def test_reference_answer_reads_bare_and_worked_references():
    assert reference_answer("\\frac{1}{2}") == "\\frac{1}{2}" and reference_answer("#### 1,200") == "1,200"
    assert reference_answer("So x = 5.\nThe answer is 5") == "5" and reference_answer(None) is None


@pytest.mark.parametrize("fmt", [list, as_messages])
def test_each_rollout_type_gets_one_reward_and_correctness_counts_once(fmt):
    # problem P: base rollouts 1 of 2 right -> p_base = 1/2; bank bonus beta * (1 - 1/2) = 0.25 for a right bank
    types = ["base", "base", "bank", "bank", "explore", "explore", "explore", "explore"]
    texts = [RIGHT, WRONG, RIGHT, WRONG, "idea A. The answer is 12.", "idea B. The answer is 12.",
             "idea C. The answer is 5.", "idea D. The answer is 5."]
    judge = judge_replying({"idea A": 1, "idea B": -1, "idea C": 1, "idea D": 0})
    reward = hybrid_reward(beta=0.5, judge=NoveltyJudge(judge))
    columns = dict(answer=["12"] * 8, problem_id=["P"] * 8, rollout_type=types, problem=["3 x 4?"] * 8,
                   guideline_bank=[[]] * 4 + [["multiply directly"]] * 4, **TRL_EXTRAS)
    prompts = [f"prompt {t}" for t in types]  # every branch has its own prompt: the id joins them
    out = reward(prompts, fmt(texts), **columns)
    assert out == pytest.approx([1.0, -1.0, 1.0 + 0.25, -1.0,   # base: +-1; bank: +-1 plus the bonus when right
                                 1.0, 0.2, -0.5, -1.0])       # explore: the table only, over (correct, novel)
    assert [p.novelty for p in reward.last[4:]] == [1, -1, 1, 0] and reward.last[2].p_base == 0.5
    assert reward.__name__ == "tmas_hybrid"


def test_the_three_parts_sum_to_the_hybrid_as_trl_sums_them():
    types = ["base", "bank", "explore", "bank", "base", "explore"]
    texts = [WRONG, RIGHT, "idea A. The answer is 12.", RIGHT, RIGHT, "idea B. The answer is 3."]
    columns = dict(answer=["12"] * 6, problem_id=["P", "P", "P", "Q", "Q", "Q"], rollout_type=types,
                   guideline_bank=[["s"]] * 6, problem=["p"] * 6)
    judge = NoveltyJudge(judge_replying({"idea A": 0, "idea B": 1}))
    parts = [correctness_reward(None, texts, **columns), bank_bonus_reward(0.4)(None, texts, **columns),
             novelty_reward(judge)(None, texts, **columns)]
    total = [sum(0.0 if v is None else v for v in row) for row in zip(*parts)]  # TRL: nansum over functions
    assert total == pytest.approx(hybrid_reward(0.4, judge)(None, texts, **columns))
    assert parts[1] == [None, pytest.approx(0.4), None, 0.0, None, None]  # P: p_base 0; Q: p_base 1
    assert parts[2][:2] == [None, None] and parts[0][2] is None


def test_bank_and_base_meet_by_problem_id_and_problems_do_not_mix():
    # A: base 1/3 right -> bonus 0.5 * 2/3; B: base right -> bonus 0; C: no base rollout -> no bonus, counted
    ids = ["A"] * 6 + ["B"] * 2 + ["C"] * 2
    texts = [RIGHT, WRONG, WRONG, RIGHT, RIGHT, WRONG, RIGHT, RIGHT, RIGHT, RIGHT]
    used = [False, False, False, True, True, True, False, True, True, True]
    prompts = [f"{i} with the bank" if u else f"{i} alone" for i, u in zip(ids, used)]
    metrics = Metrics()
    out = bank_bonus_reward(beta=0.5)(prompts, texts, answer=["12"] * 10, used_bank=used, problem_id=ids,
                                      log_metric=metrics)
    assert out == pytest.approx([None, None, None, 1 / 3, 1 / 3, 0, None, 0, 0, 0])
    assert metrics == {"tmas/bank_without_base": [2.0]}
    # without the id column the prompt is the key: "A with the bank" never meets "A alone"
    keyed_by_prompt = bank_bonus_reward(0.5)(prompts, texts, answer="12", used_bank=used)
    assert keyed_by_prompt == [None, None, None, 0.0, 0.0, 0.0, None, 0.0, 0.0, 0.0]
    # identical prompts (the old usage) still group; no prompts and no ids: one group for the call
    same = bank_bonus_reward(1.0)(["q"] * 6, texts[:6], answer="12", used_bank=used[:6])
    assert same == bank_bonus_reward(1.0)(None, texts[:6], answer="12", used_bank=used[:6])
    assert same == pytest.approx([None, None, None, 2 / 3, 2 / 3, 0])
    # conversational prompts work as keys too; a custom group column
    chats = [[{"role": "user", "content": p}] for p in ids]
    assert bank_bonus_reward(0.5)(chats, as_messages(texts), answer="12", used_bank=used) == pytest.approx(out)
    assert bank_bonus_reward(0.5, group_column="qid")(None, texts, answer="12", used_bank=used,
                                                      qid=ids) == pytest.approx(out)


def test_precomputed_p_base_column_wins_over_the_batch():
    texts = [RIGHT, RIGHT, WRONG]
    out = hybrid_reward(beta=1.0, novelty="column")(None, texts, answer="12", problem_id=["P"] * 3,
                                                   rollout_type=["bank", "base", "base"], p_base=[0.25, None, None])
    assert out == pytest.approx([1.75, 1.0, -1.0])


def test_judge_sees_problem_bank_and_solution_and_parses_the_three_classes():
    record = []
    judge = NoveltyJudge(judge_replying({"idea A": 1, "idea B": 0, "idea C": -1}, record))
    bank = GuidelineBank().apply_reply("STRATEGY: set up an equation\nSTRATEGY: work backwards").bank
    texts = ["idea A. The answer is 12.", "idea B. The answer is 12.", "idea C. The answer is 9."]
    reward = hybrid_reward(judge=judge)
    out = reward(["ignored"] * 3, texts, answer="12", problem_id="P", rollout_type="explore",
                 problem="Tom has 3 bags of 4 apples.", guideline_bank=[bank] * 3)
    assert out == [1.0, 0.2, -1.0]  # class 0 is "the same as a listed strategy": not novel
    assert len(record) == 3 and record[0][0]["content"] == JUDGE_SYSTEM
    user = record[1][-1]["content"]
    assert "Tom has 3 bags of 4 apples." in user and "- set up an equation\n- work backwards" in user
    assert "idea B" in user and "idea A" not in user


def test_empty_bank_unparsed_reply_and_failing_judge():
    calls = []
    chatty = ScriptedLLM(lambda conv, i: calls.append(conv) or "I think it is quite new!")
    metrics = Metrics()
    texts = ["The answer is 12.", "The answer is 5."]
    columns = dict(answer="12", rollout_type="explore", guideline_bank=[[], ["a strategy"]], log_metric=metrics)
    reward = hybrid_reward(judge=NoveltyJudge(chatty))
    # empty bank: nothing to repeat -> class 1 without a call; unparsed reply -> fallback class 0 (not novel)
    assert reward([[{"role": "user", "content": "Q?"}]] * 2, texts, **columns) == [1.0, -1.0]
    assert len(calls) == 1 and "<problem>\nQ?\n</problem>" in calls[0][-1]["content"]
    assert [p.novelty_source for p in reward.last] == ["empty_bank", "unparsed"]
    assert [p.judge_reply for p in reward.last] == ["", "I think it is quite new!"]
    assert metrics["tmas/judge_unparsed"] == [1.0] and metrics["tmas/judge_failed"] == [0.0]

    def fail(conv, i):
        raise LLMError("judge server down")

    failing = hybrid_reward(judge=NoveltyJudge(ScriptedLLM(fail), fallback=-1))
    assert failing(["Q"] * 2, texts, **columns) == [1.0, -1.0]
    assert failing.last[1].novelty_source == "judge_failed"


@pytest.mark.parametrize("reply, expected", [
    ("NOVELTY: 1", 1), ("novelty=-1", -1), ("Novelty: 0.", 0), ("NOVELTY: \u22121", -1), ("-1", -1),
    ("NOVELTY: 1 ... on reflection NOVELTY: -1", -1), ("NOVELTY: +1", 1), ("new approach", None), ("NOVELTY: 5", None),
    ("", None), ('```json\n{"identified_strategy": "casework on n", "classification": -1}\n```', -1),
    ('{"identified_strategy": "x", "classification": "0"}', 0), ('{"identified_strategy": "a", "classification": 1', 1),
    ('"classification": <1, 0 or -1>', None), ('{"classification": 10}', None)])
def test_parse_novelty(reply, expected):
    assert parse_novelty(reply) == expected


def test_strategies_of_accepts_banks_json_lists_and_text():
    bank = GuidelineBank().apply_reply("STRATEGY: draw a table").bank
    assert strategies_of(bank) == strategies_of(bank.to_json()) == strategies_of(["draw a table"]) == ("draw a table",)
    assert strategies_of(bank.render()) == ("draw a table",) and strategies_of(GuidelineBank().render()) == ()
    assert strategies_of(None) == ()
    with pytest.raises(ValueError, match="guideline bank"):
        strategies_of(3)


def test_fallback_novelty_sources_column_and_answers():
    texts = ["The answer is 12.", "The answer is 12.", "The answer is 9.", "The answer is 7."]
    by_column = hybrid_reward(novelty="column")
    assert by_column(None, texts, answer="12", rollout_type="explore", novelty_class=[1, -1, 0, -1]) == [
        1.0, 0.2, -1.0, -1.0]
    assert by_column(None, texts, answer="12", rollout_type="explore", novel=[True, False, True, False]) == [
        1.0, 0.2, -0.5, -1.0]
    seen = [["7"], ["12.0", "3"], [], ["7"]]
    assert answer_novelty(texts, seen) == [1, 0, 1, 0]
    assert novelty_reward(novelty="answers")(None, texts, answer=["12"] * 4, seen_answers=seen) == [
        1.0, 0.2, -0.5, -1.0]  # no rollout_type column: every row is scored as exploring
    with pytest.raises(ValueError, match="novelty_class"):
        by_column(None, texts, answer="12", rollout_type="explore", novelty_class=[2, 1, 1, 1])


def test_custom_table_and_errors():
    config = dict(correct_novel=2.0, wrong_not_novel=-3.0)
    reward = hybrid_reward(novelty="column", **config)
    assert reward(None, [RIGHT, WRONG], answer="12", rollout_type="explore", novelty_class=[1, -1]) == [2.0, -3.0]
    assert HybridRewardConfig().novelty_value(False, 0) == -1.0
    with pytest.raises(ValueError, match="finite"):
        HybridRewardConfig(correct_not_novel=float("nan"))
    with pytest.raises(ValueError, match="undetermined"):
        HybridRewardConfig(undetermined="maybe")
    with pytest.raises(ValueError, match="NoveltyJudge"):
        hybrid_reward()
    with pytest.raises(ValueError, match="guideline_bank"):
        hybrid_reward(judge=NoveltyJudge(ScriptedLLM(lambda c, i: "")))(None, [RIGHT], answer="12",
                                                                       rollout_type="explore")
    with pytest.raises(ValueError, match="rollout_type"):
        hybrid_reward(novelty="column")(None, [RIGHT], answer="12", rollout_type="sideways")
    for empty in (None, "", "none"):  # a missing type is not silently a base rollout
        with pytest.raises(ValueError, match="rollout_type"):
            hybrid_reward(novelty="column")(None, [RIGHT, WRONG], answer="12", rollout_type=["base", empty])
    for bad in ("new", [1], 2, 0.5):
        with pytest.raises(ValueError, match=f"novelty_class values must be 1, 0 or -1, got {re.escape(repr(bad))}"):
            hybrid_reward(novelty="column")(None, [RIGHT], answer="12", rollout_type="explore", novelty_class=[bad])
    assert hybrid_reward(novelty="column")(None, [RIGHT, WRONG], answer="12", rollout_type="explore",
                                           novelty_class=["1", -1.0]) == [1.0, -1.0]  # numbers as text or floats
    with pytest.raises(ValueError, match="used_bank"):
        bank_bonus_reward()(None, [RIGHT], answer="12")
    with pytest.raises(ValueError, match="beta"):
        HybridRewardConfig(beta=-1.0)
    with pytest.raises(ValueError, match="fallback"):
        NoveltyJudge(ScriptedLLM(lambda c, i: ""), fallback=2)


def test_without_rollout_types_every_row_is_base_and_the_judge_is_not_asked():
    llm = ScriptedLLM(lambda c, i: "NOVELTY: 1")
    reward = hybrid_reward(judge=NoveltyJudge(llm))
    assert reward(["q"] * 2, [RIGHT, WRONG], answer="12") == [1.0, -1.0] and llm.calls == 0
    assert [(p.rollout_type, p.p_base, p.bonus) for p in reward.last] == [("base", 0.5, 0.0)] * 2
