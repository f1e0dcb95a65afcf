"""Build time of a question pool, phase by phase, at 1k and 10k questions; and PRR throughput.

Data: the 383 real MATH problems of `rewardmath_rm_scores` (10 candidates each, one correct, cached
scores of 22 RMs and judges), REPLICATED to reach each size. Copy k > 0 of a problem gets " [copy k]"
appended to its id and its text, so ids stay unique and the embedder never sees two identical strings;
a copy keeps the original's scores and labels. `--gsm8k-texts` cycles the 1000 GSM8K question texts in
with the MATH ones (only the embedded text changes) for more variety in what is embedded.

The phases of `morkit.question_pool.pool.build_pool`, each the same public function it calls, timed on
its own (time.perf_counter):
  rows    `pool_rows`: cached member scores -> padded (Q, N, R) arrays ("scoring" here means reading
          the cached scores, no model runs)
  fit     `fit_ensembles`: normaliser fit, single-RM PRR (the global weights), ensemble enumeration
  stats   `ensemble_statistics`: PRR and best-of-n of every ensemble; `--ensembles` of them
  embed   MiniLM (all-MiniLM-L6-v2, CPU) embeddings of the question texts; above `--embed-max`
          (default 2000) only that many are embedded and the time is scaled linearly, marked "~"
  index   `index_vectors`: FAISS index under the default IndexConfig (kind "auto"), plus its recall if approximate
  lookup  not a build phase: one nearest-question search at a time (`morkit.question_pool.index.search`, top `--k`) for
          `--lookups` pool vectors with a little noise, p50 and p99 (what a query's selection waits for)
`--full-at` also times "stats" with the whole enumeration (5335 ensembles for 22 RMs, max 3 members).

Then PRR alone for the largest size x `--ensembles` ensembles (combine + prr_matrix, chunked as the pool
does), against a plain per-question, per-ensemble Python loop over `morkit.question_pool.prr.prr` on a
sample, extrapolated to the same size; both are measured in this run and the sample's values must agree.

    .venv/bin/python bench/pool_build.py [--sizes 1000 10000] [--ensembles 1000] [--no-embed]
                                         [--plot docs/figures/pool_scaling.svg] [--json PATH]

`--large N` (e.g. 1000000) measures instead a pool past its dense PRR table, with all 5335 ensembles:
  rows     the 383 problems' arrays tiled to N questions (ids and texts get " [copy k]"); no Query objects; the
           member and step scores written by chunks to temporary files and memory-mapped, as build_pool keeps them
  vectors  SYNTHETIC clustered unit vectors (bench/knn.py's mixture, 384 dims), since MiniLM on CPU would
           need about 18 hours for a million texts; made chunk by chunk as the build embeds (written to disk
           as they come), their few seconds counted in the index phase
  build    `pool_from_rows` (normaliser, single-RM PRR, enumeration, per-ensemble means over the sampled
           questions, the FAISS index with its recall@100), then the learned-selector fit (sampled) and the save,
           each phase with its peak RSS (VmHWM: every resident page, memory-mapped file pages included, as
           ru_maxrss counts them) and its peak anonymous RSS (RssAnon sampled every 10 ms: the process's own
           memory), the build's peak against the 4 GB target
Then a FRESH process opens the saved pool (memory-mapped) and selects for `--queries` new query vectors
from the same distribution, one at a time, with the learned selector (the default method) and PRES (the
neighbours' PRR computed from member scores per query): p50 and p99 of `Router.select_many` given
the query's vector (neighbour search + choice), its RSS after opening and its peak RSS, measured with
the MiniLM query embedding (p50 of one real question at a time) timed separately at the end.
`--budgets S ...` (with `--large`) also stores the packaged RewardMATH costs in the pool and fits the learned
selector's budget routes (a timed build phase), and the fresh process then times both methods again under a
budget of each share S of the full route's cost (`Router(pool, method, budget=Budget(share=S))`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from plotting import figure_path, write_json  # noqa: E402 (beside this script)


def replicated(queries, size: int, texts=None):
    """`size` queries cycling through `queries`; copy k > 0 gets " [copy k]" on its id and on its text.

    `texts` (default: the queries' own) cycle separately, so a longer list only changes what is embedded."""
    from dataclasses import replace

    texts = texts or [q.question for q in queries]
    out = []
    for j in range(size):
        base, id_copy, text_copy = queries[j % len(queries)], j // len(queries), j // len(texts)
        out.append(replace(base, id=f"{base.id} [copy {id_copy}]" if id_copy else base.id,
                           question=texts[j % len(texts)] + (f" [copy {text_copy}]" if text_copy else "")))
    return out


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - started


def lookup_times(index, vectors, count: int, k: int) -> dict:
    """p50 / p99 ms of one-at-a-time top-k searches for `count` of the pool's vectors, each with a little noise."""
    import numpy as np

    from morkit.question_pool.index import search

    rng = np.random.default_rng(1)
    picks = vectors[rng.integers(0, len(vectors), count)] + rng.normal(0, 0.01, (count, vectors.shape[1]))
    picks = (picks / np.linalg.norm(picks, axis=1, keepdims=True)).astype(np.float32)
    for v in picks[:10]:  # warm-up
        search(index, v[None], k)
    times = []
    for v in picks:
        started = time.perf_counter()
        search(index, v[None], k)
        times.append(time.perf_counter() - started)
    ms = np.array(times) * 1000
    return {"lookup_p50_ms": float(np.percentile(ms, 50)), "lookup_p99_ms": float(np.percentile(ms, 99))}


def build_phases(queries, rm_names, ensembles_limit: int, embedder, full: bool, embed_max: int,
                 lookups: int = 0, k: int = 100):
    """Run build_pool's steps one by one; returns ({phase: seconds}, details).

    Above `embed_max` questions only the first `embed_max` texts are embedded and the time is scaled
    linearly (the texts repeat, so their lengths are the same mix); the index then gets those vectors
    tiled to the full size with a little noise."""
    import numpy as np

    from morkit.question_pool.index import index_vectors
    from morkit.question_pool.pool import PoolConfig, fit_ensembles
    from morkit.question_pool.rows import ensemble_statistics, pool_rows

    config = PoolConfig()
    t: dict[str, float] = {}
    rows, t["rows"] = timed(pool_rows, queries, rm_names, config.reduction)
    (normalizer, _, everything), t["fit"] = timed(fit_ensembles, rows, rm_names, config)
    ensembles = everything[:ensembles_limit] if ensembles_limit else everything

    _, t["stats"] = timed(ensemble_statistics, rows.scores, rows.correct, rows.valid, normalizer, rm_names,
                          ensembles)
    details = {"ensembles": len(ensembles), "enumerated": len(everything), "index": "-"}
    if full and len(everything) > len(ensembles):
        _, t["stats_full"] = timed(ensemble_statistics, rows.scores, rows.correct, rows.valid, normalizer,
                                   rm_names, everything)
    if embedder is not None:
        texts = [q.question for q in rows.questions]
        if embed_max and len(texts) > embed_max:
            sample, seconds = timed(embedder.encode, texts[:embed_max])
            t["embed"], details["embedded"] = seconds * len(texts) / embed_max, embed_max
            rng = np.random.default_rng(0)
            vectors = sample[np.arange(len(texts)) % embed_max]
            vectors = vectors + rng.normal(0, 0.01, vectors.shape).astype(np.float32)
            vectors = np.ascontiguousarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        else:
            vectors, t["embed"] = timed(embedder.encode, texts)
        (index, info), t["index"] = timed(index_vectors, vectors, config.index)
        details["index"] = info["kind"]
        details.update({"recall": v for key, v in info.items() if key.startswith("recall")})
        if lookups:
            details.update(lookup_times(index, vectors, lookups, k))
    return t, details


def prr_vectorised(normalised, correct, valid, weights, chunk: int = 256):
    """PRR (Q, E) float64 the way ensemble_statistics computes it, without best-of-n."""
    import numpy as np

    from morkit.question_pool.ensembles import combine
    from morkit.question_pool.prr import prr_matrix

    out = np.empty((len(normalised), weights.shape[1]))
    for start in range(0, len(normalised), chunk):
        part = slice(start, start + chunk)
        out[part] = prr_matrix(combine(normalised[part], weights), correct[part], valid[part])
    return out


def prr_loop(normalised, correct, valid, ensembles, rm_names, question_rows, ensemble_cols):
    """What a user writes without the batched path: one question, one ensemble, one prr() call at a time.

    The ensemble score is sum_m w_m * z_m added member by member, so candidates whose member scores are
    equal get exactly equal ensemble scores (a tie, which PRR counts as wrong)."""
    import numpy as np

    from morkit.question_pool.prr import prr

    column = {name: r for r, name in enumerate(rm_names)}
    members = [(ensembles[e].weights, [column[m] for m in ensembles[e].members]) for e in ensemble_cols]
    out = np.empty((len(question_rows), len(ensemble_cols)))
    for i, q in enumerate(question_rows):
        real = valid[q]
        scores, labels = normalised[q][real], correct[q][real]
        for j, (weights, cols) in enumerate(members):
            combined = sum(w * scores[:, c] for w, c in zip(weights, cols))
            out[i, j] = np.nan if np.isnan(combined).any() else prr(combined, labels)
    return out


def tied_members(normalised, valid, ensembles, rm_names, question_rows, ensemble_cols):
    """(Q, E) bool: some two candidates of the question have identical scores from all the ensemble's members."""
    import numpy as np

    column = {name: r for r, name in enumerate(rm_names)}
    out = np.zeros((len(question_rows), len(ensemble_cols)), dtype=bool)
    for i, q in enumerate(question_rows):
        for j, e in enumerate(ensemble_cols):
            rows = normalised[q][valid[q]][:, [column[m] for m in ensembles[e].members]]
            out[i, j] = len(np.unique(rows, axis=0)) < len(rows)
    return out


def tiled(array, size: int, chunk: int = 1 << 14):
    """`array`'s rows tiled to `size` rows, by chunks into a RowArray: on disk (memory-mapped) when large, as a
    build's rows are (morkit.question_pool.rowfiles)."""
    import numpy as np

    from morkit.question_pool.rowfiles import RowArray

    out = RowArray((size, *array.shape[1:]), array.dtype)
    for start in range(0, size, chunk):
        stop = min(size, start + chunk)
        out.part(start, stop)[...] = array[np.arange(start, stop) % len(array)]
    return out.finish()


def tiled_rows(base, size: int):
    """PoolRows of `size` questions: `base`'s arrays tiled, copy k > 0 of a question with " [copy k]" on its id
    and text (what `replicated` does to queries, without a million Query objects); member and step scores on disk
    beyond rowfiles.ON_DISK_BYTES, as `build_pool` keeps them."""
    from dataclasses import replace

    import numpy as np

    from morkit.question_pool.table import QuestionTable

    n = len(base.questions)
    order = np.arange(size) % n
    copy = lambda j: f" [copy {j // n}]" if j >= n else ""  # noqa: E731
    questions = QuestionTable.from_columns(  # columns, not a million PoolQuestion objects
        size, (base.questions[j % n].id + copy(j) for j in range(size)),
        (base.questions[j % n].question + copy(j) for j in range(size)),
        (base.questions[j % n].domain for j in range(size)), [q.n_candidates for q in base.questions] * (size // n)
        + [q.n_candidates for q in base.questions[: size % n]])
    return replace(base, questions=questions, scores=tiled(base.scores, size), correct=base.correct[order],
                   valid=base.valid[order], steps=None if base.steps is None else tiled(base.steps, size), skipped={},
                   missing={k: 0 for k in base.missing})


def clustered_vectors(count: int, dim: int, seed: int, chunk: int = 100_000):
    """bench/knn.py's clustered unit vectors (200 topics x 10 subtopics, the same for every seed), made in
    chunks so a million of them need no more memory than their own 1.5 GB."""
    import numpy as np

    part = clustered_parts(dim, seed)
    out = np.empty((count, dim), dtype=np.float32)
    for start in range(0, count, chunk):
        out[start : start + chunk] = part(min(chunk, count - start))
    return out


def clustered_parts(dim: int, seed: int):
    """A function giving the next n of the clustered unit vectors of `seed` (its chunks are its calls)."""
    import numpy as np
    from knn import unit  # bench/knn.py, beside this script

    topic_rng = np.random.default_rng(0)
    topics = unit(topic_rng.standard_normal((200, dim), dtype=np.float32))
    subtopics = unit(np.repeat(topics, 10, axis=0)
                     + topic_rng.standard_normal((2000, dim), dtype=np.float32) / np.sqrt(dim))
    rng = np.random.default_rng(seed)

    def part(n: int):
        members = rng.integers(0, len(subtopics), n)
        noise = 0.75 * rng.standard_normal((n, dim), dtype=np.float32) / np.sqrt(dim)
        return unit(subtopics[members] + noise)

    return part


class Vectors:
    """An embedder stand-in that hands back vectors made elsewhere (morkit only calls `name` and `encode`)."""

    name = "synthetic-clustered-384"

    def __init__(self, vectors):
        self.vectors = vectors

    def encode(self, texts, progress: bool = False):
        assert len(texts) == len(self.vectors)
        return self.vectors


class ClusteredEmbedder:
    """An embedder stand-in that makes the next clustered vectors as the build asks for them, in its chunks (a
    million-question build embeds by chunk and writes the vectors to disk as they come)."""

    name, dim = "synthetic-clustered-384", 384

    def __init__(self, seed: int) -> None:
        self.part = clustered_parts(self.dim, seed)

    def encode(self, texts, progress: bool = False):
        return self.part(len(texts))


def _status_gib(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def rss_gib() -> float:
    return _status_gib("VmRSS")


def anon_rss_gib() -> float:
    """RSS less file-backed pages: what the process itself holds (a memory-mapped pool's pages it has read
    count in RSS but are page cache the kernel reclaims)."""
    return _status_gib("RssAnon")


def peak_rss_gib() -> float:
    """This process's high-water RSS (VmHWM: unlike ru_maxrss, not inherited from the parent across exec)."""
    return _status_gib("VmHWM")


class PhasePeaks:
    """Each phase's peak RSS two ways. Total: VmHWM read after the phase, then reset to the current RSS (Linux
    clear_refs 5); like ru_maxrss it counts every resident page, memory-mapped file pages included. Anon: the
    largest RssAnon (the process's own memory, no file pages) a thread sampled every 10 ms during the phase, a
    lower bound (a spike between two samples is missed)."""

    def __init__(self, interval: float = 0.01) -> None:
        import threading

        self.peaks: dict[str, float] = {}
        self.anon_peaks: dict[str, float] = {}
        self._anon, self._stop = anon_rss_gib(), threading.Event()
        self.reset()
        threading.Thread(target=self._sample, args=(interval,), daemon=True).start()

    def _sample(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._anon = max(self._anon, anon_rss_gib())

    def reset(self) -> None:
        self._anon = anon_rss_gib()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:  # not Linux, or not allowed: peaks then run from the process start
            pass

    def timed(self, name: str, times: dict, fn, *args, **kwargs):
        out, times[name] = timed(fn, *args, **kwargs)
        self.peaks[name] = peak_rss_gib()
        self.anon_peaks[name] = max(self._anon, anon_rss_gib())
        self.reset()
        return out

    def stop(self) -> None:
        self._stop.set()


def build_large(base_queries, rm_names, size: int, out: str, costs: bool = False) -> dict:
    """Build and save a `size`-question pool from tiled rows and synthetic vectors; phase times and peak RSS.
    `costs`: also store the packaged RewardMATH costs and fit the learned selector's budget routes."""
    from morkit.question_pool.pool import PoolConfig, pool_from_rows
    from morkit.question_pool.rows import pool_rows
    from morkit.selection.budget import CostOptions
    from morkit.selection.learned_method import with_budget_routes, with_stored_learned

    t: dict[str, float] = {}
    phases = PhasePeaks()
    base = pool_rows(base_queries, rm_names, "min")
    rows = phases.timed("rows", t, tiled_rows, base, size)
    pool = phases.timed("pool_from_rows", t, pool_from_rows, rows, rm_names, ClusteredEmbedder(seed=1),
                        config=PoolConfig())
    del rows
    history = pool.meta["history"][0]["timings"]
    t["statistics"], t["index"] = history["prr_s"], history["embed_index_s"]
    pool = phases.timed("learned", t, with_stored_learned, pool)
    if costs:
        pool = phases.timed("budget_routes", t, with_budget_routes, pool, CostOptions(files=("rewardmath",)))
    phases.timed("save", t, pool.save, out)
    phases.stop()
    routes = [{"members": len(r["members"]), "label": r["fit"]["label"]} for r in pool.meta.get("budget_routes", ())]
    return {"times": t, "ensembles": len(pool.ensembles), "dense": pool.dense, "index": pool.meta["index"],
            **({"budget_routes": routes} if costs else {}),
            "sample": pool.meta["statistics"]["sample"] if not pool.dense else None,
            "peak_rss_gib": max(phases.peaks.values()), "phase_peak_rss_gib": phases.peaks,
            "peak_anon_rss_gib": max(phases.anon_peaks.values()), "phase_peak_anon_rss_gib": phases.anon_peaks}


def select_child(path: str, queries: int, k: int, data_dir, budgets=()) -> None:
    """In a fresh process: open the pool, time one-at-a-time selection from query vectors (each method without a
    budget, then at each of `budgets`, shares of the full route's cost); print JSON."""
    import json

    import numpy as np

    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.question_pool.pool import load_pool
    from morkit.selection.router import Router

    before = rss_gib()
    pool, open_s = timed(load_pool, path)
    opened = rss_gib()
    base = rewardmath_rm_scores(data_dir)
    vectors = clustered_vectors(queries, 384, seed=2)
    out = {"open_s": open_s, "rss_before_open_gib": before, "rss_after_open_gib": opened, "methods": {}}
    from morkit.selection.budget import Budget

    runs = [(method, None) for method in ("learned", "pres")]
    runs += [(method, share) for share in budgets for method in ("learned", "pres")]
    for method, share in runs:
        budget = None if share is None else Budget(share=share)
        router = Router(pool, method, embedder=Vectors(vectors), k=k, budget=budget)
        router.select_many([base[0]], vectors=vectors[:1])  # warm-up: the method's tables
        times = []
        for i in range(queries):
            started = time.perf_counter()
            router.select_many([base[i % len(base)]], vectors=vectors[i : i + 1])
            times.append(time.perf_counter() - started)
        ms = np.array(times) * 1000
        name = method if share is None else f"{method}, budget {share:.0%}"
        out["methods"][name] = {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                                  "rss_gib": rss_gib(), "anon_rss_gib": anon_rss_gib()}
    out["peak_rss_select_gib"] = peak_rss_gib()
    from morkit.question_pool.embed import load_embedder

    embedder = load_embedder()
    texts = [q.question for q in base[:50]]
    embedder.encode(texts[:2])
    times = []
    for text in texts:
        started = time.perf_counter()
        embedder.encode([text])
        times.append(time.perf_counter() - started)
    out["embed_p50_ms"] = float(np.percentile(np.array(times) * 1000, 50))
    out["peak_rss_with_embedder_gib"] = peak_rss_gib()
    print(json.dumps(out))


OPEN_TARGET_S, BUILD_TARGET_BYTES, RECALL_TARGET = 1.0, 4e9, 0.99
"""Issue 35's targets for a million-question pool: open within 1 s, build within 4 GB peak RSS, recall@100."""


def run_large(args, base, rm_names, data_dir) -> dict:
    import shutil
    import subprocess
    import sys
    import tempfile

    folder = tempfile.mkdtemp(prefix="morkit-pool-scale-", dir=args.large_dir)
    path = os.path.join(folder, "pool")
    try:
        print(f"building a {args.large:,}-question pool (tiled rewardmath rows, synthetic vectors) in {path}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        built = build_large(base, rm_names, args.large, path, costs=bool(args.budgets))
        size_gb = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)) / 1e9
        child = subprocess.run([sys.executable, __file__, "--select-child", path, "--queries", str(args.queries),
                                "--k", str(args.k), "--data-dir", str(data_dir),
                                *(["--budgets", *map(str, args.budgets)] if args.budgets else [])],
                               capture_output=True, text=True)
        if child.returncode:
            raise SystemExit(f"the selecting process failed:\n{child.stderr}")
        selected = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    t = built["times"]
    sampled = "" if built["dense"] else f" (means over {built['sample']:,} sampled questions)"
    print(f"\n{args.large:,} questions x {built['ensembles']:,} ensembles; dense tables: {built['dense']}{sampled}; "
          f"index {built['index']['kind']}, "
          f"recall@100 {built['index'].get('recall@100', 1.0):.3f}; on disk {size_gb:.1f} GB")
    labels = [("rows", "rows: tile the 383 problems' arrays", "rows"),
              ("statistics", "normaliser, single-RM PRR, enumeration, sampled means", "pool_from_rows"),
              ("index", "synthetic vectors to disk + FAISS index + recall", "pool_from_rows"),
              ("learned", "learned-selector fit (20k-question sample)", "learned"),
              *([("budget_routes", f"budget routes: {len(built['budget_routes'])} fits along the cost ladder",
                  "budget_routes")] if "budget_routes" in t else []),
              ("save", "save (atomic directory swap)", "save")]
    peaks, anon = built["phase_peak_rss_gib"], built["phase_peak_anon_rss_gib"]
    print(f"  {'build phase':<58}{'seconds':>10}{'peak RSS':>12}{'of it anon':>12}")
    for key, label, phase in labels:
        print(f"  {label:<58}{t[key]:>9.1f}s{peaks[phase]:>8.2f} GiB{anon[phase]:>8.2f} GiB")
    total = t["rows"] + t["pool_from_rows"] + t["learned"] + t.get("budget_routes", 0.0) + t["save"]
    peak, recall = built["peak_rss_gib"], built["index"].get("recall@100", 1.0)
    print(f"  {'build total':<58}{total:>9.1f}s   peak RSS {peak:.2f} GiB, of it anon {built['peak_anon_rss_gib']:.2f} "
          "GiB (total: VmHWM, file pages included; anon: RssAnon sampled every 10 ms)")
    print(f"fresh process: open {selected['open_s']:.2f}s, RSS {selected['rss_before_open_gib']:.2f} -> "
          f"{selected['rss_after_open_gib']:.2f} GiB after opening")
    print(f"against the targets: open {selected['open_s']:.2f}s / 1 s = {selected['open_s'] / OPEN_TARGET_S:.2f}x; "
          f"build peak {peak * 2**30 / 1e9:.2f} GB / 4 GB = {peak * 2**30 / BUILD_TARGET_BYTES:.2f}x; "
          f"recall@100 {recall:.4f} (at least {RECALL_TARGET})")
    print(f"{'select (query vector given), k=' + str(args.k):<40}{'p50':>10}{'p99':>10}{'RSS after':>12}"
          f"{'of it anon':>12}")
    for method, m in selected["methods"].items():
        print(f"  {method:<38}{m['p50_ms']:>8.2f}ms{m['p99_ms']:>8.2f}ms{m['rss_gib']:>9.2f} GiB"
              f"{m.get('anon_rss_gib', float('nan')):>8.2f} GiB")
    print(f"peak RSS of the selecting process: {selected['peak_rss_select_gib']:.2f} GiB; with MiniLM loaded "
          f"{selected['peak_rss_with_embedder_gib']:.2f} GiB; MiniLM query embedding p50 "
          f"{selected['embed_p50_ms']:.1f} ms (CPU)")
    print(f"targets: learned select p50 <= 2 ms, PRES p50 <= 5 ms, selecting RSS <= 2 GB; load average at the end "
          f"{os.getloadavg()[0]:.1f}")
    return {"large": args.large, "build": built, "build_total_s": total, "on_disk_gb": size_gb, "select": selected,
            "k": args.k, "queries": args.queries, "load_end": os.getloadavg()[0]}


PHASES = (("rows", "cached scores -> arrays"), ("fit", "normaliser, single-RM PRR, enumeration"),
          ("stats", "PRR + best-of-n"), ("embed", "embedding (MiniLM, CPU)"), ("index", "FAISS index"))


def plot(result: dict, path: Path) -> None:
    """Log-log: each build phase's seconds and their total without embedding (which dominates it) against pool
    questions, with a linear reference; beside it the single nearest-question lookup's p50 and p99."""
    from plotting import figure

    sizes = [row["size"] for row in result["rows"]]
    lookup = all("lookup_p50_ms" in row for row in result["rows"])
    with figure(path, 1, 1 + lookup, height=4.0, gridspec_kw={"width_ratios": [3, 2][: 1 + lookup]}) as (fig, axes):
        ax = axes[0, 0]
        for key, label in PHASES:
            if all(key in row["seconds"] for row in result["rows"]):
                label += f" ({result['ensembles']:,} ensembles)" if key == "stats" else ""
                line, = ax.plot(sizes, [row["seconds"][key] for row in result["rows"]], "o-", label=label)
                scaled = [row for row in result["rows"] if key == "embed" and row.get("embedded")]
                if scaled:
                    ax.plot([r["size"] for r in scaled], [r["seconds"][key] for r in scaled], "o", color="white",
                            markeredgecolor=line.get_color(),
                            label=f"embedding, hollow: {scaled[0]['embedded']:,} texts timed, scaled")
        total = [sum(v for key, v in row["seconds"].items() if key not in ("embed", "stats_full"))
                 for row in result["rows"]]
        ax.plot(sizes, total, "k^-", label="total without embedding")
        ax.plot(sizes, [total[-1] * s / sizes[-1] for s in sizes], "k:", linewidth=1, label="linear in questions")
        ax.set(xscale="log", yscale="log", xlabel="pool questions (replicated rewardmath)", ylabel="seconds",
               title="build time by phase")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=8)
        if lookup:
            right = axes[0, 1]
            for key, label, style in (("lookup_p50_ms", "p50", "o-"), ("lookup_p99_ms", "p99", "s--")):
                right.plot(sizes, [row[key] for row in result["rows"]], style, color="#1f5fbf", label=label)
            right.set(xscale="log", yscale="log", xlabel="pool questions", ylabel="milliseconds",
                      title=f"one nearest-question search\n(top {result['k']}, index {result['rows'][-1]['index']})")
            right.legend(fontsize=8)
        for a in axes[0]:
            a.set_xticks(sizes, [f"{s / 1000:g}k" if s >= 1000 else str(s) for s in sizes])
            a.minorticks_off()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000], help="pool sizes (questions)")
    parser.add_argument("--ensembles", type=int, default=1000,
                        help="ensembles per pool: the first N of the default enumeration (0 = all of it)")
    parser.add_argument("--full-at", type=int, nargs="*", default=[1000],
                        help="at these sizes also time PRR+best-of-n with the whole enumeration")
    parser.add_argument("--no-embed", action="store_true", help="skip the embedding and index phases")
    parser.add_argument("--data-dir", help="folder of the public data sets (default: $MORKIT_DATA_DIR, "
                        "else data/ in morkit's cache folder, which `morkit data fetch NAME` fills)")
    parser.add_argument("--embed-max", type=int, default=2000,
                        help="above this many questions embed only this many and scale the time (0: embed all)")
    parser.add_argument("--gsm8k-texts", action="store_true",
                        help="embed GSM8K question texts in rotation with the MATH ones")
    parser.add_argument("--loop-questions", type=int, default=200, help="sample size of the plain-loop baseline")
    parser.add_argument("--loop-ensembles", type=int, default=50, help="sample size of the plain-loop baseline")
    parser.add_argument("--large", type=int, default=0,
                        help="instead: build a pool of this many questions (e.g. 1000000), open it in a fresh "
                             "process and time selection (see above)")
    parser.add_argument("--large-dir", help="where the large pool is written, then removed (default: the temp dir)")
    parser.add_argument("--queries", type=int, default=1000, help="--large: queries selected one at a time")
    parser.add_argument("--k", type=int, default=100, help="neighbours per query (the lookups; --large: selection)")
    parser.add_argument("--lookups", type=int, default=200,
                        help="single nearest-question searches timed per size (0: none; needs the index)")
    parser.add_argument("--plot", type=figure_path, help="write the scaling curve (.svg or .png); not with --large")
    parser.add_argument("--json", type=Path, help="write the measured numbers as JSON")
    parser.add_argument("--budgets", type=float, nargs="+", default=[],
                        help="--large: also store the packaged RewardMATH costs, fit the budget routes and time "
                             "selection at these budgets (shares of the full route's cost, e.g. 0.1 0.25)")
    parser.add_argument("--select-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.large and args.plot:
        parser.error("--plot draws the --sizes curve: drop --large (its numbers go to --json)")
    if args.select_child:
        from morkit.core import settings

        select_child(args.select_child, args.queries, args.k, settings.data_dir(args.data_dir), args.budgets)
        return

    import numpy as np

    from morkit.core import settings
    from morkit.data.datasets import gsm8k_model_solutions, rewardmath_rm_scores
    from morkit.question_pool.ensembles import weight_matrix
    from morkit.question_pool.pool import PoolConfig, fit_ensembles
    from morkit.question_pool.rows import pool_rows
    from morkit.reward_models.rules.table import table_names

    load = os.getloadavg()[0]
    data_dir = settings.data_dir(args.data_dir)
    base = rewardmath_rm_scores(data_dir)
    rm_names = tuple(table_names(base))
    texts = [q.question for q in base]
    if args.gsm8k_texts:
        texts += [q.question for q in gsm8k_model_solutions(data_dir)]
    if args.large:
        result = run_large(args, base, rm_names, data_dir)
        if args.json:
            write_json(args.json, result)
        return
    embedder = None
    if not args.no_embed:
        from morkit.question_pool.embed import load_embedder

        embedder, load_s = timed(load_embedder)
        embedder.encode(texts[:8])  # warm-up
        cut = embedder.model.max_seq_length
        tokens = np.mean([len(embedder.model.tokenizer(t, truncation=True, max_length=cut)["input_ids"])
                          for t in texts])
        print(f"embedder {embedder.name} on {embedder.model.device}, loaded in {load_s:.1f}s; "
              f"{tokens:.0f} tokens per text on average (cut at {cut})")
    print(f"{len(base)} real rewardmath problems x {len(base[0].candidates)} candidates, {len(rm_names)} RMs, "
          f"REPLICATED to each size (copy k>0: id and text + ' [copy k]'); "
          f"{'MATH + GSM8K' if args.gsm8k_texts else 'MATH'} texts; {os.cpu_count()} CPUs, load {load:.1f}")

    results = {}
    for size in args.sizes:
        queries = replicated(base, size, texts)
        assert len({q.id for q in queries}) == size and len({q.question for q in queries}) == size
        results[size] = build_phases(queries, rm_names, args.ensembles, embedder, size in args.full_at,
                                      args.embed_max, args.lookups, args.k)
        print(f"  built {size:,} questions: {sum(v for k, v in results[size][0].items() if k != 'stats_full'):.1f}s",
              flush=True)

    sizes = args.sizes
    print()
    header = f"{'phase':<44}" + "".join(f"{f'{s:,} q':>12}" for s in sizes)
    print(header)
    print("-" * len(header))
    first = results[sizes[0]][1]
    labels = [("rows", "rows: cached scores -> arrays"),
              ("fit", "fit: normaliser, single-RM PRR, enumeration"),
              ("stats", f"stats: PRR + best-of-n, {first['ensembles']:,} ensembles"),
              ("embed", "embed: MiniLM on CPU"),
              ("index", f"index: FAISS {first['index']}")]
    for key, label in labels:
        if all(key in results[s][0] for s in sizes):
            marks = ["~" if key == "embed" and "embedded" in results[s][1] else " " for s in sizes]
            print(f"{label:<44}" + "".join(f"{m:>3}{results[s][0][key]:>8.2f}s" for s, m in zip(sizes, marks)))
    totals = {s: sum(v for k, v in results[s][0].items() if k != "stats_full") for s in sizes}
    print(f"{'total':<44}" + "".join(f"{totals[s]:>11.2f}s" for s in sizes))
    for s in sizes:
        if "embedded" in results[s][1]:
            done = results[s][1]["embedded"]
            print(f"~ {s:,} q: {done:,} texts embedded, the time scaled x{s / done:g} (--embed-max 0 embeds all); "
                  f"the index got those vectors tiled with noise")
    print(f"{'stats throughput (question x ensemble / s)':<44}"
          + "".join(f"{s * results[s][1]['ensembles'] / results[s][0]['stats']:>12,.0f}" for s in sizes))
    for s in sizes:
        if "stats_full" in results[s][0]:
            full_s, enumerated = results[s][0]["stats_full"], results[s][1]["enumerated"]
            print(f"stats with the whole enumeration ({enumerated:,} ensembles) at {s:,} q: {full_s:.2f}s "
                  f"({s * enumerated / full_s:,.0f} q x e/s); linear extrapolation to "
                  f"{max(sizes):,} q: ~{full_s * max(sizes) / s:.0f}s")
        if "recall" in results[s][1]:
            print(f"recall@100 of the {results[s][1]['index']} index at {s:,} q: {results[s][1]['recall']:.3f}")
        if "lookup_p50_ms" in results[s][1]:
            print(f"one nearest-question search (top {args.k}) at {s:,} q: p50 {results[s][1]['lookup_p50_ms']:.2f} "
                  f"ms, p99 {results[s][1]['lookup_p99_ms']:.2f} ms")

    # PRR alone, largest size x --ensembles, against the plain loop on a sample.
    size = max(sizes)
    rows = pool_rows(replicated(base, size, texts), rm_names, "min")
    normalizer, _, ensembles = fit_ensembles(rows, rm_names, PoolConfig())
    ensembles = ensembles[: args.ensembles] if args.ensembles else ensembles

    started = time.perf_counter()
    normalised = normalizer.apply(rm_names, rows.scores)
    weights = weight_matrix(ensembles, rm_names)
    vectorised = prr_vectorised(normalised, rows.correct, rows.valid, weights)
    vec_s = time.perf_counter() - started

    q_rows = np.arange(min(args.loop_questions, size))
    e_cols = np.unique(np.linspace(0, len(ensembles) - 1, min(args.loop_ensembles, len(ensembles))).astype(int))
    loop, loop_s = timed(prr_loop, normalised, rows.correct, rows.valid, ensembles, rm_names, q_rows, e_cols)
    per_cell = loop_s / loop.size
    cells = size * len(ensembles)
    sample = vectorised[np.ix_(q_rows, e_cols)]
    same_nan = np.array_equal(np.isnan(sample), np.isnan(loop))
    diff = float(np.nanmax(np.abs(sample - loop))) if np.isfinite(loop).any() else 0.0

    print()
    print(f"PRR only, {size:,} questions x {len(ensembles):,} ensembles = {cells:,} (question, ensemble) cells")
    print(f"{'method':<52}{'seconds':>10}{'cells/s':>14}{'ratio':>9}")
    print(f"{'plain loop, prr() per cell (sample, extrapolated)':<52}{per_cell * cells:>9.1f}s"
          f"{1 / per_cell:>14,.0f}{1:>8.1f}x")
    print(f"{'morkit vectorised (combine + prr_matrix, chunk 256)':<52}{vec_s:>9.1f}s"
          f"{cells / vec_s:>14,.0f}{per_cell * cells / vec_s:>8.1f}x")
    print(f"loop sample: {len(q_rows)} questions x {len(e_cols)} ensembles = {loop.size:,} cells in {loop_s:.2f}s; "
          f"max |vectorised - loop| on it: {diff:.1e}, NaN cells equal ({int(np.isnan(loop).sum())} NaN)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (start {load:.1f})")
    if diff >= 1e-9 or not same_nan:
        wrong = ~(np.abs(sample - loop) < 1e-9) & ~(np.isnan(sample) & np.isnan(loop))
        tied = tied_members(normalised, rows.valid, ensembles, rm_names, q_rows, e_cols)
        print(f"MISMATCH in {int(wrong.sum())} sample cells; {int((wrong & tied).sum())} of them are questions where "
              f"two candidates have identical member scores (an exact tie the vectorised combine may break by an ulp)")
    assert same_nan, "NaN pattern differs between vectorised and loop"
    assert diff < 1e-9, f"vectorised PRR differs from the plain loop by {diff}"
    result = {"k": args.k, "ensembles": first["ensembles"], "cpus": os.cpu_count(), "load_start": load,
              "load_end": os.getloadavg()[0], "rows": [{"size": s, "seconds": results[s][0], "total_s": totals[s],
                                                        **results[s][1]} for s in sizes],
              "prr": {"size": size, "ensembles": len(ensembles), "vectorised_s": vec_s,
                      "loop_extrapolated_s": per_cell * cells, "loop_sample_cells": int(loop.size)}}
    if args.json:
        write_json(args.json, result)
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
