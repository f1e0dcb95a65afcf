"""`morkit serve --ray` on a local Ray with CPU replicas: one Ray for the module, each test on the app it needs.

The probe app (the ingress: router, embedder, the app; one deployment per model RM) gives the single-process
server's rewards, limits, errors and auth through Serve's HTTP proxy. The scripted app serves a scripted RM (no
model: a fixed time per call, and a call that says HANG sleeps) with Ray Serve's autoscaling: under a rising load
its deployment grows from 1 replica to more, and a replica that hangs gives its request a 504 at the deadline,
counted in /metrics, while later requests are served and the hung replica is replaced.
"""

from __future__ import annotations

import os
import re
import threading
import time

import httpx
import pytest
from fakes import scripted_rm
from fakes.embedder import HashEmbedder
from fakes.serving import free_port, live

from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.reward_models.options import ScoringOptions
from morkit.selection.methods import SelectOptions
from morkit.services.serving.app import ServeLimits
from morkit.services.serving.engine import RoutingEngine

pytestmark = pytest.mark.slow
LIMITS = ServeLimits(max_body_bytes=200_000, max_items=32)
KEY = {"Authorization": "Bearer sesame"}
TIMEOUT_S = 5.0  # the scripted app's --timeout: a hung replica's request gets its 504 then
SCRIPTED = scripted_rm.NAME


class Cluster:
    """One local Ray; `url(name, build)` deploys the app `build()` gives (app, placement) unless it is the one
    deployed already (Serve restarts between apps: one proxy, one application)."""

    def __init__(self, ray_serve):
        self.ray_serve, self.current, self.current_url = ray_serve, None, None

    def url(self, name, build):
        if self.current != name:
            self.close()
            app, placement = build()
            self.current_url, self.current = self.ray_serve.deploy(app, placement, address="auto"), name
        return self.current_url

    def close(self):
        if self.current is not None:
            self.current = None
            self.ray_serve.shutdown()


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray")
    import fakes.embedder

    from morkit.reward_models.backends.ray import connect
    from morkit.services.serving import ray_serve

    if ray.is_initialized():
        ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)
    connect("auto", num_cpus=2, _node_ip_address="127.0.0.1")
    shipped = (fakes.embedder, scripted_rm)  # the hash embedder and the scripted RM travel by value
    for module in shipped:
        ray.cloudpickle.register_pickle_by_value(module)
    apps = Cluster(ray_serve)
    try:
        yield apps
    finally:
        apps.close()
        for module in shipped:
            ray.cloudpickle.unregister_pickle_by_value(module)
        ray.shutdown()


@pytest.fixture(scope="module")
def probe_pool_dir(math_queries, tmp_path_factory):
    from morkit.services.scoring import score

    train = score(math_queries[:24], ["math-consensus", "minilm-probe"],
                  options=ScoringOptions(cache=None, device="cpu"))
    out = tmp_path_factory.mktemp("ray-serve") / "pool"
    build_pool(train, HashEmbedder(), config=PoolConfig(max_members=2)).save(out)
    return out


PROBE_SELECT, PROBE_SCORING = SelectOptions(method="pres"), ScoringOptions(device="cpu")


@pytest.fixture(scope="module")
def probe_local(probe_pool_dir):
    """The probe app in this process, on its own port."""
    from morkit.question_pool.pool import load_pool

    local = RoutingEngine(load_pool(probe_pool_dir), PROBE_SELECT, PROBE_SCORING, embedder=HashEmbedder())
    try:
        with live(local, LIMITS, api_key="sesame") as local_url:
            yield local_url
    finally:
        local.close()


@pytest.fixture
def served(cluster, probe_pool_dir, probe_local):
    """The probe app on Serve (one ingress, one minilm-probe replica, both on CPU) and the same app in process."""
    def build():
        placement = cluster.ray_serve.RayServeOptions(rm_cpus=0.5, ingress_cpus=0.5, port=free_port())
        return cluster.ray_serve.build_app(str(probe_pool_dir), PROBE_SELECT, PROBE_SCORING, LIMITS, api_key="sesame",
                                           placement=placement, embedder=HashEmbedder()), placement

    return cluster.url("probe", build), probe_local, cluster.ray_serve


@pytest.fixture(scope="module")
def scripted_pool(math_queries, tmp_path_factory):
    """A pool over math-consensus and the scripted RM (registered in this process only: the ingress learns it from
    the driver's registration), and the folder where its instances leave their process ids."""
    from morkit.services.scoring import score

    log_dir = tmp_path_factory.mktemp("scripted-replicas")
    scripted_rm.register(log_dir=str(log_dir), cost_s=0.02)
    try:
        train = score(math_queries[:24], ["math-consensus", SCRIPTED], options=ScoringOptions(cache=None))
        out = tmp_path_factory.mktemp("scripted") / "pool"
        build_pool(train, HashEmbedder(), config=PoolConfig(max_members=2)).save(out)
        yield out, log_dir
    finally:
        scripted_rm.unregister()


@pytest.fixture
def scripted(cluster, scripted_pool):
    """The scripted app on Serve: the scripted RM autoscaled from 1 to 3 replicas (target 1 call per replica, Serve's
    metrics every 0.5 s over 2 s, scaling up after 0.5 s), health-checked every second; calls of 4 pairs."""
    pool_dir, log_dir = scripted_pool

    def build():
        placement = cluster.ray_serve.RayServeOptions(
            rm_replicas=1, max_rm_replicas=3, target_ongoing=1, upscale_delay_s=0.5,
            autoscaling_extra={"metrics_interval_s": 0.5, "look_back_period_s": 2.0}, rm_cpus=0.25, ingress_cpus=0.5,
            health_check_s=1.0, port=free_port())
        app = cluster.ray_serve.build_app(
            str(pool_dir), SelectOptions(method="fixed", rms=(SCRIPTED,)), ScoringOptions(device="cpu", cache=None,
                                                                                            chunk=4),
            ServeLimits(timeout_s=TIMEOUT_S), placement=placement, embedder=HashEmbedder())
        return app, placement

    return cluster.url("scripted", build), log_dir


def _bodies(math_queries):
    from morkit.data.contract import query_to_json

    queries = [q for q in math_queries[40:46]]
    rank = {"queries": [{**query_to_json(q), "candidates": [{"text": c.text} for c in q.candidates]}
                        for q in queries]}
    prompts = [q.question for q in queries[:3] for _ in q.candidates]
    reward = {"query": [q.question + c.text for q in queries[:3] for c in q.candidates], "prompts": prompts}
    texts = [f"<|im_start|>user\n{q.question}<|im_end|>\n<|im_start|>assistant\n{c.text}<|im_end|>\n"
             for q in queries[3:] for c in q.candidates[:3]]
    return {"/v1/rank": rank, "/get_reward": reward, "/classify": {"input": texts, "activation": False}}


def _numbers(value):
    """Every number in a reply, in order (ids and timestamps aside)."""
    if isinstance(value, dict):
        return [n for k, v in sorted(value.items()) if k not in ("id", "created") for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [value] if isinstance(value, float) else []


def test_every_route_gives_the_single_process_servers_rewards(served, math_queries):
    url, local_url, _ = served
    for route, body in _bodies(math_queries).items():
        got = httpx.post(f"{url}{route}", json=body, headers=KEY, timeout=120)
        want = httpx.post(f"{local_url}{route}", json=body, headers=KEY, timeout=120)
        assert (got.status_code, want.status_code) == (200, 200), (route, got.text, want.text)
        assert _numbers(got.json()) == pytest.approx(_numbers(want.json()), abs=1e-6), route
        assert len(set(_numbers(got.json()))) > 2, route  # the probe ran: rewards vary
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["resident_rms"] == ["math-consensus", "minilm-probe"]
    metrics = httpx.get(f"{url}/metrics", headers=KEY).text
    assert 'morkit_requests_total{route="/classify",status="200"}' in metrics
    assert 'morkit_rm_replicas{rm="minilm-probe",state="RUNNING"} 1.0' in metrics.splitlines()


def test_limits_errors_and_auth_are_the_single_process_servers(served):
    url, local_url, _ = served
    cases = [("/v1/rank", {"content": b"{" + b" " * 300_000 + b"}"}, KEY, 413),
             ("/v1/rank", {"json": {"queries": 3}}, KEY, 400),
             ("/classify", {"json": {"input": "no template here"}}, KEY, 400),
             ("/get_reward", {"json": {"query": ["a"] * 33, "prompts": ["a"] * 33}}, KEY, 400),
             ("/v1/rank", {"json": {"queries": []}}, {}, 401),
             ("/classify", {"json": {"input": "x"}}, {"Authorization": "Bearer wrong"}, 401)]
    for route, body, headers, status in cases:
        got = httpx.post(f"{url}{route}", headers={"content-type": "application/json", **headers}, timeout=60, **body)
        want = httpx.post(f"{local_url}{route}", headers={"content-type": "application/json", **headers}, timeout=60,
                          **body)
        assert (got.status_code, got.json()) == (status, want.json()), (route, got.text)


def test_the_ray_serve_flags_need_ray(capsys, tmp_path):
    from morkit.cli import main

    assert main(["serve", "--pool", str(tmp_path), "--ray-gpus", "1"]) == 2
    assert "--ray-max-replicas and --ray-gpus apply only with --ray" in capsys.readouterr().err


def _rank(url, answers):
    body = {"queries": [{"id": "q", "question": "What is 2+3?", "candidates": [{"text": a} for a in answers]}]}
    return httpx.post(f"{url}/v1/rank", json=body, timeout=60)


def _metric(url, sample):
    """The value of one sample line of /metrics (0 when it is absent)."""
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0


def _replicas(url):
    """The scripted RM's replicas by state, as /metrics shows them."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {state: int(float(n)) for state, n in
            re.findall(r'^morkit_rm_replicas\{rm="%s",state="(\w+)"\} (\S+)$' % SCRIPTED, text, re.M)}


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_rm_deployment_scales_out_from_one_replica_under_a_rising_load(scripted):
    url, _ = scripted
    assert _replicas(url) == {"RUNNING": 1}
    for _ in range(6):  # light load: one request at a time, one call each, never over the target of 1
        assert _rank(url, ["one", "two", "six", "ten"]).status_code == 200
    assert _replicas(url) == {"RUNNING": 1}

    statuses, stop = [], threading.Event()

    def client():  # each request is 2 calls of 4 pairs; 6 clients keep about 12 calls in flight or waiting
        while not stop.is_set():
            statuses.append(_rank(url, [f"answer {i}" for i in range(8)]).status_code)

    clients = [threading.Thread(target=client) for _ in range(6)]
    for thread in clients:
        thread.start()
    deadline = time.monotonic() + 90
    try:
        while _replicas(url).get("RUNNING", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        stop.set()
        for thread in clients:
            thread.join()
    assert 2 <= _replicas(url).get("RUNNING", 0) <= 3
    assert statuses and set(statuses) == {200}


def test_a_hung_replica_gets_a_timely_504_is_counted_and_replaced(scripted):
    url, log_dir = scripted
    timeouts = f'morkit_rm_timeouts_total{{rm="{SCRIPTED}"}}'
    before = _metric(url, timeouts)
    started = time.monotonic()
    reply = _rank(url, ["HANG: this call sleeps", "five"])
    took = time.monotonic() - started
    assert reply.status_code == 504, reply.text
    assert reply.json()["error"].startswith(f"not answered within {TIMEOUT_S:g} s (--timeout)")
    assert TIMEOUT_S - 0.5 < took < TIMEOUT_S + 3
    assert _metric(url, timeouts) == before + 1
    assert _metric(url, 'morkit_requests_total{route="/v1/rank",status="504"}') >= 1
    (hung,) = scripted_rm.pids(log_dir, "hung")

    deadline = time.monotonic() + 90  # later requests are served (another replica, or the hung one's replacement)
    while _rank(url, ["one", "two"]).status_code != 200:
        assert time.monotonic() < deadline, "no request was served after the replica hung"
    while _alive(hung):  # the health check fails past --timeout: Serve stops the replica and starts another
        assert time.monotonic() < deadline, "the hung replica was not replaced"
        time.sleep(0.5)
    while _replicas(url).get("RUNNING", 0) < 1:
        assert time.monotonic() < deadline, "no replica runs after the hung one went"
        time.sleep(0.5)
    assert _rank(url, ["one", "two"]).status_code == 200
