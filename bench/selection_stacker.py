"""Does the learned selector's CV ever pick the stacker? Per pool, the CV best-of-n of the stacker settings
(a conditional logit over one normalised score per RM: query-z or pool-z x penalty) against the learned
selector's own pick (the stacker settings are in its CV table).

Pools are built from the bench's data sets (bench/selection_data.py: GSM8K questions a packaged head trained
on are dropped, so no GSM8K model-solution question 0-399 is in a pool) with a hash embedder, so the rows that read
neighbours (the "+local" settings, PRES) see random ones here: this bench weighs the stacker's settings only.

    .venv/bin/python bench/selection_stacker.py [--datasets rewardmath qwen gsm8k humaneval mixed] [--folds 5]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from selection_data import DATASETS, load_dataset  # noqa: E402 (beside this script)


class HashEmbedder:
    name, dim = "hash-embedder", 16

    def encode(self, texts, *, batch_size=64, progress=False):
        import numpy as np

        rows = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
                .standard_normal(self.dim) for t in texts]
        return np.asarray([r / np.linalg.norm(r) for r in rows], dtype=np.float32).reshape(-1, self.dim)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="*", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--qwen-range", default="0:70")
    parser.add_argument("--gsm8k-range", default="400:1000")
    parser.add_argument("--humaneval-per-task", type=int, default=8)
    parser.add_argument("--humaneval-rms", nargs="+", default=["minilm-probe", "smollm2-orm"])
    parser.add_argument("--mixed-gsm8k-range", default="400:600")
    parser.add_argument("--mixed-per-task", type=int, default=6)
    parser.add_argument("--mixed-rms", nargs="+", default=["math-consensus", "code-tests", "minilm-probe",
                                                           "smollm2-orm"])
    parser.add_argument("--keep-head-train", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="*", default=[],
                        help="also pools of the first N questions of each data set (small pools)")
    parser.add_argument("--data-dir")
    args = parser.parse_args()
    if int(args.gsm8k_range.split(":")[0] or 0) < 400 or int(args.mixed_gsm8k_range.split(":")[0] or 0) < 400:
        sys.exit("GSM8K model-solution questions 0-399 trained the packaged heads: start the range at 400")

    from morkit.question_pool.pool import build_pool

    for key in args.datasets:
        started = time.perf_counter()
        try:
            ds = load_dataset(key, args)
        except Exception as exc:  # a data set whose RMs cannot run here: say so, measure the others
            print(f"\n== {key}: not loaded ({type(exc).__name__}: {exc})", flush=True)
            continue
        print(f"\n== {ds.name}: RMs {', '.join(ds.rm_names)} (loaded in {time.perf_counter() - started:.0f}s)")
        for size in [n for n in args.sizes if n < len(ds.queries)] + [len(ds.queries)]:
            pool = build_pool(ds.queries[:size], HashEmbedder(), rm_names=ds.rm_names)
            print(f" pool of {len(pool)} questions", flush=True)
            measure(pool, args.folds)


def measure(pool, folds: int) -> None:
    """Print the CV pick of each stored RM set's fit, the stacker settings in its table (they are in SETTINGS)."""
    from morkit.selection.coverage import domain_rm_sets
    from morkit.selection.learned import SETTINGS, STACKER_SETTINGS, TooFewMixed, fit_learned

    stacker_labels = {s.label for s in STACKER_SETTINGS}
    for members in domain_rm_sets(pool):
        started = time.perf_counter()
        try:
            fit = fit_learned(pool, members, folds=folds, settings=SETTINGS)  # the stacker's settings among them
        except TooFewMixed as exc:
            print(f"  [{len(members)} RMs] {exc}")
            continue
        table = {label: (value, sd) for label, value, sd in fit.cv_table}
        stacker = max(stacker_labels, key=lambda label: table[label][0])
        rest = max((row for row in fit.cv_table if row[0] not in stacker_labels), key=lambda row: row[1])
        picked = any(c.setting.label in stacker_labels for c in fit.components)
        print(f"  [{len(members)} RMs: {', '.join(members)[:60]}] {fit.report['questions']} questions ({fit.report['mixed']} mixed), "
              f"{fit.report['folds']} folds, {time.perf_counter() - started:.0f}s")
        print(f"    CV pick: {fit.label}  {fit.cv_best_of_n:.4f}")
        print(f"    best stacker setting: {stacker}  {table[stacker][0]:.4f} (sd over folds {table[stacker][1]:.4f})")
        print(f"    best other row: {rest[0]}  {rest[1]:.4f}")
        print(f"    CV picks a stacker setting: {'YES' if picked else 'no'}", flush=True)


if __name__ == "__main__":
    main()
