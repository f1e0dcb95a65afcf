"""`morkit serve` over real HTTP on 127.0.0.1: rank and OpenRLHF rewards equal single-process results,
micro-batching, limits (413, 400, 503, 504), disconnects, the start-up fit check, SIGTERM, and TRL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from fakes.embedder import HashEmbedder
from fakes.serving import BlockingEngine, free_port, live

from morkit.cli import main
from morkit.core.errors import UnavailableError
from morkit.reward_models.memory import GIB, MemoryNeed
from morkit.reward_models.options import ScoringOptions
from morkit.selection.methods import SelectOptions
from morkit.services.serving.app import ServeLimits
from morkit.services.serving.engine import RoutingEngine

TABLE = "qwen2.5-math-rm-72b"
VARIED = (28, 37, 54)  # qwen25_math_rm8 questions whose answers disagree (math-consensus varies)


def metric(url: str, name: str) -> dict[str, float]:
    """Samples of one metric family: sample name + labels -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        if family.name == name:
            for s in family.samples:
                out[s.name + json.dumps(s.labels, sort_keys=True)] = s.value
    return out


def unscored(queries, keep=(TABLE,)):
    return [replace(q, candidates=tuple(replace(c, correct=None, scores={k: v for k, v in c.scores.items()
                                                                          if k in keep})
                                        for c in q.candidates)) for q in queries]


@pytest.fixture(scope="module")
def engine(hash_pool, tmp_path_factory):
    engine = RoutingEngine(hash_pool, SelectOptions(method="pres"),
                           ScoringOptions(device="cpu", cache=tmp_path_factory.mktemp("serve") / "cache.sqlite"),
                           embedder=HashEmbedder())
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def reference_rankings(hash_pool, math_queries):
    """What single-process `morkit.rank` gives (the hash embedder stands in for the pool's)."""
    from morkit.question_pool import embed
    from morkit.services import routing

    queries = unscored(math_queries[40:70])
    original = embed.load_embedder
    embed.load_embedder = lambda name, device=None: HashEmbedder()
    try:
        rankings = routing.rank(queries, hash_pool, SelectOptions(method="pres"), ScoringOptions(device="cpu"))
    finally:
        embed.load_embedder = original
    return queries, [r.to_json() for r in rankings]


def test_a_fixed_ensemble_routes_every_query_to_it(hash_pool, math_queries):
    # `morkit serve --rm NAME`: every query gets the pool's ensemble of exactly those RMs
    engine = RoutingEngine(hash_pool, SelectOptions(method="fixed", rms=("math-consensus",)),
                           ScoringOptions(device="cpu"), embedder=HashEmbedder())
    try:
        rankings = engine.rank(unscored(math_queries[40:43]))
        assert engine.method == "fixed" and engine.health()["fixed_ensemble"] == ["math-consensus"]
        assert all(r.selection.method == "fixed" and r.selection.choice.ensemble.members == ("math-consensus",)
                   for r in rankings)
    finally:
        engine.close()


def contract(query) -> dict:
    from morkit.data.contract import query_to_json

    return query_to_json(query)


def test_rank_over_http_equals_single_process_rank(engine, reference_rankings):
    queries, expected = reference_rankings
    with live(engine) as url:
        reply = httpx.post(f"{url}/v1/rank", json={"queries": [contract(q) for q in queries[:6]]}, timeout=60)
        health = httpx.get(f"{url}/health").json()
    assert reply.status_code == 200, reply.text
    assert reply.json()["results"] == expected[:6]
    assert health["status"] == "ok" and health["resident_rms"] == ["math-consensus"]


def test_32_concurrent_rank_requests_are_answered_and_micro_batched(engine, reference_rankings):
    queries, expected = reference_rankings

    async def burst(url):
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(client.post(f"{url}/v1/rank", json={"queries": [contract(queries[i])]})
                                          for i in range(30)), client.post(f"{url}/v1/rank", json={
                                              "queries": [contract(q) for q in queries[:3]]}),
                                        client.post(f"{url}/v1/rank", json={"queries": [contract(queries[5])]}))

    with live(engine, ServeLimits(max_batch=32, max_wait_ms=300)) as url:
        replies = asyncio.run(burst(url))
        sizes = metric(url, "morkit_batch_size")
        requests = metric(url, "morkit_requests")
    assert [r.status_code for r in replies] == [200] * 32
    assert [r.json()["results"] for r in replies[:30]] == [[e] for e in expected[:30]]
    assert replies[30].json()["results"] == expected[:3] and replies[31].json()["results"] == [expected[5]]
    assert sizes["morkit_batch_size_sum{}"] == 32
    assert sizes["morkit_batch_size_count{}"] < 32  # fewer engine calls than requests: batches > 1
    assert requests['morkit_requests_total{"route": "/v1/rank", "status": "200"}'] == 32


def test_openrlhf_get_reward(engine, math_queries):
    from morkit.services.serving.protocol import group_scaled, reward_job

    groups = [math_queries[i] for i in VARIED]
    prompts = [q.question for q in groups for _ in q.candidates]
    responses = [c.text for q in groups for c in q.candidates]
    labels = [q.reference for q in groups for _ in q.candidates]
    body = {"query": [p + r for p, r in zip(prompts, responses)], "prompts": prompts, "labels": labels}
    # As OpenRLHF decodes them (skip_special_tokens=False): left padding, BOS, then EOS and padding after
    padded = {**body, "query": ["<pad><pad><s>" + p + r + "</s><pad>" for p, r in zip(prompts, responses)]}
    with live(engine) as url:
        reply = httpx.post(f"{url}/get_reward", json=body, timeout=60)
        decoded = httpx.post(f"{url}/get_reward", json=padded, timeout=60)
        bad = httpx.post(f"{url}/get_reward", json={**body, "query": body["query"][:3] + ["x"] + body["query"][4:]})
    assert reply.status_code == 200, reply.text
    assert decoded.status_code == 200 and decoded.json() == reply.json()
    got = reply.json()
    job = reward_job(body)
    rankings = engine.rank(job.queries)  # the same grouped queries, in process
    assert len(job.queries) == 3 and got["rewards"] == [r.scores[c] for r, (q, c) in
                                                        zip([rankings[q] for q, _ in job.positions], job.positions)]
    assert got["scores"] == group_scaled(job, [r.scores for r in rankings])
    assert all(0.0 <= s <= 1.0 for s in got["scores"]) and max(got["scores"]) == 1.0
    assert len(set(got["rewards"])) > 1  # the groups' answers disagree, so the rewards do
    assert bad.status_code == 400 and "item 3" in bad.json()["error"]


def test_bad_bodies_get_one_line_reasons(engine):
    good = {"id": "a", "question": "What is 1 + 1?", "candidates": [{"text": "2", "scores": {TABLE: 1.0}}]}
    cases = {
        b"{not json": (400, "malformed JSON"),
        b"[1, 2]": (400, "expected a JSON object"),
        b'{"queries": [{"id": "a", "question": "q", "candidates": [{"text": "x", "scores": {"r": NaN}}]}]}':
            (400, "NaN is not a finite number"),
        b'{"queries": 3}': (400, "'queries' must be a list"),
        json.dumps({"queries": [good, {**good, "id": "b", "question": 7}]}).encode():
            (400, "queries[1]: query 'b': 'question' must be a string"),
        json.dumps({"queries": [good, good]}).encode(): (400, "duplicate id"),
        json.dumps({"queries": [{**good, "candidates": [{"agent": "a"}]}]}).encode(): (400, "neither 'text' nor"),
        b"{" + b" " * 3000 + b"}": (413, "over this server's limit of 2048 bytes"),
    }
    with live(engine, ServeLimits(max_body_bytes=2048, max_items=5)) as url:
        for body, (status, reason) in cases.items():
            reply = httpx.post(f"{url}/v1/rank", content=body, headers={"content-type": "application/json"})
            error = reply.json()["error"]
            assert (reply.status_code, reason in error, "\n" in error) == (status, True, False), (body[:60], error)
        many = httpx.post(f"{url}/get_reward", json={"query": ["a"] * 6, "prompts": ["a"] * 6})
        assert many.status_code == 400 and "at most 5" in many.json()["error"]


def _rank_body(qid: str) -> dict:
    return {"queries": [{"id": qid, "question": "q", "candidates": [{"text": "a"}]}]}


def test_full_queue_is_503_and_a_slow_request_is_504():
    fake = BlockingEngine()
    with live(fake, ServeLimits(max_batch=1, max_wait_ms=0, queue_size=1, timeout_s=1.0)) as url:
        with httpx.Client(timeout=30) as client:
            first = threading.Thread(target=client.post, args=(f"{url}/v1/rank",), kwargs={"json": _rank_body("a")})
            first.start()
            assert fake.running.wait(10)
            with httpx.Client(timeout=30) as other:
                waiting = threading.Thread(target=lambda: setattr(fake, "late", other.post(
                    f"{url}/v1/rank", json=_rank_body("b"))))
                waiting.start()
                deadline = time.monotonic() + 10
                while httpx.get(f"{url}/health").json()["queue_depth"] < 1:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                full = client.post(f"{url}/v1/rank", json=_rank_body("c"))
                waiting.join(30)
            fake.release.set()
            first.join(30)
        skipped = metric(url, "morkit_skipped_requests")
    assert full.status_code == 503 and full.headers["retry-after"] == "1" and "queue is full" in full.json()["error"]
    assert fake.late.status_code == 504 and "--timeout" in fake.late.json()["error"]
    assert fake.seen == ["a"] and skipped["morkit_skipped_requests_total{}"] == 1  # the timed-out one never ran


def test_a_disconnected_clients_queued_work_is_skipped():
    fake = BlockingEngine()
    with live(fake, ServeLimits(max_batch=1, max_wait_ms=0)) as url:
        with httpx.Client(timeout=30) as client:
            first = threading.Thread(target=client.post, args=(f"{url}/v1/rank",), kwargs={"json": _rank_body("a")})
            first.start()
            assert fake.running.wait(10)
            with httpx.Client(timeout=0.5) as impatient, pytest.raises(httpx.ReadTimeout):
                impatient.post(f"{url}/v1/rank", json=_rank_body("gone"))  # the client leaves, closing its socket
            deadline = time.monotonic() + 10
            while metric(url, "morkit_requests").get('morkit_requests_total{"route": "/v1/rank", "status": "499"}') != 1:
                assert time.monotonic() < deadline, "the server did not notice the disconnect"
                time.sleep(0.02)
            fake.release.set()
            first.join(30)
            after = client.post(f"{url}/v1/rank", json=_rank_body("after"))
        skipped = metric(url, "morkit_skipped_requests")
    assert after.status_code == 200 and fake.seen == ["a", "after"]
    assert skipped["morkit_skipped_requests_total{}"] == 1


def test_a_pool_that_does_not_fit_is_refused_at_start_up(hash_pool, tmp_path, monkeypatch, capsys):
    from morkit.reward_models import memory
    from morkit.reward_models.handles import RMHandle

    monkeypatch.setattr(RMHandle, "memory_need", lambda self: MemoryNeed(40 * GIB, GIB))
    monkeypatch.setattr(memory, "devices_free", lambda device, spread: [8 * GIB])
    with pytest.raises(UnavailableError, match="'math-consensus' does not fit: it needs about 45.1 GiB"):
        RoutingEngine(hash_pool, SelectOptions(method="pres"), ScoringOptions(device="cpu"), embedder=HashEmbedder())
    hash_pool.save(tmp_path / "pool")
    port = free_port()
    assert main(["serve", "--pool", str(tmp_path / "pool"), "--port", str(port), "--device", "cpu", "-q"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("morkit: error: reward model 'math-consensus' does not fit") and "\n" not in err
    with socket.socket() as s:  # refused before the port was bound
        s.bind(("127.0.0.1", port))


def test_the_pools_embedder_counts_in_the_fit_check(hash_pool, monkeypatch):
    from morkit.question_pool.embed import DEFAULT_EMBEDDER, embedder_memory
    from morkit.reward_models import memory
    from morkit.reward_models.handles import RMHandle

    monkeypatch.setitem(hash_pool.meta["embedder"], "name", DEFAULT_EMBEDDER)  # the packaged MiniLM, 90 MB
    need = embedder_memory(DEFAULT_EMBEDDER)
    assert need.weights > 80e6 and need.activations > 0
    monkeypatch.setattr(RMHandle, "memory_need", lambda self: MemoryNeed(GIB, 0))
    alone = MemoryNeed(GIB, 0).per_device
    monkeypatch.setattr(memory, "devices_free", lambda device, spread: [alone + need.weights // 2])
    with pytest.raises(UnavailableError, match="'math-consensus \\+ embedder all-MiniLM-L6-v2' does not fit"):
        RoutingEngine(hash_pool, SelectOptions(method="pres"), ScoringOptions(device="cpu"))


def test_trl_reward_in_process_and_through_the_server_agree(engine, math_queries):
    from morkit.integrations.trl import RoutedReward, routed_reward

    groups = [math_queries[i] for i in VARIED]
    prompts = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": q.question}]
               for q in groups for _ in q.candidates]
    completions = [[{"role": "assistant", "content": c.text}] for q in groups for c in q.candidates]
    solution = [q.reference for q in groups for _ in q.candidates]
    local = RoutedReward(engine=engine, reference_column="solution")
    rewards = local(prompts=prompts, completions=completions, completion_ids=None, solution=solution)
    assert len(rewards) == len(completions) and len(set(rewards)) > 1
    expected = engine.rewards([q.question for q in groups for _ in q.candidates],
                              [c.text for q in groups for c in q.candidates])["rewards"]
    assert rewards == expected
    with live(engine) as url:
        remote = routed_reward(url=url, reference_column="solution")
        assert remote._client is None  # built on first call
        assert remote(prompts=prompts, completions=completions, solution=solution) == rewards
        strings = remote(prompts=[q.question for q in groups[:1] for _ in q.candidates],
                         completions=[c.text for c in groups[0].candidates],
                         solution=solution[: len(groups[0].candidates)])
        remote.close()
    assert strings == rewards[: len(groups[0].candidates)]
    with pytest.raises(ValueError, match="no column 'answer'"):
        RoutedReward(engine=engine, reference_column="answer")(prompts=["q"], completions=["a"])


# ------------------------------------------------------------------------------------ real models, processes
@pytest.fixture(scope="module")
def real_pool(tmp_path_factory, data_dir):
    """A pool over the table RM, math-consensus and the MiniLM probe, embedded with the real MiniLM."""
    out = tmp_path_factory.mktemp("real") / "pool"
    assert main(["pool", "build", "--dataset", "qwen25_math_rm8:24", "--data-dir", str(data_dir), "--rm", TABLE,
                 "--rm", "math-consensus", "--rm", "minilm-probe", "-o", str(out), "-q", "--device", "cpu",
                 "--no-cache"]) == 0
    return out


@pytest.mark.slow
def test_real_pool_rank_equals_morkit_rank_and_shares_the_cache(real_pool, math_queries, tmp_path):
    from morkit.question_pool.pool import load_pool
    from morkit.services.routing import rank

    pool = load_pool(real_pool)
    queries = unscored(math_queries[40:46])
    options = SelectOptions(method="stacker")  # every pool RM: the 24-question pool is too small for the default
    expected = [r.to_json() for r in rank(queries, pool, options, ScoringOptions(device="cpu"))]
    engine = RoutingEngine(pool, options, ScoringOptions(device="cpu", cache=tmp_path / "c.sqlite"))
    try:
        assert set(engine.models) == {"math-consensus", "minilm-probe"}
        with live(engine) as url:
            got = httpx.post(f"{url}/v1/rank", json={"queries": [contract(q) for q in queries]}, timeout=120).json()
            again = httpx.post(f"{url}/v1/rank", json={"queries": [contract(q) for q in queries]}, timeout=120).json()
            hits = metric(url, "morkit_score_cache_hits")
    finally:
        engine.close()
    for row, want in zip(got["results"], expected):
        assert {k: v for k, v in row.items() if k != "scores"} == {k: v for k, v in want.items() if k != "scores"}
        assert row["scores"] == pytest.approx(want["scores"], rel=1e-6, abs=1e-9)
    assert again == got and hits["morkit_score_cache_hits_total{}"] > 0  # the second time from the shared cache


@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight_and_exits_0(real_pool, math_queries, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "morkit.cli", "serve", "--pool", str(real_pool), "--port",
                             str(port), "--device", "cpu", "--no-cache", "-q", "--max-wait-ms", "0"],
                            stderr=open(tmp_path / "serve.log", "w"), env=env,
                            cwd=Path(__file__).resolve().parents[3])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "server did not come up"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        queries = unscored(math_queries[24:44], keep=())  # no cached scores: minilm-probe must run on them all
        result = {}
        sender = threading.Thread(target=lambda: result.setdefault("reply", httpx.post(
            f"{url}/v1/rank", json={"queries": [contract(q) for q in queries]}, timeout=300)))
        sender.start()
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/health", timeout=10).json()["in_flight"] == 0:
            assert sender.is_alive() and time.monotonic() < deadline, "the request was never in flight"
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        sender.join(300)
        assert proc.wait(120) == 0, (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    reply = result["reply"]
    assert reply.status_code == 200 and len(reply.json()["results"]) == len(queries)
    assert "morkit serve: listening on" in (tmp_path / "serve.log").read_text()
