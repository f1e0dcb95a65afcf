"""TMAS as its paper specifies (issue 31, second pass): scores from different verify calls are compared only
through one re-score (item 2); the guideline agent sees summaries, prompts carry the paper's words and no
scores or extracted answers (item 4); the memory agents are fed analysis, never score strings (item 5)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from fakes.tmas import FakeVerifier, Roles, answers, events, run

from morkit.core.errors import InputError
from morkit.core.types import Verdict
from morkit.loops.tmas.analysis import writes_analysis
from morkit.loops.tmas.loop import TMAS, TMASConfig
from morkit.loops.tmas.prompts import PAPER_WORDING
from morkit.question_pool.ensembles import Ensemble, Normalizer
from morkit.reward_models.rules.consensus import MathConsensus
from morkit.verify.combined import CombinedVerifier
from morkit.verify.critic import LLMVerifier
from morkit.verify.mor import MoRVerifier


@dataclass
class ShiftingVerifier(FakeVerifier):
    """Scores by answer plus `shift` per earlier call: a later call scores the same answer higher, as within-call
    z-scores or a learned ranker's features may, so its scores compare only within one call."""

    shift: float = 2.0
    absolute_scores: bool = False

    def verify(self, question, answers, context=()):
        verdicts = super().verify(question, answers, context)
        return [Verdict(v.score + self.shift * (self.calls - 1), v.feedback) for v in verdicts]


def consensus_mor() -> MoRVerifier:
    """A real MoR ensemble of one set-level member (math-consensus): it writes scores only, relative to siblings."""
    normalizer = Normalizer("zscore", {"math-consensus": 0.5}, {"math-consensus": 0.25})
    return MoRVerifier(Ensemble(("math-consensus",), (1.0,), "sum"), "pool-zscore", normalizer,
                       {"math-consensus": MathConsensus()})


class MeteredRoles(Roles):
    """Roles with `stream`, so that it is an LLM and a critic on it is charged to the loop's budget."""

    def stream(self, conversation, params=None):
        yield self.chat([conversation], params)[0].texts[0]


def prompts_of(roles) -> list[str]:
    return [c[-1]["content"] for convs in roles.seen.values() for c in convs]


# -- item 2: scores compared across calls -------------------------------------------------------------------


def test_rounds_scored_in_different_calls_are_compared_in_one_rescore():
    # round 1: 12 (0.9) and 7 (0.3); round 2's 7 and 5 come from the next call, shifted by 2: 7 reads 2.3
    verifier = ShiftingVerifier()
    result = run(Roles(answers(12, 7, 7, 5)), verifier, solutions=2, verifications=1, reference="12")
    assert "12" in result.answer and result.state["best"]["iteration"] == 1  # main answered round 2's 7
    assert result.state["chosen_by"] == "rescore" and result.score == pytest.approx(0.9 + 4)
    (rescore,) = events(result, "rescore")
    assert rescore["finalists"] == [{"iteration": 1, "index": 0}, {"iteration": 2, "index": 0}]
    assert rescore["scores"] == pytest.approx([4.9, 4.3]) and rescore["chosen"] == {"iteration": 1, "index": 0}
    finals = [r["text"] for r in result.state["rollouts"] if (r["iteration"], r["index"]) in ((1, 0), (2, 0))]
    assert verifier.log[2][:2] == (finals, finals)  # one call; the finalists are each other's only siblings
    assert [(p["correct"], p["rule"]) for p in result.state["curve"]] == [(True, "score"), (True, "rescore")]
    everything = ShiftingVerifier()
    run(Roles(answers(12, 7, 7, 5)), everything, solutions=2, verifications=1, rescore_context="all")
    assert len(everything.log[2][1]) == 4  # the switch: every solution so far as the siblings
    absolute = FakeVerifier()
    plain = run(Roles(answers(12, 7, 7, 5)), absolute, solutions=2, verifications=1)
    assert absolute.calls == 2 and events(plain, "rescore") == [] and plain.state["chosen_by"] == "score"


def test_each_curve_point_is_what_a_run_stopped_there_answers():
    solver = answers(12, 7, 7, 5, 9, 3)
    full = run(Roles(solver), ShiftingVerifier(), iterations=3, solutions=2, verifications=1)
    for t in (1, 2, 3):
        short = run(Roles(solver), ShiftingVerifier(), iterations=t, solutions=2, verifications=1)
        point = full.state["curve"][t - 1]
        assert point["selected"] == {k: short.state["best"][k] for k in ("iteration", "index")}
        assert point["score"] == short.score


def test_the_rescore_is_a_greedy_charged_call_and_a_failed_one_is_recorded():
    roles = MeteredRoles(answers(12, 7, 7, 5), critic="Checked. Score: 5/10")
    both = CombinedVerifier(ShiftingVerifier(writes_analysis=False), LLMVerifier(roles))
    result = run(roles, both, solutions=2, verifications=1)
    critic = roles.params["critic"]
    assert len(critic) == 2 + 2 + 2 and critic[-1].temperature == 0.0  # two rounds of two, then two finalists
    # solutions, critiques, summaries, the two bank agents, and the re-score's critiques
    assert result.calls == 4 + 4 + 2 + 1 + 1 + 2 and "12" in result.answer
    failing = run(Roles(answers(12, 7, 7, 5)), ShiftingVerifier(fail_on=(3,)), solutions=2, verifications=1)
    assert [(e["step"], e["error"]) for e in events(failing, "error")] == [("rescore", "ScoreError")]
    assert events(failing, "rescore")[0]["fallback"] == "the newest round's best"
    assert failing.state["chosen_by"] == "newest" and failing.state["best"]["iteration"] == 2


def test_stop_score_is_refused_for_scores_that_compare_only_within_a_call():
    with pytest.raises(InputError, match="stop_score .*shifting"):
        TMAS(Roles(answers(12)), ShiftingVerifier(name="shifting"), TMASConfig(stop_score=0.5))
    with pytest.raises(InputError, match="stop_score"):
        TMAS(Roles(answers(12)), consensus_mor(), TMASConfig(stop_score=0.5))  # consensus reads the siblings
    assert TMAS(Roles(answers(12)), FakeVerifier(), TMASConfig(stop_score=0.5)).config.stop_score == 0.5


# -- item 4: what the agents see, in the paper's words ------------------------------------------------------


def test_the_guideline_agent_sees_each_solution_with_its_summary():
    roles = Roles(answers(12, 7), summary=lambda c, k, p: f"summary number {k}")
    run(roles, verifications=1, epsilon=0.0)
    prompt = roles.user("guidelines", 0)
    assert all(f"The answer is {a}.\n\n#### Verification Summary\nsummary number {k}" in prompt
               for k, a in enumerate((12, 7, 12, 7)))


def test_no_prompt_shows_a_score_or_an_extracted_answer_unless_asked():
    def roles():
        return Roles(answers(12, 7), experience="ADD result: 3 x 4 = 12", guidelines="STRATEGY: multiply")

    quiet = roles()
    run(quiet, epsilon=0.5, verifications=2)
    assert not any(re.search(r"score \d|\(answer ", p) for p in prompts_of(quiet))
    shown = roles()
    run(shown, epsilon=0.0, verifications=2, show_scores=True)
    assert "### Previous Attempt 1 (answer 12, score 0.900)" in shown.user("solver", 4)
    assert "### Rollout 2 (answer 7, score 0.300)" in shown.user("experience", 0)
    assert "### Verification 1 (score 0.900)" in shown.user("summary", 0)


PAPER_WORDS = {  # sentences of the published prompts (tmas.txt) that each agent's prompt must carry
    ("solver", 0): ["Draft your solution mentally or in your scratchpad.",
                    "Merely citing a result without showing why it applies or how it works is considered a failure.",
                    "Present *only* your best, finalized version.", "Here is your task input:"],
    ("solver", 4): ["Study each **Previous Attempt** and its **Verification Summary**.",
                    "Do NOT repeat logic that has already been identified as incorrect",
                    "Present *only* your best, finalized, and fully corrected version."],
    ("solver", 5): ["pursue a direction that is **fundamentally different** from everything listed here."],
    ("experience", 0): ["**Verifier-backed**: It must be explicitly confirmed correct by the verification summary.",
                        "Prioritize insights confirmed consistently across multiple rollouts.",
                        "Aim for **20-35 entries** in total across both categories."],
    ("guidelines", 0): ["**Memory of exploration**: It records which broad strategic directions have already been "
                        "tried, so the solver does not waste computation repeating the same approach."],
}


def test_prompts_carry_the_papers_published_wording(paper_text):
    roles = Roles(answers(12, 7))
    run(roles, epsilon=0.5, verifications=1)  # round 2: solution 3 explores (the seeded coin)
    squash = lambda text: re.sub(r"\s+", "", text).lower()  # noqa: E731
    for (role, call), sentences in PAPER_WORDS.items():
        prompt = squash(roles.user(role, call))
        assert all(squash(s) in prompt for s in sentences), (role, call)
    # the quotes are the paper's (its rendering breaks some words and drops a list item's period)
    text = squash(paper_text("tmas"))
    assert all(squash(s).rstrip(".") in text for sentences in PAPER_WORDS.values() for s in sentences)
    quoted = [sentence for constant in PAPER_WORDING for line in constant.format(size="20-35 entries").split("\n")
              for sentence in re.split(r"(?<=\.) ", re.sub(r"^\d+\. ", "", line))]
    assert len(quoted) > 30 and [q for q in quoted if squash(q).rstrip(".") not in text] == []


# -- item 5: analysis, never score strings, for the memory agents -------------------------------------------


def test_an_mor_verifier_alone_feeds_the_memory_agents_solutions_not_score_strings():
    roles = Roles(answers(12, 7, 12, 5), experience="ADD result: 3 x 4 = 12", guidelines="STRATEGY: multiply")
    result = run(roles, consensus_mor(), epsilon=0.0)
    assert roles.seen["summary"] == []  # nothing to summarise but numbers
    assert not any("ensemble score" in p or "#### Verification Summary" in p for p in prompts_of(roles))
    assert "without verification summaries: the verifier writes scores, not analysis" in roles.user("experience", 0)
    start = events(result, "start")[0]
    assert start["verifier_writes_analysis"] is False and "--verifier both" in start["memory_input"]
    assert events(result, "summary")[0]["skipped"] == start["memory_input"]
    assert result.state["rollouts"][0]["feedback"][0].startswith("ensemble score")  # kept in the trace


def test_with_both_the_summary_reads_the_critique_and_the_mor_line_stays_in_the_trace():
    roles = Roles(answers(12, 7), critic="Step 2 multiplies correctly. Score: 9/10")
    both = CombinedVerifier(consensus_mor(), LLMVerifier(roles))
    result = run(roles, both, verifications=1, epsilon=0.0)
    summary = roles.user("summary", 0)
    assert "Step 2 multiplies correctly. Score: 9/10" in summary and "ensemble score" not in summary
    assert not any("ensemble score" in p for p in prompts_of(roles))
    assert result.state["rollouts"][0]["feedback"] == ["Step 2 multiplies correctly. Score: 9/10"]
    assert events(result, "verify")[0]["score_feedback"][0][0].startswith("ensemble score")
    assert writes_analysis(both) and not writes_analysis(consensus_mor())  # found by structure: MoR holds no critic
