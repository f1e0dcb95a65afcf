"""Scoring through a local Ray cluster (Ray Data actor pool, 1 and 2 actors) against single-process scoring.

Same real GSM8K (question, answer) pairs, same RM, same chunk, in one run; no score cache. Each row is a
whole scoring run as a user sees it: the single-process row builds the RM in this process, the Ray rows
start their actors (each loads its own RM replica), score and stream every batch back to the driver.
An untimed warm-up run first reads the weights into the page cache, so no row pays the first disk read.
The local Ray instance is started once, before the rows (its start time is printed apart). On this
2-core machine a second actor adds no compute: the ratio shows Ray's overhead, not its scaling.
Scores must agree with single-process ones (largest difference printed).

With --failure, what a failed run leaves: two actors of one CPU each, one of them failing on its second batch
(a morkit error, or its actor killed for good); the seconds until the error reaches the driver, until every
CPU is free and no actor of the run is alive, and whether a retry needing every CPU then runs. Each case runs
with the run's actors killed at once on failure, and without (as before: Ray Data frees them when its objects are
garbage-collected, which the error the caller holds delays), waiting up to --wait seconds. The replicas are
model-free stand-ins (score = answer length): what is measured is Ray's, not a model's.

    .venv/bin/python bench/ray_scoring.py [--rm minilm-probe --rm smollm2-orm] [--pairs 256] [--chunk 32]
    .venv/bin/python bench/ray_scoring.py --failure [--wait 60]
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def real_queries(count: int, data_dir: str | None = None) -> list:
    """GSM8K model-solution queries (600 onwards, outside the probe head's training data) with `count` candidates."""
    from morkit.core import settings
    from morkit.data.datasets import gsm8k_model_solutions

    out, total = [], 0
    for query in gsm8k_model_solutions(settings.data_dir(data_dir))[600:]:
        if total >= count:
            break
        out.append(query)
        total += len(query.candidates)
    return out


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def values(queries, name: str) -> list[float]:
    return [c.scores[name] for q in queries for c in q.candidates]


def failure_rows(wait_s: float, data_dir: str | None) -> None:
    """A failed run with and without its actors killed at once: error, release and free times, then a retry."""
    import sys
    from pathlib import Path

    import ray

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the stand-in replica
    import fakes.ray_cluster
    from fakes.ray_cluster import FailingReplica, seconds_until_free

    from morkit.reward_models.backends.ray import connect
    from morkit.reward_models.catalog import resolve_rm
    from morkit.reward_models.options import ScoringOptions
    from morkit.runtime.ray_runs import ActorRun

    queries = real_queries(64, data_dir)
    pairs = list(dict.fromkeys((q.question, c.text) for q in queries for c in q.candidates))
    _, started = timed(connect, "auto", num_cpus=2, _node_ip_address="127.0.0.1")
    ray.cloudpickle.register_pickle_by_value(fakes.ray_cluster)  # the workers cannot import it
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; local Ray, 2 CPUs, started in "
          f"{started:.1f}s; {len(pairs)} pairs in batches of 8 over 2 actors x 1 CPU; a stand-in replica fails on "
          "its second batch")
    print(f"{'failure':<26}{'on failure':<22}{'error after s':>14}{'kill s':>8}{'all free after s':>18}"
          f"{'retry (2-CPU actor)':>21}")
    release = ActorRun.release
    with tempfile.TemporaryDirectory(prefix="morkit-bench-") as folder:
        for how in ("input", "kill"):
            for kill in (True, False):
                ActorRun.release = release if kill else (lambda self: None)
                rm = resolve_rm("minilm-probe", ScoringOptions.from_flags(ray="auto", chunk=8, ray_workers=2))
                rm.factory = functools.partial(FailingReplica, os.path.join(folder, f"{how}-{kill}"), how)
                started = time.perf_counter()
                try:
                    rm.score(pairs)
                    held = None
                except Exception as err:  # noqa: BLE001 - the caller holds the error, as a CLI or a notebook does
                    held = err
                failed_s = time.perf_counter() - started
                freed = seconds_until_free(ray, rm.last_run.names, wait_s)
                ActorRun.release = release
                retry = "skipped"
                if freed is not None:
                    again = resolve_rm("minilm-probe", ScoringOptions.from_flags(ray="auto", chunk=8, ray_workers=1))
                    again.factory = functools.partial(FailingReplica, os.path.join(folder, "never"), None)
                    _, retry_s = timed(again.score, pairs)
                    retry = f"ran in {retry_s:.1f}s"
                label = f"{'morkit error' if how == 'input' else 'actor killed'} ({type(held).__name__})"
                kill_s = f"{rm.last_run.release_s:.3f}" if rm.last_run.release_s is not None else "-"
                print(f"{label:<26}{'actors killed at once' if kill else 'left to Ray Data':<22}{failed_s:14.1f}"
                      f"{kill_s:>8}{(f'{freed:.2f}' if freed is not None else f'not in {wait_s:g}'):>18}{retry:>21}")
                del held
                if freed is None:  # let the leaked run go before the next case
                    import gc

                    gc.collect()
                    for name in rm.last_run.names:
                        try:
                            ray.kill(ray.get_actor(name), no_restart=True)
                        except ValueError:
                            continue
                    seconds_until_free(ray, rm.last_run.names, wait_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rm", action="append", help="RM to measure, repeatable (default minilm-probe, smollm2-orm)")
    parser.add_argument("--pairs", type=int, default=256, help="pairs for minilm-probe (a quarter for smollm2-orm)")
    parser.add_argument("--chunk", type=int, default=32, help="pairs per batch (per Ray block)")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    parser.add_argument("--failure", action="store_true", help="instead: what a failed run leaves (see above)")
    parser.add_argument("--wait", type=float, default=60.0, help="with --failure: seconds to wait for free CPUs")
    args = parser.parse_args()
    if args.failure:
        failure_rows(args.wait, args.data_dir)
        return

    from morkit.reward_models.backends.ray import connect
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.catalog import resolve_rm
    from morkit.reward_models.scoring import score_queries
    from morkit.runtime.models import release_models

    _, started = timed(connect, "auto", num_cpus=os.cpu_count(), _node_ip_address="127.0.0.1")
    print(f"local Ray: {os.cpu_count()} CPUs, started in {started:.1f}s (not counted below); chunk {args.chunk}")
    print(f"{'RM':<14}{'pairs':>6}  {'run':<22}{'seconds':>8}{'pairs/s':>9}{'vs single':>10}{'max |diff|':>12}")
    for name in args.rm or ["minilm-probe", "smollm2-orm"]:
        queries = real_queries(args.pairs if name == "minilm-probe" else max(8, args.pairs // 4), args.data_dir)
        pairs = sum(len(q.candidates) for q in queries)
        options = ScoringOptions(chunk=args.chunk)

        def single():
            return score_queries(queries, [resolve_rm(name, options).load()], chunk=args.chunk)

        # warm-up: weights in the page cache
        score_queries(queries[:1], [resolve_rm(name, options).load()], chunk=args.chunk)
        release_models()  # so the timed row loads its model, as every Ray actor does
        base, base_s = timed(single)
        reference = values(base, name)
        print(f"{name:<14}{pairs:>6}  {'single process':<22}{base_s:8.1f}{pairs / base_s:9.1f}{1.0:10.2f}{0.0:12.1e}")
        for workers in args.workers:
            rm = resolve_rm(name, ScoringOptions.from_flags(chunk=args.chunk, ray="auto", ray_workers=workers))
            out, seconds = timed(score_queries, queries, [rm], chunk=args.chunk)
            diff = max(abs(a - b) for a, b in zip(values(out, name), reference))
            label = f"Ray, {workers} actor{'s' if workers > 1 else ''}"
            print(f"{'':<14}{pairs:>6}  {label:<22}{seconds:8.1f}{pairs / seconds:9.1f}{base_s / seconds:10.2f}"
                  f"{diff:12.1e}")


if __name__ == "__main__":
    main()
