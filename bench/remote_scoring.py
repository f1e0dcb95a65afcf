"""Pairs/s through RemoteRewardModel against 1, 2 and 4 local vLLM `/pooling` servers sharing this machine's cores,
and what the score cache saves on a repeated batch.

Each server count is a run of its own: that many fresh vLLM CPU servers (the tiny Llama classifier of
tests/reward_models/test_vllm_engine.py, started one at a time), the machine's cores split between them
(VLLM_CPU_OMP_THREADS_BIND: with 2 cores, 1 server binds both, 2 servers one each, 4 servers one each, two to a
core), warmed up on pairs the measured batch does not hold, then the --pairs pairs scored once, --concurrency
requests in flight over the servers in turn. Fresh servers per count: no server has seen the measured pairs.

On one machine more servers add no compute: they share its cores, so what a count changes is how the requests are
spread and batched. Left to vLLM's own binding (the counts in --vllm-binding run that way too), every server binds its
OpenMP threads to all the cores, so busy servers contend for the same cores at every parallel step. After the first
1-server run, the score cache: the same pairs scored through the scoring orchestrator without a cache, into a cold
one, then again from it.

`--fake` uses the stdlib fake server of tests/fakes/http_server.py (fixed 20 ms a request, no compute): a check of
the client's control flow, not of the cores.

    python bench/remote_scoring.py [--servers 1,2,4] [--vllm-binding 2] [--pairs 256] [--concurrency 8] [--fake]
                                   [--json docs/figures/remote_scoring.json] [--page docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fakes
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reward_models"))  # the tiny vLLM model

from compute import cpu_name  # noqa: E402 (beside this script)
from plotting import write_json  # noqa: E402
from tables import markdown, prose, write_block  # noqa: E402

TABLE = "remote_scoring"  # its block on the benchmarks page


def make_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    from test_vllm_engine import WORDS

    rng = random.Random(seed)
    words = WORDS + [str(i) for i in range(100)]
    return [(" ".join(rng.choices(words, k=rng.randint(6, 20))), " ".join(rng.choices(words, k=rng.randint(10, 60))))
            for _ in range(count)]


def core_sets(servers: int, cores: list[int]) -> list[str]:
    """The cores each of `servers` servers binds (VLLM_CPU_OMP_THREADS_BIND): the cores split in equal runs while
    there are enough, else one core each, in turn."""
    if servers <= len(cores):
        size = len(cores) // servers
        runs = [cores[i * size:(i + 1) * size] for i in range(servers)]
        return [",".join(map(str, run)) for run in runs]
    return [str(cores[i % len(cores)]) for i in range(servers)]


@contextlib.contextmanager
def bound(cores: str | None) -> Iterator[None]:
    """VLLM_CPU_OMP_THREADS_BIND set to `cores` for a server started inside (None: vLLM's own binding)."""
    key = "VLLM_CPU_OMP_THREADS_BIND"
    old = os.environ.pop(key, None)
    if cores is not None:
        os.environ[key] = cores
    try:
        yield
    finally:
        os.environ.pop(key, None)
        if old is not None:
            os.environ[key] = old


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def table(result: dict) -> str:
    """The benchmarks page's block: what ran, a row per run (server count and binding), and the score cache."""
    one = next((r for r in result["rows"] if r["servers"] == 1), None)
    rows = [[str(r["servers"]), r["cores"], f"{r['pairs_per_s']:.1f}", f"{r['seconds']:.2f}",
             f"{r['pairs_per_s'] / one['pairs_per_s']:.2f}x" if one else ""] for r in result["rows"]]
    load = ("load not recorded" if result["load_start"] is None else
            f"load {result['load_start']:.1f} at the start, {result['load_end']:.1f} at the end")
    note = f" {result['note']}" if result.get("note") else ""
    parts = [
        prose(f"{result['pairs']} pairs through RemoteRewardModel ({result['concurrency']} requests in flight, "
              f"{result['batch_size']} pair a request) against {result['backend']}, on {result['cpus']} cores of "
              f"{result['cpu']}; {load}.{note}"),
        markdown(["servers", "cores each", "pairs/s", "seconds", "vs 1 server"], rows)]
    cache = result.get("cache")
    if cache:
        cold = (f" (filling a cold cache cost x{cache['cold_s'] / cache['no_cache_s']:.2f} the time of scoring with "
                "none)" if cache.get("cold_s") is not None else "")
        parts.append(prose(f"The score cache, on the 1-server run's {result['pairs']} pairs: the repeated batch "
                           f"came from the cache in {cache['warm_ms']:.1f} ms, {cache['speedup']:,.0f}x faster than "
                           f"scoring it again{cold}."))
    return "\n\n".join(parts)


def cores_text(binding: str, sets: list[str]) -> str:
    """What the table says of a run's cores: each server's, or how they were bound."""
    named = {"fake": "none (fake servers)", "vllm": "all, vLLM's own binding"}
    return named[binding] if binding in named else " / ".join(sets)  # no "|": a table cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default="1,2,4", help="server counts, each a run of its own (default 1,2,4)")
    ap.add_argument("--pairs", type=int, default=256, help="pairs scored in each run (default 256)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    ap.add_argument("--batch-size", type=int, default=1, help="pairs a request (default 1)")
    ap.add_argument("--vllm-binding", default="",
                    help="server counts to run once more under vLLM's own binding, every server on all the cores "
                         "(e.g. 2; default none)")
    ap.add_argument("--fake", action="store_true", help="the stdlib fake server instead of vLLM (20 ms a request)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.1)  # 0.05 fails: below the worker's own use
    ap.add_argument("--json", type=Path, help="write the measured numbers as JSON")
    ap.add_argument("--page", type=Path, help="write the table into this docs page's remote_scoring block")
    args = ap.parse_args()
    counts = [int(x) for x in args.servers.split(",")]
    runs = [(n, "fake" if args.fake else "split") for n in counts]
    runs += [(int(x), "vllm") for x in args.vllm_binding.split(",") if x and not args.fake]
    if min(counts) < 1 or args.pairs < 1 or args.concurrency < 1 or args.batch_size < 1:
        ap.error("--servers, --pairs, --concurrency and --batch-size must be at least 1")
    pairs, warm = make_pairs(args.pairs), make_pairs(16, seed=1)  # the warm-up never holds a measured pair

    from morkit.core.types import Candidate, Query
    from morkit.reward_models.backends.servers import RemoteRewardModel
    from morkit.reward_models.cache import ScoreCache
    from morkit.reward_models.scoring import score_queries

    workdir = Path(tempfile.mkdtemp(prefix="morkit-bench-"))
    cores = sorted(os.sched_getaffinity(0))
    load_start = os.getloadavg()[0]
    if args.fake:
        from fakes.http_server import FakeServer

        render = lambda q, a: f"<user>{q}<assistant>{a}"  # noqa: E731
        backend = "fake stdlib /pooling servers (20 ms a request)"
    else:
        from test_vllm_engine import build_tiny_model, start_server, stop_server
        from transformers import AutoTokenizer

        from morkit.reward_models.backends.pooling_io import chat_render

        model_dir = workdir / "tiny"
        build_tiny_model(model_dir)
        render = chat_render(AutoTokenizer.from_pretrained(model_dir))
        backend = f"vLLM CPU servers (the tiny Llama classifier, gpu_memory_utilization {args.gpu_memory_utilization})"
    print(f"{backend}; {len(cores)} cores ({cpu_name()}); {len(pairs)} pairs, concurrency {args.concurrency}, "
          f"batch size {args.batch_size}", flush=True)

    rows, cache = [], None
    for n, binding in runs:
        sets = core_sets(n, cores) if binding == "split" else [None] * n
        started, procs, fakes, urls = time.perf_counter(), [], [], []
        try:
            for i, cpus in enumerate(sets):  # one at a time: two engines starting at once on 2 cores crawl
                if args.fake:
                    fakes.append(FakeServer(delay_s=0.02))
                    urls.append(fakes[-1].url)
                    continue
                with bound(cpus):
                    proc, url = start_server(model_dir, workdir / f"serve{n}-{i}.log", deadline_s=300,
                                             gpu_memory_utilization=args.gpu_memory_utilization)
                procs.append(proc)
                urls.append(url)
            start_s = time.perf_counter() - started
            rm = RemoteRewardModel("bench", urls, "tiny", render=render, concurrency=args.concurrency,
                                   batch_size=args.batch_size, timeout_s=120)
            rm.score(warm)  # connections and the engines' first passes
            _, seconds = timed(rm.score, pairs)
            rows.append({"servers": n, "binding": binding, "cores": cores_text(binding, sets), "seconds": seconds,
                         "pairs_per_s": len(pairs) / seconds, "start_s": start_s})
            print(f"{n} server(s), cores {rows[-1]['cores']}: {len(pairs) / seconds:8.1f} pairs/s ({seconds:.2f}s; "
                  f"started in {start_s:.0f}s)", flush=True)
            if n == 1 and cache is None:  # the score cache on a repeated batch, through the scoring orchestrator
                rm = RemoteRewardModel("bench-cache", urls, "tiny", render=render, concurrency=args.concurrency,
                                       batch_size=args.batch_size, timeout_s=120)
                queries = [Query(f"q{i}", q, (Candidate(a),)) for i, (q, a) in enumerate(pairs)]
                score_queries([Query(f"w{i}", q, (Candidate(a),)) for i, (q, a) in enumerate(warm)], [rm])  # warm-up
                _, no_cache = timed(score_queries, queries, [rm])
                with ScoreCache(workdir / "scores.sqlite") as store:
                    _, cold = timed(score_queries, queries, [rm], cache=store)
                    sent = rm.requests_sent
                    _, warm_s = timed(score_queries, queries, [rm], cache=store)
                    assert rm.requests_sent == sent, "the repeated batch reached the server"
                cache = {"no_cache_s": no_cache, "cold_s": cold, "warm_ms": warm_s * 1000,
                         "speedup": no_cache / warm_s}
                print(f"score cache: no cache {no_cache:.3f}s, cold cache {cold:.3f}s, repeated batch from cache "
                      f"{warm_s * 1000:.1f} ms ({no_cache / warm_s:.0f}x faster than rescoring)", flush=True)
        except Exception as err:  # noqa: BLE001 - report the counts that did run
            print(f"{n} server(s): not measured: {str(err)[:300]}", flush=True)
        finally:
            for fake in fakes:
                fake.close()
            for proc in procs:
                stop_server(proc)

    result = {"backend": backend, "cpu": cpu_name(), "cpus": len(cores), "pairs": len(pairs),
              "concurrency": args.concurrency, "batch_size": args.batch_size, "rows": rows, "cache": cache,
              "load_start": load_start, "load_end": os.getloadavg()[0]}
    print(table(result))
    if args.json:
        write_json(args.json, result)
    if args.page:
        write_block(args.page, TABLE, table(result))


if __name__ == "__main__":
    main()
