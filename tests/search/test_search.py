"""ACS rules and baselines with scripted agents, a scripted aggregator and a table verifier."""

from __future__ import annotations

import pytest
from fakes.search import TableVerifier, aggregating_llm

from morkit.core.errors import InputError, LLMError
from morkit.llm.agents import (
    AgentAnswer,
    AgentsConfig,
    AgentSpec,
    LLMPool,
    generate_answers,
    load_agents,
)
from morkit.llm.base import SamplingParams, ScriptedLLM
from morkit.search.acs import ACS
from morkit.search.aggregate import Aggregator
from morkit.search.baselines import (
    BestOfN,
    MajorityVote,
    SingleAggregation,
    self_consistency,
)




ANSWERS = [AgentAnswer("a1", "A"), AgentAnswer("a2", "B"), AgentAnswer("a3", "C"), AgentAnswer("a4", "D")]
SCORES = {"A": 0.9, "B": 0.5, "C": 0.8, "D": 0.1, "agg(A|C)": 0.85, "agg(A|B|C)": 0.95, "agg(A|C|D)": 0.7,
          "agg(A|B|C|D)": 0.9}


def test_acs_topk_start_greedy_step_early_stop_and_residual_keep():
    verifier = TableVerifier({**SCORES, "agg(A|B|C|D|agg(A|B|C))": 0.99})
    result = ACS(verifier, Aggregator(aggregating_llm()), k=2).run("q", ANSWERS)
    steps = [(s.step, s.members, s.text, s.accepted) for s in result.trace]
    assert steps == [
        ("answers", (0, 1, 2, 3), "", False),
        ("initial", (0, 2), "agg(A|C)", True),  # top-2 by score: A (0.9) and C (0.8)
        ("greedy", (0, 2, 1), "agg(A|B|C)", True),  # adding B (0.95) beats 0.85
        ("greedy", (0, 2, 1), "agg(A|B|C|D)", False),  # adding D gives 0.9 < 0.95: stop
        ("residual", (0, 1, 2, 3), "agg(A|B|C|D|agg(A|B|C))", True),
    ]
    assert result.answer == "agg(A|B|C|D|agg(A|B|C))" and result.score == 0.99
    assert dict(result.trace[2].tried) == {1: 0.95, 3: 0.7}
    assert result.llm_calls == 1 + 2 + 1 + 1  # initial, 2 candidates, 1 candidate, residual
    # every verify call saw all agent answers as context
    assert all(ctx == ["A", "B", "C", "D"] for _, ctx in verifier.calls)


def test_acs_residual_discarded_and_ties_do_not_count_as_better():
    verifier = TableVerifier({**SCORES, "agg(A|B|C)": 0.85, "agg(A|C|D)": 0.85})  # ties with the current 0.85
    result = ACS(verifier, Aggregator(aggregating_llm()), k=2).run("q", ANSWERS)
    assert [s.step for s in result.trace] == ["answers", "initial", "greedy", "residual"]
    assert not result.trace[2].accepted and not result.trace[3].accepted  # residual scores 0 < 0.85
    assert result.answer == "agg(A|C)"


def test_acs_empty_aggregate_and_failures_never_crash():
    empty = ScriptedLLM(lambda conversation, i: "")
    result = ACS(TableVerifier(SCORES), Aggregator(empty), k=2).run("q", ANSWERS)
    assert result.answer == "" and result.score == 0.0  # scored as an empty answer, search goes on
    failing = aggregating_llm(fail_on="agg(A|B|C)")
    result = ACS(TableVerifier(SCORES), Aggregator(failing), k=2).run("q", ANSWERS)
    assert any(s.step == "error" and "greedy aggregation failed" in s.note for s in result.trace)
    assert result.answer == "agg(A|C)"
    result = ACS(TableVerifier(SCORES), Aggregator(aggregating_llm(fail_on="agg(A|C)")), k=2).run("q", ANSWERS)
    assert result.answer == "A" and result.extra["fallback"] == "best agent answer"
    none = ACS(TableVerifier(SCORES), Aggregator(aggregating_llm())).run("q", [])
    assert none.answer == "" and none.trace[0].note == "no agent answered"


def test_acs_single_answer_and_step_limit():
    result = ACS(TableVerifier(SCORES), Aggregator(aggregating_llm()), k=2).run("q", ANSWERS[:1])
    assert [s.step for s in result.trace] == ["answers", "initial", "stop", "residual"]
    limited = ACS(TableVerifier(SCORES), Aggregator(aggregating_llm()), k=1, max_steps=1, residual=False)
    trace = limited.run("q", ANSWERS).trace
    assert [s.step for s in trace] == ["answers", "initial", "greedy", "stop"]
    assert trace[-1].note == "step limit (1) reached"
    with pytest.raises(InputError, match="step"):
        ACS(TableVerifier(SCORES), Aggregator(aggregating_llm()), step="best-first")


def test_first_improvement_keeps_the_first_addition_that_beats_the_current_answer():
    """Algorithm A's pass tries the remaining answers in answer order, one aggregation each, and keeps each
    improvement at once; Section 3.2's argmax step aggregates every addition and keeps the best."""
    table = {**SCORES, "agg(A|B|C)": 0.86, "agg(A|C|D)": 0.95, "agg(A|B|C|D)": 0.9}
    argmax = ACS(TableVerifier(table), Aggregator(aggregating_llm()), k=2, residual=False).run("q", ANSWERS)
    first = ACS(TableVerifier(table), Aggregator(aggregating_llm()), k=2, residual=False, step="first").run("q", ANSWERS)
    assert (argmax.answer, argmax.extra["members"]) == ("agg(A|C|D)", [0, 2, 3])
    assert (first.answer, first.extra["members"]) == ("agg(A|B|C|D)", [0, 2, 1, 3])
    assert [s.tried for s in first.trace if s.step == "greedy"] == [((1, 0.86),), ((3, 0.9),)]
    assert (argmax.llm_calls, first.llm_calls) == (1 + 2 + 1, 1 + 1 + 1)
    capped = ACS(TableVerifier(table), Aggregator(aggregating_llm()), k=2, residual=False, step="first", max_steps=1)
    result = capped.run("q", ANSWERS)  # the limit counts passes: one pass tries every remaining answer
    assert result.answer == "agg(A|B|C|D)" and result.trace[-1].note == "every answer is in the set"


def test_refine_prompt_is_selectable_and_an_agents_system_prompt_replaces_the_default():
    seen = []
    llm = ScriptedLLM(lambda conversation, _: seen.append(conversation) or "x")
    Aggregator(llm, prompt="refine").aggregate("2+2?", ["4", "5"])
    Aggregator(llm, system="Be brief.").aggregate("2+2?", ["4", "5"])
    assert "Response 1:\n4\n\nResponse 2:\n5" in seen[0][1]["content"]
    assert seen[1][0]["content"] == "Be brief.\n1. 4\n2. 5" and seen[1][1]["content"] == "Question: 2+2?."
    with pytest.raises(InputError, match="aggregator prompt"):
        Aggregator(llm, prompt="mine")


def test_agents_that_fail_are_reported_and_the_rest_answer():
    config = AgentsConfig((AgentSpec("good", params=SamplingParams(n=2)), AgentSpec("bad", model="broken")),
                          AgentSpec("aggregator"))

    class Pool(LLMPool):
        def llm(self, spec):
            if spec.model == "broken":
                return ScriptedLLM(lambda c, i: (_ for _ in ()).throw(LLMError("timed out after 3 tries")))
            return ScriptedLLM(lambda c, i: f"answer {i} to {c[-1]['content']}")

    answers, failures = generate_answers(config, "2+2?", Pool())
    assert [a.text for a in answers] == ["answer 0 to 2+2?", "answer 1 to 2+2?"]
    assert failures == ["bad: timed out after 3 tries"]


def test_baselines():
    answers = [AgentAnswer("x", "so 12. The answer is 12."), AgentAnswer("y", "The answer is 7."),
               AgentAnswer("x", "The answer is 12"), AgentAnswer("z", "I think 7"), AgentAnswer("z", "The answer is 7")]
    verifier = TableVerifier({answers[1].text: 0.4, answers[3].text: 0.9})
    assert BestOfN(verifier).run("q", answers).answer == "I think 7"
    vote = MajorityVote().run("q", answers)
    assert "7" in vote.answer and vote.score == pytest.approx(3 / 5)
    assert "12" in self_consistency("x").run("q", answers).answer
    moa = SingleAggregation(Aggregator(aggregating_llm()), TableVerifier({})).run("q", answers[:2])
    assert moa.answer.startswith("agg(") and moa.llm_calls == 1
    assert MajorityVote().run("q", []).answer == ""


def test_agents_toml(tmp_path):
    config = load_agents()
    assert len(config.agents) >= 3 and {a.backend for a in config.agents} == {"local"}
    assert len({(a.params.temperature, a.system) for a in config.agents}) == len(config.agents)
    bad = tmp_path / "agents.toml"
    bad.write_text('[[agent]]\nname = "x"\ntemprature = 0.3\n')
    with pytest.raises(InputError, match=r"agents.toml: agent 'x': unknown keys \['temprature'\]"):
        load_agents(bad)
    bad.write_text('[[agent]]\nname = "x"\nbackend = "magic"\n')
    with pytest.raises(InputError, match="unknown backend 'magic'"):
        load_agents(bad)
    bad.write_text('[[agent]]\nname = "x"\n[[agent]]\nname = "x"\n')
    with pytest.raises(InputError, match="unique"):
        load_agents(bad)
    bad.write_text('[[agent]]\nname = "x"\ntemperature = -1\n')
    with pytest.raises(InputError, match="SamplingParams.temperature must be a finite number >= 0"):
        load_agents(bad)
    bad.write_text('[[agent]]\nname = "x"\ncost = -2\n')
    with pytest.raises(InputError, match="cost"):
        load_agents(bad)
    bad.write_text("[[agent]\n")
    with pytest.raises(InputError, match="invalid TOML"):
        load_agents(bad)
    served = tmp_path / "served.toml"
    served.write_text('[[agent]]\nname = "remote"\nbackend = "openai"\nmodel = "qwen"\n'
                      'base_url = "http://127.0.0.1:9/v1"\nn = 3\nstop = ["\\n\\n"]\n')
    served.write_text(served.read_text() + "cost = 0.25\n")
    spec = load_agents(served).agents[0]
    assert spec.cost == 0.25
    assert spec.params.n == 3 and spec.params.stop == ("\n\n",) and spec.base_url.endswith("/v1")
