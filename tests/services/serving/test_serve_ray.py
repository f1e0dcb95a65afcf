"""`morkit serve --ray` on a local Ray with CPU replicas: the ingress (router, embedder, the app) and one deployment
per model RM give the single-process server's rewards, limits, errors and auth through Serve's HTTP proxy."""

from __future__ import annotations

import os

import httpx
import pytest
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


@pytest.fixture(scope="module")
def probe_pool_dir(math_queries, tmp_path_factory):
    from morkit.services.scoring import score

    train = score(math_queries[:24], ["math-consensus", "minilm-probe"],
                  options=ScoringOptions(cache=None, device="cpu"))
    out = tmp_path_factory.mktemp("ray-serve") / "pool"
    build_pool(train, HashEmbedder(), config=PoolConfig(max_members=2)).save(out)
    return out


@pytest.fixture(scope="module")
def served(probe_pool_dir):
    """The app on Serve (one ingress, one minilm-probe replica, both on CPU) and the same app in process."""
    ray = pytest.importorskip("ray")
    import fakes.embedder

    from morkit.question_pool.pool import load_pool
    from morkit.services.serving import ray_serve

    if ray.is_initialized():
        ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)
    ray.cloudpickle.register_pickle_by_value(fakes.embedder)  # the hash embedder travels to the ingress
    placement = ray_serve.RayServeOptions(rm_cpus=0.5, ingress_cpus=0.5, port=free_port())
    select, scoring = SelectOptions(method="pres"), ScoringOptions(device="cpu")
    app = ray_serve.build_app(str(probe_pool_dir), select, scoring, LIMITS, api_key="sesame", placement=placement,
                              embedder=HashEmbedder())
    url = ray_serve.deploy(app, placement, address="auto", num_cpus=2, _node_ip_address="127.0.0.1")
    local = RoutingEngine(load_pool(probe_pool_dir), select, scoring, embedder=HashEmbedder())
    try:
        with live(local, LIMITS, api_key="sesame") as local_url:
            yield url, local_url, ray_serve
    finally:
        local.close()
        ray_serve.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(fakes.embedder)
        ray.shutdown()


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
