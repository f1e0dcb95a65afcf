"""Accuracy against cost on RewardMATH: how much best-of-n each route buys per GFLOP-equivalent spent scoring.

Data: rewardmath_rm_scores (383 MATH problems x 10 answers, one correct; cached scores of 22 RMs and judges), each
RM costed from the packaged cost file `rewardmath` (morkit/resources/costs/rewardmath.toml: parameter counts from
the models' cards, API judges' list prices converted at morkit.reward_models.cost's rates; docs/reward-models.md).
A query's cost is the sum of its route's members' costs per candidate times its 10 candidates; every member is
charged (a cached score counts as computed).

Design: `--folds`-fold cross-validation by problem, once per `--seeds` seed. For each fold a pool is built from the
training problems only, its learned fit and its budget routes (the cost ladder) are fitted there, and every choice
below is made on it; the held-out problems are then routed:
  - every single RM (its cost: that RM alone),
  - "morkit default": Router(pool), the learned selector over every RM (it reads all 22),
  - "PRES": Router(pool, "pres"), the paper's rule (its cost: the ensemble it picks per query),
  - "learned, budget S": Router(pool, budget=Budget(share=S)) for each --shares S (of the default's cost),
  - "PRES, budget S": the same budget on PRES,
  - "cascade, spend P": Cascade.fit(pool, CascadeOptions(cheap, then, spend=P)): cheap = the RMs of the route the
    budgeted learned selector takes on this fold's pool at --cascade-share; then = every other RM; P = the share
    of queries to escalate, turned into a confidence threshold on the pool's out-of-fold picks,
  - lines: the per-query oracle (the best single RM on each question) and a random pick.
A method's hit is its expected best-of-n correctness (ties share). Reported per method: accuracy (mean over
problems and deals, with its SE over problems), mean cost per query, its share of the default's, and for cascades
the share of held-out queries escalated; then the accuracy reachable at 10%, 25% and 50% of the default's cost
(the best method whose mean cost is within it) and the cheapest route within one point of the default.

    .venv/bin/python bench/cost_frontier.py [--folds 5] [--seeds 0] [--shares ...] [--spends ...]
                                            [--json docs/figures/cost_frontier.json]
                                            [--plot docs/figures/cost_frontier.svg]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from plotting import LEARNED, PRES, OTHER, SINGLE, figure, figure_path, write_json  # noqa: E402

DEFAULT = "morkit default (learned, every RM)"
PRES_ROW = "PRES (paper, with combinations)"
ORACLE = "per-query oracle (best single RM per question)"
RANDOM = "random pick (expected)"
LEVELS = (0.10, 0.25, 0.50)
"""Shares of the default's cost at which the reachable accuracy is reported."""
WITHIN = 1.0
"""Points of accuracy: the cheapest route within this many of the default's."""


def learned_label(share: float) -> str:
    return f"learned, budget {share:.0%}"


def pres_label(share: float) -> str:
    return f"PRES, budget {share:.0%}"


def cascade_label(spend: float) -> str:
    return f"cascade, spend {spend:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--shares", type=float, nargs="+", default=[0.02, 0.05, 0.1, 0.25, 0.5],
                        help="budgets as shares of the full route's cost")
    parser.add_argument("--spends", type=float, nargs="+", default=[0.1, 0.25, 0.5],
                        help="cascade: shares of queries to escalate")
    parser.add_argument("--cascade-share", type=float, default=0.1,
                        help="the cascade's cheap RMs: the budgeted route at this share of the full cost")
    parser.add_argument("--data-dir", help="data sets folder (default $MORKIT_DATA_DIR)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=figure_path)
    args = parser.parse_args()
    result = run(args)
    if args.json:
        write_json(args.json, result)
    if args.plot:
        plot(result, args.plot)


def run(args: argparse.Namespace) -> dict:
    import numpy as np

    from morkit.core import settings
    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.question_pool.embed import load_embedder
    from morkit.question_pool.pool import build_pool
    from morkit.reward_models.cost import COST_UNIT, cost_table
    from morkit.reward_models.rules.table import table_names
    from morkit.selection.budget import Budget, CostOptions
    from morkit.selection.cascade import Cascade, CascadeOptions
    from morkit.selection.learned_method import with_budget_routes, with_stored_learned
    from morkit.selection.router import Router
    from selection import expected_hit, single_hits
    from selection_data import LookupEmbedder

    started = time.perf_counter()
    queries = rewardmath_rm_scores(settings.data_dir(args.data_dir))
    rms = tuple(table_names(queries))
    costs = cost_table(rms, files=["rewardmath"])
    per_candidate = costs.vector(rms)
    n = len(queries)
    candidates = np.array([len(q.candidates) for q in queries], dtype=float)
    correct = [np.array([bool(c.correct) for c in q.candidates]) for q in queries]
    print(f"rewardmath_rm_scores: {n} problems x {sorted(set(candidates.astype(int)))} answers, {len(rms)} RMs; "
          f"costs from the packaged cost file 'rewardmath' ({COST_UNIT} per candidate, "
          f"{per_candidate.min():.3g} to {per_candidate.max():.3g})")
    embedder = LookupEmbedder(load_embedder(None, "cpu"))
    vectors = embedder.encode([q.question for q in queries])

    seeds = list(args.seeds)
    shape = (len(seeds), n)
    hits: dict[str, np.ndarray] = {}
    spent: dict[str, np.ndarray] = {}
    escalated: dict[str, np.ndarray] = {}
    singles = single_hits(queries, rms)
    oracle = float(np.nanmax(singles, axis=1).mean())
    random = float(np.mean([c.mean() for c in correct]))
    singles = np.where(np.isnan(singles), np.array([c.mean() for c in correct])[:, None], singles)  # no score
    for r, name in enumerate(rms):
        hits[name] = np.tile(singles[:, r], (len(seeds), 1))
        spent[name] = np.tile(per_candidate[r] * candidates, (len(seeds), 1))
    labels = [DEFAULT, PRES_ROW, *map(learned_label, args.shares), *map(pres_label, args.shares),
              *map(cascade_label, args.spends)]
    for label in labels:
        hits[label], spent[label] = np.full(shape, np.nan), np.full(shape, np.nan)
    for label in map(cascade_label, args.spends):
        escalated[label] = np.full(shape, np.nan)
    cheap_sets: list[list[str]] = []
    timing = {"build": 0.0, "route": 0.0}
    for s, seed in enumerate(seeds):
        fold_of = np.empty(n, dtype=int)
        fold_of[np.random.default_rng(seed).permutation(n)] = np.arange(n) % args.folds
        for f in range(args.folds):
            train_rows, test_rows = np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)
            train, test = [queries[i] for i in train_rows], [queries[i] for i in test_rows]
            t0 = time.perf_counter()
            pool = with_stored_learned(build_pool(train, embedder, rm_names=rms))
            pool = with_budget_routes(pool, CostOptions(files=("rewardmath",)))
            timing["build"] += time.perf_counter() - t0
            print(f"seed {seed} fold {f}: pool of {len(pool)} problems, {len(pool.meta['budget_routes'])} budget "
                  f"routes fitted ({time.perf_counter() - t0:.0f}s)", flush=True)
            t0 = time.perf_counter()
            routers = {DEFAULT: Router(pool, k=args.k, costs=costs), PRES_ROW: Router(pool, "pres", k=args.k,
                                                                                      costs=costs)}
            for share in args.shares:
                routers[learned_label(share)] = Router(pool, k=args.k, budget=Budget(share=share), costs=costs)
                routers[pres_label(share)] = Router(pool, "pres", k=args.k, budget=Budget(share=share), costs=costs)
            tvec = vectors[test_rows]
            for label, router in routers.items():
                for row, ranking in zip(test_rows, _ranked(router, test, tvec)):
                    hits[label][s, row] = expected_hit(ranking.scores, correct[row])
                    spent[label][s, row] = ranking.cost
            probe = Router(pool, k=args.k, budget=Budget(share=args.cascade_share), costs=costs)
            cheap = tuple(probe.select_many(test[:1], vectors=tvec[:1])[0].choice.details["budget"]["route"])
            cheap_sets.append(list(cheap))
            then = tuple(m for m in rms if m not in cheap)
            learned = None  # the routes' fits, shared by the cascades at every spend
            for spend in args.spends:
                label = cascade_label(spend)
                cascade = Cascade.fit(pool, CascadeOptions(cheap=cheap, then=then, spend=spend), k=args.k,
                                      costs=costs, embedder=embedder, learned=learned)
                learned = cascade.learned
                for row, ranking in zip(test_rows, _cascaded(cascade, test, tvec)):
                    hits[label][s, row] = expected_hit(ranking.scores, correct[row])
                    spent[label][s, row] = ranking.cost
                    escalated[label][s, row] = float(bool(ranking.escalated))
            timing["route"] += time.perf_counter() - t0

    default_cost = float(np.nanmean(spent[DEFAULT]))
    methods = {}
    for label in list(rms) + labels:
        per_problem = np.nanmean(hits[label], axis=0)
        methods[label] = {
            "kind": _kind(label, rms), "accuracy": 100 * float(np.nanmean(hits[label])),
            "se": 100 * float(np.nanstd(per_problem, ddof=1) / np.sqrt(np.isfinite(per_problem).sum())),
            "cost": float(np.nanmean(spent[label])), "share": float(np.nanmean(spent[label])) / default_cost,
            **({"escalated": float(np.nanmean(escalated[label]))} if label in escalated else {}),
        }
    default_accuracy = methods[DEFAULT]["accuracy"]
    at = {}
    for level in LEVELS:
        inside = {k: v for k, v in methods.items() if v["share"] <= level + 1e-9}
        best = max(inside, key=lambda k: inside[k]["accuracy"]) if inside else None
        at[f"{level:.2f}"] = {"level": level, "method": best,
                              "accuracy": inside[best]["accuracy"] if best else None}
    close = {k: v for k, v in methods.items() if v["accuracy"] >= default_accuracy - WITHIN}
    cheapest = min(close, key=lambda k: close[k]["cost"])
    result = {
        "data": "rewardmath_rm_scores", "problems": n, "candidates": int(candidates.max()), "rms": list(rms),
        "folds": args.folds, "seeds": seeds, "k": args.k, "unit": COST_UNIT, "shares": args.shares,
        "spends": args.spends, "cascade_share": args.cascade_share, "cascade_cheap": cheap_sets,
        "oracle": 100 * oracle, "random": 100 * random, "default_cost": default_cost, "methods": methods,
        "at": at, "within": WITHIN, "cheapest_within": {"method": cheapest, **close[cheapest]},
        "frontier": _frontier(methods), "timing_s": {k: round(v, 1) for k, v in timing.items()},
        "total_s": round(time.perf_counter() - started, 1),
    }
    _print(result)
    return result


def _ranked(router, test, tvec):
    return [router.rank(q, sel) for q, sel in zip(test, router.select_many(test, vectors=tvec))]


def _cascaded(cascade, test, tvec):
    return cascade.route(test)


def _kind(label: str, rms) -> str:
    if label in rms:
        return "single"
    if label.startswith("cascade"):
        return "cascade"
    if label.startswith("PRES"):
        return "pres"
    return "learned"


def _frontier(methods: dict) -> list[str]:
    """The methods no other beats on both accuracy and cost, cheapest first."""
    order = sorted(methods, key=lambda k: (methods[k]["cost"], -methods[k]["accuracy"]))
    out, best = [], -1.0
    for label in order:
        if methods[label]["accuracy"] > best:
            out.append(label)
            best = methods[label]["accuracy"]
    return out


def _print(result: dict) -> None:
    unit = result["unit"]
    print(f"\n{'method':<44} {'best-of-n %':>11} {'SE':>5} {unit + '/query':>14} {'of default':>10}")
    for label, m in sorted(result["methods"].items(), key=lambda kv: kv[1]["cost"]):
        mark = " *" if label in result["frontier"] else ""
        extra = f"  escalated {m['escalated']:.0%}" if "escalated" in m else ""
        print(f"{label:<44} {m['accuracy']:11.1f} {m['se']:5.1f} {m['cost']:14.4g} {m['share']:10.1%}{mark}{extra}")
    print(f"{ORACLE:<44} {result['oracle']:11.1f}\n{RANDOM:<44} {result['random']:11.1f}")
    print("* on the frontier (no other method is both cheaper and more accurate)")
    print(f"\ndefault's cost: {result['default_cost']:.4g} {unit} per query")
    for level in result["at"].values():
        print(f"at {level['level']:.0%} of the default's cost: {level['accuracy']:.1f}% ({level['method']})")
    c = result["cheapest_within"]
    print(f"cheapest route within {result['within']:g} point of the default ({result['methods'][DEFAULT]['accuracy']:.1f}%): "
          f"{c['method']}, {c['accuracy']:.1f}% at {c['share']:.1%} of its cost")
    print(f"total {result['total_s']:.0f}s")


def plot(result: dict, path: Path) -> None:
    """Accuracy against mean cost per query (log scale, as a share of the default's), each method a point."""
    methods = result["methods"]
    colors = {"single": SINGLE, "learned": LEARNED, "pres": PRES, "cascade": OTHER}
    with figure(path, height=4.6) as (_, axes):
        ax = axes[0, 0]
        for kind, marker in (("single", "o"), ("pres", "s"), ("learned", "D"), ("cascade", "^")):
            inside = {k: v for k, v in methods.items() if v["kind"] == kind}
            xs = [100 * v["share"] for v in inside.values()]
            ys = [v["accuracy"] for v in inside.values()]
            label = {"single": "single RMs", "pres": "PRES (budgets, and none)",
                     "learned": "learned selector (budgets, and the default)", "cascade": "cascades"}[kind]
            order = sorted(range(len(xs)), key=xs.__getitem__)
            style = "" if kind == "single" else "-"
            ax.plot([xs[i] for i in order], [ys[i] for i in order], style + marker, color=colors[kind], label=label,
                    alpha=0.8 if kind == "single" else 1.0)
        ax.axhline(result["oracle"], color="black", linestyle=":", linewidth=1, label="per-query oracle")
        ax.axhline(result["random"], color="black", linestyle="--", linewidth=1, label="random pick")
        ax.set_xscale("log")
        ax.set_xlabel("mean cost per query, % of the default's (log scale)")
        ax.set_ylabel(f"best-of-{result['candidates']} accuracy, %")
        ax.set_title(f"RewardMATH, {result['folds']}-fold CV by problem: accuracy against scoring cost")
        ax.legend(loc="lower right")


if __name__ == "__main__":
    main()
