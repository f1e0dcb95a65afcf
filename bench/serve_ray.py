"""`morkit serve --ray` against the single-process server on this machine, under the same load: requests/s and p50/p99
latency of /v1/rank, and how much Ray Serve costs here.

Setup and load are bench/serve_load.py's (its pool of qwen25_math_rm8 questions over the table RM, math-consensus
and minilm-probe, embedded with the real MiniLM; its requests, one contract query of 8 answers each; its asyncio
clients). No score cache: every request embeds its question and runs minilm-probe on its 8 answers. Ray Serve runs
on a local Ray with CPU replicas: one ingress (router, embedder, the app) and one minilm-probe replica. Every Ray
Serve reply is checked against the single-process reply for the same query (scores to 1e-6).

On a 2-core machine Ray can only cost: the ingress and the RM replica share the cores the single process had, plus
Serve's proxy and controller, and each engine call crosses two actor hops (proxy -> ingress -> RM replica) with the
pairs pickled. On a cluster the RM deployment gets a GPU per replica and as many replicas as GPUs, which one process
cannot have: the bench prints the per-request overhead that remains to be amortised.

    .venv/bin/python bench/serve_ray.py [--clients 8] [--requests 32] [--duration 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from serve_load import load, make_pool, percentile, request_queries, run_server


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_process(pool_dir: Path, limits, bodies, clients, duration):
    from morkit.question_pool.pool import load_pool
    from morkit.reward_models.options import ScoringOptions
    from morkit.selection.methods import SelectOptions
    from morkit.services.serving.engine import RoutingEngine

    engine = RoutingEngine(load_pool(pool_dir), SelectOptions(), ScoringOptions(device="cpu", cache=None))
    try:  # warm-up: the first calls build lazy state
        return run_server(engine, limits, bodies, clients, duration, warm_up=2)
    finally:
        engine.close()


def on_ray_serve(pool_dir: Path, limits, bodies, clients, duration):
    from morkit.reward_models.options import ScoringOptions
    from morkit.selection.methods import SelectOptions
    from morkit.services.serving import ray_serve

    placement = ray_serve.RayServeOptions(rm_cpus=1.0, ingress_cpus=1.0, port=free_port())
    started = time.perf_counter()
    app = ray_serve.build_app(str(pool_dir), SelectOptions(), ScoringOptions(device="cpu", cache=None), limits,
                              placement=placement)
    url = ray_serve.deploy(app, placement, address="auto", num_cpus=os.cpu_count(), _node_ip_address="127.0.0.1")
    up = time.perf_counter() - started
    try:
        asyncio.run(load(url, bodies[:2], 1, duration, {}))
        return asyncio.run(load(url, bodies, clients, duration, {})), up
    finally:
        ray_serve.shutdown()


def summary(name: str, latencies: list[float], replies: list, seconds: float) -> dict:
    done = [r for r in replies if r is not None and r.status_code == 200]
    row = {"name": name, "ok": len(done), "rps": len(done) / seconds, "p50": percentile(latencies, 0.5),
           "p99": percentile(latencies, 0.99)}
    print(f"  {name:<16} {row['ok']:>4} ok  {row['rps']:7.2f} req/s  p50 {row['p50'] * 1e3:8.1f} ms  "
          f"p99 {row['p99'] * 1e3:8.1f} ms", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    ap.add_argument("--requests", type=int, default=32, help="requests per run (default 32)")
    ap.add_argument("--duration", type=float, default=60.0, help="cap per run, seconds (default 60)")
    ap.add_argument("--pool-questions", type=int, default=24, help="pool size (default 24)")
    args = ap.parse_args()

    from morkit.data.contract import query_to_json
    from morkit.services.serving.limits import ServeLimits

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.clients} clients, "
          f"{args.requests} requests of 8 answers each", flush=True)
    limits = ServeLimits()
    bodies = [{"queries": [query_to_json(q)]} for q in request_queries(args.requests)]
    with tempfile.TemporaryDirectory() as tmp:
        pool_dir = make_pool(Path(tmp), args.pool_questions)
        local_run = single_process(pool_dir, limits, bodies, args.clients, args.duration)
        local = summary("single process", *local_run)
        (ray_latencies, ray_replies, ray_seconds), up = on_ray_serve(pool_dir, limits, bodies, args.clients,
                                                                      args.duration)
        ray = summary("Ray Serve", ray_latencies, ray_replies, ray_seconds)
    pairs = [(a.json()["results"][0]["scores"], b.json()["results"][0]["scores"]) for a, b in
             zip(local_run[1], ray_replies) if a is not None and b is not None and a.status_code == b.status_code == 200]
    differ = sum(len(x) != len(y) or any(abs(u - v) > 1e-6 for u, v in zip(x, y)) for x, y in pairs)
    print(f"{len(pairs)} replies compared: {differ} differ from the single process's by more than 1e-6")
    print(f"Ray Serve came up in {up:.1f} s (Ray start, ingress and one minilm-probe replica loading)")
    print(f"Ray Serve / single process: throughput x{ray['rps'] / local['rps']:.2f}, p50 latency "
          f"x{ray['p50'] / local['p50']:.2f}; overhead per request at p50: {(ray['p50'] - local['p50']) * 1e3:.0f} ms")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
