"""Where a learned fit's questions find the neighbours that its "local" features and PRES read: among the fit's own
samples (`fit_learned(neighbours="sample")`, what earlier releases did) or among every pool question its RMs cover,
in the pool's index as a query's are (`neighbours="pool"`, the default). Both fits run on the same saved pool in the
same process, so "before" (sample) and "after" (pool) differ only in the neighbours.

Pools are built as `bench/pool_build.py --large` builds them (its helpers are imported): RewardMATH's 383 problems
(10 candidates, 22 RMs' cached scores) tiled to each size, copy k > 0 with " [copy k]" on its id and text, and
SYNTHETIC clustered question vectors (200 topics x 10 subtopics), so a question's vector says nothing of its
problem: a neighbour is a copy of the question's own problem by chance alone (1 in 383). Copies keep their
problem's scores and labels, so such a neighbour would hand a question its own labels; the script counts how many
of the CV's neighbours are copies of their question's problem under each source. Each size's pool is built in a
child process, saved to a temporary folder, opened memory-mapped (as a served pool is) and removed at the end.

Per size and source: the fit's seconds (wall, and CPU over all threads, which a loaded machine moves less) and
peak RSS (VmHWM, reset before each fit: it counts the pages of the mapped pool read; beside it the highest
RssAnon sampled every 10 ms, what the process itself holds), the seconds spent finding
neighbours and on PRES's CV, the CV table's rows (the pick, PRES, every "+local" setting, the best other setting, the
blend, the best single RM), the mean similarity of a CV question's
20 nearest, their share outside the CV sample, and their share of copies of the question's own problem.

    .venv/bin/python bench/selection_neighbours.py [--sizes 20000 1000000] [--dir /tmp] [--json PATH]
    .venv/bin/python bench/selection_neighbours.py --pool PATH   # a pool already built (e.g. by --keep)

A million questions need about 6 GiB and 5 minutes to build (the child process) and each fit a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from plotting import write_json  # noqa: E402 (beside this script)

PROBLEMS = 383
"""RewardMATH problems the pools tile: pool row r is a copy of problem r % PROBLEMS."""
SOURCES = ("sample", "pool")


def build(size: int, path: str, data_dir: str | None) -> dict:
    """A `size`-question pool as pool_build.py --large builds it (tiled rows, synthetic vectors), saved to `path`
    without a stored fit; its build seconds and peak RSS."""
    from pool_build import ClusteredEmbedder, peak_rss_gib, tiled_rows

    from morkit.core import settings
    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.question_pool.pool import PoolConfig, pool_from_rows
    from morkit.question_pool.rows import pool_rows
    from morkit.reward_models.rules.table import table_names

    started = time.perf_counter()
    base = rewardmath_rm_scores(settings.data_dir(data_dir))
    rm_names = tuple(table_names(base))
    rows = tiled_rows(pool_rows(base, rm_names, "min"), size)
    pool = pool_from_rows(rows, rm_names, ClusteredEmbedder(seed=1), config=PoolConfig())
    del rows
    pool.save(path)
    return {"size": size, "build_s": time.perf_counter() - started, "peak_rss_gib": peak_rss_gib(),
            "dense": pool.dense, "index": pool.meta["index"], "ensembles": len(pool.ensembles)}


class Recorder:
    """Records the neighbourhoods a fit finds (their fit rows) and times finding them and PRES's CV (wall and CPU
    seconds: on a loaded machine the CPU seconds vary less)."""

    def __init__(self) -> None:
        from morkit.selection import learned
        from morkit.selection.local import Neighbourhood

        self.found: list[tuple[object, object]] = []
        self.seconds = {"neighbours": [0.0, 0.0], "pres_cv": [0.0, 0.0]}
        self.real = {name: getattr(Neighbourhood, name) for name in ("among", "in_pool")}
        self.real_pres = {name: getattr(learned, name) for name in ("pres_out_of_fold", "pres_served_out_of_fold")}
        recorder = self

        def timing(key, fn, *args):
            wall, cpu = time.perf_counter(), time.process_time()
            out = fn(*args)
            recorder.seconds[key][0] += time.perf_counter() - wall
            recorder.seconds[key][1] += time.process_time() - cpu
            return out

        def among(rows, vectors, groups, stats, k):
            near = timing("neighbours", recorder.real["among"], rows, vectors, groups, stats, k)
            recorder.found.append((rows, near))
            return near

        def in_pool(pool, rows, members, k, within=None, folds=None):
            near = timing("neighbours", recorder.real["in_pool"], pool, rows, members, k, within, folds)
            recorder.found.append((rows, near))
            return near

        Neighbourhood.among, Neighbourhood.in_pool = among, in_pool
        for name, fn in self.real_pres.items():
            setattr(learned, name, lambda *args, fn=fn: timing("pres_cv", fn, *args))

    def restore(self) -> None:
        from morkit.selection import learned
        from morkit.selection.local import Neighbourhood

        for name, method in self.real.items():
            setattr(Neighbourhood, name, classmethod(method.__func__))
        for name, fn in self.real_pres.items():
            setattr(learned, name, fn)


def neighbour_figures(recorder: Recorder, cv_rows, k: int) -> dict:
    """Of the CV questions' first `k` neighbours (no fold left out): mean similarity, share outside the CV
    sample, share that are copies of the question's own problem."""
    import numpy as np

    for rows, near in recorder.found:
        if len(rows) == len(cv_rows) and np.array_equal(rows, cv_rows):
            keep = near.lists.first(k)
            pool_rows = near.reference[np.where(keep, near.lists.rows, 0)]
            copies = (pool_rows % PROBLEMS == np.asarray(rows)[:, None] % PROBLEMS) & keep
            return {"mean_similarity": float(near.lists.sims[keep].mean()),
                    "outside_cv_sample": float(((near.place[np.where(keep, near.lists.rows, 0)] < 0) & keep).sum()
                                               / keep.sum()),
                    "copies_of_own_problem": float(copies.sum() / keep.sum()),
                    "questions_with_a_copy": float(copies.any(axis=1).mean())}
    return {}


def fit_once(pool, source: str) -> dict:
    """One fit over every RM with the given neighbour source: time, peak RSS, CV table and neighbour figures."""
    from pool_build import PhasePeaks

    from morkit.selection.learned import LOCAL_K, fit_learned

    recorder = Recorder()
    phases, times = PhasePeaks(), {}
    cpu = time.process_time()
    try:
        fit = phases.timed("fit", times, fit_learned, pool, neighbours=source)
    finally:
        recorder.restore()
        phases.stop()
    return {"seconds": times["fit"], "cpu_seconds": time.process_time() - cpu, "peak_rss_gib": phases.peaks["fit"],
            "peak_anon_rss_gib": phases.anon_peaks["fit"],
            "label": fit.label, "cv_best_of_n": fit.cv_best_of_n, "cv_table": [list(row) for row in fit.cv_table],
            "cv_questions": fit.report.get("cv_questions", fit.report["questions"]),
            "questions": fit.report["questions"], "pool_questions": len(pool),
            **{f"{key}_s": wall for key, (wall, _) in recorder.seconds.items()},
            **{f"{key}_cpu_s": used for key, (_, used) in recorder.seconds.items()},
            "neighbours": neighbour_figures(recorder, fit.out_of_fold.rows, LOCAL_K)}


def shown_rows(table: list) -> list[tuple[str, str]]:
    """(what, label) of the CV table rows the report shows."""
    labels = [row[0] for row in table]
    local = [x for x in labels if "+local" in x and not x.startswith("blend")]
    others = [row for row in table if "+local" not in row[0] and not row[0].startswith(("blend", "single", "PRES"))]
    singles = [row for row in table if row[0].startswith("single")]
    out = [("PRES", x) for x in labels if x.startswith("PRES")]
    out += [("local", x) for x in local]
    out += [("best other setting", max(others, key=lambda r: r[1])[0])] if others else []
    out += [("blend", x) for x in labels if x.startswith("blend")]
    out += [("best single RM", max(singles, key=lambda r: r[1])[0])] if singles else []
    return out


def report(size: int, runs: dict) -> None:
    before, after = runs["sample"], runs["pool"]
    print(f"\n{size:,} questions: the fit learns from {after['questions']:,}, its CV weighs {after['cv_questions']:,}")
    print(f"  {'':<44}{'sample (before)':>18}{'pool (after)':>18}")
    for key, label, fmt in (("seconds", "fit seconds (CPU seconds)", "cpu_seconds"),
                            ("neighbours_s", "  of it finding neighbours", "neighbours_cpu_s"),
                            ("pres_cv_s", "  of it PRES's CV", "pres_cv_cpu_s")):
        cells = [f"{r.get(key, float('nan')):.1f} ({r.get(fmt, float('nan')):.1f})" for r in (before, after)]
        print(f"  {label:<44}{cells[0]:>18}{cells[1]:>18}")
    print(f"  {'fit peak RSS (GiB)':<44}{before['peak_rss_gib']:>18.2f}{after['peak_rss_gib']:>18.2f}")
    print(f"  {'  of it anonymous, sampled (GiB)':<44}{before['peak_anon_rss_gib']:>18.2f}"
          f"{after['peak_anon_rss_gib']:>18.2f}")
    for key, label in (("mean_similarity", "CV question's 20 nearest: mean similarity"),
                       ("outside_cv_sample", "  share outside the CV sample"),
                       ("copies_of_own_problem", "  share copies of its own problem"),
                       ("questions_with_a_copy", "  questions with such a copy among them")):
        values = [r["neighbours"].get(key, float("nan")) for r in (before, after)]
        print(f"  {label:<44}{values[0]:>18.4f}{values[1]:>18.4f}")
    print(f"  chance of a copy of its own problem: {1 / PROBLEMS:.4f} per neighbour")
    tables = {source: {row[0]: row for row in runs[source]["cv_table"]} for source in SOURCES}
    print(f"  {'CV best-of-n (sd over folds)':<60}{'sample':>16}{'pool':>16}")
    for source in SOURCES:
        run = runs[source]
        print(f"  pick under {source:<8}: {run['label']:<45}{run['cv_best_of_n']:.4f}")
    rows = shown_rows(after["cv_table"]) + [x for x in shown_rows(before["cv_table"]) if x[0] == "PRES"]
    seen = set()
    for what, label in rows:
        if label in seen:
            continue
        seen.add(label)
        cells = []
        for source in SOURCES:
            row = tables[source].get(label)
            cells.append("skipped" if row is None else f"{row[1]:.4f} ({row[2]:.3f})")
        print(f"  {what + ': ' + label:<60.60}{cells[0]:>16}{cells[1]:>16}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20000, 1000000], help="pool sizes (questions)")
    parser.add_argument("--pool", help="instead of building: fit on this saved pool (not removed)")
    parser.add_argument("--dir", help="where pools are built, then removed (default: the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the built pools (their paths are printed)")
    parser.add_argument("--data-dir", help="folder of the public data sets (default: $MORKIT_DATA_DIR)")
    parser.add_argument("--json", help="write the figures as JSON")
    parser.add_argument("--build-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--fit-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_child:
        print(json.dumps(build(int(args.build_child[0]), args.build_child[1], args.data_dir)))
        return
    if args.fit_child:
        from morkit.question_pool.pool import load_pool

        pool = load_pool(args.fit_child)
        from morkit.question_pool.rows import sample_rows
        from morkit.selection.learned import LEARN_SAMPLE, PoolSlice

        PoolSlice.of(pool, sample_rows(len(pool), LEARN_SAMPLE), pool.rm_names)  # the sample's pages read once
        print(json.dumps({source: fit_once(pool, source) for source in SOURCES}))
        return

    results = []
    for size in [None] if args.pool else args.sizes:
        folder = None if args.pool else tempfile.mkdtemp(prefix="morkit-neighbours-", dir=args.dir)
        path = args.pool or os.path.join(folder, "pool")
        try:
            built = None
            if not args.pool:
                print(f"building {size:,} questions in {path}; load {os.getloadavg()[0]:.1f}", flush=True)
                built = json.loads(_child(["--build-child", str(size), path], args.data_dir))
                print(f"  built in {built['build_s']:.0f}s, peak RSS {built['peak_rss_gib']:.2f} GiB, dense "
                      f"{built['dense']}, index {built['index']['kind']}", flush=True)
            runs = json.loads(_child(["--fit-child", path], args.data_dir))
            size = size or runs["pool"]["pool_questions"]
            report(size, runs)
            results.append({"size": size, "build": built, "runs": runs, "load_end": os.getloadavg()[0]})
        finally:
            if folder and not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
            elif folder:
                print(f"  kept {path}")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if args.json:
        write_json(Path(args.json), results)


def _child(extra: list[str], data_dir: str | None) -> str:
    """Run this script with `extra` in a fresh process; its last stdout line."""
    command = [sys.executable, __file__, *extra, *(["--data-dir", data_dir] if data_dir else [])]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(extra[:1])} failed:\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    main()
