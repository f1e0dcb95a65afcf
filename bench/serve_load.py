"""`morkit serve` under load: N concurrent clients on 127.0.0.1 against the same scoring done by direct
library calls in the same run, and what micro-batching gains (on vs off).

Setup: a real pool of qwen25_math_rm8 questions 0..--pool-questions-1 over the cached Qwen2.5-Math-RM-72B
table, math-consensus (a rule) and minilm-probe (MiniLM + a trained head, run on CPU), embedded with the
real all-MiniLM-L6-v2. Requests: one contract query each (questions 40..69, 8 answers, the table score
kept, the other RMs left to run), routed with the default method, so every request embeds its question
and runs math-consensus and minilm-probe on its 8 answers. No score cache (every request computes).

Measured, in one process, on one RoutingEngine (the server's own; models resident):
  - direct, one query per call: engine.rank([q]) in a loop (what a single in-process caller gets);
  - direct, all queries in one call: engine.rank(queries) (the best a batch can do);
  - server, micro-batching on (--max-batch, --max-wait-ms) and off (max_batch 1): --clients concurrent
    asyncio+httpx clients, --requests requests in all, each run capped at --duration seconds.
Throughput is queries per second; latency is per request (client side, from send to reply), p50 and p99.
Every server reply is checked against the direct result for its query. The server runs with its default
request limits (ServeLimits: body, items, candidates, text, bytes held) and, with --api-key, requires the
key (the clients send it).

    .venv/bin/python bench/serve_load.py [--clients 8] [--requests 32] [--duration 45] [--api-key KEY]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TABLE = "qwen2.5-math-rm-72b"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def make_pool(workdir: Path, questions: int) -> Path:
    from morkit.cli import main

    out = workdir / "pool"
    code = main(["pool", "build", "--dataset", f"qwen25_math_rm8:{questions}", "--rm", TABLE, "--rm",
                 "math-consensus", "--rm", "minilm-probe", "-o", str(out), "-q", "--device", "cpu", "--no-cache"])
    if code:
        raise SystemExit(f"pool build failed ({code})")
    return out


def request_queries(count: int) -> list:
    from morkit.core import settings
    from morkit.data.datasets import qwen25_math_rm8

    loaded = qwen25_math_rm8(settings.data_dir(None))[40:70]
    queries = [replace(q, candidates=tuple(replace(c, correct=None, scores={TABLE: c.scores[TABLE]})
                                           for c in q.candidates)) for q in loaded]
    return [replace(queries[i % len(queries)], id=f"r{i}") for i in range(count)]


async def load(url: str, bodies: list[dict], clients: int, duration: float,
               headers: dict[str, str]) -> tuple[list[float], list, float]:
    import httpx

    latencies: list[float] = []
    replies: list = [None] * len(bodies)
    next_index = iter(range(len(bodies)))
    deadline = time.monotonic() + duration

    async def client(http: httpx.AsyncClient) -> None:
        for i in next_index:
            if time.monotonic() > deadline:
                return
            sent = time.perf_counter()
            reply = await http.post(f"{url}/v1/rank", json=bodies[i])
            latencies.append(time.perf_counter() - sent)
            replies[i] = reply

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=max(duration, 30), headers=headers) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return latencies, replies, time.perf_counter() - started


def run_server(engine, limits, bodies, clients, duration, api_key=None, warm_up: int = 0):
    """The load on a single-process server run in a thread; `warm_up` requests first, one at a time, untimed."""
    from morkit.services.serving.server import make_server

    server = make_server(engine, limits, port=0, api_key=api_key)  # binds a free port on 127.0.0.1 now
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    url = f"http://127.0.0.1:{server.port}"
    try:
        if warm_up:
            asyncio.run(load(url, bodies[:warm_up], 1, duration, headers))
        return asyncio.run(load(url, bodies, clients, duration, headers))
    finally:
        server.should_exit = True
        thread.join(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    ap.add_argument("--requests", type=int, default=32, help="requests per server run (default 32)")
    ap.add_argument("--duration", type=float, default=45.0, help="cap per server run, seconds (default 45)")
    ap.add_argument("--pool-questions", type=int, default=24, help="pool size (default 24)")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--api-key", help="run the server with this API key (the clients send it)")
    args = ap.parse_args()

    from morkit.data.contract import query_to_json
    from morkit.question_pool.pool import load_pool
    from morkit.reward_models.options import ScoringOptions
    from morkit.selection.methods import SelectOptions
    from morkit.services.serving.app import ServeLimits
    from morkit.services.serving.engine import RoutingEngine

    t0 = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="morkit-serve-bench-"))
    pool = load_pool(make_pool(workdir, args.pool_questions))
    engine = RoutingEngine(pool, SelectOptions(), ScoringOptions(device="cpu", cache=None))
    print(f"setup: pool of {len(pool)} questions over {', '.join(pool.rm_names)}; resident RMs "
          f"{', '.join(engine.models)}; {engine.method}; {time.perf_counter() - t0:.1f}s; {os.cpu_count()} CPUs")
    queries = request_queries(args.requests)
    engine.rank(queries[:2])  # warm-up (first forward passes)

    started = time.perf_counter()
    direct = [engine.rank([q])[0].to_json() for q in queries]
    one_by_one = time.perf_counter() - started
    started = time.perf_counter()
    batched = [r.to_json() for r in engine.rank(queries)]
    all_at_once = time.perf_counter() - started
    assert [r["best_index"] for r in batched] == [r["best_index"] for r in direct]

    bodies = [{"queries": [query_to_json(q)]} for q in queries]
    rows = [("direct: engine.rank([q]) per query", len(queries), one_by_one, None, None),
            ("direct: engine.rank(all) one call", len(queries), all_at_once, None, None)]
    for label, limits in ((f"server, micro-batching on (max_batch {args.max_batch}, {args.max_wait_ms:g} ms)",
                           ServeLimits(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms)),
                          ("server, micro-batching off (max_batch 1)", ServeLimits(max_batch=1, max_wait_ms=0))):
        latencies, replies, seconds = run_server(engine, limits, bodies, args.clients, args.duration, args.api_key)
        done = [(i, r) for i, r in enumerate(replies) if r is not None]
        bad = [i for i, r in done if r.status_code != 200 or r.json()["results"][0]["best_index"]
               != direct[i]["best_index"]]
        if bad:
            raise SystemExit(f"{label}: {len(bad)} replies differ from the direct results (first: request {bad[0]})")
        rows.append((label, len(done), seconds, percentile(latencies, 0.5), percentile(latencies, 0.99)))
    engine.close()

    base = rows[0][1] / rows[0][2]
    key = "; API key required and sent" if args.api_key else ""
    print(f"\n{args.clients} clients, {args.requests} requests of 1 query x 8 answers each; CPU; no score cache{key}\n")
    print(f"{'how':<58} {'queries':>7} {'seconds':>8} {'q/s':>7} {'x direct':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for label, n, seconds, p50, p99 in rows:
        rate = n / seconds
        lat = (f"{p50 * 1000:8.0f} {p99 * 1000:8.0f}" if p50 is not None else f"{'-':>8} {'-':>8}")
        print(f"{label:<58} {n:>7} {seconds:>8.2f} {rate:>7.2f} {rate / base:>8.2f} {lat}")
    on, off = rows[2], rows[3]
    print(f"\nmicro-batching gain: {(on[1] / on[2]) / (off[1] / off[2]):.2f}x throughput, "
          f"p50 {off[3] / on[3]:.2f}x lower, p99 {off[4] / on[4]:.2f}x lower; total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
