"""ATLAS as its paper specifies it (issue 31, second pass): explore effort is the solver's reasoning-effort
setting, never a token cap unless asked; no morkit tally; no verifier calls the paper would not make; scores that
are compared come from one verify call; the orchestrator's principles are the paper's published words."""

from __future__ import annotations

import pytest
from fakes.atlas import PROBLEM, ScriptedVerifier, atlas, notes, orchestrator, shifting_verifier, solver, text_of
from fakes.http_server import FakeServer

from morkit.core.errors import InputError, LLMError
from morkit.llm.base import SamplingParams, takes_reasoning_effort
from morkit.llm.openai_compat import OpenAIChatLLM
from morkit.loops.atlas.loop import Solver

# -- item 11: effort is the model's reasoning-effort setting --------------------------------------------------

EFFORTS = ["ACTION: explore effort=high", "ACTION: explore effort=low", "ACTION: explore", "ACTION: stop"]


def test_effort_is_the_solvers_reasoning_setting_and_never_cuts_the_answer():
    solve = solver("The answer is 42.", reasoning=True)
    spec = Solver(solve, SamplingParams(max_tokens=4096), "Solve it.")
    result = atlas(orchestrator(EFFORTS), spec, max_explores=3).run(PROBLEM)
    params = [p for _, p in solve.seen]
    assert [p.reasoning_effort for p in params] == ["high", "low", None]
    assert [p.max_tokens for p in params] == [4096] * 3  # the solver's own ceiling, whatever the effort
    assert [c[0]["content"] for c in solve.conversations] == ["Solve it."] * 3  # no effort instruction either
    assert [e["reasoning_effort"] for e in result.state["evidence"]] == ["high", "low", None]
    assert notes(result) == []


def test_an_effort_the_backend_cannot_express_is_noted_not_turned_into_a_cap():
    solve = solver("The answer is 42.")  # like the local backend: no reasoning-effort setting
    orch = orchestrator(EFFORTS)
    result = atlas(orch, Solver(solve, SamplingParams(max_tokens=4096)), max_explores=3).run(PROBLEM)
    assert [p.max_tokens for _, p in solve.seen] == [4096] * 3
    assert all(p.reasoning_effort is None for _, p in solve.seen)
    told = "Note: effort 'high' was not applied: solver 'default' has no reasoning-effort setting"
    assert told in orch.conversations[1][-1]["content"]
    assert sum("was not applied" in n for n in notes(result)) == 2  # high and low; the bare explore asked none


def test_token_cap_efforts_stay_a_switch_for_small_models():
    solve = solver("The answer is 42.", reasoning=True)
    atlas(orchestrator(EFFORTS), Solver(solve, SamplingParams(max_tokens=4096), "Solve it."),
          effort_mode="token_cap", max_explores=3).run(PROBLEM)
    assert [p.max_tokens for _, p in solve.seen] == [512, 128, 4096]
    assert all(p.reasoning_effort is None for _, p in solve.seen)
    assert solve.conversations[1][0]["content"] == "Solve it. Answer briefly."


def test_the_openai_client_sends_the_effort_as_reasoning_effort():
    server = FakeServer(chat=lambda messages: "The answer is 42.")
    try:
        llm = OpenAIChatLLM("reasoner", server.v1, timeout=5.0, retries=0)
        assert takes_reasoning_effort(llm) and not takes_reasoning_effort(solver("x"))
        spec = Solver(llm, SamplingParams(max_tokens=4096))
        result = atlas(orchestrator(EFFORTS), {"r": spec}, max_explores=3).run(PROBLEM)
        assert result.state["explores"] == 3
        sent = [(p.get("reasoning_effort"), p["max_tokens"]) for p in server.payloads]
        assert sent == [("high", 4096), ("low", 4096), (None, 4096)]
    finally:
        server.close()
    with pytest.raises(InputError, match="reasoning_effort"):
        SamplingParams(reasoning_effort="Very high")


# -- item 12: no tally, no verification the paper would not make ------------------------------------------------

def test_no_answer_tally_unless_switched_on():
    texts = ("The answer is 42.", "The answer is 42.", "The answer is 41.")
    orch = orchestrator(["ACTION: explore"] * 3)
    atlas(orch, solver(*texts), max_explores=3).run(PROBLEM)
    assert not any("Final answers so far" in text_of(c) for c in orch.conversations)
    tallied = orchestrator(["ACTION: explore"] * 3)
    atlas(tallied, solver(*texts), max_explores=3, show_tally=True).run(PROBLEM)
    assert "Final answers so far: 42 (x2), 41 (x1)." in tallied.conversations[-1][-1]["content"]


def test_hidden_scores_mean_one_verify_call_at_the_end():
    texts = ("The answer is 41.", "The answer is 42.", "The answer is 41.")
    verifier = ScriptedVerifier()  # absolute: the final answer is scored alone
    result = atlas(orchestrator(["ACTION: explore"] * 3), solver(*texts), verifier, max_explores=3).run(PROBLEM)
    assert [answers for _, answers, _ in verifier.calls] == [["Both agree. The answer is 42."]]
    assert result.score == pytest.approx(0.9) and all(e["score"] is None for e in result.state["evidence"])
    relative = ScriptedVerifier(absolute_scores=False)  # its score means something only beside the candidates
    atlas(orchestrator(["ACTION: explore"] * 3), solver(*texts), relative, max_explores=3).run(PROBLEM)
    assert [len(answers) for _, answers, _ in relative.calls] == [3]  # the synthesis and the 2 distinct texts
    fallback = ScriptedVerifier()
    result = atlas(orchestrator(["ACTION: explore"] * 3, synthesis=LLMError("down")), solver(*texts), fallback,
                   max_explores=3).run(PROBLEM)
    assert [answers for _, answers, _ in fallback.calls] == [["The answer is 41.", "The answer is 42."]]
    assert result.state["final_source"] == "fallback:best-verified" and result.state["final_answer"] == "42"


# -- item 2: scores compared come from one call -------------------------------------------------------------------

def test_shown_scores_of_a_shifting_verifier_come_from_one_call_per_turn():
    texts = ("Right. The answer is 42.", "Wrong. The answer is 41.", "Wrong again. The answer is 41.")
    verifier = shifting_verifier(1.0)  # +1 per call: scored one by one, the last candidate would look best
    orch = orchestrator(["ACTION: explore"] * 3 + ["ACTION: stop"], synthesis=LLMError("down"))
    result = atlas(orch, solver(*texts), verifier, max_explores=4, show_scores=True).run(PROBLEM)
    last_turn = orch.conversations[3][-1]["content"]
    assert "Verifier scores, from one call over the 3 candidates so far" in last_turn
    assert "#1 2.900, #2 2.200, #3 2.200." in last_turn  # the third call: every candidate in it
    assert "Verifier score:" not in text_of(orch.conversations[-1])  # no score from a call of its own
    # the fallback compares the candidates within one more call, and picks the right one
    assert [len(answers) for _, answers, _ in verifier.calls] == [1, 2, 3, 3]
    assert result.state["final_source"] == "fallback:best-verified" and result.state["final_answer"] == "42"
    assert result.score == pytest.approx(3.9)


def test_absolute_shown_scores_are_reused_by_the_fallback():
    verifier = ScriptedVerifier()
    orch = orchestrator(["ACTION: explore"] * 2, synthesis=LLMError("down"))
    result = atlas(orch, solver("The answer is 41.", "The answer is 42."), verifier, max_explores=2,
                   show_scores=True).run(PROBLEM)
    assert [answers for _, answers, _ in verifier.calls] == [["The answer is 41."], ["The answer is 42."]]
    assert result.state["final_answer"] == "42" and result.score == pytest.approx(0.9)
    assert "Verifier score: 0.200." in text_of(orch.conversations[-1])


# -- the paper's published principles ------------------------------------------------------------------------------

def test_the_orchestrator_reads_the_papers_principles(paper_text):
    paper = paper_text("atlas")  # as the paper's text renders them (list numbers and some final periods dropped)
    for quote in ("You cannot solve problems yourself.", "Self-reported confidence is poorly calibrated",
                  "same answer through DIFFERENT methods. Same-method agreement may reflect a shared misconception.",
                  "CRITICAL: Each explore costs budget. Giving up is valid",
                  "Every decision must cite which principle justifies the action.",
                  "Candidates from different models that agree provide stronger evidence",
                  "(a) which model to use and why, citing cost data"):
        assert quote in paper, quote
    orch = orchestrator(["ACTION: explore"])
    atlas(orch, solver("The answer is 42.")).run(PROBLEM)
    system = orch.conversations[0][0]["content"]
    for sentence in ("1. You cannot solve problems yourself.", "Self-reported confidence is poorly calibrated.",
                     "same answer through DIFFERENT methods. Same-method agreement may reflect a shared misconception.",
                     "ADDITIONAL_PROMPT is your tool for forcing method diversity",
                     "5. CRITICAL: Each explore costs budget. Giving up is valid",
                     "Every decision must cite which principle justifies the action."):
        assert sentence in system, sentence
    plain = orchestrator(["ACTION: explore"])
    atlas(plain, solver("The answer is 42."), additional_prompt=False, give_up=False).run(PROBLEM)
    system = plain.conversations[0][0]["content"]
    assert "may reflect a shared misconception rather than true convergence." in system
    assert "Explicitly cite which principle justifies your action." in system
    assert "submit an empty answer" not in system and "Giving up" not in system
    priced = orchestrator(["ACTION: explore"])
    atlas(priced, {"a": solver("x"), "b": solver("y")}, solver_costs=("a=1", "b=3")).run(PROBLEM)
    system = priced.conversations[0][0]["content"]
    assert "Candidates from different models that agree provide stronger evidence" in system
    assert "(a) which model to use and why, citing cost data" in system
