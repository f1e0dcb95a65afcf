"""StreamMA's protocol, pinned by what each agent is sent: the review protocol, rising authority, stream and
serial hand-offs, the final agent, S steps, Stream x N and token accounting (timing and failures:
test_streamma_timing.py). The agents are the recording fakes of tests/fakes/streamma.py."""

from __future__ import annotations

import re

import pytest
from fakes.streamma import (
    PROBLEM,
    STEPS,
    PacedLLM,
    agents,
    events,
    no_agent_threads_left,
    sections,
    tagged,
    words,
)

from morkit.llm.base import Completion, ScriptedLLM
from morkit.loops.streamma.graph import StepSplitter, best_available
from morkit.loops.streamma.loop import (
    StreamMA,
    StreamMAConfig,
    Topology,
    compare_protocols,
)
from morkit.loops.streamma.replies import own_step, parse_reply

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
    assert "You are Agent 1" in solver and "pipeline of 4 agents" in solver and "The answer is N" in solver
    authority = []
    for i in (1, 2, 3):
        (system,) = llms[i].systems()  # one system prompt for every turn of an agent
        assert "write ACCEPT" in system and '"ERROR: [description]" then "CORRECTION: [corrected step]"' in system
        assert "STEP k" not in system and f"You are Agent {i + 1}." in system and "SUMMARY:" in system
        authority.append(re.search(r"YOU (MUST CORRECT|CAN OVERRULE|HAVE FINAL CORRECTION)", system).group(1))
    assert authority == ["MUST CORRECT", "CAN OVERRULE", "HAVE FINAL CORRECTION"]  # authority rises downstream
    ranked = agents(4)
    StreamMA(ranked, config=StreamMAConfig(agents=4, authority="ranked")).run(PROBLEM)
    levels = []
    for i in (1, 2, 3):  # morkit's earlier text: each agent told its level
        (system,) = ranked[i].systems()
        levels.append(int(re.search(r"Authority: level (\d+) of 4; it rises downstream", system).group(1)))
        assert (f"You rank above agents 1..{i}" in system) and ("your decision is final" in system) == (i == 3)
    assert levels == [2, 3, 4]
    equal = agents(3)
    StreamMA(equal, config=StreamMAConfig(agents=3, authority="equal")).run(PROBLEM)
    assert all("equal say" in s and "level" not in s and "YOU" not in s for i in (1, 2) for s in equal[i].systems())
    rewrite = agents(3)
    StreamMA(rewrite, config=StreamMAConfig(agents=3, review="rewrite", summary="final")).run(PROBLEM)
    for i in (1, 2):  # morkit's earlier review protocol: a verdict, then the reviewer's own step
        (system,) = rewrite[i].systems()
        assert "ERROR: <what is wrong>" in system and "STEP k: <your own step k>" in system
        assert f"You are agent {i + 1} of 3" in system and ("SUMMARY" in system) == (i == 2)


def test_stream_delivers_steps_one_turn_at_a_time_and_pipelines():
    llms = agents(4, step_s=0.01, review_s=0.01)
    result = StreamMA(llms, config=StreamMAConfig(agents=4, queue_size=2)).run(PROBLEM)
    assert result.stop_reason == "completed" and result.loop == "streamma:stream"
    assert result.state["steps"] == [tagged(s, 1, 2, 3) for s in STEPS]
    # six turns, one per upstream step, then every reviewer's summary turn
    assert result.state["latency"]["calls_per_agent"] == [1, 7, 7, 7] and result.calls == 1 + 7 + 7 + 7
    for i in (1, 2, 3):
        # Each reviewer saw step k (as its upstream wrote it) having written exactly k steps of its own.
        assert [(k, a) for k, _, a in llms[i].reviews] == [(k, k) for k in range(len(STEPS))]
        assert [v for _, v, _ in llms[i].reviews] == [[tagged(s, *range(1, i))] for s in STEPS]
        turns = [c for c in llms[i].conversations if sections(c[-1]["content"])]
        # one upstream step per turn; the conversation grows by one turn and reply each time
        assert [len(sections(c[-1]["content"])) for c in turns] == [1] * 6 and [len(c) for c in turns] == [
            2 + 2 * k for k in range(6)]
        head = "The original problem is:"
        assert head in turns[0][1]["content"] and all(head not in c[-1]["content"] for c in turns[1:])
        assert all(c[: len(p) + 1][: len(p)] == p for p, c in zip(turns, turns[1:]))  # each extends the last
        # The reviewer's whole reply (its verdict and correction) goes downstream.
        assert result.state["forwarded"][i][0] == (f"ERROR: re-checked by a{i}\n"
                                                   f"CORRECTION: {tagged(STEPS[0], *range(1, i + 1))}")
        assert [r["verdict"] for r in result.state["reviews"][i]] == ["error"] * 6
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
        assert f"Agent {i}'s complete response:" in message and "The original problem is:" in message
        # every upstream step, the tail included, in the one message, before the agent writes anything
        assert [k for k, _ in sections(message)] == list(range(6))
        assert [v for _, v, _ in llms[i].reviews] == [[tagged(s, *range(1, i))] for s in STEPS]
        assert all(written == 0 for _, _, written in llms[i].reviews)
    assert result.state["steps"] == [tagged(s, 1, 2) for s in STEPS]
    assert result.answer.endswith("SUMMARY: checked by a2. The answer is 5.")
    done = events(result, "step_emitted", 1)[-1]["t"]
    assert events(result, "step_received", 2)[0]["t"] >= done
    # a reply without the protocol's labels states no error: the upstream steps stand
    echo = ScriptedLLM(lambda conversation, i: "First.\nEND_STEP\nSecond.")
    plain = StreamMA(echo, config=StreamMAConfig(agents=2, protocol="serial")).run(PROBLEM)
    assert plain.state["solutions"][1] == ["First.", "Second."] == plain.state["solutions"][0]
    assert {e["source"] for e in events(plain, "step_reviewed")} == {"unreviewed"}
    # morkit's earlier rewrite protocol: its paragraphs (split as the solver's) are its steps
    echo = ScriptedLLM(lambda conversation, i: "First.\n\nSecond." if len(conversation) == 2 and
                       "Solve" in conversation[0]["content"] else "Mine.\n\nAlso mine.")
    plain = StreamMA(echo, config=StreamMAConfig(agents=2, protocol="serial", review="rewrite",
                                                 step_marker="\n\n")).run(PROBLEM)
    assert plain.state["solutions"] == [["First.", "Second."], ["Mine.", "Also mine."]]
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


def test_what_a_reviewer_hands_downstream():
    from morkit.loops.streamma.replies import forwarded, without_steps

    assert forwarded("ACCEPT", "He buys 4.", "kept", 1, "reply") == "ACCEPT\nSTEP 2: He buys 4."
    assert forwarded("ACCEPT\nSTEP 2: mine", "mine", "written", 1, "reply") == "ACCEPT\nSTEP 2: mine"
    assert forwarded("ERROR: no\nCORRECTION: fixed", "fixed", "corrected", 1, "reply") == "ERROR: no\nCORRECTION: fixed"
    assert forwarded("???", "upstream", "fallback", 0, "reply") == "upstream" == forwarded("", "upstream", "kept", 0,
                                                                                            "reply")
    assert forwarded("ACCEPT\nSTEP 1: mine", "mine", "written", 0, "step") == "mine"
    # the paper's review: a STEP the reviewer wrote anyway is dropped; its version follows its verdict
    assert without_steps("ACCEPT\nSTEP 2: mine\nLooks right.") == "ACCEPT"
    assert without_steps("ERROR: no\nCORRECTION: fixed\nSTEP 2: mine") == "ERROR: no\nCORRECTION: fixed"
    assert forwarded("ACCEPT\nLooks right.", "He buys 4.", "kept", 1, "reply") == \
        "ACCEPT\nLooks right.\nSTEP 2: He buys 4."
    assert forwarded("ERROR: adds wrongly", "3 + 4 = 8", "flagged", 2, "reply") == \
        "ERROR: adds wrongly\nSTEP 3: 3 + 4 = 8"


def test_serial_steps_a_labelled_reply_did_not_reach_keep_the_upstream_steps():
    short = ScriptedLLM(lambda conversation, i: "ACCEPT\nSTEP 1: Tom starts with 3 apples.")
    result = StreamMA([PacedLLM("a0"), short], config=StreamMAConfig(agents=2, protocol="serial")).run(PROBLEM)
    assert result.state["solutions"][1] == list(STEPS)  # the paper's review: accepted or unreviewed, each stands
    assert [e["source"] for e in events(result, "step_reviewed")] == ["kept"] + ["unreviewed"] * 5
    result = StreamMA([PacedLLM("a0"), short], config=StreamMAConfig(agents=2, protocol="serial", review="rewrite",
                                                                     summary="none")).run(PROBLEM)
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
    # Once upstream has ended, the final agent gets one more turn for its summary and the answer.
    llms = agents(3)
    result = StreamMA(llms, config=StreamMAConfig(agents=3)).run(PROBLEM, reference="#### 5")
    assert result.state["summary"] == "SUMMARY: checked by a2. The answer is 5." == result.state["summaries"][2]
    assert result.answer == "\n\n".join([tagged(s, 1, 2) for s in STEPS] + [result.state["summary"]])
    assert result.state["correct"] and result.state["per_agent"][2]["summary"]
    finish = llms[2].conversations[-1]
    assert len(sections(finish[-1]["content"])) == 0 and "DETAILED final answer" in finish[-1]["content"]
    assert [e["text"] for e in events(result, "summary", 2)] == [result.state["summary"]]
    # summary="final" (morkit's earlier protocol): only the final agent; with S set, in its reply to the last
    # step (no extra turn)
    llms = agents(3)
    result = StreamMA(llms, config=StreamMAConfig(agents=3, steps=6, summary="final")).run(PROBLEM)
    assert result.state["latency"]["calls_per_agent"] == [1, 6, 6]
    assert not any("SUMMARY" in c[-1]["content"] for c in llms[1].conversations)
    assert "That was the last step" in llms[2].conversations[-1][-1]["content"]
    assert result.answer.endswith("SUMMARY: checked by a2. The answer is 5.")
    # switched off, nobody is asked for one
    plain = StreamMA(agents(2), config=StreamMAConfig(agents=2, summary="none")).run(PROBLEM)
    assert plain.state["summary"] is None and plain.answer == "\n\n".join(tagged(s, 1) for s in STEPS)
    assert plain.state["latency"]["calls_per_agent"] == [1, 6]


def test_s_steps_per_agent():
    llms = agents(3)
    result = StreamMA(llms, config=StreamMAConfig(agents=3, steps=3)).run(PROBLEM)
    assert result.stop_reason == "completed" and result.state["steps_per_agent"] == 3
    assert "in exactly 3 steps" in llms[0].conversations[0][0]["content"]
    assert [len(s) for s in result.state["solutions"]] == [3, 3, 3]  # the solver's stream is cut after S
    assert result.state["latency"]["calls_per_agent"] == [1, 4, 4]  # a turn per step, then the summary
    rewrite = agents(3)
    StreamMA(rewrite, config=StreamMAConfig(agents=3, steps=3, review="rewrite")).run(PROBLEM)
    assert all("you write exactly 3 steps" in s for i in (1, 2) for s in rewrite[i].systems())
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
        yield f"Count them.\nEND_STEP\nThe answer is {self.answers[params.seed]}."


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
    generated = sum(map(words, STEPS)) + len(STEPS)  # each step and its END_STEP line
    assert tokens["per_agent"][0] == {"agent": 0, "calls": 1, "prompt_tokens": solver_prompt, "reused_tokens": 0,
                                      "prefilled_tokens": solver_prompt, "generated_tokens": generated,
                                      "total_tokens": solver_prompt + generated, "kv_hit_ratio": 0.0}
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
