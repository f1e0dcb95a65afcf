"""`morkit serve` bounded within its default limits, over real HTTP on 127.0.0.1: a request that runs out of time
is dropped in every engine phase (embedding and scoring included) and the next one is served; symbolic answer
comparison is bounded per pair and per request, in a process that can be ended; a body of too many JSON values is
refused before it is parsed, and a small request is not kept waiting behind large ones; an empty API key from the
environment is refused. The engine, the server and its sockets are real; a stand-in embedder and a rule cost a few
milliseconds a call, as a model would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fakes.embedder import HashEmbedder
from fakes.serving import free_port, live, one_line_error, rank_body, wait_until

from morkit.cli import main
from morkit.core import budget, grading
from morkit.core.errors import InputError
from morkit.core.types import Score
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.reward_models.catalog import REWARD_MODELS
from morkit.reward_models.options import ScoringOptions
from morkit.selection.methods import SelectOptions
from morkit.services.serving import app as serving_app
from morkit.services.serving import protocol
from morkit.services.serving.engine import RoutingEngine
from morkit.services.serving.limits import ServeLimits

COST_S = 0.005  # what the stand-in embedder and rule take a call: 4096 of them are 20 s, five times the timeout
TIMEOUT_S = 4.0


class SlowEmbedder(HashEmbedder):
    """The hash embedder (the pool's), at COST_S a call; records how many texts each call was given."""

    def __init__(self):
        self.calls: list[int] = []

    def encode(self, texts, **kwargs):
        self.calls.append(len(texts))
        time.sleep(COST_S)
        return super().encode(texts, **kwargs)


class SlowPairs:
    """A rule scored by pairs that takes COST_S a pair whose answer says 'slow' (a model's forward pass)."""

    kind = "rule"
    name = "slow-pairs"

    def score(self, pairs):
        out = []
        for _, answer in pairs:
            if "slow" in answer:
                time.sleep(COST_S)
            out.append(Score(len(answer) % 7 / 7))
        return out


@pytest.fixture(scope="module")
def slow_engine(math_queries):
    """A pool over math-consensus and the slow rule; the engine scores every query with the slow rule alone."""
    from morkit.services.scoring import score

    REWARD_MODELS.register("slow-pairs", SlowPairs, "COST_S a pair that says 'slow'", kind="rule")
    try:
        train = score(math_queries[:24], ["math-consensus", "slow-pairs"], options=ScoringOptions(cache=None))
        pool = build_pool(train, HashEmbedder(), config=PoolConfig(max_members=2))
        engine = RoutingEngine(pool, SelectOptions(method="fixed", rms=("slow-pairs",)),
                               ScoringOptions(device="cpu", cache=None), embedder=SlowEmbedder())
        yield engine
        engine.close()
    finally:
        REWARD_MODELS.unregister("slow-pairs")


def _chatml(question: str, answer: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>\n"


ATTACKS = {  # 4096 one-answer queries (0.2-0.3 MB): every question distinct, so each is embedded
    "/v1/rank": lambda n: {"queries": [{"id": f"q{i}", "question": f"question {i}?", "candidates": [{"text": "a"}]}
                                       for i in range(n)]},
    "/get_reward": lambda n: {"query": [f"question {i}? a" for i in range(n)],
                              "prompts": [f"question {i}?" for i in range(n)]},
    "/classify": lambda n: {"model": "m", "input": [_chatml(f"question {i}?", "a") for i in range(n)]},
    "scoring": lambda n: {"queries": [{"id": f"q{i}", "question": "one question?", "candidates": [{"text": f"slow {i}"}]}
                                      for i in range(n)]},  # one question: embedded once, but 4096 slow pairs
    "one query": lambda n: {"queries": [{"id": "q", "question": "one question?",
                                         "candidates": [{"text": f"slow {i}"} for i in range(n)]}]},
}
LATER = {"/v1/rank": rank_body("later"), "/get_reward": {"query": ["p a"], "prompts": ["p"]},
         "/classify": {"model": "m", "input": _chatml("What is 2+3?", "5")}, "scoring": rank_body("later", 1, "slow"), "one query": rank_body("later", 1, "slow")}


@pytest.mark.slow
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_request_past_its_timeout_is_dropped_in_every_phase_and_the_next_is_served(slow_engine, attack):
    route = attack if attack.startswith("/") else "/v1/rank"
    body = json.dumps(ATTACKS[attack](4096)).encode()
    with live(slow_engine, ServeLimits(timeout_s=TIMEOUT_S)) as url:
        slow_engine.router.embedder.calls.clear()
        big = httpx.post(f"{url}{route}", content=body, timeout=120)
        later = httpx.post(f"{url}{route}", json=LATER[attack], timeout=120)  # before: 504, the engine busy 20 s
        wait_until(lambda: httpx.get(f"{url}/health").json()["in_flight"] == 0, 30)
    assert big.status_code == 504 and "--timeout" in one_line_error(big)
    assert later.status_code == 200, later.text
    assert set(slow_engine.router.embedder.calls) == {1}  # one question a call, as ever


def test_a_job_past_its_own_deadline_is_cut_from_its_batch_and_its_batch_mates_go_on(slow_engine):
    job = ATTACKS["/v1/rank"](3)["queries"]
    from morkit.data.contract import parse_query

    late, fine = tuple(parse_query(q) for q in job[:2]), (parse_query(job[2]),)
    with budget.work_bounded(None, parts=(time.monotonic() - 1, None)):
        results = slow_engine.run([late, fine])
    assert isinstance(results[0], budget.DeadlinePassed)
    assert [r.to_json()["id"] for r in results[1]] == ["q2"]


# ------------------------------------------------------------------------------------------ symbolic comparison
SERVER = """
import sys
sys.path.insert(0, {tests!r})
from fakes.embedder import HashEmbedder
import morkit.question_pool.embed as embed
embed.load_embedder = lambda name=None, device=None: HashEmbedder()
from morkit.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_costly_symbolic_answers_are_bounded_and_the_server_stays_free(hash_pool, tmp_path):
    hash_pool.save(tmp_path / "pool")
    script = tmp_path / "server.py"
    script.write_text(SERVER.format(tests=str(Path(__file__).resolve().parents[2])))
    port = free_port()
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, str(script), "serve", "--pool", str(tmp_path / "pool"), "--port",
                             str(port), "--rm", "math-consensus", "--timeout", "60", "--no-cache", "--device", "cpu"],
                            stderr=open(log, "w"), env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"

    def rewards(answers):
        body = {"query": ["p " + a for a in answers], "prompts": ["p"] * len(answers)}
        return httpx.post(f"{url}/get_reward", json=body, timeout=90)

    try:
        wait_until(lambda: proc.poll() is None and "listening on" in log.read_text(), 60)
        powers = rewards([f"\\boxed{{(x+{i})^{{200}}}}" for i in range(16)])  # 1 KB; 2-5 s a pair before
        bomb = rewards(["\\boxed{((9^{999})^{999})^{999}}", "\\boxed{7}", "\\boxed{7}"])  # held the GIL for hours
        later = rewards(["\\boxed{\\sqrt{4}}", "\\boxed{2}", "\\boxed{3}"])
    finally:
        proc.kill()
        proc.wait()
    assert powers.status_code == 200 and len(set(powers.json()["rewards"])) == 1, powers.text  # 16 classes of 1
    first, second, third = bomb.json()["rewards"]  # classes of 1 and 2
    assert bomb.status_code == 200 and first < second == third, bomb.text
    first, second, third = later.json()["rewards"]  # still compared symbolically: sqrt(4) = 2
    assert later.status_code == 200 and first == second > third, later.text


def test_a_pair_past_its_time_counts_as_different_and_a_spent_budget_falls_back_to_text():
    answers = ["x+1", "1+x", "2", "2.0", "\\sqrt{4}"]
    assert grading.equivalence_classes(answers) == [0, 0, 1, 1, 1]
    undecided = budget.SymbolicBudget(lambda a, b, pair_s, wait_s: (None, 1.0), 1.0, 10.0)
    with budget.work_bounded(None, 16, symbolic=undecided):
        assert grading.equivalence_classes(answers) == [0, 1, 2, 2, 3]  # by text and exact value
    assert undecided.costly == {"x+1", "1+x", "\\sqrt{4}", "2"}  # never compared again in this request
    calls = []
    never = budget.SymbolicBudget(lambda a, b, pair_s, wait_s: (calls.append((a, b)), 1.0), 1.0, 10.0)
    with budget.work_bounded(None, 16, symbolic=never):
        assert grading.equivalence_classes([f"x+{i}" for i in range(8)]) == list(range(8))
    assert len(calls) == 3  # then the request is grouped by text: three undecided pairs are enough
    spent = budget.SymbolicBudget(lambda a, b, pair_s, wait_s: (True, 0.0), 1.0, 0.0)
    with budget.work_bounded(None, 16, symbolic=spent):
        assert grading.equivalence_classes(answers) == [0, 1, 2, 2, 3]
        assert grading.answers_equivalent("x+1", "1+x") is False and grading.answers_equivalent("2", "2.0")
    with budget.work_bounded(time.monotonic() - 1, 16, symbolic=spent), pytest.raises(budget.DeadlinePassed):
        grading.equivalence_classes(answers)


def test_the_comparison_process_is_ended_past_a_pairs_time_and_started_again():
    from morkit.runtime.symbolic import SymbolicWorker

    worker = SymbolicWorker()
    try:
        assert worker.compare("\\sqrt{4}", "2", 30.0, 60.0)[0] is True
        verdict, took = worker.compare("((9^{999})^{999})^{999}", "7", 1.0, 60.0)
        assert verdict is None and worker.killed == 1 and took < 5.0
        # the spare may still be starting: its wait is not the pair's, which is decided as on a warm process
        verdict, took = worker.compare("x^2", "x*x", 1.0, 60.0)
        assert verdict is True and took < 1.0
        assert worker.compare("x+1", "1+x", 30.0, 60.0)[0] is True and worker.compare("x", "2", 30.0, 60.0)[0] is False
    finally:
        worker.close()


# ------------------------------------------------------------------------------------------ JSON values
def test_json_values_are_counted_before_parsing_as_after_it():
    samples = [{}, {"a": []}, {"a": [{}, [], [[]], "", "[{,}]", '"\\', 1.5, None, True]}, {"k,[": {"": {"x": [1]}}},
               {"t": "x\\\"\\\\" * 3, "é😀": ["\u2028", "\\u0022"]}]
    for body in samples:
        for text in (json.dumps(body), json.dumps(body, indent="\t", ensure_ascii=False)):
            assert protocol.json_value_count(text.encode()) == protocol.body_extent(json.loads(text))[1], text
    values = b"[" + b"{}," * (2**20) + b"{}]"  # 3 MiB
    assert protocol.json_value_count(values) == 2**20 + 2


def test_many_bodies_of_small_values_are_refused_before_parsing_and_a_small_request_is_served(monkeypatch):
    from fakes.serving import InstantEngine

    parsed: list[int] = []
    real = protocol._parsed

    def parse(text, *args):  # the JSON parser's entry: records what reached it
        parsed.append(len(text))
        return real(text, *args)

    monkeypatch.setattr(protocol, "_parsed", parse)
    body = b'{"queries": [' + b"{}," * (700 * 1024) + b"{}]}"  # 2.1 MB, 717k values: 90 MB once parsed
    fake = InstantEngine()
    with live(fake, ServeLimits(max_body_bytes=4 * 2**20, max_inflight_bytes=64 * 2**20)) as url:
        async def eight_and_one():
            async with httpx.AsyncClient(timeout=120) as client:
                big = [asyncio.ensure_future(client.post(f"{url}/v1/rank", content=body)) for _ in range(8)]
                small = await client.post(f"{url}/v1/rank", json=rank_body("small"))
                return await asyncio.gather(*big), small

        big, small = asyncio.run(eight_and_one())
    assert [r.status_code for r in big] == [413] * 8
    values = protocol.body_extent(json.loads(body))[1]
    assert f"{values} JSON values" in one_line_error(big[0]) and "--max-json-values" in one_line_error(big[0])
    assert small.status_code == 200 and max(parsed) < 1000  # only the small body was ever parsed


def test_a_small_request_does_not_wait_behind_large_bodies_being_parsed(monkeypatch):
    from fakes.serving import InstantEngine

    release, started = threading.Event(), threading.Semaphore(0)
    real = protocol.decode_body

    def decode(raw, *args):  # large bodies take as long as the test says
        if len(raw) > 64 * 1024:
            started.release()
            release.wait(60)
        return real(raw, *args)

    monkeypatch.setattr(serving_app, "decode_body", decode)
    large = json.dumps(rank_body("large", 1, "x" * 100_000)).encode()
    with live(InstantEngine()) as url:
        async def run():
            async with httpx.AsyncClient(timeout=120) as client:
                big = [asyncio.ensure_future(client.post(f"{url}/v1/rank", content=large)) for _ in range(3)]
                for _ in range(2):  # both parser threads busy with large bodies, a third waiting
                    assert await asyncio.to_thread(started.acquire, True, 30)
                try:
                    small = await asyncio.wait_for(client.post(f"{url}/v1/rank", json=rank_body("small")), 30)
                finally:
                    release.set()
                return small, await asyncio.gather(*big)

        small, big = asyncio.run(run())
    assert small.status_code == 200 and [r.status_code for r in big] == [200] * 3


# ------------------------------------------------------------------------------------------ API key
@pytest.mark.parametrize("value", ["", " ", "\n", " key"])
def test_an_empty_or_blank_api_key_in_the_environment_is_refused(value, monkeypatch, capsys, tmp_path):
    from morkit.integrations.trl import routed_reward

    monkeypatch.setenv("MORKIT_API_KEY", value)
    assert main(["serve", "--pool", str(tmp_path / "no-pool"), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morkit: error: MORKIT_API_KEY ") and "\n" not in err, err
    with pytest.raises(InputError, match="MORKIT_API_KEY"):
        routed_reward(url="http://127.0.0.1:9")
    routed_reward(pool=object())  # in this process the key is never used, so never read
    monkeypatch.delenv("MORKIT_API_KEY")
    for flag in (value, "key "):
        with pytest.raises(SystemExit) as exited:
            main(["serve", "--pool", str(tmp_path / "no-pool"), "--api-key", flag])
        err = capsys.readouterr().err.strip()
        assert exited.value.code == 2 and "--api-key" in err and "\n" not in err, err
