"""PRES per query on a pool past its dense PRR table: the neighbours' PRR computed from member scores, old way vs new.

Pool: the 383 real MATH problems of `rewardmath_rm_scores` (10 candidates each, one correct, 22 RMs and judges)
tiled to `--size` questions with synthetic clustered vectors (bench/pool_build.py's `tiled_rows` and
`ClusteredEmbedder`), built with `statistics="on-the-fly"`, in memory. The per-query work depends on k and on
the neighbours' (correct, incorrect) answer pairs (about 900 at k=100 here), not on the pool's size;
`bench/pool_build.py --large N` times PRES through the Router on a saved, memory-mapped pool.

For `--queries` query vectors from the same distribution, their k nearest pool questions found once, then per
query, one at a time, the two ways interleaved so they share whatever else loads the machine:
  old     the method morkit used before, kept in this script only as the baseline: a float32 (pairs x RMs) @
          (RMs x ensembles) product of the (correct - incorrect) normalised score differences on one BLAS thread,
          each cell whose sign rounding could flip (within a relative 1e-6 of zero) summed again exactly
  kernel  morkit's `neighbour_prr`: numba-compiled, both answers' ensemble scores in float64, summed as the
          dense table's builder sums them (morkit/question_pool/pair_wins.py)
Timed (p50 and p99 in ms, wall clock by time.perf_counter and the process's CPU time by time.process_time, every
thread's (the kernel splits a count over $MORKIT_PRR_THREADS threads), which a busy machine inflates less): `PRES.scores` (the evidence) and `PRES.choose` (evidence and
pick), both ways; `PRES.choose` with the kernel under a cost limit (`--share` of the full route's cost, the
packaged RewardMATH costs) against the same without one. Every query's evidence must be bit-identical between
"old PRR, new sum" and the kernel, and its choice the same (checked; the tests compare both with the dense
tables).
Then in fresh processes: `import numba`; the kernel's first compile (numba's cache pointed at an empty folder,
import included) and its load from that cache in a second process (what a PRES on a non-dense pool pays when
it is built; its first query then pays nothing more).

    .venv/bin/python bench/pres_latency.py [--size 200000] [--queries 300] [--k 100] [--share 0.25] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from plotting import write_json  # noqa: E402 (beside this script)


class OldMatrix:
    """What the old way needs of the ensembles: W (R, E) in float32 and the exact sums' members and weights."""

    def __init__(self, ensembles, rm_names) -> None:
        import numpy as np

        from morkit.question_pool.ensembles import member_slots, weight_matrix

        weights = weight_matrix(ensembles, rm_names)
        self.weights32 = weights.astype(np.float32)
        self.members, self.member_weights = member_slots(weights)
        self.uses = (weights != 0).astype(np.float32)
        self.largest_weight = float(np.abs(weights).max(initial=0.0))


def old_prr(scores, correct, valid, normalizer, rm_names, matrix: OldMatrix):
    """(k, E) float64 PRR, NaN where undefined: the float32 product rechecked exactly near zero (the old way)."""
    import numpy as np

    from morkit.runtime.threads import one_blas_thread

    scores = np.asarray(scores, dtype=np.float64)
    normalised = normalizer.apply(rm_names, scores)
    good, bad = correct & valid, ~correct & valid
    q, g, b = np.nonzero(good[:, :, None] & bad[:, None, :])
    z_good, z_bad = normalised[q, g], normalised[q, b]
    delta = np.nan_to_num(z_good - z_bad, nan=0.0)
    slots = min(matrix.members.shape[0], delta.shape[1])
    largest = -np.partition(-np.abs(delta), slots - 1, axis=1)[:, :slots].sum(axis=1)
    bound = (matrix.largest_weight * (1e-6 * largest + 1e-12 * np.nan_to_num(np.abs(z_good) + np.abs(z_bad))
                                      .sum(axis=1))).astype(np.float32)
    pairs = good.sum(axis=1) * bad.sum(axis=1)

    def exact(rows, ens):
        filled = np.nan_to_num(rows, nan=0.0)
        out = np.zeros(len(ens))
        for slot in range(matrix.members.shape[0]):
            out += matrix.member_weights[slot, ens] * filled[np.arange(len(ens)), matrix.members[slot, ens]]
        return out

    def wins(part):
        product = delta[part].astype(np.float32) @ matrix.weights32
        limit = bound[part, None]
        won = product > limit
        doubt = np.abs(product, out=product) <= limit
        pair, ens = np.divmod(np.flatnonzero(doubt), doubt.shape[1])
        if len(pair):
            moving = np.zeros(len(pair), dtype=bool)
            for slot in range(matrix.members.shape[0]):
                member = matrix.members[slot, ens]
                moving |= (matrix.member_weights[slot, ens] != 0) & (delta[part][pair][np.arange(len(pair)), member]
                                                                     != 0)
            pair, ens = pair[moving], ens[moving]
            first = part.start
            won[pair, ens] = exact(z_good[first + pair], ens) > exact(z_bad[first + pair], ens)
        return won

    ensembles = matrix.weights32.shape[1]
    counts = np.zeros((len(pairs), ensembles), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(pairs)])
    with one_blas_thread():
        for size in np.unique(pairs[pairs > 0]):
            rows = np.flatnonzero(pairs == size)
            step = max(1, (1 << 20) // (int(size) * ensembles))
            for at in range(0, len(rows), step):
                block = rows[at:at + step]
                for run in np.split(block, np.flatnonzero(np.diff(block) != 1) + 1):
                    won = wins(slice(int(starts[run[0]]), int(starts[run[-1] + 1])))
                    counts[run] = won.view(np.uint8).reshape(len(run), int(size), ensembles).sum(axis=1)
    out = np.full((len(pairs), ensembles), np.nan)
    mixed = pairs > 0
    out[mixed] = counts[mixed] / pairs[mixed, None]
    lacking = (np.isnan(scores) & valid[:, :, None]).any(axis=1)
    if lacking.any():
        out[(lacking.astype(np.float32) @ matrix.uses) > 0] = np.nan
    return out


def old_pres(pool, blas: bool):
    """A PRES whose neighbours' PRR is computed the old way (everything else, the pick included, is PRES's own);
    `blas`: their evidence summed as before too, by a float32 BLAS product on BLAS's threads, else as PRES sums
    it now (`neighbour_prr.weighted_rows`, on this thread)."""
    import numpy as np

    from morkit.question_pool.neighbour_prr import weighted_rows
    from morkit.selection.pres import PRES

    class OldPRES(PRES):
        def scores(self, neighbours):
            order = np.argsort(neighbours.rows)
            rows = neighbours.rows[order]
            table = old_prr(pool.scores[rows], pool.correct[rows], pool.valid[rows], pool.normalizer,
                            pool.rm_names, self.old)
            table = np.nan_to_num(table.astype(np.float32), nan=0.0)[np.argsort(order)]
            sims = neighbours.similarities
            return sims.astype(np.float32) @ table if blas else weighted_rows(sims, table)

    method = OldPRES(pool)
    method.old = OldMatrix(pool.ensembles, pool.rm_names)
    return method


def ms(times) -> dict:
    import numpy as np

    values = np.array(times) * 1000
    return {"p50_ms": float(np.percentile(values, 50)), "p99_ms": float(np.percentile(values, 99))}


def first_compile() -> dict:
    """In fresh processes: `import numba`, then the kernel compiled into an empty cache, then loaded from it."""
    probe = ("import json, time; t = time.perf_counter(); import numba; imported = time.perf_counter() - t; "
             "from morkit.question_pool import pair_wins; t = time.perf_counter(); pair_wins.compiled(); "
             "print(json.dumps({'import_numba_s': imported, 'kernel_s': time.perf_counter() - t}))")
    root = Path(__file__).resolve().parents[1]
    out = {}
    with tempfile.TemporaryDirectory(prefix="morkit-numba-cache-") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(root)}
        for name in ("compile", "cached"):
            run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=root)
            if run.returncode:
                raise SystemExit(f"the compiling process failed:\n{run.stderr}")
            out[name] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200_000, help="pool questions (tiled RewardMATH problems)")
    parser.add_argument("--queries", type=int, default=300, help="queries timed, one at a time")
    parser.add_argument("--k", type=int, default=100, help="neighbours per query")
    parser.add_argument("--share", type=float, default=0.25,
                        help="the cost limit's share of the full route's cost (packaged RewardMATH costs)")
    parser.add_argument("--data-dir", help="folder of the public data sets (default: $MORKIT_DATA_DIR, "
                        "else data/ in morkit's cache folder)")
    parser.add_argument("--json", type=Path, help="write the measured numbers as JSON")
    args = parser.parse_args()

    import numpy as np
    from pool_build import ClusteredEmbedder, Vectors, clustered_vectors, tiled_rows  # beside this script

    from morkit.core import settings
    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.question_pool.pool import PoolConfig, pool_from_rows
    from morkit.question_pool.rows import pool_rows
    from morkit.reward_models.cost import cost_table
    from morkit.reward_models.rules.table import table_names
    from morkit.selection.budget import Budget, cost_limit
    from morkit.selection.pres import PRES
    from morkit.selection.router import Router

    load = os.getloadavg()[0]
    base = rewardmath_rm_scores(settings.data_dir(args.data_dir))
    rm_names = tuple(table_names(base))
    started = time.perf_counter()
    rows = tiled_rows(pool_rows(base, rm_names, "min"), args.size)
    pool = pool_from_rows(rows, rm_names, ClusteredEmbedder(seed=1), config=PoolConfig(statistics="on-the-fly"))
    built = time.perf_counter() - started
    print(f"{args.size:,} questions x {len(pool.ensembles):,} ensembles, on the fly (built in {built:.0f}s); "
          f"k={args.k}, {args.queries} queries; load average {load:.1f}", flush=True)
    started = time.perf_counter()
    new = PRES(pool)  # imports numba and compiles the kernel, or loads it from numba's cache
    warm_s = time.perf_counter() - started
    vectors = clustered_vectors(args.queries, 384, seed=2)
    found = Router(pool, "pres", embedder=Vectors(vectors), k=args.k).chooser.neighbours(vectors)
    old, old_summed = old_pres(pool, blas=True), old_pres(pool, blas=False)
    everything = frozenset(pool.rm_names)
    limit = cost_limit(Budget(share=args.share), cost_table(pool.rm_names, files=("rewardmath",)), pool.rm_names,
                       pool.rm_names, 10)
    pairs = [int(((pool.correct[n.rows] & pool.valid[n.rows]).sum(axis=1)
                  * (~pool.correct[n.rows] & pool.valid[n.rows]).sum(axis=1)).sum()) for n in found]
    steps = {"old scores": lambda n: old.scores(n), "old PRR, new sum": lambda n: old_summed.scores(n),
             "kernel scores": lambda n: new.scores(n),
             "old choose": lambda n: old.choose(n, everything), "kernel choose": lambda n: new.choose(n, everything),
             "kernel choose, budget": lambda n: new.choose(n, everything, limit)}
    for step in steps.values():  # warm-up: first touches, BLAS
        step(found[0])
    times: dict[str, list[float]] = {name: [] for name in steps}
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    same = choices = 0
    for neighbours in found:
        for name, step in steps.items():
            t, c = time.perf_counter(), time.process_time()
            step(neighbours)
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
        same += bool(np.array_equal(old_summed.scores(neighbours), new.scores(neighbours)))
        a, b = old_summed.choose(neighbours, everything), new.choose(neighbours, everything)
        choices += (a.ensemble, a.score, a.alternatives) == (b.ensemble, b.score, b.alternatives)
    latency = {name: {**ms(values), **{f"cpu_{k}": v for k, v in ms(cpu[name]).items()}}
               for name, values in times.items()}
    compile_s = first_compile()
    result = {"size": args.size, "k": args.k, "queries": args.queries, "ensembles": len(pool.ensembles),
              "pairs_mean": float(np.mean(pairs)), "latency": latency, "identical_evidence": same,
              "identical_choices": choices, "pres_build_s": warm_s, "first_compile": compile_s,
              "share": args.share, "load_start": load, "load_end": os.getloadavg()[0]}

    print(f"PRES built in {warm_s:.2f}s (numba imported, its kernel compiled or loaded from numba's cache)")
    print(f"answer pairs per query: mean {np.mean(pairs):.0f}; evidence bit-identical both ways on {same} of "
          f"{len(found)} queries, choices identical on {choices}")
    print(f"  {'per query':<34}{'p50':>10}{'p99':>10}{'CPU p50':>10}{'CPU p99':>10}")
    for name, row in latency.items():
        print(f"  {name:<34}{row['p50_ms']:>8.2f}ms{row['p99_ms']:>8.2f}ms{row['cpu_p50_ms']:>8.2f}ms"
              f"{row['cpu_p99_ms']:>8.2f}ms")
    for what in ("scores", "choose"):
        o, n = latency[f"old {what}"], latency[f"kernel {what}"]
        print(f"  {what}: old / kernel  p50 {o['p50_ms'] / n['p50_ms']:.2f}x, p99 {o['p99_ms'] / n['p99_ms']:.2f}x, "
              f"CPU p50 {o['cpu_p50_ms'] / n['cpu_p50_ms']:.2f}x")
    budget, free = latency["kernel choose, budget"], latency["kernel choose"]
    print(f"  choose under a {args.share:.0%} cost limit / without: p50 {budget['p50_ms'] / free['p50_ms']:.2f}x")
    print(f"fresh processes: import numba {compile_s['compile']['import_numba_s']:.2f}s; kernel compile "
          f"{compile_s['compile']['kernel_s']:.2f}s, loaded from numba's cache "
          f"{compile_s['cached']['kernel_s']:.2f}s (then import numba {compile_s['cached']['import_numba_s']:.2f}s); "
          f"load average at the end {result['load_end']:.1f}")
    if args.json:
        write_json(args.json, result)
    if same != len(found) or choices != len(found):
        raise SystemExit("the two ways differ")


if __name__ == "__main__":
    main()
