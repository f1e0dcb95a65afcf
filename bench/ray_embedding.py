"""Question embedding through a local Ray cluster (Ray Data over 1 and 2 embedder actors) against one process.

The same N real questions (GSM8K, MATH, HumanEval... from the shared data, repeated if N is larger), the same
embedder (MiniLM), no embedding cache, in one run. Each row is a whole embedding as `pool build` does it: the
one-process row loads the embedder and embeds; the Ray rows start their actors (each loads its own embedder),
embed and stream each 512-question chunk back. An untimed warm-up reads the weights into the page cache first;
the local Ray instance is started once, before the rows (its start time is printed apart). Per-actor rate and
driver overhead are measured so that the cluster figure (actors x per-actor rate) can be read off. On this
2-core machine a second actor adds no compute: the ratio shows Ray's cost, not its scaling.

With --build N, a whole build's embedding of N questions as `pool build --ray` runs it (spill.embed behind the
embedding cache, vectors spilled to disk), one stream against the former way, in the same run: the driver loaded
the embedder to learn its dimension, then embedded by parts of 16,384 questions, one actor pool each. Each row
counts its actor-pool starts and driver model loads; a third row reruns the stream with every vector cached. By
default (--compute stand-in) the actors load the real embedder, so each start costs what it does, but answer each
chunk with random unit vectors instead of running it: the compute, the same in both ways, drops out, and N can be
100,000 on 2 cores. --compute model runs the embedder.

    .venv/bin/python bench/ray_embedding.py [--questions 2000] [--actors 1 2]
    .venv/bin/python bench/ray_embedding.py --build 100000 [--compute stand-in|model]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from types import SimpleNamespace

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


def _stand_in_actor():
    """An embedder actor that loads the real embedder (its start costs what it does) and answers each chunk with
    random unit vectors of its dimension (no compute). Defined here, shipped to the actors by value."""
    from morkit.question_pool.embed_ray import _EmbedActor

    class StandIn(_EmbedActor):
        def __call__(self, batch):
            import numpy as np

            rng = np.random.default_rng(int(batch["i"][0]))
            vectors = rng.standard_normal((len(batch["i"]), self.embedder.dim)).astype(np.float32)
            return {"i": batch["i"], "vector": vectors / np.linalg.norm(vectors, axis=1, keepdims=True)}

    return StandIn


def build_rows(count: int, compute: str, data_dir: str | None, spill_mb: float | None) -> None:
    """A whole build's embedding of `count` questions: the former way (a driver-side model load for the dimension,
    then one actor pool per part of spill.CHUNK questions) against one stream, then the stream again all cached."""
    import numpy as np

    from morkit.question_pool import spill
    from morkit.question_pool.embed import load_embedder
    from morkit.question_pool.embed_cache import CachedEmbedder, EmbeddingCache
    from morkit.question_pool.embed_ray import RayEmbedder, RayEmbedOptions
    from morkit.reward_models.backends.ray import connect
    from morkit.runtime import models

    cpus = os.cpu_count() or 1
    if spill_mb is not None:  # spill as a larger build does (past 256 MB, 170,000 questions at 384 dims)
        spill.SPILL_BYTES = int(spill_mb * (1 << 20))
    texts = real_questions(count, data_dir)
    questions = [SimpleNamespace(id=f"q{i}", question=t) for i, t in enumerate(texts)]
    _, started = timed(connect, "auto", num_cpus=cpus, _node_ip_address="127.0.0.1")
    loads = []
    real_load = models.sentence_transformer

    def counted(*args, **kwargs):  # every model load in this (the driver) process
        loads.append(args)
        return real_load(*args, **kwargs)

    models.sentence_transformer = counted
    options = RayEmbedOptions(actors=1, num_cpus=cpus)

    def embedder():
        ray_embedder = RayEmbedder(None, device="cpu", options=options)
        if compute == "stand-in":
            ray_embedder.actor = _stand_in_actor()
        return ray_embedder

    def former(inner, cache):
        """spill.embed as it was: the driver's model for `dim`, then `encode` by parts of spill.CHUNK."""
        dim = load_embedder(None, "cpu").dim
        def check(vectors, start):  # the same checks either way: not what is measured
            return None

        if count * dim * 4 <= spill.SPILL_BYTES:
            return CachedEmbedder(inner, cache).encode(texts)
        return spill.encode_to_disk(lambda part: CachedEmbedder(inner, cache).encode(part), texts, check)

    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {cpus} CPUs; local Ray started in "
          f"{started:.1f}s (not counted); {count:,} questions, one actor x {cpus} CPUs, compute: {compute}; "
          f"spilled to disk past {spill.SPILL_BYTES / (1 << 20):g} MB by parts of {spill.CHUNK:,}; chunks of 512")
    print(f"{'way':<40}{'seconds':>9}{'pool starts':>13}{'driver loads':>14}{'embedded':>10}")
    with tempfile.TemporaryDirectory(prefix="morkit-bench-") as folder:
        results = {}
        for way in ("former", "stream", "stream, all cached"):
            cache = EmbeddingCache(os.path.join(folder, f"{way.split(',')[0]}.sqlite"))
            inner = embedder()
            loads.clear()
            started = time.perf_counter()
            if way == "former":
                vectors = former(inner, cache)
            else:
                model = CachedEmbedder(inner, cache)
                vectors = spill.embed(model, questions)
            seconds = time.perf_counter() - started
            cache.close()
            results[way] = np.asarray(vectors[:: max(1, count // 1000)])
            label = {"former": "former: a pool per 16,384-question part", "stream": "stream: one pool",
                     "stream, all cached": "stream again, every vector cached"}[way]
            print(f"{label:<40}{seconds:9.1f}{inner.runs:13d}{len(loads):14d}{inner.texts_sent:10,}")
        if compute == "model":
            diff = float(np.abs(results["former"] - results["stream"]).max())
            print(f"max |diff| former vs stream: {diff:.1e}")
    models.sentence_transformer = real_load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=2000, help="questions to embed (default 2000)")
    parser.add_argument("--actors", type=int, nargs="*", default=[1, 2], help="Ray actor counts (default 1 2)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds; each row reports its fastest (default 2)")
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    parser.add_argument("--build", type=int, help="instead: a whole build's embedding of this many questions, "
                        "one stream against a pool per part (see above)")
    parser.add_argument("--compute", choices=["stand-in", "model"], default="stand-in",
                        help="with --build: actors that load the model but skip it (default), or run it")
    parser.add_argument("--spill-mb", type=float, help="with --build: spill vectors to disk past this size "
                        "(default 256 MB, as pool build does; 0 spills any build, as a million-question one)")
    args = parser.parse_args()
    if args.build:
        build_rows(args.build, args.compute, args.data_dir, args.spill_mb)
        return

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
