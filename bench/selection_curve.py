"""Learning curve of per-query RM selection: best-of-n accuracy against the number of labelled pool questions.

How many labelled validation questions does a pool need? Each data set's questions are split into `--folds`
folds by the same seeded permutation as bench/selection.py. For each fold, each of `--repeats` seeded
draws orders the OTHER folds' questions at random, and for each size N in `--sizes` a pool is built from the
first N of them (`morkit.question_pool.pool.build_pool`, z-score normaliser; sizes are nested within a draw,
so a step along the curve adds questions rather than swapping them). "all" is every other-fold question,
built once per fold (its spread is over folds only); a size larger than the training part is skipped.
The fold's held-out questions are answered by:
  - default: Router(pool), the learned selector (PRES when the pool has too few mixed questions),
  - PRES: Router(pool, "pres", k=--k), the CTTS-MM paper's rule with combinations,
  - best single: the single RM with the highest mean expected best-of-n on the pool's N questions
    (what a user with N labels would pick by hand; an RM with no score on a question picks at random there).
A hit is the EXPECTED best-of-n correctness (bench/selection.py's expected_hit on Ranking.scores: the share
of correct answers among the candidates tied for the top score). Per size the table gives each method's
mean accuracy over the folds x repeats runs (each run's accuracy is its mean over the fold's held-out
questions), the sd of those run means, the pool's questions, and the learned default's fits by kind, most
common first ("single RM" when its CV kept one RM, "blend", a learner and feature set, "PRES fallback" when the
pool had too few mixed questions; counted per run, or per query on a mixed-domain set; the JSON keeps the full
fit labels). The packaged heads' training questions are dropped by selection_data's loaders (there is no
--keep-head-train here).

Written: the table as JSON (--json) and a figure (--plot; .svg or .png by its suffix): one panel per data
set, accuracy against pool questions on a log axis, each method's sd as error bars.

    .venv/bin/python bench/selection_curve.py [--datasets rewardmath gsm8k mixed] [--sizes 25 50 100 200 all]
                                              [--repeats 3] [--folds 5] [--k 100] [--seed 0]
                                              [--plot docs/figures/selection_curve.svg]
                                              [--json docs/figures/selection_curve.json]
    .venv/bin/python bench/selection_curve.py --quick     # smoke run: sizes 25 50, repeats 1, folds 2
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from pathlib import Path

from plotting import figure_path, write_json  # beside this script
from selection import add_data_args, expected_hit, single_hits  # sets the env as it loads
from selection_data import DATASETS, Dataset, LookupEmbedder, load_dataset

METHODS = (("default", "default (learned)"), ("pres", "PRES"), ("single", "best single (on train)"))
DEFAULTS = {"sizes": ["25", "50", "100", "200", "all"], "repeats": 3, "folds": 5}
QUICK = {"sizes": ["25", "50"], "repeats": 1, "folds": 2}
FALLBACK = "PRES fallback"


def size_arg(text: str) -> str:
    """A --sizes entry: a positive question count, or "all"."""
    if text != "all" and not (text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"--sizes takes positive integers or 'all', not {text!r}")
    return text


def fit_kind(label: str) -> str:
    """A fit's label without its parameters, so fits count together: "single RM", "blend", "logit [full]"..."""
    for kind in ("single RM", "blend", FALLBACK):
        if label.startswith(kind):
            return kind
    return re.sub(r" \([^()]*\)$", "", label)


def run_dataset(ds: Dataset, args, embedder) -> dict:
    """Every (fold, draw, size) run on one data set: per size, each method's run accuracies, pool sizes and
    the learned default's fits."""
    import numpy as np

    from morkit.question_pool.pool import PoolConfig, build_pool
    from morkit.selection.router import Router

    queries, rms = ds.queries, ds.rm_names
    n = len(queries)
    ds.announce(f"{args.folds}-fold CV (seed {args.seed}), {args.repeats} repeat{'s' * (args.repeats != 1)}, k={args.k}")
    qvec = embedder.encode([q.question for q in queries])
    correct = [np.array([bool(c.correct) for c in q.candidates]) for q in queries]
    singles = single_hits(queries, rms)
    random_pick = np.array([c.mean() for c in correct])
    singles = np.where(np.isnan(singles), random_pick[:, None], singles)
    one_domain = len({q.domain or "unknown" for q in queries}) == 1

    fold_of = np.empty(n, dtype=int)
    fold_of[np.random.default_rng(args.seed).permutation(n)] = np.arange(n) % args.folds
    runs = {size: {"pool": [], "picks": Counter(), **{key: [] for key, _ in METHODS}} for size in args.sizes}
    for f in range(args.folds):
        train_rows = np.flatnonzero(fold_of != f)
        test_rows = np.flatnonzero(fold_of == f)
        test = [queries[i] for i in test_rows]
        for r in range(args.repeats):
            order = np.random.default_rng([args.seed, f, r]).permutation(train_rows)
            for size in args.sizes:
                if (size == "all" and r > 0) or (size != "all" and int(size) > len(train_rows)):
                    continue
                rows = order if size == "all" else order[:int(size)]
                pool = build_pool([queries[i] for i in rows], embedder, rm_names=rms,
                                  config=PoolConfig(normalizer="zscore"))
                out = runs[size]
                out["pool"].append(len(pool))
                out["single"].append(float(singles[test_rows, int(np.argmax(singles[rows].mean(axis=0)))].mean()))
                methods = (("default", Router(pool, k=args.k)), ("pres", Router(pool, "pres", k=args.k)))
                for key, router in methods:
                    selections = router.select_many(test, vectors=qvec[test_rows])
                    out[key].append(float(np.mean([
                        expected_hit(router.rank(query, selection).scores, correct[row])
                        for row, query, selection in zip(test_rows, test, selections)])))
                    if key == "default" and one_domain:
                        fit = router.method.fit_for(frozenset(rms))
                        out["picks"][FALLBACK if fit is None else fit.label] += 1
                    elif key == "default":  # a fit per RM set: count what each query got
                        out["picks"].update(FALLBACK if "fallback" in s.choice.details
                                            else s.choice.details.get("learner", "unknown") for s in selections)
        print(f"  fold {f + 1}/{args.folds} done ({time.perf_counter() - args.started:.0f}s)", flush=True)
    return {"name": ds.name, "questions": n, "rms": list(rms), "folds": args.folds, "repeats": args.repeats,
            "seed": args.seed, "k": args.k, "one_domain": one_domain,
            "rows": [summary(size, runs[size]) for size in args.sizes if runs[size]["pool"]]}


def summary(size: str, out: dict) -> dict:
    """One table row: each method's mean and sd over the runs (in %), the pool sizes, the default's fits."""
    import numpy as np

    row = {"size": size, "runs": len(out["pool"]), "pool_min": min(out["pool"]), "pool_max": max(out["pool"]),
           "pool_mean": float(np.mean(out["pool"]))}
    for key, _ in METHODS:
        values = np.array(out[key]) * 100
        row[key] = {"mean": float(values.mean()), "sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                    "per_run": [round(float(v), 4) for v in values]}
    kinds = Counter()
    for label, count in out["picks"].items():
        kinds[fit_kind(label)] += count
    row["default_fit"] = {"kinds": dict(kinds.most_common()), "labels": dict(out["picks"].most_common())}
    return row


def print_table(result: dict) -> None:
    print(f"\n{result['name']}: {result['questions']} questions, {result['folds']}-fold CV x {result['repeats']} "
          f"repeat{'s' * (result['repeats'] != 1)}; accuracy % (mean over runs, sd of the run means); "
          "'all' runs once per fold")
    print(f"{'size':>5} {'pool N':>9} {'runs':>4}" + "".join(f" {title:>22}" for _, title in METHODS)
          + "  default's fits, most common first (" + ("runs)" if result["one_domain"] else "held-out queries)"))
    for row in result["rows"]:
        pool = (f"{row['pool_min']}" if row["pool_min"] == row["pool_max"]
                else f"{row['pool_min']}-{row['pool_max']}")
        cells = "".join(f" {row[key]['mean']:13.2f} +- {row[key]['sd']:5.2f}" for key, _ in METHODS)
        fits = ", ".join(f"{kind} {count}" for kind, count in row["default_fit"]["kinds"].items())
        print(f"{row['size']:>5} {pool:>9} {row['runs']:>4}{cells}  {fits}")


def plot(results: list[dict], path: Path) -> None:
    """One panel per data set: accuracy against pool questions (log x), each method with its sd as error bars."""
    import textwrap

    from plotting import figure

    runs = {(r["folds"], r["repeats"]) for r in results}
    with figure(path, 1, len(results), height=3.9) as (fig, axes):
        for ax, result in zip(axes[0], results):
            x = [row["pool_mean"] for row in result["rows"]]
            for i, (key, title) in enumerate(METHODS):
                shift = 1 + 0.03 * (i - 1)  # a small offset on the log axis so the error bars do not overlap
                ax.errorbar([v * shift for v in x], [row[key]["mean"] for row in result["rows"]],
                            yerr=[row[key]["sd"] for row in result["rows"]], marker="o", label=title)
            ax.set_xscale("log")
            ax.set_xticks(x, [tick(v, row["size"], x[i - 1] if i else 0) for i, (v, row) in
                              enumerate(zip(x, result["rows"]))])
            ax.minorticks_off()
            ax.set_xlabel("labelled pool questions")
            how = "" if len(runs) == 1 else (f", {result['folds']}-fold CV, {result['repeats']} "
                                             f"repeat{'s' * (result['repeats'] != 1)}")
            ax.set_title(f"{textwrap.fill(result['name'], 28)}\n({result['questions']} questions{how})")
        axes[0][0].set_ylabel("best-of-n accuracy (%)\nbars: sd over folds x repeats")
        if len(runs) == 1:
            (folds, repeats), = runs
            fig.suptitle(f"{folds}-fold CV, {repeats} seeded draw{'s' * (repeats != 1)} of each size per fold "
                         "('all': once per fold)", fontsize=10)
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=len(METHODS))


def tick(value: float, size: str, previous: float) -> str:
    """An x tick label; "all" goes one line down where it would run into the previous size's label."""
    if size != "all":
        return f"{value:.0f}"
    return f"\n{value:.0f} (all)" if value < 1.5 * previous else f"{value:.0f}\n(all)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=["rewardmath", "gsm8k", "mixed"])
    parser.add_argument("--sizes", nargs="+", type=size_arg,
                        help=f"pool questions, or all (default {' '.join(DEFAULTS['sizes'])})")
    parser.add_argument("--repeats", type=int, help=f"seeded draws per fold and size (default {DEFAULTS['repeats']})")
    parser.add_argument("--folds", type=int, help=f"cross-validation folds (default {DEFAULTS['folds']})")
    parser.add_argument("--quick", action="store_true", help="smoke run: " + ", ".join(
        f"{k} {' '.join(v) if isinstance(v, list) else v}" for k, v in QUICK.items()) + " (explicit flags win)")
    parser.add_argument("--k", type=int, default=100, help="pool neighbours per query for PRES")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=figure_path,
                        help="write the figure here (.svg or .png); the docs' is docs/figures/selection_curve.svg")
    parser.add_argument("--json", type=Path, help="write the numbers here (docs/figures/selection_curve.json)")
    add_data_args(parser)
    parser.set_defaults(keep_head_train=False)  # load_dataset reads it: heads' training questions never enter a pool
    args = parser.parse_args()
    for key, value in (QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.repeats < 1 or args.folds < 2:
        parser.error("--repeats must be at least 1 and --folds at least 2")
    args.sizes = sorted(set(args.sizes), key=lambda s: float("inf") if s == "all" else int(s))

    import logging

    logging.basicConfig(level=logging.ERROR)  # the learned selector's "falling back to PRES" is counted instead
    from morkit.question_pool.embed import load_embedder

    args.started = time.perf_counter()
    embedder = LookupEmbedder(load_embedder())
    results = []
    for key in args.datasets:
        results.append(run_dataset(load_dataset(key, args), args, embedder))
        print_table(results[-1])
    total = time.perf_counter() - args.started
    if args.json:
        write_json(args.json, {"datasets": results, "total_s": round(total, 1)})
    if args.plot:
        plot(results, args.plot)
    print(f"\ntotal {total:.0f}s" + "".join(f"; wrote {p}" for p in (args.json, args.plot) if p))


if __name__ == "__main__":
    main()
