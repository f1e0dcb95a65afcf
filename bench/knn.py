"""Nearest-question search at pool scale: FAISS (exact and HNSW) against numpy brute force.

Vectors are SYNTHETIC unit vectors, not real embeddings (MiniLM on CPU would need most of an hour for
100k texts), in two variants, each with fresh queries from the same distribution (not in the index):
  clustered  a hierarchical mixture of gaussians, closer to sentence embeddings: 200 topics x 10
             subtopics, points scattered around their subtopic (cosine ~0.8 to it, ~0.64 between
             siblings, ~0.3 to the rest of their topic, ~0 across topics)
  random     i.i.d. gaussian, normalised: no structure at all, the worst case for HNSW (every
             similarity is near 0 and the true top-k barely stands out)
Measured per variant, all methods on the same vectors and queries in one run:
  numpy      brute force: one float32 matrix product, argpartition for the top k, sort of those k
  flat       faiss.IndexFlatIP, exact
  hnsw       morkit's approximate index: index.new_index(dim, "hnsw") with the IndexConfig defaults
             (M 32, efConstruction 200, efSearch 128), build time, and at a few efSearch values
batched throughput (queries/s, all queries in one call, numpy in blocks of 256), single-query latency
(p50 over --single queries searched one at a time, as morkit's selection does), recall@k of HNSW against
the exact top k, and whether faiss flat and numpy return the same top-k ids. Ratios are against numpy
in the same run. Also: exact single-query latency at several pool sizes, with the default thread count
and with one thread (for index.APPROXIMATE_ABOVE).
faiss and numpy use every core the machine has. The default runs the clustered set only (an HNSW
build of 100k vectors takes minutes on 2 cores); `--data clustered random` runs both.

    .venv/bin/python bench/knn.py [--n 100000] [--dim 384] [--queries 1000] [--k 100] [--data clustered random]
"""

from __future__ import annotations

import argparse
import os
import time


def unit(x):
    import numpy as np

    return x / np.linalg.norm(x, axis=1, keepdims=True)


def vectors(kind: str, count: int, dim: int, seed: int):
    """`count` float32 unit vectors of the named synthetic distribution (see the module docstring)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    noise = lambda n, scale: scale * rng.standard_normal((n, dim), dtype=np.float32) / np.sqrt(dim)  # noqa: E731
    if kind == "random":
        return np.ascontiguousarray(unit(rng.standard_normal((count, dim), dtype=np.float32)))
    if kind == "clustered":
        topics = unit(rng.standard_normal((200, dim), dtype=np.float32))
        subtopics = unit(np.repeat(topics, 10, axis=0) + noise(2000, 1.0))
        members = rng.integers(0, len(subtopics), count)
        return np.ascontiguousarray(unit(subtopics[members] + noise(count, 0.75)), dtype=np.float32)
    raise ValueError(kind)


def numpy_topk(base, queries, k: int, block: int = 256):
    """Exact top-k by inner product: (similarities, ids), best first."""
    import numpy as np

    sims, ids = np.empty((len(queries), k), np.float32), np.empty((len(queries), k), np.int64)
    for start in range(0, len(queries), block):
        scores = queries[start:start + block] @ base.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top_scores = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-top_scores, axis=1, kind="stable")
        ids[start:start + block] = np.take_along_axis(top, order, axis=1)
        sims[start:start + block] = np.take_along_axis(top_scores, order, axis=1)
    return sims, ids


def batched(search, queries, k):
    started = time.perf_counter()
    out = search(queries, k)
    return out, len(queries) / (time.perf_counter() - started)


def p50_ms(search, queries, k):
    import numpy as np

    times = []
    for q in queries:
        started = time.perf_counter()
        search(q[None, :], k)
        times.append(time.perf_counter() - started)
    return 1000 * float(np.median(times))


def recall(found, truth) -> float:
    return sum(len(set(f) & set(t)) for f, t in zip(found, truth)) / truth.size


def run_variant(kind: str, args, efs) -> list[tuple]:
    import faiss
    import numpy as np

    from morkit.question_pool.index import IndexConfig, new_index, recall_at_k

    started = time.perf_counter()
    data = vectors(kind, args.n + args.queries, args.dim, args.seed)
    base, queries = data[: args.n], data[args.n:]
    single = queries[: args.single]
    print(f"\n== {kind}: {args.n:,} x {args.dim} unit vectors, {args.queries:,} queries "
          f"(made in {time.perf_counter() - started:.1f}s)", flush=True)

    (np_sims, np_ids), np_qps = batched(lambda q, k: numpy_topk(base, q, k), queries, args.k)
    np_p50 = p50_ms(lambda q, k: numpy_topk(base, q, k), single, args.k)

    flat = faiss.IndexFlatIP(args.dim)
    started = time.perf_counter()
    flat.add(base)
    flat_build = time.perf_counter() - started
    (flat_sims, flat_ids), flat_qps = batched(flat.search, queries, args.k)
    flat_p50 = p50_ms(flat.search, single, args.k)

    same_sets = np.mean([set(a) == set(b) for a, b in zip(flat_ids, np_ids)])
    same_order = np.mean((flat_ids == np_ids).all(axis=1))
    print(f"faiss flat vs numpy top-{args.k}: same id set for {same_sets:.1%} of queries, same order for "
          f"{same_order:.1%}, {recall(flat_ids, np_ids):.4%} of ids shared; max |similarity diff| "
          f"{np.abs(flat_sims - np_sims).max():.1e}")
    print(f"exact neighbour similarity: top-1 {np.median(flat_sims[:, 0]):.3f}, "
          f"top-{args.k} {np.median(flat_sims[:, -1]):.3f} (median over queries)")

    config = IndexConfig()
    hnsw = new_index(args.dim, "hnsw", config)
    started = time.perf_counter()
    hnsw.add(base)
    hnsw_build = time.perf_counter() - started
    print(f"hnsw build (M {config.hnsw_m}, efConstruction {config.ef_construction}): {hnsw_build:.1f}s", flush=True)

    rows = [(kind, "numpy brute force", None, np_qps, np_p50, 1.0),
            (kind, "faiss IndexFlatIP (exact)", flat_build, flat_qps, flat_p50, 1.0)]
    for ef in efs:
        hnsw.hnsw.efSearch = ef
        (_, ids), qps = batched(hnsw.search, queries, args.k)
        rows.append((kind, f"faiss HNSW efSearch {ef}" + (" (default)" if ef == config.ef_search else ""),
                     hnsw_build, qps, p50_ms(hnsw.search, single, args.k), recall(ids, flat_ids)))
    hnsw.hnsw.efSearch = config.ef_search
    started = time.perf_counter()
    pool_recall = recall_at_k(hnsw, base, args.k)
    print(f"index.recall_at_k (what a pool records: 500 pool vectors as queries, efSearch {config.ef_search}): "
          f"{pool_recall:.3f} in {time.perf_counter() - started:.1f}s")
    return rows, np_qps, np_p50


def flat_latency_by_size(args, sizes) -> None:
    """Exact single-query p50 by pool size, with the default thread count and with one thread."""
    import contextlib

    import faiss

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # numpy's BLAS then keeps its default threads in both columns
        threadpool_limits = None
    base = vectors("random", max(sizes) + args.single, args.dim, args.seed + 1)
    queries = base[max(sizes):]
    threads = faiss.omp_get_max_threads()
    print(f"\nexact single-query latency by pool size ({args.dim}-dim, top-{args.k}, p50 ms over {args.single} "
          f"queries); '1t': faiss and numpy's BLAS held to one thread")
    print(f"{'pool size':>10}{f'flat {threads}t':>10}{'flat 1t':>10}{f'numpy {threads}t':>10}{'numpy 1t':>10}")
    for size in sizes:
        flat = faiss.IndexFlatIP(args.dim)
        flat.add(base[:size])
        k = min(args.k, size)
        row = []
        for one in (False, True):
            faiss.omp_set_num_threads(1 if one else threads)
            row.append(p50_ms(flat.search, queries, k))
        faiss.omp_set_num_threads(threads)
        for one in (False, True):
            limit = threadpool_limits(1) if one and threadpool_limits else contextlib.nullcontext()
            with limit:
                row.append(p50_ms(lambda q, kk: numpy_topk(base[:size], q, kk), queries, k))
        print(f"{size:>10,}" + "".join(f"{v:>10.2f}" for v in row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="vectors in the index")
    parser.add_argument("--dim", type=int, default=384, help="dimension (MiniLM: 384)")
    parser.add_argument("--queries", type=int, default=1000, help="queries for batched throughput and recall")
    parser.add_argument("--single", type=int, default=100, help="queries timed one at a time (latency)")
    parser.add_argument("--k", type=int, default=100, help="neighbours per query")
    parser.add_argument("--ef", type=int, nargs="+", default=[128, 256, 512], help="HNSW efSearch values")
    parser.add_argument("--data", nargs="+", choices=["clustered", "random"], default=["clustered"],
                        help="vector sets (default clustered only: each HNSW build of 100k takes minutes on 2 cores)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 25_000, 50_000, 100_000],
                        help="pool sizes for the exact-latency sweep (none: skip it)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import faiss
    import numpy as np

    load = os.getloadavg()[0]
    print(f"faiss {faiss.__version__} ({faiss.omp_get_max_threads()} threads), numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs, load {load:.1f}; SYNTHETIC vectors (see --help)")
    started = time.perf_counter()
    table = []
    for kind in args.data:
        rows, np_qps, np_p50 = run_variant(kind, args, args.ef)
        table += [(*row, row[3] / np_qps, np_p50 / row[4]) for row in rows]
    if args.sizes:
        flat_latency_by_size(args, args.sizes)

    print(f"\n{args.n:,} x {args.dim}, top-{args.k}, {args.queries:,} batched queries, p50 over {args.single} single")
    header = (f"{'data':<10}{'method':<34}{'build s':>8}{'batch q/s':>11}{'x numpy':>8}{'p50 ms':>8}{'x numpy':>8}"
              f"{f'recall@{args.k}':>11}")
    print(header)
    print("-" * len(header))
    for kind, name, build, qps, p50, rec, qps_ratio, p50_ratio in table:
        build_text = "-" if build is None else f"{build:.1f}"
        print(f"{kind:<10}{name:<34}{build_text:>8}{qps:>11,.0f}{qps_ratio:>7.1f}x{p50:>8.2f}{p50_ratio:>7.1f}x"
              f"{rec:>11.3f}")
    print(f"total {time.perf_counter() - started:.0f}s; load average at the end {os.getloadavg()[0]:.1f} "
          f"(start {load:.1f})")


if __name__ == "__main__":
    main()
