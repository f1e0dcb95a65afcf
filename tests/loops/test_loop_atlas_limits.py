"""ATLAS loop limits and failures: the explore cap, failing solvers / orchestrator / verifier, call and token
budgets, final-answer failures and their fallbacks, the reference kept out of every prompt; one real SmolLM2 run."""

from __future__ import annotations

import json

import pytest
from fakes.atlas import (
    PROBLEM,
    REFERENCE,
    ScriptedVerifier,
    atlas,
    is_final_turn,
    kinds,
    orchestrator,
    solver,
)

from morkit.core.errors import LLMError
from morkit.llm.base import SamplingParams
from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Effort, Solver
from morkit.loops.base import Budget

# -- failures, caps and budgets ---------------------------------------------------------------------

def test_explore_cap_when_the_orchestrator_never_stops():
    orch = orchestrator(["ACTION: explore"] * 10)
    result = atlas(orch, solver("The answer is 42."), max_explores=3).run(PROBLEM)
    assert result.state["explores"] == 3 and result.stop_reason == "explore budget spent (3 of 3)"
    assert len(result.state["decisions"]) == 3 and sum(map(is_final_turn, orch.conversations)) == 1
    assert "No more explores are possible" in orch.conversations[-1][-1]["content"]
    assert result.state["final_source"] == "synthesis"


def test_solver_error_is_evidence_and_the_loop_goes_on():
    orch = orchestrator(["ACTION: explore solver=flaky", "ACTION: explore", "ACTION: stop"])
    flaky = solver(LLMError("server said 503"), name="flaky")
    result = atlas(orch, {"good": solver("The answer is 42."), "flaky": flaky}, ScriptedVerifier()).run(PROBLEM)
    first, second = result.state["evidence"]
    assert first["error"] == "LLMError: server said 503" and first["text"] is None and first["score"] is None
    assert second["final"] == "42" and second["error"] is None
    assert result.state["solver_usage"] == {"flaky": 1, "good": 1}
    assert "Candidate #1 (solver=flaky effort=- prompt=-): the solver failed: LLMError: server said 503" in \
        orch.conversations[1][-1]["content"]


def test_orchestrator_error_takes_the_default_and_turns_still_alternate():
    orch = orchestrator([LLMError("timeout"), LLMError("timeout")])
    result = atlas(orch, solver("The answer is 42.")).run(PROBLEM)
    assert result.state["explores"] == 1
    assert [(d["action"], d["source"]) for d in result.state["decisions"]] == [("explore", "error"), ("stop", "error")]
    assert "orchestrator call failed: timeout" in result.state["decisions"][0]["notes"][0]
    final = orch.conversations[-1]
    assert [m["role"] for m in final] == ["system", "user"] and PROBLEM in final[1]["content"]
    assert "Result of explore #1" in final[1]["content"] and result.answer == "Both agree. The answer is 42."


def test_call_budget_stops_cleanly_with_the_best_answer_so_far():
    orch = orchestrator(["ACTION: explore"] * 10)
    result = atlas(orch, solver("The answer is 42."), ScriptedVerifier(), budget=Budget(max_calls=2)).run(PROBLEM)
    assert result.calls == 2 and result.stop_reason == "call budget spent (2 of 2)"
    assert result.state["final_source"] == "fallback:best-verified" and result.answer == "The answer is 42."
    assert result.score == pytest.approx(0.9) and "synthesis_failed" in kinds(result) and "fallback" in kinds(result)


def test_call_budget_keeps_the_last_call_for_the_final_answer():
    orch = orchestrator(["ACTION: explore"] * 10)
    result = atlas(orch, solver("The answer is 41."), budget=Budget(max_calls=5)).run(PROBLEM)
    assert result.calls == 5 and result.state["explores"] == 2
    assert result.stop_reason.startswith("call budget: last call kept for the final answer")
    assert result.state["final_source"] == "synthesis"


def test_token_budget_refusal_mid_round_falls_back_to_best_verified():
    # word counts stand in for tokens: each decision 2, each solver answer 8
    orch = orchestrator(["ACTION: explore"] * 10)
    solve = solver("Adding the two numbers, the answer is 41.", "Adding the two numbers, the answer is 42.")
    result = atlas(orch, solve, ScriptedVerifier(), budget=Budget(max_tokens=21)).run(PROBLEM)
    assert result.state["explores"] == 2 and result.tokens == 22
    assert result.stop_reason.startswith("token budget spent") and "explore_refused" in kinds(result)
    assert result.state["final_source"] == "fallback:best-verified"
    assert result.state["final_answer"] == "42" and result.score == pytest.approx(0.9)


def test_synthesis_failure_falls_back_to_majority_without_verifier():
    orch = orchestrator(["ACTION: explore"] * 3, synthesis=LLMError("synthesis broke"))
    solve = solver("The answer is 41.", "So it is 42.0. The answer is 42.", "The answer is 42")
    result = atlas(orch, solve, max_explores=3).run(PROBLEM)
    assert result.state["final_source"] == "fallback:majority" and result.state["synthesis"] is None
    assert result.answer == "So it is 42.0. The answer is 42." and result.score is None
    failed = [e for e in result.trace if e["kind"] == "synthesis_failed"]
    assert failed and "synthesis broke" in failed[0]["error"]


def test_synthesis_failure_falls_back_to_best_verified_and_empty_synthesis_counts_as_failure():
    orch = orchestrator(["ACTION: explore"] * 3, synthesis="   ")
    solve = solver("The answer is 41.", "The answer is 41.", "The answer is 42.")
    result = atlas(orch, solve, ScriptedVerifier(), max_explores=3).run(PROBLEM)
    assert result.state["final_source"] == "fallback:best-verified" and result.answer == "The answer is 42."
    assert [r["of"] for r in result.state["rescored"]] == [1, 2, 3]
    assert [e for e in result.trace if e["kind"] == "synthesis_failed"][0]["error"] == "empty synthesis"


def test_no_answer_at_all_returns_empty():
    orch = orchestrator(["ACTION: explore"] * 2, synthesis=LLMError("down"))
    result = atlas(orch, solver(LLMError("down")), max_explores=2).run(PROBLEM)
    assert result.answer == "" and result.state["final_source"] == "none" and result.state["explores"] == 2


def test_verifier_failure_loses_scores_not_the_run():
    class Broken:
        name = "broken"

        def verify(self, question, answers, context=()):
            raise RuntimeError("rm crashed")

    orch = orchestrator(["ACTION: explore", "ACTION: stop"])
    result = atlas(orch, solver("The answer is 42."), Broken()).run(PROBLEM)
    assert result.answer == "Both agree. The answer is 42." and result.score is None
    assert result.state["evidence"][0]["score"] is None
    assert len([e for e in result.trace if e["kind"] == "verify_error"]) == 1  # the one end-of-run call


def test_reference_is_never_in_any_prompt():
    orch = orchestrator(["ACTION: explore solver=a effort=high", "garbage", "ACTION: explore solver=b",
                         "ACTION: explore solver=zzz", "ACTION: stop"])
    a, b = solver("The answer is 42.", name="a"), solver(LLMError("boom"), "The answer is 41.", name="b")
    verifier = ScriptedVerifier()
    result = atlas(orch, {"a": a, "b": b}, verifier, max_explores=4, min_explores=2).run(PROBLEM, reference=REFERENCE)
    assert result.state["explores"] == 4 and result.state["solver_usage"] == {"a": 3, "b": 1}
    texts = [m["content"] for llm in (orch, a, b) for c in llm.conversations for m in c]
    texts += [t for q, answers, context in verifier.calls for t in (q, *answers, *context)]
    assert texts and not any(REFERENCE in t for t in texts)
    check = result.state["reference_check"]
    assert check["reference"] == REFERENCE and check["correct"] is False
    assert len(check["explores_correct"]) == result.state["explores"]


def test_reference_check_in_state():
    orch = orchestrator(["ACTION: explore", "ACTION: explore", "ACTION: stop"])
    solve = solver("The answer is 42.", "The answer is 41.")
    result = atlas(orch, solve).run(PROBLEM, reference="40 + 2 = 42\n#### 42")
    assert result.state["reference_check"] == {"reference": "42", "correct": True, "explores_correct": [True, False]}


# -- the real model ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_real_smollm2_run_has_the_expected_structure():
    from morkit.llm.local import LocalLLM

    llm = LocalLLM(device="cpu")
    llm.loaded  # load outside the run: the run's seconds are generation only
    params = SamplingParams(temperature=0.0, max_tokens=48)
    config = ATLASConfig(max_explores=2, min_explores=1, temperature=0.0, max_tokens=24, synthesis_max_tokens=32,
                         efforts={"low": Effort(24), "medium": Effort(48, "Solve step by step.")})
    loop = ATLAS(llm, {"smol": Solver(llm, params)}, None, config, Budget(max_calls=6))
    problem = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
               "How many clips did Natalia sell altogether in April and May?")
    result = loop.run(problem, reference="72")
    print(f"real ATLAS run: {result.seconds:.1f}s, {result.calls} calls, stop: {result.stop_reason}")
    assert 1 <= result.state["explores"] <= 2 and result.calls >= 3
    assert result.state["final_source"] in ("synthesis", "fallback:majority", "give_up")
    assert isinstance(result.answer, str) and (result.answer or result.state["gave_up"])
    assert all(d["action"] in ("explore", "stop", "give_up") for d in result.state["decisions"])
    assert sum(result.state["solver_usage"].values()) == result.state["explores"]
    assert set(result.state["reference_check"]) == {"reference", "correct", "explores_correct"}
    json.dumps(result.to_json())


def test_call_budget_keeps_the_calls_an_llm_critic_needs_to_verify_the_final_answer():
    from morkit.verify.critic import LLMVerifier

    critic = solver("Looks right. Score: 9/10", name="critic")
    orch = orchestrator(["ACTION: explore"] * 10)
    result = atlas(orch, solver("The answer is 42."), LLMVerifier(critic), budget=Budget(max_calls=7),
                   show_scores=True).run(PROBLEM)
    # a round is a decision, an explore and its score; the end is the final answer and its score
    assert result.state["explores"] == 1 and result.calls == 5 and len(critic.seen) == 2
    assert result.stop_reason.startswith("call budget: last call kept for the final answer")
    assert "verify_error" not in kinds(result) and result.state["final_source"] == "synthesis"
    assert result.score == pytest.approx(0.9)
