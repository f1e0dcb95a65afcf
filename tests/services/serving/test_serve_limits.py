"""`morkit serve` under abuse, over real HTTP on 127.0.0.1: each limit refuses before any work, memory is
bounded by bytes held, a timed-out request leaves the queue, parsing never blocks the event loop, the API
key, the listening address, and SIGTERM while a model call hangs. Fakes stand in for the engine (control
flow only); the server, its sockets and the CLI are real."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fakes.serving import BlockingEngine, InstantEngine, free_port, live, one_line_error, rank_body, wait_until

from morkit.cli import main
from morkit.core import budget, grading
from morkit.core.errors import MorkitError
from morkit.reward_models.rules.consensus import consensus_scores
from morkit.services.serving.limits import ServeLimits
from morkit.services.serving.protocol import _SPECIAL, strip_trailing_special
from morkit.services.serving.server import make_server


# ------------------------------------------------------------------------------------------ per-request caps
def test_too_many_candidates_and_too_much_text_are_413_before_any_work():
    fake = InstantEngine()
    limits = ServeLimits(max_candidates=10, max_text_chars=1000)
    with live(fake, limits) as url:
        many = httpx.post(f"{url}/v1/rank", json={"queries": [rank_body("a", 6)["queries"][0],
                                                              rank_body("b", 5)["queries"][0]]})
        items = httpx.post(f"{url}/get_reward", json={"query": ["pa"] * 11, "prompts": ["p"] * 11})
        long = httpx.post(f"{url}/v1/rank", json=rank_body("a", 2, "x" * 600))
        fine = httpx.post(f"{url}/v1/rank", json=rank_body("a", 10))
    assert many.status_code == 413 and "11 candidates" in one_line_error(many)
    assert "--max-candidates" in one_line_error(many) and "at most 10" in one_line_error(many)
    assert items.status_code == 413 and "--max-candidates" in one_line_error(items)
    assert long.status_code == 413 and "--max-text-chars" in one_line_error(long)
    assert fine.status_code == 200 and fake.seen == 1  # only the request within the caps reached the engine


def test_200k_candidates_are_refused_at_once_and_the_server_stays_up():
    fake = InstantEngine()
    body = json.dumps(rank_body("a", 200_000)).encode()  # 3.4 MB, under the body limit
    with live(fake, ServeLimits(max_json_values=10**6)) as url:  # its 400k values: refused by candidates here
        started = time.monotonic()
        big = httpx.post(f"{url}/v1/rank", content=body, timeout=60)
        took = time.monotonic() - started
        after = httpx.post(f"{url}/v1/rank", json=rank_body("b"), timeout=10)
    assert big.status_code == 413 and "200000 candidates" in one_line_error(big) and took < 30
    assert after.status_code == 200 and fake.seen == 1


def test_empty_candidates_and_other_bad_bodies_are_one_line_4xx():
    fake = InstantEngine()
    cases = [
        (json.dumps(rank_body("a", 0)), "/v1/rank", 400, "queries[0]: query 'a': 'candidates' is empty"),
        ('{"queries": [{"id": "a", "question": "q", "candidates": "x"}]}', "/v1/rank", 400, "'candidates' must be"),
        ('{"queries": []}', "/v1/rank", 400, "'queries' is empty"),
        ("{}", "/v1/rank", 400, "'queries' must be a list"),
        (b"\xff\xfe{}", "/v1/rank", 400, "not valid UTF-8"),
        ("", "/v1/rank", 400, "empty"),
        ('{"query": "pa", "prompts": ["p"]}', "/get_reward", 400, "'query' must be a list"),
        ('{"query": ["pa"]}', "/get_reward", 400, "'prompts' is missing"),
        ('{"query": ["pa"], "prompts": ["p", "q"]}', "/get_reward", 400, "2 prompts for 1 items"),
        ('{"query": ["pa"], "prompts": [3]}', "/get_reward", 400, "must be strings"),
        ('{"query": ["pa"], "prompts": ["p"], "labels": [{}]}', "/get_reward", 400, "labels[0]"),
        ('{"query": ["xa"], "prompts": ["p"]}', "/get_reward", 400, "query[0] does not start with prompts[0]"),
        ('{"query": [], "prompts": []}', "/get_reward", 400, "'query' is empty"),
    ]
    with live(fake) as url:
        for body, route, status, reason in cases:
            reply = httpx.post(f"{url}{route}", content=body, headers={"content-type": "application/json"})
            assert (reply.status_code, reason in one_line_error(reply)) == (status, True), (body, reply.text)
    assert fake.seen == 0


def test_morkit_rank_accepts_a_query_without_candidates_as_score_does(tmp_path, hash_pool, math_queries,
                                                                       monkeypatch):
    from fakes.embedder import HashEmbedder

    from morkit.data.contract import query_to_json
    from morkit.question_pool import embed

    hash_pool.save(tmp_path / "pool")
    monkeypatch.setattr(embed, "load_embedder", lambda name, device=None: HashEmbedder())
    lines = [query_to_json(math_queries[40]), {**query_to_json(math_queries[41]), "candidates": []}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["score", str(tmp_path / "in.jsonl"), "--rm", "math-consensus", "-o", str(tmp_path / "s.jsonl"),
                 "-q", "--no-cache"]) == 0
    assert main(["rank", str(tmp_path / "in.jsonl"), "--pool", str(tmp_path / "pool"), "-o", str(tmp_path / "r.jsonl"),
                 "-q", "--device", "cpu", "--method", "pres", "--no-cache"]) == 0
    scored = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    ranked = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert scored[1]["candidates"] == [] and isinstance(ranked[0]["best_index"], int)
    assert ranked[1]["id"] == "math-41" and ranked[1]["best_index"] is None and ranked[1]["scores"] == []


# ------------------------------------------------------------------------------------------ memory and queue
def test_a_full_byte_budget_is_503_at_once_and_the_bytes_come_back():
    fake = BlockingEngine()
    limits = ServeLimits(max_batch=1, max_wait_ms=0, max_body_bytes=3000, max_inflight_bytes=4000)
    first = json.dumps(rank_body("a", 1, "x" * 2500)).encode()
    second = json.dumps(rank_body("b", 1, "y" * 2000)).encode()
    with live(fake, limits) as url:
        with httpx.Client(timeout=30) as client:
            holder = threading.Thread(target=lambda: setattr(fake, "first", client.post(f"{url}/v1/rank", content=first)))
            holder.start()
            assert fake.running.wait(10)
            assert httpx.get(f"{url}/health").json()["held_bytes"] == len(first)
            started = time.monotonic()
            refused = httpx.post(f"{url}/v1/rank", content=second, timeout=30)
            took = time.monotonic() - started
            fake.release.set()
            holder.join(30)
        health = httpx.get(f"{url}/health").json()
        after = httpx.post(f"{url}/v1/rank", content=second, timeout=30)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "--max-inflight-bytes" in one_line_error(refused) and took < 5  # refused, never queued
    assert fake.first.status_code == 200 and health["held_bytes"] == 0 and after.status_code == 200
    assert fake.seen == ["a", "b"]


def test_a_timed_out_request_leaves_the_queue_and_frees_its_bytes_at_once():
    fake = BlockingEngine()
    first = json.dumps(rank_body("a")).encode()
    with live(fake, ServeLimits(max_batch=1, max_wait_ms=0, timeout_s=1.0)) as url:
        with httpx.Client(timeout=30) as client:
            holder = threading.Thread(target=client.post, args=(f"{url}/v1/rank",), kwargs={"content": first})
            holder.start()
            assert fake.running.wait(10)
            body = json.dumps(rank_body("late", 1, "z" * 5000)).encode()
            late = httpx.post(f"{url}/v1/rank", content=body, timeout=30)
            health = httpx.get(f"{url}/health").json()  # right after the 504: nothing waits, no bytes of it held
            fake.release.set()
            holder.join(30)
    assert late.status_code == 504 and "--timeout" in one_line_error(late)
    assert health["queue_depth"] == 0 and health["held_bytes"] == len(first)  # only the running request's
    assert fake.seen == ["a"]  # the timed-out request never reached the engine


@pytest.mark.slow
def test_health_answers_while_a_request_is_in_flight_and_says_stalled_past_the_timeout():
    fake = BlockingEngine()
    with live(fake, ServeLimits(max_batch=1, max_wait_ms=0, timeout_s=1.0)) as url:
        with httpx.Client(timeout=30) as client:
            holder = threading.Thread(target=client.post, args=(f"{url}/v1/rank",), kwargs={"json": rank_body("a")})
            holder.start()
            assert fake.running.wait(10)
            busy = httpx.get(f"{url}/health", timeout=5)
            time.sleep(1.2)
            stalled = httpx.get(f"{url}/health", timeout=5)
            fake.release.set()
            holder.join(30)
        healthy = httpx.get(f"{url}/health", timeout=5)
    assert busy.status_code == 200 and busy.json()["in_flight"] == 1 and busy.json()["status"] == "ok"
    assert stalled.status_code == 503 and stalled.json()["status"] == "stalled"
    assert healthy.status_code == 200 and healthy.json()["in_flight"] == 0


# ------------------------------------------------------------------------------------------ parsing cost
def test_trailing_special_tokens_are_stripped_in_linear_time_as_the_regex_did():
    regex = re.compile(rf"(?:{_SPECIAL})+\s*$")
    samples = ["ans</s><pad>", "ans</s> <pad> \n", "a<|im_end|>", "a<|<|x|>", "a<||>", "a<|b c|>", "x<s>[PAD]",
               "a" + "<|" + "n" * 41 + "|>", "a" + "<|" + "n" * 40 + "|>", "<pad>", "", " \n", "a<eos>\x1c\xa0",
               "a</s>b", "a<|x|>\n<|y|>", "[SEP][CLS]\u2028"]
    for text in samples:
        assert strip_trailing_special(text) == regex.sub("", text), text
    attack = "<|a|>" * 40000 + "x"  # 200 KB: minutes for the regex, which retried from every token
    started = time.monotonic()
    assert strip_trailing_special(attack) == attack and strip_trailing_special(attack[:-1]) == ""
    assert time.monotonic() - started < 2


def test_a_body_built_to_stall_the_parser_does_not_block_health():
    fake = InstantEngine()
    text = "P" + "<|a|>" * 8000 + "x"  # 40 KB per item; 34 s for five of them before
    body = {"query": [text] * 25, "prompts": ["P"] * 25}
    with live(fake) as url:
        async def both():
            async with httpx.AsyncClient(timeout=60) as client:
                reward = asyncio.ensure_future(client.post(f"{url}/get_reward", json=body))
                await asyncio.sleep(0.05)
                started = time.monotonic()
                health = await client.get(f"{url}/health")
                return await reward, health, time.monotonic() - started

        reward, health, health_s = asyncio.run(both())
    assert reward.status_code == 200 and reward.json()["rewards"] == [0.0] * 25
    assert health.status_code == 200 and health_s < 5


def test_consensus_compares_few_classes_and_keeps_first_match_classes(monkeypatch):
    calls = []

    def fake_equal(a, b):  # symbolic answers 'sK' are equal when K agrees mod 3; counts every comparison
        calls.append((a, b))
        return a[0] == b[0] == "s" and int(a[1:]) % 3 == int(b[1:]) % 3

    monkeypatch.setattr(grading, "_symbolic_equal", fake_equal)

    def reference(answers):  # the definition: each answer joins the first class whose representative matches
        reps, out = [], []
        for a in answers:
            if a is None:
                out.append(None)
                continue
            index = next((i for i, r in enumerate(reps) if grading.answers_equivalent(r, a)), None)
            if index is None:
                index = len(reps)
                reps.append(a)
            out.append(index)
        return out

    few = ["s1", "3", "s4", "3.0000001", "s2", "1/2", "0.5", "s5", "", "s7", "3.1", "t1", "s9", None, "3.0"]
    assert grading.equivalence_classes(few) == reference(few)
    calls.clear()
    numbers = [f"\\boxed{{{i}}}" for i in range(2000)]
    assert consensus_scores(numbers) == [1 / 2000] * 2000 and calls == []  # exact values: no comparison at all
    distinct = [f"t{i}" for i in range(2000)]  # 2000 classes: 2 million comparisons before
    with budget.work_bounded(None, grading.SERVER_SYMBOLIC_CLASSES):  # as the server's engine runs
        assert grading.equivalence_classes(distinct) == list(range(2000))
    assert len(calls) <= 2000 * grading.SERVER_SYMBOLIC_CLASSES
    calls.clear()
    beyond = [f"t{i}" for i in range(40)] + ["t39"]
    assert grading.equivalence_classes(beyond) == reference(beyond)  # unbounded elsewhere (pools, loops)


def test_answer_extraction_is_linear_on_crafted_answers():
    started = time.monotonic()
    assert grading.normalize_answer("1 " + "a" * 60 + "!") == "1" + "a" * 60 + "!"  # exponential before
    n = 200_000  # each of these took minutes to hours before (a retry from every start of a long run)
    assert grading.extract_answer("\\boxed{" * (n // 7) + "7") == "7"
    assert grading.extract_answer("\n" * n + "x") is None
    assert grading.extract_answer("A: a" + " " * n + "b\nA") == "a" + " " * n + "b"
    assert grading.extract_answer("the answer is" + "\n" * n + "3") == "3"
    assert grading.extract_answer("the answer is" + " " * n) is None
    assert grading.extract_answer("<<x" * (n // 3) + " 4") == "4"
    assert grading.extract_answer("The answer is: 12.\nA: 5\n<<2*3=6>>") == "5"  # as before: 'A:' lines first
    assert grading.extract_answer("The answer is: 12.\nso <<2*3=6>>") == "12"
    assert grading.extract_answer("x \\boxed{1} \\boxed{{2}}") == "{2}"
    assert grading.as_number("1e10000000") is None and grading.as_number("1e3") == 1000
    assert consensus_scores(["\\boxed{1e10000000}", "\\boxed{2e10000000}"]) == [0.5, 0.5]
    assert time.monotonic() - started < 20


def test_work_past_the_deadline_fails_the_call_rather_than_change_a_score():
    from morkit.core.types import Candidate, Query
    from morkit.reward_models.rules.code_tests import CodeTests

    with budget.work_bounded(time.monotonic() - 1), pytest.raises(budget.DeadlinePassed):
        grading._symbolic_equal("\\sqrt{4}", "2")
    query = Query("q", "add", (Candidate("def add(a, b):\n    return a + b\n"),), tests="assert add(1, 2) == 3")
    with budget.work_bounded(time.monotonic() - 1), pytest.raises(budget.DeadlinePassed):
        CodeTests().run_tests(query)
    assert grading._symbolic_equal("x+1", "1+x") is True and CodeTests().run_tests(query)[0].passed


# ------------------------------------------------------------------------------------------ API key
def test_an_api_key_guards_every_route_but_health(monkeypatch):
    from morkit.integrations.trl import routed_reward

    fake = InstantEngine()
    with live(fake, api_key="s3cret") as url:
        for method, route in (("POST", "/v1/rank"), ("POST", "/get_reward"), ("GET", "/metrics"), ("GET", "/nope")):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"},
                            {"Authorization": "Basic s3cret"}):
                reply = httpx.request(method, f"{url}{route}", json=rank_body("a"), headers=headers)
                assert reply.status_code == 401 and "API key" in one_line_error(reply), (route, headers)
                assert reply.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(f"{url}/health").status_code == 200
        good = httpx.post(f"{url}/v1/rank", json=rank_body("a"), headers={"Authorization": "Bearer s3cret"})
        lower = httpx.get(f"{url}/metrics", headers={"Authorization": "bearer s3cret"})
        assert good.status_code == 200 and lower.status_code == 200 and fake.seen == 1
        monkeypatch.delenv("MORKIT_API_KEY", raising=False)
        with pytest.raises(MorkitError, match="answered 401.*MORKIT_API_KEY"):
            routed_reward(url=url, retries=0)(prompts=["p"], completions=["a"])
        assert routed_reward(url=url, api_key="s3cret")(prompts=["p"], completions=["a"]) == [0.0]
        monkeypatch.setenv("MORKIT_API_KEY", "s3cret")
        assert routed_reward(url=url)(prompts=["p", "p"], completions=["a", "b"]) == [0.0, 0.0]


def test_listening_beyond_this_machine_without_a_key_warns(capsys):
    fake = InstantEngine()
    for host, key, warned in (("0.0.0.0", None, True), ("0.0.0.0", "k", False), ("127.0.0.1", None, False)):
        server = make_server(fake, host=host, port=0, api_key=key)
        server.listener.close()
        err = capsys.readouterr().err
        assert ("warning: listening on 0.0.0.0" in err and "without an API key" in err) == warned, err
        assert server.port > 0


# ------------------------------------------------------------------------------------------ ports, hosts, CLI
def test_bad_port_host_or_port_in_use_exit_2_with_one_line(capsys, tmp_path):
    absent = str(tmp_path / "no-pool")  # bound before the pool loads: it is never read
    for port in ("99999", "65536", "0", "-1"):
        with pytest.raises(SystemExit) as exited:
            main(["serve", "--pool", absent, "--port", port])
        err = capsys.readouterr().err.strip()
        assert exited.value.code == 2 and "--port" in err and "1 to 65535" in err and "\n" not in err, err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--pool", absent, "--port", str(port)]) == 2
        err = capsys.readouterr().err.strip()
    assert err == f"morkit: error: --port {port}: cannot listen on 127.0.0.1:{port}: Address already in use"
    started = time.monotonic()
    assert main(["serve", "--pool", absent, "--host", "no-such-host.invalid"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morkit: error: --host no-such-host.invalid: ") and "\n" not in err
    assert time.monotonic() - started < 15


def test_the_listening_line_names_the_port_bound(capsys):
    with live(InstantEngine()) as url:
        port = int(url.rsplit(":", 1)[1])
    assert port > 0 and f"listening on http://127.0.0.1:{port} " in capsys.readouterr().err


HANGING_SERVER = """
import sys, threading
import morkit.question_pool.pool as pools
import morkit.services.serving.engine as engines

class Pool:
    def __len__(self):
        return 0

class Hanging:  # a model call that never returns
    models, method, cache = {}, "fake", None
    def __init__(self, *args, **kwargs):
        pass
    def health(self):
        return {"status": "ok"}
    def run(self, jobs):
        threading.Event().wait()
    def close(self):
        pass

pools.load_pool = lambda path: Pool()
engines.RoutingEngine = Hanging
from morkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_sigterm_ends_the_process_within_its_grace_while_the_engine_hangs(tmp_path):
    script = tmp_path / "hanging_server.py"
    script.write_text(HANGING_SERVER)
    port = free_port()
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, str(script), "serve", "--pool", "unused", "--port", str(port),
                             "--grace", "2", "--max-wait-ms", "0"], stderr=open(log, "w"),
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=Path(__file__).resolve().parents[3])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is None and "listening on" in log.read_text(), 60)
        reply = {}
        sender = threading.Thread(target=lambda: reply.setdefault("r", httpx.post(
            f"{url}/v1/rank", json=rank_body("a"), timeout=60)))
        sender.start()
        wait_until(lambda: httpx.get(f"{url}/health", timeout=5).json()["in_flight"] == 1)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = proc.wait(30)
        took = time.monotonic() - started
        sender.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = log.read_text()
    assert code == 1 and took < 15, err  # grace 2 s; the old server was still alive 62 s later
    assert "engine call was still running 2 s after the signal" in err
    assert reply["r"].status_code == 503 and "shutting down" in reply["r"].json()["error"]
