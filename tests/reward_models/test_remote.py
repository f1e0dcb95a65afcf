"""RemoteRewardModel against real HTTP servers on 127.0.0.1 that speak vLLM's `/pooling` JSON (tests/fakes/http_server.py)."""

from __future__ import annotations

import json

import pytest
from fakes.http_server import FakeServer

from morkit.core.types import Candidate, Query, Score
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.backends.servers import RemoteRewardModel, RemoteScoringError
from morkit.reward_models.scoring import score_queries


@pytest.fixture(scope="module")
def servers():
    pair = [FakeServer(delay_s=0.02), FakeServer(delay_s=0.02)]
    yield pair
    for s in pair:
        s.close()


def render(question: str, answer: str) -> str:
    return f"<user>{question}<assistant>{answer}"


def make_rm(urls, **kw) -> RemoteRewardModel:
    opts = dict(concurrency=4, timeout_s=0.5, retries=2, backoff_s=0.01)
    opts.update(kw)
    return RemoteRewardModel("remote-test", urls, "tiny", render=render, **opts)


def expected(q: str, a: str) -> float:
    return len(render(q, a)) / 10.0


def test_scores_and_request_schema(servers):
    rm = make_rm([servers[0].url])
    pairs = [("what is 2+2", "4"), ("q", "a longer answer")]
    assert rm.score(pairs) == [Score(expected(*p)) for p in pairs]
    req = servers[0].payloads[-1]
    assert req["model"] == "tiny" and req["task"] == "classify" and req["use_activation"] is False
    assert rm.health() == {servers[0].url: True}


@pytest.mark.slow
def test_failures_reported_by_index_and_other_scores_kept(servers):
    rm = make_rm([s.url for s in servers])
    pairs = [("q0", "fine"), ("q1", "FAIL500"), ("q2", "fine too"), ("q3", "WRONGLEN"), ("q4", "TIMEOUT"),
             ("q5", "BADJSON"), ("q6", "FLAKY ok")]
    scores, failures = rm.score_partial(pairs)
    assert [f.index for f in failures] == [1, 3, 4, 5]
    reasons = {f.index: f.reason for f in failures}
    assert "HTTP 500" in reasons[1]
    assert "expected 1 values" in reasons[3]
    assert "timed out" in reasons[4]
    assert "not JSON" in reasons[5]
    assert all(f.attempts == 3 for f in failures)  # 1 try + 2 retries
    for i in (0, 2, 6):  # FLAKY succeeds on its retry
        assert scores[i] == Score(expected(*pairs[i]))
    assert all(scores[i] is None for i in (1, 3, 4, 5))
    with pytest.raises(RemoteScoringError) as info:
        make_rm([s.url for s in servers]).score(pairs)
    assert "4 of 7 pairs failed" in str(info.value) and "[1, 3, 4, 5]" in str(info.value)
    assert info.value.scores[0] == scores[0]


def test_malformed_replies_fail_their_pairs_and_keep_the_others(servers):
    rm = make_rm([s.url for s in servers], retries=1)
    pairs = [("q0", "fine"), ("q1", "HUGE"), ("q2", "NAN"), ("q3", "fine too"), ("q4", "HTMLTYPE")]
    scores, failures = rm.score_partial(pairs)
    reasons = {f.index: f.reason for f in failures}
    assert sorted(reasons) == [1, 2, 4] and all(f.attempts == 2 for f in failures)
    assert "an integer of 401 digits" in reasons[1] and "non-finite" in reasons[2]
    assert f"{failures[2].url}/pooling" in reasons[4] and "'text/html'" in reasons[4]
    assert scores[0] == Score(expected(*pairs[0])) and scores[3] == Score(expected(*pairs[3]))
    # Indices of mixed types fail their request (two pairs here), not the batch.
    scores, failures = make_rm([servers[0].url], batch_size=2, retries=0).score_partial(
        [("m0", "a"), ("m1", "b"), ("m2", "c"), ("m3", "STRINDEX")])
    assert [f.index for f in failures] == [2, 3] and "index" in failures[0].reason
    assert scores[:2] == [Score(expected("m0", "a")), Score(expected("m1", "b"))]


def test_a_finish_that_cannot_read_a_reply_fails_that_pair(servers):
    def two_values(data):  # an RM head that needs two values per row
        return Score(data[0] - data[1])

    def unloaded(data):  # a bug, not a malformed reply: reported at once, not retried
        raise RuntimeError("head not loaded")

    scores, failures = make_rm([servers[0].url], finish=two_values, retries=1).score_partial([("q", "a")])
    assert scores == [None] and "IndexError" in failures[0].reason and failures[0].attempts == 2
    scores, failures = make_rm([servers[0].url], finish=unloaded, retries=1).score_partial([("q", "a")])
    assert scores == [None] and failures[0].reason == "unexpected RuntimeError: head not loaded"
    assert failures[0].attempts == 1


def test_retry_counts(servers):
    before = sum(s.seen[render("r", "FAIL500 x")] for s in servers)
    rm = make_rm([s.url for s in servers], retries=3)
    _, failures = rm.score_partial([("r", "FAIL500 x")])
    assert failures[0].attempts == 4
    assert sum(s.seen[render("r", "FAIL500 x")] for s in servers) - before == 4
    # A retry goes to the other server.
    assert all(s.seen[render("r", "FAIL500 x")] >= 2 for s in servers)


@pytest.mark.slow
def test_concurrency_bound_and_round_robin():
    fresh = [FakeServer(delay_s=0.05), FakeServer(delay_s=0.05)]
    try:
        rm = make_rm([s.url for s in fresh], concurrency=3, timeout_s=5)
        pairs = [(f"q{i}", "a" * i) for i in range(40)]
        assert rm.score(pairs) == [Score(expected(*p)) for p in pairs]
        total_max = max(s.max_in_flight for s in fresh)
        assert 2 <= sum(s.max_in_flight for s in fresh) and total_max <= 3
        assert fresh[0].requests == 20 and fresh[1].requests == 20
        # One server alone: the bound is reached but never passed.
        solo = FakeServer(delay_s=0.05)
        try:
            make_rm([solo.url], concurrency=3, timeout_s=5).score(pairs)
            assert solo.max_in_flight == 3
        finally:
            solo.close()
    finally:
        for s in fresh:
            s.close()


def test_batched_requests(servers):
    rm = make_rm([servers[0].url], batch_size=4)
    pairs = [(f"q{i}", f"answer {i}") for i in range(10)]
    before = servers[0].requests
    assert rm.score(pairs) == [Score(expected(*p)) for p in pairs]
    assert servers[0].requests - before == 3


def test_dead_server_fails_over(servers):
    dead = "http://127.0.0.1:9"  # nothing listens on the discard port
    rm = make_rm([dead, servers[1].url], retries=1)
    pairs = [(f"d{i}", "x") for i in range(6)]
    assert rm.score(pairs) == [Score(expected(*p)) for p in pairs]
    scores, failures = make_rm([dead], retries=1).score_partial(pairs[:1])
    assert scores == [None] and "connection error" in failures[0].reason


@pytest.mark.parametrize("bad", ["FAIL500", "HUGE"])
def test_scoring_run_caches_successes_before_raising(servers, tmp_path, bad):
    rm = make_rm([s.url for s in servers])
    query = Query("q1", "question", (Candidate("good one"), Candidate(bad), Candidate("good two")))
    cache = ScoreCache(tmp_path / "scores.sqlite")
    with pytest.raises(RemoteScoringError):
        score_queries([query], [rm], cache=cache)
    hits = cache.get_many(rm.name, [("question", "good one"), ("question", bad), ("question", "good two")])
    assert hits[0] == Score(expected("question", "good one")) and hits[2] is not None and hits[1] is None
    cache.close()


def test_works_inside_running_event_loop(servers):
    import asyncio

    rm = make_rm([servers[0].url])

    async def inside():
        return rm.score([("q", "a")])

    assert asyncio.run(inside()) == [Score(expected("q", "a"))]


# -- reading pooled outputs (shared by the offline and remote vLLM backends) -----------------------

def test_to_score_kinds():
    import math

    from morkit.reward_models.backends.pooling_io import MalformedOutput, to_score

    assert to_score("classify", [0.25]) == Score(0.25)
    assert to_score("classify", [[0.25]]) == Score(0.25)
    assert to_score("token_classify", [[0.1], [0.2], [-0.7]], expected_rows=3) == Score(-0.7)
    assert to_score("token_classify", [0.1, 0.2, -0.7]) == Score(-0.7)  # squeezed one-label rows
    steps = to_score("step", [[0.0, 0.0], [0.0, math.log(3)]], label=1, num_labels=2, expected_rows=2)
    assert steps.steps == pytest.approx((0.5, 0.75)) and steps.value == pytest.approx(0.5)
    for kind, data, kw in [("classify", [0.1, 0.2], {}), ("token_classify", [[0.1]], {"expected_rows": 2}),
                           ("step", [[0.1, 0.2, 0.3]], {"num_labels": 2}), ("classify", ["x"], {}),
                           ("step", [], {}), ("classify", [10**400], {}), ("token_classify", [[0.1], 10**400], {})]:
        with pytest.raises(MalformedOutput):
            to_score(kind, data, **kw)


def test_step_and_token_kinds_over_http():
    class StepServer(FakeServer):
        def pooling(self, req):
            ids = req["input"]
            rows = [[0.0, 0.0] for t in ids if t == 9]  # one [neg, pos] row per step token 9
            return 200, json.dumps({"data": [{"index": 0, "data": rows}]}).encode()

    server = StepServer()
    try:
        rm = RemoteRewardModel("prm", [server.url], "m", task="step", render=lambda q, a: [1, 5, 9, 6, 9],
                               step_token_id=9, retries=0)
        assert rm.kind == "prm" and server.payloads == []
        (score,) = rm.score([("q", "a")])
        assert score.steps == (0.5, 0.5) and server.payloads[0]["task"] == "token_classify"
        _, failures = RemoteRewardModel("prm", [server.url], "m", task="step", render=lambda q, a: [1, 9],
                                        step_token_id=5, retries=0).score_partial([("q", "a")])
        assert "expected 0 rows" in failures[0].reason
    finally:
        server.close()


def test_activation_switch_detection():
    from dataclasses import dataclass

    from morkit.reward_models.backends.vllm_engine import raw_output_params

    @dataclass
    class New:
        use_activation: bool | None = None

    class Old:
        def __init__(self, activation: bool = True, softmax: bool = True):
            pass

    assert raw_output_params(New) == {"use_activation": False}
    assert raw_output_params(Old) == {"activation": False, "softmax": False}


def test_vllm_backend_is_lazy():
    from morkit.reward_models.backends.vllm_engine import VLLMRewardModel

    rm = VLLMRewardModel("/nonexistent", kind="step", step_token_id=7)
    assert rm.kind == "prm" and rm._llm is None and rm.llm_kwargs["dtype"] == "float32"
    assert rm._pooler_config({"task", "tok_pooling_type", "step_tag_id"}) == {
        "task": "token_classify", "tok_pooling_type": "STEP", "step_tag_id": 7}
    assert rm.score([]) == []
