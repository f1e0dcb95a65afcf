"""Question embedding through a local Ray cluster (Ray Data over 1 and 2 embedder actors) against one process.

The same N real questions (GSM8K, MATH, HumanEval... from the shared data, repeated if N is larger), the same
embedder (MiniLM), no embedding cache, in one run. Each row is a whole embedding as `pool build` does it: the
one-process row loads the embedder and embeds; the Ray rows start their actors (each loads its own embedder),
embed and stream each 512-question chunk back. An untimed warm-up reads the weights into the page cache first;
the local Ray instance is started once, before the rows (its start time is printed apart). Per-actor rate and
driver overhead are measured so that the cluster figure (actors x per-actor rate) can be read off. On this
2-core machine a second actor adds no compute: the ratio shows Ray's cost, not its scaling.

    flock /tmp/h/heavy.lock .venv/bin/python bench/ray_embedding.py [--questions 2000] [--actors 1 2]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def real_questions(count: int, data_dir: str | None = None) -> list[str]:
    """`count` distinct question texts from the registered data sets (a suffix makes repeats distinct)."""
    from morkit.core import settings
    from morkit.data.datasets import DATASETS, load_spec

    pool: list[str] = []
    for name in DATASETS.names():
        try:
            pool.extend(q.question for q in load_spec(name, settings.data_dir(data_dir)))
        except Exception:  # noqa: BLE001 - a data set missing from this checkout's data is skipped
            continue
        if len(pool) >= count:
            break
    pool = list(dict.fromkeys(pool)) or ["What is 2 + 2?"]
    return [pool[i % len(pool)] + ("" if i < len(pool) else f" (variant {i // len(pool)})") for i in range(count)]


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=2000, help="questions to embed (default 2000)")
    parser.add_argument("--actors", type=int, nargs="*", default=[1, 2], help="Ray actor counts (default 1 2)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; each row reports its fastest (default 2)")
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    args = parser.parse_args()

    import numpy as np

    from morkit.question_pool.embed import CHUNK, load_embedder
    from morkit.question_pool.embed_ray import RayEmbedder, RayEmbedOptions
    from morkit.reward_models.backends.ray import connect
    from morkit.runtime.models import release_models

    texts = real_questions(args.questions, args.data_dir)
    cpus = os.cpu_count() or 1
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {cpus} CPUs; {len(texts)} questions, "
          f"chunks of {CHUNK}")
    load_embedder(None, "cpu").encode(texts[:64])  # warm-up: weights in the page cache
    release_models()  # so the timed row loads its embedder, as every Ray actor does

    def one_process():
        return load_embedder(None, "cpu").encode(texts)

    _, started = timed(connect, "auto", num_cpus=cpus, _node_ip_address="127.0.0.1")
    print(f"local Ray: {cpus} CPUs, started in {started:.1f}s (not counted below); each row is the fastest of "
          f"{args.repeats} rounds, the rows taking turns within a round (other load hits every row alike)")
    runs = {0: one_process}
    for actors in args.actors:
        options = RayEmbedOptions(actors=actors, num_cpus=max(1, cpus // actors))
        runs[actors] = lambda options=options: RayEmbedder(None, device="cpu", options=options).encode(texts)
    rows: dict[int, float] = {}
    vectors: dict[int, np.ndarray] = {}
    for _ in range(args.repeats):
        for key, run in runs.items():
            release_models()  # every row loads its embedder, as every Ray actor does
            vectors[key], seconds = timed(run)
            rows[key] = min(rows.get(key, seconds), seconds)
    base_s, reference = rows[0], vectors[0]
    print(f"{'run':<34}{'seconds':>8}{'questions/s':>13}{'vs one process':>16}{'max |diff|':>12}")
    print(f"{'one process (' + str(cpus) + ' torch threads)':<34}{base_s:8.1f}{len(texts) / base_s:13.1f}"
          f"{1.0:16.2f}{0.0:12.1e}")
    for actors in args.actors:
        seconds, diff = rows[actors], float(np.abs(vectors[actors] - reference).max())
        label = f"Ray, {actors} actor{'s' if actors > 1 else ''} x {max(1, cpus // actors)} CPU"
        print(f"{label:<34}{seconds:8.1f}{len(texts) / seconds:13.1f}{base_s / seconds:16.2f}{diff:12.1e}")
        assert diff <= 1e-6, f"Ray vectors differ from one process by {diff:.1e}"

    # Driver overhead: a Ray run of a single chunk is start-up (actor, model load, scheduling) plus one chunk.
    small = texts[:CHUNK]
    _, small_local = timed(lambda: load_embedder(None, "cpu").encode(small))
    _, small_ray = timed(RayEmbedder(None, device="cpu", options=RayEmbedOptions(actors=1, num_cpus=cpus)).encode, small)
    overhead = max(0.0, small_ray - small_local)
    one = rows.get(1)
    if one:
        per_actor = len(texts) / max(one - overhead, 1e-9)
        print(f"\nfixed cost of a Ray run (actor start + model load + scheduling, from a one-chunk run): "
              f"{overhead:.1f}s; 1-actor row minus that minus one process: "
              f"{(one - overhead - base_s) / len(texts) * 1000:+.2f} ms/question (noise where negative)")
        print(f"per-actor rate after start-up: {per_actor:.1f} questions/s on {cpus} CPUs; a cluster of A such "
              f"actors embeds about A x {per_actor:.1f} questions/s (chunks are independent: no actor waits on "
              f"another), so 1,000,000 questions take about {1e6 / per_actor / 3600:.1f} h / A + {overhead:.0f}s")
    print("On this machine every actor shares the same 2 cores as the driver, so Ray only adds its cost; a second "
          "actor splits the cores instead of adding any.")


if __name__ == "__main__":
    main()
