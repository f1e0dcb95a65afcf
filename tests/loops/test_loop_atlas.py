"""ATLAS loop: the orchestrator's conversation (reasoning, whole candidates, pool budget), its actions (explore with
additional prompt, stop, give up), ATLAS-MM costs, and synthesis in its own conversation vs the integrator switch.

Control flow runs on recording scripted LLMs (tests/fakes/atlas.py); caps, budgets and fallbacks: test_loop_atlas_limits.py."""

from __future__ import annotations

import json

import pytest
from fakes.atlas import (
    PROBLEM,
    ScriptedVerifier,
    atlas,
    is_final_turn,
    kinds,
    notes,
    orchestrator,
    solver,
    text_of,
)

from morkit.core.errors import InputError, LLMError
from morkit.llm.base import SamplingParams
from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Effort, Solver, parse_action
from morkit.loops.atlas.prompts import INTEGRATOR_SYSTEM, SYNTHESIS_HEADING
from morkit.loops.settings import configure

# -- protocol -------------------------------------------------------------------------------------

def test_parse_action_takes_the_last_action_line_after_the_reasoning():
    assert parse_action("ACTION: stop").action == "stop"
    parsed = parse_action("  action :  Explore solver=big effort=high prompt=plan")
    assert (parsed.action, dict(parsed.args)) == ("explore", {"solver": "big", "effort": "high", "prompt": "plan"})
    parsed = parse_action("First I thought:\nACTION: explore solver=a\nbut the answers agree.\nACTION: stop")
    assert parsed.action == "stop" and parsed.reasoning.endswith("but the answers agree.")
    for text in ("ACTION: give_up", "ACTION: give up", "action: GIVEUP", "ACTION: give-up"):
        assert parse_action(text).action == "give_up", text
    parsed = parse_action("Try algebra.\nACTION: explore Solver=a solver=b junk\nADDITIONAL_PROMPT: Use algebra.\n"
                          "Check units.")
    assert dict(parsed.args) == {"solver": "a"} and parsed.additional_prompt == "Use algebra.\nCheck units."
    assert parse_action("ADDITIONAL_PROMPT: early\nACTION: explore").additional_prompt is None
    assert parse_action("ACTION: stop\nADDITIONAL_PROMPT: x").additional_prompt is None
    for text in ("", "I would explore more", "The ACTION: stop", "ACTION: explored", "**ACTION: stop**",
                 "ACTION - stop", "__import__('os').system('x')"):
        assert parse_action(text) is None, text


def test_config_and_solver_validation():
    for bad in ({"max_explores": 0}, {"max_explores": 2, "min_explores": 3}, {"efforts": {"very high": Effort(64)}},
                {"efforts": {"x": "high"}}, {"pool_tokens": 0}, {"synthesis": "committee"},
                {"effort_mode": "thinking"}, {"solver_costs": ("big",)}, {"solver_costs": ("big=-1",)},
                {"solver_costs": ("big=cheap",)}):
        with pytest.raises(InputError):
            ATLASConfig(**bad)
    for bad in ({"max_tokens": 0}, {}, {"reasoning": "Very High"}, {"reasoning": ""}):
        with pytest.raises(InputError):
            Effort(**bad)
    for bad in ({"bad name": solver("1")}, {}, {"a": "not a solver"}):
        with pytest.raises(InputError):
            ATLAS(orchestrator([]), bad)
    with pytest.raises(InputError):
        ATLAS(orchestrator([]), {"a": solver("1")}, default_solver="b")
    with pytest.raises(InputError, match="unknown solvers"):
        atlas(orchestrator([]), {"a": solver("1")}, solver_costs=("b=1",))
    one = ATLAS(orchestrator([]), solver("1"))
    assert list(one.solvers) == ["default"] and one.default_solver == "default" and one.costs == {}
    pair = ATLAS(orchestrator([]), {"a": (solver("1"), SamplingParams(max_tokens=9)), "b": Solver(solver("2"))},
                 default_solver="b")
    assert pair.solvers["a"].params.max_tokens == 9 and pair.default_solver == "b"


def test_every_new_knob_is_settable_from_text():
    config = configure(ATLASConfig, [("solver_costs", "big=3,small=0.5"), ("synthesis", "integrator"),
                                     ("reason_first", "false"), ("give_up", "no"), ("pool_tokens", "900"),
                                     ("additional_prompt", "off"), ("show_scores", "false"), ("show_tally", "on"),
                                     ("effort_mode", "token_cap")])
    assert config.solver_costs == ("big=3", "small=0.5") and config.synthesis == "integrator"
    assert (config.reason_first, config.give_up, config.additional_prompt, config.show_scores) == (False,) * 4
    assert config.pool_tokens == 900 and config.show_tally is True and config.effort_mode == "token_cap"


# -- the orchestrator's conversation ----------------------------------------------------------------

def test_explores_until_it_stops_then_answers_in_the_same_conversation():
    orch = orchestrator(["Nothing yet.\nACTION: explore", "One answer only.\nACTION: explore",
                         "42 twice?\nACTION: stop"])
    verifier = ScriptedVerifier()
    result = atlas(orch, solver("So 40+2=42. The answer is 42.", "The answer is 41."), verifier,
                   show_scores=True).run(PROBLEM)
    assert result.loop == "atlas" and result.stop_reason == "orchestrator stopped"
    assert result.answer == "Both agree. The answer is 42." and result.score == pytest.approx(0.9)
    state = result.state
    assert state["explores"] == 2 and state["final_source"] == "synthesis" and state["final_answer"] == "42"
    assert state["synthesis_mode"] == "orchestrator" and state["gave_up"] is False
    assert [(e["final"], e["score"]) for e in state["evidence"]] == [("42", 0.9), ("41", 0.2)]
    assert [(d["action"], d["reasoning"]) for d in state["decisions"]] == [
        ("explore", "Nothing yet."), ("explore", "One answer only."), ("stop", "42 twice?")]
    assert result.calls == 3 + 2 + 1 and len(orch.seen) == 4
    assert kinds(result)[0] == "start" and kinds(result)[-1] == "stop" and "synthesis" in kinds(result)
    # an absolute verifier with scores shown: each explore once, then the final answer alone
    assert [answers for _, answers, _ in verifier.calls] == [
        ["So 40+2=42. The answer is 42."], ["The answer is 41."], ["Both agree. The answer is 42."]]
    # ONE conversation: every call extends the previous one; roles alternate; the final turn holds all evidence
    convs = orch.conversations
    for before, after in zip(convs, convs[1:]):
        assert after[: len(before)] == before
    final = convs[-1]
    assert [m["role"] for m in final] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert [m["content"] for m in final if m["role"] == "assistant"] == [d["raw"] for d in state["decisions"]]
    assert state["conversation"][: len(final)] == final and state["conversation"][-1]["content"] == result.answer
    assert "Final answer: 42. Verifier score: 0.900." in final[3]["content"]
    assert "Final answers so far" not in text_of(final)  # no morkit tally unless show_tally
    assert SYNTHESIS_HEADING in final[-1]["content"]
    json.dumps(result.to_json())  # state and trace are JSON-able


def test_orchestrator_reasons_before_acting_within_its_token_budget():
    reasoning = "Step 1: nothing is known.\nStep 2: a high-effort solver is worth it.\n"
    orch = orchestrator([reasoning + "ACTION: explore effort=high"])
    result = atlas(orch, solver("The answer is 42."), max_tokens=700, synthesis_max_tokens=300).run(PROBLEM)
    decision = result.state["decisions"][0]
    assert decision["reasoning"] == reasoning.strip() and decision["effort"] == "high"
    assert [p.max_tokens for _, p in orch.seen] == [700, 700, 300]
    system = orch.conversations[0][0]["content"]
    assert "first think about the evidence in free text, then end your reply with exactly one ACTION line" in system
    assert orch.conversations[1][2]["content"] == reasoning + "ACTION: explore effort=high"  # kept whole, in context
    terse = orchestrator(["ACTION: explore"])
    atlas(terse, solver("The answer is 42."), reason_first=False).run(PROBLEM)
    assert "Reply with exactly one ACTION line (and, for explore, an optional ADDITIONAL_PROMPT) and nothing else." \
        in terse.conversations[0][0]["content"]
    assert terse.conversations[0][-1]["content"].endswith("Your ACTION line:")


def test_orchestrator_sees_every_candidate_whole():
    long = "\n".join(f"Line {i}: 40 + 2 is still {40 + 2}, checked again from another angle." for i in range(120))
    orch = orchestrator(["ACTION: explore", "ACTION: explore", "ACTION: stop"])
    result = atlas(orch, solver(long + "\nThe answer is 42.", "Short. The answer is 41.")).run(PROBLEM)
    assert len(long) > 5000 and result.state["left_out"] == 0
    final = text_of(orch.conversations[-1])
    assert f"<response>\n{long}\nThe answer is 42.\n</response>" in final
    assert "<response>\nShort. The answer is 41.\n</response>" in final
    assert "Candidate #2 (solver=default effort=- prompt=-):" in final


def test_pool_budget_leaves_out_whole_candidates_with_a_note():
    big = "Long derivation. " * 60 + "The answer is 41."  # about 260 estimated tokens
    orch = orchestrator(["ACTION: explore", "ACTION: explore", "ACTION: explore", "ACTION: stop"])
    texts = ("Quick: 40 + 2 = 42. The answer is 42.", big, "Again 42. The answer is 42.")
    result = atlas(orch, solver(*texts), max_explores=3, pool_tokens=60).run(PROBLEM)
    evidence = result.state["evidence"]
    assert [e["in_context"] for e in evidence] == [True, False, True] and result.state["left_out"] == 1
    for conversation in orch.conversations[2:]:
        seen = text_of(conversation)
        assert "Long derivation." not in seen  # never a part of a left-out candidate
        assert "[response left out whole: about" in seen and "Final answer: 41." in seen
        assert "1 of " in seen and "candidate responses are left out whole" in seen
        assert texts[0] in seen
    assert texts[2] in text_of(orch.conversations[-1])  # a later, smaller candidate still fits
    assert [e["kind"] for e in result.trace].count("left_out") == 1


def test_unparseable_replies_explore_with_default_until_min_explores_then_stop():
    orch = orchestrator(["Let me think about it.", "explore please", "I am not sure", "ACTION: explore"])
    solve_a, solve_b = solver("The answer is 42.", name="a"), solver("The answer is 41.", name="b")
    result = atlas(orch, {"a": solve_a, "b": solve_b}, min_explores=2).run(PROBLEM)
    assert result.state["explores"] == 2 and result.stop_reason == "protocol default stop (default)"
    assert result.state["solver_usage"] == {"a": 2} and result.state["unparsed_actions"] == 3
    decisions = result.state["decisions"]
    assert [(d["action"], d["source"]) for d in decisions] == [
        ("explore", "default"), ("explore", "default"), ("stop", "default")]
    assert decisions[1]["raw"] == "explore please"
    assert len(notes(result)) == 3 and all("no ACTION line" in n for n in notes(result))
    assert "stopping" in notes(result)[-1]
    # the orchestrator is told how its reply was read, and the final turn says why exploring ended
    told = orch.conversations[1][-1]["content"]
    assert "Note: your reply had no ACTION line: exploring with the default solver" in told
    assert "no usable ACTION line" in orch.conversations[-1][-1]["content"]


def test_stop_or_give_up_before_min_explores_is_overridden():
    orch = orchestrator(["ACTION: give_up", "ACTION: stop"])
    result = atlas(orch, solver("The answer is 42."), min_explores=1).run(PROBLEM)
    assert result.state["explores"] == 1 and result.answer
    first, second = result.state["decisions"]
    assert first["action"] == "explore" and first["source"] == "override" and "min_explores" in first["notes"][0]
    assert second["action"] == "stop" and second["source"] == "parsed" and second["notes"] == []


def test_zero_min_explores_lets_the_orchestrator_answer_at_once():
    orch = orchestrator(["nonsense"], synthesis="The answer is 42.")
    result = atlas(orch, solver("The answer is 41."), min_explores=0).run(PROBLEM)
    assert result.state["explores"] == 0 and result.answer == "The answer is 42."
    final = orch.conversations[-1]
    assert [m["role"] for m in final] == ["system", "user", "assistant", "user"] and PROBLEM in final[1]["content"]


# -- give up ---------------------------------------------------------------------------------------

def test_give_up_ends_with_an_empty_answer_and_its_stop_reason():
    orch = orchestrator(["ACTION: explore", "ACTION: explore", "Both failed twice.\nACTION: give_up"])
    verifier = ScriptedVerifier()
    result = atlas(orch, solver(LLMError("boom"), "No idea."), verifier).run(PROBLEM, reference="42")
    assert result.answer == "" and result.score is None and result.stop_reason == "orchestrator gave up"
    assert result.state["final_source"] == "give_up" and result.state["gave_up"] is True
    assert result.state["final_answer"] is None and result.state["reference_check"]["correct"] is False
    assert len(orch.seen) == 3 and not any(is_final_turn(c) for c in orch.conversations)  # no final-answer call
    assert "give_up" in kinds(result) and verifier.calls == []  # scores hidden, no end rescoring
    system = orch.conversations[0][0]["content"]
    assert "ACTION: give_up" in system and "submit an empty answer" in system


def test_give_up_in_the_final_answer_turn_and_switched_off():
    orch = orchestrator(["ACTION: explore"] * 2, synthesis="Nothing holds.\nACTION: give_up")
    result = atlas(orch, solver("The answer is 41."), max_explores=2).run(PROBLEM)
    assert result.answer == "" and result.stop_reason == "orchestrator gave up"
    assert result.state["synthesis"] == "Nothing holds.\nACTION: give_up"
    off = orchestrator(["ACTION: explore", "ACTION: give_up"], synthesis="ACTION: give_up\nThe answer is 41.")
    result = atlas(off, solver("The answer is 41."), give_up=False).run(PROBLEM)
    assert result.stop_reason == "orchestrator stopped" and result.answer.endswith("The answer is 41.")
    assert any("give_up is not offered" in n for n in notes(result))
    assert "give_up" not in off.conversations[0][0]["content"]


# -- explore's arguments -----------------------------------------------------------------------------

def test_additional_prompt_reaches_the_solver_and_the_problem_stays_original():
    orch = orchestrator(["Try a table.\nACTION: explore effort=low\nADDITIONAL_PROMPT: Count with a table.\nThen add.",
                         "ACTION: explore", "ACTION: stop"])
    solve = solver("The answer is 42.")
    spec = Solver(solve, SamplingParams(max_tokens=50), "Solve it.")
    result = atlas(orch, spec, efforts={"low": Effort(20, "Be brief.")}).run(PROBLEM)
    first, second = solve.conversations
    assert first[0]["content"] == "Solve it. Be brief. Count with a table.\nThen add."
    assert first[1]["content"] == PROBLEM
    assert second[0]["content"] == "Solve it." and second[1]["content"] == PROBLEM
    assert [e["additional_prompt"] for e in result.state["evidence"]] == ["Count with a table.\nThen add.", None]
    assert "effort=low prompt=- with an additional prompt" in text_of(orch.conversations[1])
    off = orchestrator(["ACTION: explore\nADDITIONAL_PROMPT: peek at the others"])
    quiet = solver("The answer is 42.")
    result = atlas(off, quiet, additional_prompt=False).run(PROBLEM)
    assert "peek" not in quiet.conversations[0][0]["content"]
    assert "ADDITIONAL_PROMPT" not in off.conversations[0][0]["content"]
    assert any("ADDITIONAL_PROMPT is not offered" in n for n in notes(result))


def test_solvers_see_only_the_original_problem():
    orch = orchestrator(["ACTION: explore", "ACTION: explore", "ACTION: stop"])
    solve = solver("The answer is 41.", "The answer is 42.")
    atlas(orch, solve, ScriptedVerifier()).run(PROBLEM)
    for conversation in solve.conversations:
        assert [m["role"] for m in conversation] == ["system", "user"] and conversation[1]["content"] == PROBLEM
        assert "41" not in conversation[0]["content"]


def test_multi_model_solver_choice_and_unknown_solver_falls_back_to_default():
    orch = orchestrator(["ACTION: explore solver=big", "ACTION: explore solver=big effort=low",
                         "ACTION: explore solver=small", "ACTION: explore solver=huge colour=red", "ACTION: stop"])
    small, big = solver("The answer is 41.", name="smol"), solver("The answer is 42.", name="bigm")
    result = atlas(orch, {"small": small, "big": big}, ScriptedVerifier(), max_explores=6).run(PROBLEM)
    assert result.state["solver_usage"] == {"big": 2, "small": 2} and len(big.seen) == len(small.seen) == 2
    assert [e["solver"] for e in result.state["evidence"]] == ["big", "big", "small", "small"]
    assert [e["model"] for e in result.state["evidence"]] == ["bigm", "bigm", "smol", "smol"]
    assert any("unknown solver 'huge'" in n and "'small'" in n for n in notes(result))
    assert any("unknown argument colour='red'" in n for n in notes(result))
    assert "Solvers: small (default); big." in orch.conversations[0][0]["content"]
    assert result.state["cost"] is None  # no prices, no cost accounting


def test_atlas_mm_prompt_carries_costs_and_the_result_accounts_them():
    orch = orchestrator(["ACTION: explore solver=cheap", "ACTION: explore solver=strong",
                         "ACTION: explore solver=cheap", "ACTION: stop"])
    cheap, strong = solver("The answer is 41.", tokens=(100, 100)), solver("The answer is 42.", tokens=(100, 400))
    solvers = {"cheap": Solver(cheap, cost=9.0), "strong": Solver(strong)}
    result = atlas(orch, solvers, solver_costs=("cheap=0.5", "strong=3")).run(PROBLEM)
    system = orch.conversations[0][0]["content"]
    assert "cheap (default): price 0.5 per 1k tokens; strong: price 3 per 1k tokens." in system
    assert "CRITICAL: Each explore costs real money." in system and "Start with cheaper models first" in system
    assert [e["cost"] for e in result.state["evidence"]] == [pytest.approx(0.1), pytest.approx(1.5), pytest.approx(0.1)]
    cost = result.state["cost"]
    assert cost["total"] == pytest.approx(1.7) and cost["by_solver"] == {"cheap": pytest.approx(0.2),
                                                                         "strong": pytest.approx(1.5)}
    assert cost["prices"] == {"cheap": 0.5, "strong": 3.0} and cost["unpriced_solvers"] == []
    assert "Candidate #2 (solver=strong effort=- prompt=-, cost 1.5)" in text_of(orch.conversations[2])
    assert "Cost so far: 1.6." in orch.conversations[2][-1]["content"]
    # Solver.cost serves when the config names no price; a solver without one is listed as unpriced
    result = atlas(orchestrator(["ACTION: explore solver=strong"]), solvers).run(PROBLEM)
    assert result.state["cost"]["prices"] == {"cheap": 9.0} and result.state["cost"]["unpriced_solvers"] == ["strong"]


def test_effort_and_prompt_variant_change_the_solver_call():
    efforts = {"low": Effort(32, "Answer briefly."), "high": Effort(300, "Think step by step carefully.")}
    orch = orchestrator(["ACTION: explore", "ACTION: explore effort=high prompt=plan",
                         "ACTION: explore effort=low", "ACTION: explore effort=extreme prompt=nope", "ACTION: stop"])
    solve = solver("The answer is 42.")
    spec = Solver(solve, SamplingParams(temperature=0.5, max_tokens=100, seed=7), "Solve it.")
    result = atlas(orch, spec, efforts=efforts, max_explores=5).run(PROBLEM)
    params = [p for _, p in solve.seen]
    assert [p.max_tokens for p in params] == [100, 300, 32, 100] == [e["max_tokens"] for e in result.state["evidence"]]
    assert all(p.temperature == 0.5 and p.n == 1 for p in params)
    assert [p.seed for p in params] == [8, 9, 10, 11]  # a fresh sample per explore
    systems = [c[0]["content"] for c in solve.conversations]
    assert systems[0] == systems[3] == "Solve it." and systems[2] == "Solve it. Answer briefly."
    assert systems[1] == "Solve it. First write a short plan, then carry it out. Think step by step carefully."
    assert any("unknown effort 'extreme'" in n for n in notes(result))
    assert any("unknown prompt 'nope'" in n for n in notes(result))


# -- synthesis: in context (default) or integrator ---------------------------------------------------------

def test_integrator_switch_makes_a_separate_stateless_final_call():
    orch = orchestrator(["Reasoning R1.\nACTION: explore", "Reasoning R2.\nACTION: explore", "ACTION: stop"],
                        synthesis="Integrated. The answer is 42.")
    result = atlas(orch, solver("So 42. The answer is 42.", "The answer is 41."), ScriptedVerifier(),
                   synthesis="integrator").run(PROBLEM)
    assert result.answer == "Integrated. The answer is 42." and result.state["synthesis_mode"] == "integrator"
    final = orch.conversations[-1]
    assert [m["role"] for m in final] == ["system", "user"] and final[0]["content"] == INTEGRATOR_SYSTEM
    assert "<response>\nSo 42. The answer is 42.\n</response>" in final[1]["content"] and PROBLEM in final[1]["content"]
    assert "Reasoning R" not in final[1]["content"]  # the orchestrator's turns are not the integrator's context
    assert not any(SYNTHESIS_HEADING in m["content"] for m in result.state["conversation"])
    assert [e for e in result.trace if e["kind"] == "synthesis"][0]["mode"] == "integrator"


def test_by_default_the_orchestrator_judges_without_the_verifiers_scores():
    orch = orchestrator(["ACTION: explore", "ACTION: stop"])
    verifier = ScriptedVerifier()
    result = atlas(orch, solver("The answer is 42."), verifier).run(PROBLEM)  # the paper's setting
    assert result.state["evidence"][0]["score"] is None and result.score == pytest.approx(0.9)
    assert "Verifier" not in text_of(orch.conversations[-1]) and len(verifier.calls) == 1
    shown = orchestrator(["ACTION: explore", "ACTION: stop"])
    atlas(shown, solver("The answer is 42."), ScriptedVerifier(), show_scores=True).run(PROBLEM)
    assert "Verifier score: 0.900." in text_of(shown.conversations[-1])
