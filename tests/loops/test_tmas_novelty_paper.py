"""The TMAS exploration reward as the paper states it (issue 31, item 1): the judge's three classes, the binary
novelty table, class -1, and where an unjudged rollout lands."""

from __future__ import annotations

import pytest

from morkit.core.errors import LLMError
from morkit.llm.base import ScriptedLLM
from morkit.loops.tmas.novelty import JUDGE_USER, NoveltyJudge, answer_novelty, parse_novelty
from morkit.loops.tmas.rewards import HybridRewardConfig, hybrid_reward

RIGHT, WRONG = "We multiply: 3 x 4 = 12. The answer is 12.", "We add: 3 + 4 = 7. The answer is 7."
EXPLORE = dict(answer="12", rollout_type="explore", problem="Tom has 3 bags of 4 apples. How many?",
               guideline_bank=[["multiply the bags by the apples per bag"]] * 2)


def judge(reply):
    return NoveltyJudge(ScriptedLLM(lambda conversation, i: reply))


def test_a_repeated_strategy_judged_0_earns_the_papers_0_2():
    # the paper's judge answers 0 for "essentially the same as a listed strategy": its table pays +0.2 when
    # right and -1.0 when wrong (main paid an invented middle row, 0.6 and -0.75)
    reward = hybrid_reward(judge=judge("NOVELTY: 0"))
    assert reward(None, [RIGHT, WRONG], **EXPLORE) == [0.2, -1.0]
    assert [(p.novelty, p.novel) for p in reward.last] == [(0, False), (0, False)]
    assert HybridRewardConfig().novelty_value(True, 0) == 0.2


def test_the_table_is_the_papers_four_cells():
    config = HybridRewardConfig()
    assert {(c, n): config.novelty_value(c, n) for c in (True, False) for n in (1, 0)} == {
        (True, 1): 1.0, (True, 0): 0.2, (False, 1): -0.5, (False, 0): -1.0}


def test_class_minus_1_cannot_determine_is_not_novel_unless_switched():
    vague = judge('```json\n{"identified_strategy": "unclear", "classification": -1}\n```')
    by_default = hybrid_reward(judge=vague)
    assert by_default(None, [RIGHT, WRONG], **EXPLORE) == [0.2, -1.0]
    assert [(p.novelty, p.novel, p.novelty_source) for p in by_default.last] == [(-1, False, "judge")] * 2
    as_novel = hybrid_reward(judge=vague, undetermined="novel")
    assert as_novel(None, [RIGHT, WRONG], **EXPLORE) == [1.0, -0.5]
    metrics = {}
    by_default(None, [RIGHT, WRONG], log_metric=lambda k, v: metrics.setdefault(k, v), **EXPLORE)
    assert metrics["tmas/novelty_undetermined"] == 2.0 and metrics["tmas/novel_fraction"] == 0.0


def test_an_unparsed_reply_or_a_failed_call_lands_on_the_not_novel_row():
    rambling = hybrid_reward(judge=judge("Honestly, this looks rather fresh to me!"))
    assert rambling(None, [RIGHT, WRONG], **EXPLORE) == [0.2, -1.0]  # main: 0.6 and -0.75
    assert [p.novelty_source for p in rambling.last] == ["unparsed", "unparsed"]

    def down(conversation, i):
        raise LLMError("judge server down")

    failed = hybrid_reward(judge=NoveltyJudge(ScriptedLLM(down)))
    assert failed(None, [RIGHT, WRONG], **EXPLORE) == [0.2, -1.0]
    assert [p.novelty_source for p in failed.last] == ["judge_failed", "judge_failed"]
    # the switch: a fallback of 1 pays the novel row
    generous = hybrid_reward(judge=NoveltyJudge(ScriptedLLM(down), fallback=1))
    assert generous(None, [RIGHT, WRONG], **EXPLORE) == [1.0, -0.5]


def test_the_judge_prompt_is_the_papers_and_its_json_reply_parses(paper_text):
    seen = []
    llm = ScriptedLLM(lambda conversation, i: seen.append(conversation) or
                      '```json\n{"identified_strategy": "counting by multiplication", "classification": 0}\n```')
    reward = hybrid_reward(judge=NoveltyJudge(llm))
    assert reward(None, [RIGHT], **{**EXPLORE, "guideline_bank": [["multiply"]]}) == [0.2]
    user = seen[0][-1]["content"]
    for paper_words in (  # the published judge prompt's legible lines
            "**Compare** it against each entry in <already_attempted_strategies>",
            "- **1**: The student's strategy is genuinely different from ALL listed strategies.",
            "- **0**: The student's strategy is essentially the same as at least one listed strategy.",
            "- **-1**: Cannot determine the student's strategy (solution too vague/incomplete).",
            "Respond in a JSON code block:", '"identified_strategy": "Brief description of th'):
        assert paper_words in user and paper_words in JUDGE_USER.replace("{{", "{")
        assert paper_words in paper_text("tmas")
    assert "<already_attempted_strategies>\n- multiply\n</already_attempted_strategies>" in user
    assert parse_novelty('{"identified_strategy": "x", "classification": 1}') == 1


def test_column_and_answer_modes_use_the_same_classes():
    texts = [RIGHT, RIGHT, WRONG, "I cannot finish this."]
    by_bool = hybrid_reward(novelty="column")
    # a bool column's False is "not novel" (class 0), not a third class
    assert by_bool(None, texts, answer="12", rollout_type="explore", novel=[True, False, False, True]) == [
        1.0, 0.2, -1.0, -0.5]
    assert [p.novelty for p in by_bool.last] == [1, 0, 0, 1]
    # answers: a new final answer 1, a seen one 0 ("the same"), no final answer -1 ("cannot determine")
    seen = [["7"], ["12"], [], []]
    assert answer_novelty(texts, seen) == [1, 0, 1, -1]
    by_answers = hybrid_reward(novelty="answers")
    assert by_answers(None, texts, answer="12", rollout_type="explore", seen_answers=seen) == [1.0, 0.2, -0.5, -1.0]
    assert hybrid_reward(novelty="answers", undetermined="novel")(
        None, texts[3:], answer="12", rollout_type="explore", seen_answers=seen[3:]) == [-0.5]
    with pytest.raises(ValueError, match="novelty class"):
        HybridRewardConfig().novelty_value(True, 2)


@pytest.mark.parametrize("reply, expected", [
    ("**Classification:** 1", 1), ("Classification: **-1**", -1), ("**Classify**: 0", 0),
    ('{"identified_strategy": "splits the set into class 1 and class 2', None),  # cut off: prose is no class
])
def test_a_class_is_read_through_markdown_and_never_from_prose(reply, expected):
    assert parse_novelty(reply) == expected


def test_a_judge_backend_that_drops_replies_is_an_error_not_a_misaligned_table():
    from morkit.core.errors import ScoreError
    from morkit.llm.base import Completion

    class Dropping:
        name = "dropping"

        def chat(self, conversations, params):
            return [Completion(("1",))]  # one reply, however many were asked

    judge = NoveltyJudge(Dropping())
    with pytest.raises(ScoreError, match="1 replies for 2 conversations"):
        judge.judge(["p", "p"], ["s1", "s2"], [["a strategy"], ["a strategy"]])
