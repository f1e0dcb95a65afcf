"""TMAS loop (morkit.loops.tmas.loop), pinned by what each agent is sent: the explore/exploit coin, a seed per
sample, what the solution, summary, experience and guideline agents see, verification, and the ablations
(banks, stop rules, failures and curves: test_tmas_memory.py; the rewards: test_tmas_rewards.py). The LLM
and verifiers are the recording fakes of tests/fakes/tmas.py."""

from __future__ import annotations

import random

import pytest
from fakes.tmas import (
    EXPLOIT_MARK,
    EXPLORE_MARK,
    PROBLEM,
    FakeVerifier,
    Roles,
    SampledVerifier,
    answers,
    events,
    run,
    seeded,
)

from morkit.core.grading import extract_answer
from morkit.core.types import Verdict
from morkit.llm.base import SamplingParams
from morkit.loops.tmas.banks import GuidelineBank
from morkit.loops.tmas.sampling import derive_seed
from morkit.verify.combined import CombinedVerifier
from morkit.verify.critic import LLMVerifier

# -- exploration / exploitation -----------------------------------------------------------------------


def test_branches_follow_the_seeded_coin():
    roles = Roles(answers(12, 7, 5, 9))
    result = run(roles, epsilon=0.5, seed=0)
    coin = random.Random(0)
    expected = [["explore" if coin.random() < 0.5 else "exploit" for _ in range(4)] for _ in range(2)]
    assert expected == [["exploit", "exploit", "explore", "explore"], ["exploit", "explore", "exploit", "explore"]]
    assert [e["branches"] for e in events(result, "generate")] == expected
    assert [[s["branch"] for s in e["solutions"]] for e in events(result, "scores")] == expected
    again = run(Roles(answers(12, 7, 5, 9)), epsilon=0.5, seed=0)
    assert [e["branches"] for e in events(again, "generate")] == expected
    other = run(Roles(answers(12, 7, 5, 9)), epsilon=0.5, seed=1)
    assert [e["branches"] for e in events(other, "generate")] != expected
    # the prompts follow the branches: round 2's solutions 2 and 4 explore
    prompts = [roles.user("solver", k) for k in range(4, 8)]
    assert [EXPLORE_MARK in p for p in prompts] == [False, True, False, True]
    assert [EXPLOIT_MARK in p for p in prompts] == [True, False, True, False]


@pytest.mark.parametrize("epsilon, branch", [(0.0, "exploit"), (1.0, "explore")])
def test_epsilon_zero_never_explores_one_always(epsilon, branch):
    result = run(Roles(answers(12, 7)), epsilon=epsilon, iterations=3)
    assert [e["branches"] for e in events(result, "generate")] == [[branch] * 4] * 3


# -- seeds --------------------------------------------------------------------------------------------


def test_every_sample_gets_its_own_seed_in_its_own_call():
    roles = Roles(seeded)
    result = run(roles, seed=5, epsilon=0.0)
    solver = roles.params["solver"]
    assert roles.batches["solver"] == [1] * 8  # one call per sample
    expected = [derive_seed(5, "solve", t, i) for t in (1, 2) for i in range(4)]
    assert [p.seed for p in solver] == expected and len(set(expected)) == 8
    assert [e["seeds"] for e in events(result, "generate")] == [expected[:4], expected[4:]]
    assert [r["seed"] for r in result.state["rollouts"]] == expected
    # round 1's four prompts are identical, yet a seed-honouring server returns four different solutions
    assert len({roles.user("solver", k) for k in range(4)}) == 1
    assert len({s["answer"] for s in events(result, "generate")[0]["solutions"]}) == 4
    # the summaries' seeds are per sample too; the agents' derive from the step
    assert [p.seed for p in roles.params["summary"]] == [derive_seed(5, "summary", 1, i) for i in range(4)]
    assert [p.seed for p in roles.params["experience"]] == [derive_seed(5, "experience", 1, 0)]
    assert run(Roles(seeded), seed=5, epsilon=0.0).state["rollouts"] == result.state["rollouts"]
    other = Roles(seeded)
    run(other, seed=6, epsilon=0.0)
    assert not {p.seed for p in other.params["solver"]} & set(expected)


def test_per_call_and_no_seed_modes_batch_the_round():
    roles = Roles(seeded)
    result = run(roles, seed=5, epsilon=0.0, seed_mode="per_call", iterations=1, stop_on_agreement=True)
    assert roles.batches["solver"] == [4] and {p.seed for p in roles.params["solver"]} == {derive_seed(5, "solve", 1)}
    # the failure this mode has on a seed-honouring server: identical prompts, identical solutions
    assert len({s["answer"] for s in events(result, "generate")[0]["solutions"]}) == 1
    roles = Roles(seeded)
    run(roles, seed_mode="none", epsilon=0.0)
    assert roles.batches["solver"] == [4, 4] and all(p.seed is None for p in roles.params["solver"])


def test_parallel_calls_keep_each_sample_in_its_place():
    one = run(Roles(seeded), epsilon=0.5)
    many = run(Roles(seeded), epsilon=0.5, parallel_calls=4)
    assert many.state["rollouts"] == one.state["rollouts"] and len(one.state["rollouts"]) == 8


# -- what each agent sees -----------------------------------------------------------------------------


def _summary_by_answer(conversation, k, params):
    user = conversation[-1]["content"]
    answer = extract_answer(user.split("## Solution")[1].split("\n", 1)[1].split("\n\n")[0])
    return f"Summary for answer {answer}: verified {user.count('### Verification ')} times."


def test_exploit_prompt_carries_all_n_solution_summary_pairs():
    roles = Roles(answers(12, 7, 5, 9), summary=_summary_by_answer,
                  experience="ADD result: 3 x 4 = 12\nADD avoid: adding 3 + 4", guidelines="STRATEGY: multiply")
    run(roles, epsilon=0.0, verifications=1)
    first, second = roles.user("solver", 0), roles.user("solver", 4)
    assert EXPLOIT_MARK not in first and first.endswith(f"## Problem\n{PROBLEM}")
    blocks = second.split("### Previous Attempt ")[1:]
    assert len(blocks) == 4  # all N solutions of round 1, in order, each with its own summary
    for number, (block, answer) in enumerate(zip(blocks, (12, 7, 5, 9)), 1):
        assert block.startswith(f"{number}\n3 boxes times 4 apples. The answer is {answer}.")
        assert f"#### Verification Summary\nSummary for answer {answer}: verified 1 times." in block
    assert "score" not in second.lower() and "(answer" not in second  # the paper shows no scores or answers
    assert "[1] result: 3 x 4 = 12" in second and "[2] avoid: adding 3 + 4" in second
    roles = Roles(answers(12, 7, 5, 9), summary=_summary_by_answer)
    run(roles, epsilon=0.0, verifications=1, show_scores=True)  # the switch that shows them
    assert "### Previous Attempt 2 (answer 7, score 0.300)" in roles.user("solver", 4)
    roles = Roles(answers(12, 7, 5, 9))
    run(roles, epsilon=0.0, top_k=2)  # the switch back to the k best only
    assert roles.user("solver", 4).count("### Previous Attempt ") == 2


def test_summary_agent_condenses_each_candidates_m_verifications():
    verifier = SampledVerifier()
    roles = Roles(answers(12, 7, 5, 9), summary=_summary_by_answer)
    result = run(roles, verifier, verifications=3, epsilon=0.0)
    assert len(roles.seen["summary"]) == 4 and roles.batches["summary"] == [1] * 4  # one per candidate
    for k, answer in enumerate((12, 7, 5, 9)):
        prompt = roles.user("summary", k)
        assert f"The answer is {answer}." in prompt and prompt.count(f"checked answer {answer}") == 3
        assert "score" not in prompt.lower() and "(answer" not in prompt
    (summary,) = events(result, "summary")
    assert [s["text"] for s in summary["summaries"]] == [
        f"Summary for answer {a}: verified 3 times." for a in (12, 7, 5, 9)]
    assert [r["summary"] for r in result.state["rollouts"][:4]] == [s["text"] for s in summary["summaries"]]


def test_experience_and_guideline_agents_see_all_n_solutions():
    roles = Roles(answers(12, 7, 5, 9), summary=_summary_by_answer)
    run(roles, iterations=2, epsilon=0.0, verifications=1)
    experience, guidelines = roles.user("experience", 0), roles.user("guidelines", 0)
    for answer in (12, 7, 5, 9):
        assert f"The answer is {answer}." in experience and f"Summary for answer {answer}" in experience
        assert f"The answer is {answer}." in guidelines
    assert experience.count("### Rollout ") == 4 and guidelines.count("### Rollout ") == 4
    assert "Aim for **20-35 entries** in total across both categories" in experience
    roles = Roles(answers(12, 7))
    run(roles, experience_min=2, experience_capacity=None, epsilon=0.0)
    assert "Aim for **at least 2 entries**" in roles.user("experience", 0)


def test_guideline_bank_keeps_every_strategy_even_past_the_prompt_limit():
    strategies = lambda c, k, p: f"STRATEGY: strategy number {k} with a fairly long description\nSTRATEGY: x{k}"  # noqa: E731
    roles = Roles(answers(12, 7), guidelines=strategies)
    result = run(roles, iterations=6, epsilon=1.0, guideline_prompt_chars=120)
    kept = result.state["guidelines"]["strategies"]
    assert kept == [s for k in range(5) for s in (f"strategy number {k} with a fairly long description", f"x{k}")]
    assert all(set(e["added"]) <= set(kept) for e in events(result, "guidelines"))
    last = roles.user("solver", 20)  # round 6 explores with 10 strategies, too long for 120 characters
    assert "older strategies not shown for length; they were tried too]" in last
    assert "- strategy number 4 with a fairly long description\n- x4" in last and "strategy number 0" not in last
    roles = Roles(answers(12, 7), guidelines=strategies)
    unlimited = run(roles, iterations=6, epsilon=1.0)
    assert all(f"- x{k}" in roles.user("solver", 20) for k in range(5))  # no limit: every strategy shown
    assert unlimited.state["guidelines"]["strategies"] == kept


def test_guideline_bank_dedupes_and_never_evicts():
    update = GuidelineBank().apply_reply(
        "STRATEGY: multiply boxes by apples\nI think that\n- strategy: Multiply boxes by apples.\n"
        "STRATEGY: count one by one\nSTRATEGY:   \nSTRATEGY: draw a table")
    assert update.added == ("multiply boxes by apples", "count one by one", "draw a table")
    assert update.bank.strategies == update.added
    assert [r.reason for r in update.rejected] == ["not a STRATEGY line", "already in the bank", "empty text"]
    bank = GuidelineBank()
    for k in range(200):
        bank = bank.apply_reply(f"STRATEGY: idea {k}").bank
    assert len(bank.strategies) == 200
    text = bank.render(max_chars=120)
    shown = text.count("\n- idea ")
    assert len(text) <= 120 and shown == 5 and text.endswith("- idea 198\n- idea 199")
    assert text.startswith("[195 older strategies not shown for length; they were tried too]")
    assert bank.render(max_chars=10).endswith("]\n- idea 199")  # at least the newest one
    assert GuidelineBank().render() == "(none yet)"


# -- verification -------------------------------------------------------------------------------------


def test_verification_passes_are_sampled_at_the_configured_temperature():
    def critic(conversation, k, params):
        return f"Looks fine. Score: {params.seed % 11}/10"

    roles = Roles(answers(12, 7), critic=critic)
    verifier = LLMVerifier(roles, SamplingParams(temperature=0.0, max_tokens=50))
    result = run(roles, verifier, iterations=1, solutions=2, verifications=3, verify_temperature=0.9, seed=3)
    params = roles.params["critic"]
    assert roles.batches["critic"] == [2, 2, 2]  # three passes, each over both solutions
    assert {p.temperature for p in params} == {0.9} and {p.max_tokens for p in params} == {50}
    seeds = [derive_seed(3, "verify", 1, m) for m in (1, 2, 3)]
    assert [p.seed for p in params[::2]] == seeds and len(set(seeds)) == 3
    verify = events(result, "verify")
    assert [(e["verification"], e["seed"], e["temperature"]) for e in verify] == list(zip((1, 2, 3), seeds, [0.9] * 3))
    passes = [min(s % 11, 10) / 10 for s in seeds]
    assert result.state["rollouts"][0]["pass_scores"] == pytest.approx(passes)
    assert result.score == pytest.approx(sum(passes) / 3)
    assert verifier.params.temperature == 0.0  # the caller's verifier is not changed
    # a critic nested in a combined verifier is sampled too; verify_max_tokens overrides its length
    roles = Roles(answers(12), critic=critic)
    combined = CombinedVerifier(FakeVerifier(), LLMVerifier(roles), weight=1.0)
    run(roles, combined, iterations=1, solutions=1, verifications=2, verify_temperature=0.5, verify_max_tokens=20)
    assert [(p.temperature, p.max_tokens) for p in roles.params["critic"]] == [(0.5, 20)] * 2


def test_a_deterministic_verifier_is_called_once_for_all_passes():
    verifier = FakeVerifier()
    result = run(Roles(answers(12, 7)), verifier, iterations=1, verifications=8)
    assert verifier.calls == 1
    (verify,) = events(result, "verify")
    assert verify["repeats"] == 8 and verify["deterministic"] is True
    assert result.state["rollouts"][0]["pass_scores"] == [0.9] and result.score == 0.9


def test_sampled_verifier_resamples_each_critic_and_leaves_its_own_verifiers_alone():
    from dataclasses import dataclass
    from typing import Any

    from morkit.loops.tmas.sampling import sampled_verifier

    @dataclass(frozen=True)
    class CriticWithHelper:  # a critic (llm + params) that holds a verifier of its own
        llm: Any
        params: SamplingParams
        helper: Any = None

        def verify(self, question, answers, context=()):
            return [Verdict(0.5)] * len(answers)

    helper = CriticWithHelper("helper-llm", SamplingParams(temperature=0.0, max_tokens=5))
    outer = CriticWithHelper("critic-llm", SamplingParams(temperature=0.0, max_tokens=9), helper)
    sampled = sampled_verifier(outer, 0.7, 3)
    assert (sampled.params.temperature, sampled.params.seed, sampled.params.max_tokens) == (0.7, 3, 9)
    assert sampled.helper is helper  # below the critic nothing is resampled
    combined = sampled_verifier(CombinedVerifier(FakeVerifier(), outer, weight=1.0), 0.5, 1)
    assert combined.critic.params.temperature == 0.5 and combined.mor == FakeVerifier()
    assert sampled_verifier(FakeVerifier(), 0.7, 3) is None  # deterministic: nothing to sample


def test_verifier_sees_all_solutions_and_scores_are_averaged():
    class TwoPasses(SampledVerifier):
        def verify(self, question, answers, context=()):
            verdicts = super().verify(question, answers, context)
            return [Verdict(0.2 if self.calls == 1 else 0.6, v.feedback) for v in verdicts]

    verifier = TwoPasses()
    result = run(Roles(answers(12)), verifier, iterations=1, solutions=1, verifications=2)
    assert [e["scores"] for e in events(result, "verify")] == [[0.2], [0.6]]
    assert result.score == pytest.approx(0.4)
    assert result.state["best"]["feedback"] == ["checked answer 12", "checked answer 12"]
    texts = [s["text"] for s in events(result, "generate")[0]["solutions"]]
    assert [(a, c) for a, c, _ in verifier.log] == [(texts, texts)] * 2
    assert [p.temperature for _, _, p in verifier.log] == [0.7, 0.7]


# -- ablations ----------------------------------------------------------------------------------------


def test_without_the_experience_bank():
    roles = Roles(answers(12, 7), experience="ADD result: 3 x 4 = 12", guidelines="STRATEGY: multiply")
    result = run(roles, experience=False, epsilon=0.0, iterations=3)
    assert roles.seen["experience"] == [] and events(result, "experience") == []
    assert not any("## Experience Context" in roles.user("solver", k) for k in range(12))
    assert EXPLOIT_MARK in roles.user("solver", 4) and len(roles.seen["guidelines"]) == 2
    assert result.state["experience"] is None and events(result, "memory")[0]["experience"] is None
    with_bank = Roles(answers(12, 7), experience="ADD result: 3 x 4 = 12")
    run(with_bank, epsilon=0.0)
    assert "## Experience Context" in with_bank.user("solver", 4)


def test_without_the_guideline_bank():
    roles = Roles(answers(12, 7), guidelines="STRATEGY: multiply")
    result = run(roles, guidelines=False, epsilon=1.0, iterations=3)
    assert roles.seen["guidelines"] == [] and events(result, "guidelines") == []
    explore = [roles.user("solver", k) for k in range(12)]
    assert not any(EXPLORE_MARK in p for p in explore)
    assert all("approach of your own" in p for p in explore)
    assert result.state["guidelines"] is None and len(roles.seen["experience"]) == 2


def test_without_verification():
    verifier = FakeVerifier()
    roles = Roles(answers(7, 12, 12, 5), experience="ADD avoid: adding")
    result = run(roles, verifier, verifications=0, epsilon=0.0, reference="12")
    assert verifier.calls == 0 and events(result, "verify") == [] and roles.seen["summary"] == []
    second = roles.user("solver", 4)
    assert second.count("### Previous Attempt ") == 4 and "#### Verification Summary" not in second
    assert "without verification summaries: this run has no verification" in second
    assert "#### Verification Summary" not in roles.user("experience", 0)
    assert all(r["score"] is None for r in result.state["rollouts"])
    # no scores: the answer is the last round's majority (12, twice), its first occurrence
    assert result.score is None and "12" in result.answer and result.state["best"]["index"] == 1
    assert [p["correct"] for p in result.state["curve"]] == [True, True]


def test_vote_selection_picks_the_last_rounds_majority():
    verifier = FakeVerifier(scores={"12": 0.2, "7": 0.9})
    result = run(Roles(answers(7, 12, 12, 5)), verifier, select="vote")
    assert "12" in result.answer and result.state["best"]["iteration"] == 2
    assert "7" in run(Roles(answers(7, 12, 12, 5)), FakeVerifier(scores={"12": 0.2, "7": 0.9})).answer
