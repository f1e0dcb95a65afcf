"""ATLAS loop: orchestrator protocol, explore caps, solver choice, efforts, failures, budgets, fallbacks.

Control flow runs on scripted LLMs and a scripted verifier; one short run uses the real SmolLM2."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from morkit.core.errors import InputError, LLMError
from morkit.core.types import Verdict
from morkit.llm.base import Completion, SamplingParams
from morkit.loops.atlas.loop import (
    ATLAS,
    SYNTHESIS_SYSTEM,
    ATLASConfig,
    Effort,
    Solver,
    evidence_summary,
    parse_action,
)
from morkit.loops.base import Budget

PROBLEM = "Tom has 40 apples and buys 2 more. How many apples does he have?"
REFERENCE = "98765"  # never produced by any scripted LLM: if it shows up in a prompt, it leaked


@dataclass
class Recorder:
    """An LLM that records every (conversation, params) and answers with `reply(conversation, call_index)`."""

    reply: object
    name: str = "recorder"
    seen: list = field(default_factory=list)

    def chat(self, conversations, params=SamplingParams()):
        out = []
        for conversation in conversations:
            self.seen.append((conversation, params))
            out.append(Completion((self.reply(conversation, len(self.seen) - 1),), ("stop",)))
        return out

    def stream(self, conversation, params=SamplingParams()):
        yield self.chat([conversation], params)[0].texts[0]

    @property
    def conversations(self):
        return [c for c, _ in self.seen]


def orchestrator(decisions, synthesis="Both agree. The answer is 42."):
    """A recording orchestrator: decisions in order (then 'ACTION: stop'), and the synthesis reply.

    `synthesis` may be an exception instance, raised instead."""
    pending = list(decisions)

    def reply(conversation, _):
        if conversation[0]["content"] == SYNTHESIS_SYSTEM:
            if isinstance(synthesis, Exception):
                raise synthesis
            return synthesis
        item = pending.pop(0) if pending else "ACTION: stop"
        if isinstance(item, Exception):
            raise item
        return item

    return Recorder(reply, name="orchestrator")


def solver(*texts, name="solver"):
    """A recording solver replying with texts in turn (cycling); an exception instance is raised."""
    def reply(_, i):
        text = texts[i % len(texts)]
        if isinstance(text, Exception):
            raise text
        return text

    return Recorder(reply, name=name)


@dataclass
class ScriptedVerifier:
    """Score 0.9 for a final answer of 42, else 0.2; records what it was asked."""

    name: str = "scripted-verifier"
    calls: list = field(default_factory=list)

    def verify(self, question, answers, context=()):
        self.calls.append((question, list(answers), list(context)))
        return [Verdict(0.9 if "42" in a else 0.2, "looks right" if "42" in a else "check the sum") for a in answers]


def atlas(orch, solvers, verifier=None, budget=Budget(), **config):
    return ATLAS(orch, solvers, verifier, ATLASConfig(**config), budget)


def decides(result):
    return [e for e in result.trace if e["kind"] == "decide"]


def kinds(result):
    return [e["kind"] for e in result.trace]


# -- protocol parsing -----------------------------------------------------------------------------

def test_parse_action_is_strict_and_line_based():
    assert parse_action("ACTION: stop") == ("stop", {})
    assert parse_action("  action :  Explore solver=big effort=high prompt=plan") == (
        "explore", {"solver": "big", "effort": "high", "prompt": "plan"})
    assert parse_action("thinking...\nACTION: explore solver=a\nACTION: stop") == ("explore", {"solver": "a"})
    assert parse_action("Solver=a SOLVER=b") is None
    assert parse_action("ACTION: explore Solver=a solver=b junk") == ("explore", {"solver": "a"})
    for text in ("", "I would explore more", "The ACTION: stop", "ACTION: explored", "**ACTION: stop**",
                 "ACTION - stop", "__import__('os').system('x')"):
        assert parse_action(text) is None, text


def test_config_and_solver_validation():
    with pytest.raises(ValueError):
        ATLASConfig(max_explores=0)
    with pytest.raises(ValueError):
        ATLASConfig(max_explores=2, min_explores=3)
    with pytest.raises(ValueError):
        ATLASConfig(efforts={"very high": Effort(64)})
    with pytest.raises(ValueError):
        ATLASConfig(efforts={"x": Effort(0)})
    with pytest.raises(ValueError):
        ATLAS(orchestrator([]), {"bad name": solver("1")})
    with pytest.raises(ValueError):
        ATLAS(orchestrator([]), {"a": solver("1")}, default_solver="b")
    with pytest.raises(ValueError):
        ATLAS(orchestrator([]), {})
    with pytest.raises(InputError):
        ATLAS(orchestrator([]), {"a": "not a solver"})
    one = ATLAS(orchestrator([]), solver("1"))
    assert list(one.solvers) == ["default"] and one.default_solver == "default"
    pair = ATLAS(orchestrator([]), {"a": (solver("1"), SamplingParams(max_tokens=9)), "b": Solver(solver("2"))},
                 default_solver="b")
    assert pair.solvers["a"].params.max_tokens == 9 and pair.default_solver == "b"


# -- the loop -------------------------------------------------------------------------------------

def test_explores_until_the_orchestrator_stops_then_synthesises():
    orch = orchestrator(["ACTION: explore", "ACTION: explore", "ACTION: stop"])
    verifier = ScriptedVerifier()
    result = atlas(orch, solver("So 40+2=42. The answer is 42.", "The answer is 41."), verifier).run(PROBLEM)
    assert result.loop == "atlas" and result.stop_reason == "orchestrator stopped"
    assert result.answer == "Both agree. The answer is 42." and result.score == pytest.approx(0.9)
    state = result.state
    assert state["explores"] == 2 and state["final_source"] == "synthesis" and state["final_answer"] == "42"
    assert [e["final"] for e in state["evidence"]] == ["42", "41"]
    assert [e["score"] for e in state["evidence"]] == [0.9, 0.2]
    assert [d["action"] for d in state["decisions"]] == ["explore", "explore", "stop"]
    assert [d["raw"] for d in state["decisions"]] == ["ACTION: explore", "ACTION: explore", "ACTION: stop"]
    assert result.calls == 3 + 2 + 1 and len(orch.seen) == 4
    assert kinds(result)[0] == "start" and kinds(result)[-1] == "stop" and "synthesis" in kinds(result)
    # the second explore is verified with the first answer as context; the end rescores all in one call
    assert verifier.calls[1][2] == ["So 40+2=42. The answer is 42."]
    assert len(verifier.calls[-1][1]) == 3
    # the orchestrator saw the evidence summary with answers and scores; the synthesis saw the attempts
    last_decision = orch.conversations[2][1]["content"]
    assert "answer=42 score=0.900" in last_decision and "answer=41 score=0.200" in last_decision
    assert "Final answers so far: 42 (x1), 41 (x1)" in last_decision
    assert "Attempt 2 (solver default, verifier score 0.200)" in orch.conversations[3][1]["content"]
    json.dumps(result.to_json())  # state and trace are JSON-able


def test_solvers_see_only_the_original_problem():
    orch = orchestrator(["ACTION: explore", "ACTION: explore", "ACTION: stop"])
    solve = solver("The answer is 41.", "The answer is 42.")
    atlas(orch, solve, ScriptedVerifier()).run(PROBLEM)
    for conversation in solve.conversations:
        assert [m["role"] for m in conversation] == ["system", "user"] and conversation[1]["content"] == PROBLEM
        assert "41" not in conversation[0]["content"]


def test_explore_cap_when_the_orchestrator_never_stops():
    orch = orchestrator(["ACTION: explore"] * 10)
    result = atlas(orch, solver("The answer is 42."), max_explores=3).run(PROBLEM)
    assert result.state["explores"] == 3 and result.stop_reason == "explore budget spent (3 of 3)"
    assert len(decides(result)) == 3
    assert sum(c[0]["content"] == SYNTHESIS_SYSTEM for c in orch.conversations) == 1
    assert result.state["final_source"] == "synthesis"


def test_unparseable_replies_explore_with_default_until_min_explores_then_stop():
    orch = orchestrator(["Let me think about it.", "explore please", "I am not sure", "ACTION: explore"])
    solve_a, solve_b = solver("The answer is 42.", name="a"), solver("The answer is 41.", name="b")
    result = atlas(orch, {"a": solve_a, "b": solve_b}, min_explores=2).run(PROBLEM)
    assert result.state["explores"] == 2 and result.stop_reason == "orchestrator stopped"
    assert result.state["solver_usage"] == {"a": 2}
    decisions = result.state["decisions"]
    assert [(d["action"], d["source"]) for d in decisions] == [
        ("explore", "default"), ("explore", "default"), ("stop", "default")]
    assert decisions[1]["raw"] == "explore please"
    notes = [e["note"] for e in result.trace if e["kind"] == "note"]
    assert len(notes) == 3 and all("no ACTION protocol" in n for n in notes)
    assert "stopping" in notes[-1]


def test_stop_before_min_explores_is_overridden():
    orch = orchestrator(["ACTION: stop", "ACTION: stop"])
    result = atlas(orch, solver("The answer is 42."), min_explores=1).run(PROBLEM)
    assert result.state["explores"] == 1
    first, second = result.state["decisions"]
    assert first["action"] == "explore" and first["source"] == "default" and "min_explores" in first["notes"][0]
    assert second == {"action": "stop", "solver": None, "effort": None, "prompt": None, "source": "parsed",
                      "notes": [], "raw": "ACTION: stop"}


def test_zero_min_explores_lets_the_orchestrator_stop_at_once():
    orch = orchestrator(["nonsense"], synthesis="The answer is 42.")
    result = atlas(orch, solver("The answer is 41."), min_explores=0).run(PROBLEM)
    assert result.state["explores"] == 0 and result.answer == "The answer is 42."
    assert "(no attempts)" in orch.conversations[-1][1]["content"]


def test_multi_model_solver_choice_and_unknown_solver_falls_back_to_default():
    orch = orchestrator(["ACTION: explore solver=big", "ACTION: explore solver=big effort=low",
                         "ACTION: explore solver=small", "ACTION: explore solver=huge colour=red",
                         "ACTION: stop"])
    small, big = solver("The answer is 41.", name="smol"), solver("The answer is 42.", name="bigm")
    result = atlas(orch, {"small": small, "big": big}, ScriptedVerifier(), max_explores=6).run(PROBLEM)
    assert result.state["solver_usage"] == {"big": 2, "small": 2}
    assert len(big.seen) == 2 and len(small.seen) == 2
    assert [e["solver"] for e in result.state["evidence"]] == ["big", "big", "small", "small"]
    assert [e["model"] for e in result.state["evidence"]] == ["bigm", "bigm", "smol", "smol"]
    notes = [e["note"] for e in result.trace if e["kind"] == "note"]
    assert any("unknown solver 'huge'" in n and "'small'" in n for n in notes)
    assert any("unknown argument colour='red'" in n for n in notes)
    assert "Solvers: small (default), big." in orch.conversations[0][0]["content"]


def test_effort_and_prompt_variant_change_the_solver_call():
    efforts = {"low": Effort(32, "Answer briefly."), "high": Effort(300, "Think step by step carefully.")}
    orch = orchestrator(["ACTION: explore", "ACTION: explore effort=high prompt=plan",
                         "ACTION: explore effort=low", "ACTION: explore effort=extreme prompt=nope", "ACTION: stop"])
    solve = solver("The answer is 42.")
    spec = Solver(solve, SamplingParams(temperature=0.5, max_tokens=100, seed=7), "Solve it.")
    result = atlas(orch, spec, efforts=efforts, max_explores=5).run(PROBLEM)
    params = [p for _, p in solve.seen]
    assert [p.max_tokens for p in params] == [100, 300, 32, 100]
    assert [e["max_tokens"] for e in result.state["evidence"]] == [100, 300, 32, 100]
    assert all(p.temperature == 0.5 and p.n == 1 for p in params)
    assert [p.seed for p in params] == [8, 9, 10, 11]  # a fresh sample per explore
    systems = [c[0]["content"] for c in solve.conversations]
    assert systems[0] == "Solve it." and systems[3] == "Solve it."
    assert systems[1] == "Solve it. First write a short plan, then carry it out. Think step by step carefully."
    assert systems[2] == "Solve it. Answer briefly."
    notes = [e["note"] for e in result.trace if e["kind"] == "note"]
    assert any("unknown effort 'extreme'" in n for n in notes) and any("unknown prompt 'nope'" in n for n in notes)


def test_solver_error_is_evidence_and_the_loop_goes_on():
    orch = orchestrator(["ACTION: explore solver=flaky", "ACTION: explore", "ACTION: stop"])
    flaky = solver(LLMError("server said 503"), name="flaky")
    result = atlas(orch, {"good": solver("The answer is 42."), "flaky": flaky}, ScriptedVerifier()).run(PROBLEM)
    first, second = result.state["evidence"]
    assert first["error"] == "LLMError: server said 503" and first["text"] is None and first["score"] is None
    assert second["final"] == "42" and second["error"] is None
    assert result.state["solver_usage"] == {"flaky": 1, "good": 1}
    assert "#1 solver=flaky effort=- prompt=- failed: LLMError: server said 503" in orch.conversations[1][1]["content"]
    assert "failed: LLMError: server said 503" in orch.conversations[-1][1]["content"]  # the synthesis sees it


def test_orchestrator_error_takes_the_default():
    orch = orchestrator([LLMError("timeout"), LLMError("timeout")])
    result = atlas(orch, solver("The answer is 42.")).run(PROBLEM)
    assert result.state["explores"] == 1
    assert [(d["action"], d["source"]) for d in result.state["decisions"]] == [("explore", "error"), ("stop", "error")]
    assert "orchestrator call failed: timeout" in result.state["decisions"][0]["notes"][0]


def test_call_budget_stops_cleanly_with_the_best_answer_so_far():
    orch = orchestrator(["ACTION: explore"] * 10)
    result = atlas(orch, solver("The answer is 42."), ScriptedVerifier(), budget=Budget(max_calls=2)).run(PROBLEM)
    assert result.calls == 2 and result.stop_reason == "call budget spent (2 of 2)"
    assert result.state["final_source"] == "fallback:best-verified" and result.answer == "The answer is 42."
    assert result.score == pytest.approx(0.9)
    assert "synthesis_failed" in kinds(result) and "fallback" in kinds(result)


def test_call_budget_keeps_the_last_call_for_synthesis():
    orch = orchestrator(["ACTION: explore"] * 10)
    result = atlas(orch, solver("The answer is 41."), budget=Budget(max_calls=5)).run(PROBLEM)
    assert result.calls == 5 and result.state["explores"] == 2
    assert result.stop_reason.startswith("call budget: last call kept for synthesis")
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
    assert result.state["final_source"] == "fallback:majority"
    assert result.answer == "So it is 42.0. The answer is 42." and result.score is None
    assert result.state["synthesis"] is None
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
    assert len([e for e in result.trace if e["kind"] == "verify_error"]) == 2


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
    assert result.state["reference_check"] == {"reference": "42", "correct": True,
                                               "explores_correct": [True, False]}


def test_evidence_summary_is_compact():
    long = "word " * 500 + "The answer is 42."
    evidence = [{"index": 1, "solver": "a", "effort": "high", "prompt": None, "text": long, "final": "42",
                 "score": 0.5, "feedback": "fine\n" * 100, "error": None}]
    summary = evidence_summary(evidence, excerpt_chars=40)
    assert len(summary) < 400 and summary.splitlines()[0].endswith('The answer is 42."')
    assert evidence_summary([]) == "(none yet)"


# -- the real model ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_real_smollm2_run_has_the_expected_structure():
    from morkit.llm.local import LocalLLM

    llm = LocalLLM(device="cpu")
    llm.loaded  # load outside the run: the run's seconds are generation only
    params = SamplingParams(temperature=0.0, max_tokens=48)
    config = ATLASConfig(max_explores=2, min_explores=1, temperature=0.0, max_tokens=8, synthesis_max_tokens=32,
                         efforts={"low": Effort(24), "medium": Effort(48, "Solve step by step.")})
    loop = ATLAS(llm, {"smol": Solver(llm, params)}, None, config, Budget(max_calls=6))
    problem = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
               "How many clips did Natalia sell altogether in April and May?")
    result = loop.run(problem, reference="72")
    print(f"real ATLAS run: {result.seconds:.1f}s, {result.calls} calls, stop: {result.stop_reason}")
    assert 1 <= result.state["explores"] <= 2 and result.calls >= 3
    assert result.state["final_source"] in ("synthesis", "fallback:majority")
    assert isinstance(result.answer, str) and result.answer
    assert all(d["action"] in ("explore", "stop") for d in result.state["decisions"])
    assert sum(result.state["solver_usage"].values()) == result.state["explores"]
    assert set(result.state["reference_check"]) == {"reference", "correct", "explores_correct"}
    json.dumps(result.to_json())
