"""Scoring through a local Ray cluster (Ray Data actor pool, 1 and 2 actors) against single-process scoring.

Same real GSM8K (question, answer) pairs, same RM, same chunk, in one run; no score cache. Each row is a
whole scoring run as a user sees it: the single-process row builds the RM in this process, the Ray rows
start their actors (each loads its own RM replica), score and stream every batch back to the driver.
An untimed warm-up run first reads the weights into the page cache, so no row pays the first disk read.
The local Ray instance is started once, before the rows (its start time is printed apart). On this
2-core machine a second actor adds no compute: the ratio shows Ray's overhead, not its scaling.
Scores must agree with single-process ones (largest difference printed).

    .venv/bin/python bench/ray_scoring.py [--rm minilm-probe --rm smollm2-orm] [--pairs 256] [--chunk 32]
"""

from __future__ import annotations

import argparse
import os
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rm", action="append", help="RM to measure, repeatable (default minilm-probe, smollm2-orm)")
    parser.add_argument("--pairs", type=int, default=256, help="pairs for minilm-probe (a quarter for smollm2-orm)")
    parser.add_argument("--chunk", type=int, default=32, help="pairs per batch (per Ray block)")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    args = parser.parse_args()

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
