"""Per-query RM selection: best-of-n accuracy under cross-validation by problem, and select() latency.

A. Accuracy. Each data set's questions are split into `--folds` folds by a seeded permutation of
   the questions (never of answers), once per `--seeds` seed (a "fold deal"; default three). For each fold a question pool is built from the training
   questions only (`morkit.question_pool.pool.build_pool`; every question is embedded once with
   all-MiniLM-L6-v2 and looked up by text, so folds do not re-embed) and each held-out question is
   answered by:
     - every single RM (the same on every fold),
     - "best single (chosen on train)": the single RM with the highest mean best-of-n on the fold's pool,
     - "PRES singles" / "PRES (paper, with combinations)" / "PRES top-1 criterion":
       Router(pool, "pres", singles_only=True) / Router(pool, "pres") / Router(pool, "pres-top1"),
       with --k neighbours, on a z-score pool (morkit's default) and on a raw pool (the paper's setting),
       under each --pres-neighbours reading of the paper's "top-k questions" ("all": the k nearest pool
       questions; "valid": the k nearest with a correct and a wrong answer; a reading other than the default
       is named in the row's label), with each pair of readings compared per question (paired SE),
     - "morkit default": Router(pool), the learned selector (morkit.selection.learned: its inner CV on the
       fold's pool, repeated over three fold deals, picks among its settings, their blend, PRES and every single
       RM), and "stacker": the previous default,
     - "learned: <learner> [<features>]": the learned selector restricted to one learner and feature set
       (its inner CV still picks the parameters; no single RMs, PRES or margin rule), the "+local" ones
       reading each query's nearest pool questions, and the blend of those six, always,
     - "per-query oracle": per question, the best single RM's hit (an upper bound for picking one RM).
   --pres-only leaves out the learned rows (the default, the stacker, the learner restrictions).
   A method's hit on a question is its EXPECTED best-of-n correctness: the share of correct answers
   among the candidates tied for its top score (never the first by position). Scores come from
   Router.select_many + Router.rank (Ranking.scores). Reported: mean over all questions
   and deals (each question is held out once per deal), the sd of the per-fold means over folds x deals and
   of the deals' means, the SE of the mean (over the questions' means across deals), the same mean over "mixed"
   questions
   only (both a correct and a wrong answer: the only ones where methods can differ), points vs the best
   single chosen on train, and on how many questions a method beats / loses to it.

   Data: rewardmath_rm_scores (383 MATH problems x 10 answers, one correct, cached scores of 22 RMs);
   humaneval_davinci_samples (127 tasks x the first --humaneval-per-task completions, labelled by the data
   set's own pass/fail, scored by --humaneval-rms: minilm-probe and smollm2-orm, neither trained on code);
   qwen25_math_rm8 (70 MATH problems x 8 answers; cached Qwen2.5-Math-RM-72B + math-consensus +
   minilm-probe) and gsm8k_model_solutions (1000 x 4; minilm-probe + math-consensus). minilm-probe and
   math-consensus are computed with morkit.reward_models.scoring.score_queries through the score cache
   (minilm-probe on ~2800 GSM8K pairs takes a few CPU minutes the first time; math-consensus is never
   cached and is recomputed each run). The packaged minilm-probe head was trained on a seeded 75% of
   gsm8k_model_solutions:400 + ALL 70 qwen25_math_rm8 problems (its own metadata and the README; "the
   first 200 / first 30" is smollm2-orm's training data, not minilm-probe's). The split is recomputed
   from the head's metadata and its 352 training questions are dropped (--keep-head-train keeps them);
   dropping leaves 703 GSM8K and only 15 Qwen questions (--gsm8k-range / --qwen-range narrow further;
   the brief's original setting is --keep-head-train --qwen-range 30:70 --gsm8k-range 200:1000).

   Mixed domains (--datasets mixed): gsm8k_model_solutions --mixed-gsm8k-range (default 400:600, held out from
   both packaged heads) + all 127 humaneval_davinci_samples tasks x the first --mixed-per-task (6) completions,
   scored by --mixed-rms (math-consensus, code-tests, minilm-probe, smollm2-orm). An RM that does not apply to
   a domain (code-tests on math, math-consensus on code) leaves its scores missing there; a single RM picks at
   random where it has no score. Added rows: "best single per domain (chosen on train)", the manual choice
   the paper argues against (per fold and domain, the single RM best on that domain's training questions), each
   method's accuracy by domain, and the default and PRES against the manual choice with a paired SE.

B. Speed. select() latency per query, one query at a time, EXCLUDING embedding (vectors are given),
   at a pool of --speed-questions x --speed-ensembles: a real rewardmath pool REPLICATED (copies get
   suffixed ids and the real embedding plus gaussian noise, re-normalised; exact flat FAISS index) with
   its first ensembles kept. Timed: PRES (k=--k), the default learned selector after its one-time fit (fit time
   shown apart) and a plain numpy PRES (brute-force emb @ v, argpartition top-k, nansum of sim-weighted
   PRR, argmax), whose pick must equal morkit's on every timed query. Each is timed under every
   --threads limit (threadpoolctl over FAISS's OpenMP and BLAS; 0 = as loaded): on a busy machine
   FAISS's default of one thread per core makes a single-query search an order of magnitude slower.

C. Written on request: --json (every method's figures per data set, the best single RM each fold chose, the fit
   or fallback the default used for how many test queries, the reliability bins), --plot (held-out
   accuracy per method, the sd over folds x deals as error bars; bench/selection_figures.py) and --reliability
   (the default's calibrated confidence on the held-out questions against their accuracy, per confidence bin,
   beside the diagram its fits drew from their own out-of-fold picks on their pools).

    .venv/bin/python bench/selection.py [--datasets rewardmath qwen gsm8k humaneval mixed] [--folds 5] [--k 100]
                                        [--pres-neighbours all valid] [--pres-only]
                                        [--seeds 0 1 2] [--no-learner-rows] [--no-speed | --speed-only]
                                        [--keep-head-train] [--plot docs/figures/selection_results.svg]
                                        [--reliability docs/figures/reliability.svg] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from plotting import figure_path, write_json  # noqa: E402 (beside this script)
from selection_data import DATASETS, Dataset, LookupEmbedder, load_dataset  # noqa: E402 (beside this script)
from selection_speed import run_speed  # noqa: E402

DEFAULT_LABEL = "morkit default (learned) [zscore]"
LEARNER_ROWS = (  # (label, settings of morkit.selection.learned.SETTINGS it may choose between)
    ("learned: logit [scores] (CV penalty)", ("logit", "scores")),
    ("learned: logit [full] (CV penalty)", ("logit", "full")),
    ("learned: lambdarank [full] (CV params)", ("lambdarank", "full")),
    ("learned: logit [scores+local] (CV penalty)", ("logit", "scores+local")),
    ("learned: logit [full+local] (CV penalty)", ("logit", "full+local")),
    ("learned: lambdarank [full+local]", ("lambdarank", "full+local")),
)
BLEND_ROW = "learned: blend of the six above (always)"
BEST_TRAIN = "best single (chosen on train)"
ORACLE = "per-query oracle (best single per question)"
RANDOM = "random pick (expected)"
PER_DOMAIN = "best single per domain (chosen on train)"
PRES_METHODS = (  # (label, selection method, singles_only)
    ("PRES singles", "pres", True),
    ("PRES (paper, with combinations)", "pres", False),
    ("PRES top-1 criterion", "pres-top1", False),
)
NORMALIZERS = ("zscore", "raw")


def pres_label(label: str, norm: str, neighbourhood: str) -> str:
    """A PRES row's label: the default neighbourhood unnamed, as in the committed figures."""
    from morkit.selection.methods import DEFAULT_NEIGHBOURHOOD

    if neighbourhood == DEFAULT_NEIGHBOURHOOD:
        return f"{label} [{norm}]"
    return f"{label} [{norm}, {neighbourhood} neighbours]"


# ----------------------------------------------------------------------------------------- accuracy
def expected_hit(scores, correct) -> float:
    from morkit.question_pool.prr import best_of_n_hit

    return best_of_n_hit(scores, correct)


def single_hits(queries, rm_names, reduction: str = "min"):
    """(Q, R) expected best-of-n hit of every single RM on every question (NaN if a score is missing)."""
    import numpy as np

    from morkit.selection.mor import member_matrix

    out = np.full((len(queries), len(rm_names)), np.nan)
    for i, q in enumerate(queries):
        m = member_matrix(q, rm_names, reduction)
        correct = [bool(c.correct) for c in q.candidates]
        for r in range(len(rm_names)):
            if not np.isnan(m[:, r]).any():
                out[i, r] = expected_hit(m[:, r], correct)
    return out


def learner_rows(pool, test, tvec, k) -> dict:
    """Expected best-of-n of each LEARNER_ROWS restriction of the learned selector on the fold's test questions:
    fitted on the fold's pool with its own inner CV over the learner's parameters and nothing else (no single-RM
    baselines, no PRES, no margin rule), routed like the default (Router, so "local" features read each test
    query's neighbours); and the blend of all of them."""
    from dataclasses import replace

    import numpy as np

    from morkit.selection.learned import SETTINGS, TooFewMixed, blended, fit_learned
    from morkit.selection.router import Router

    width = max(len(q.candidates) for q in test)
    valid = np.array([[i < len(q.candidates) for i in range(width)] for q in test])
    correct = np.array([[i < len(q.candidates) and bool(q.candidates[i].correct) for i in range(width)]
                        for q in test])

    def padded(rows):
        return np.array([list(r) + [np.nan] * (width - len(r)) for r in rows])

    def expected(scores):
        return np.array([expected_hit(r[v], c[v]) for r, v, c in zip(scores, valid, correct)])

    out, parts = {}, []
    for label, (learner, features) in LEARNER_ROWS:
        grid = [s for s in SETTINGS if (s.learner, s.features) == (learner, features)]
        try:
            fit = fit_learned(pool, settings=grid, baselines=False)
        except TooFewMixed:
            continue
        router = Router(replace(pool, meta={**pool.meta, "learned": fit.to_json()}), k=k)
        scores = padded(router.rank(q, sel).scores for q, sel in
                        zip(test, router.select_many(test, vectors=tvec)))
        out[label] = expected(scores)
        parts.append(scores)
    if len(parts) == len(LEARNER_ROWS):
        out[BLEND_ROW] = expected(blended(parts, valid))
    return out


def run_accuracy(ds: Dataset, args, embedder) -> dict:
    """Every method's held-out accuracy on one data set, printed as tables; returns the numbers (`--json`)."""
    import numpy as np

    from morkit.question_pool.pool import PoolConfig, build_pool
    from morkit.selection import confidence as conf
    from morkit.selection.learned import MIN_MIXED
    from morkit.selection.router import Router

    queries, rms = ds.queries, ds.rm_names
    n = len(queries)
    ds.announce(f"{args.folds}-fold CV by problem (seeds {args.seeds}), k={args.k}")
    correct = [np.array([bool(c.correct) for c in q.candidates]) for q in queries]
    mixed = np.array([c.any() and not c.all() for c in correct])
    n_all_right = sum(c.all() for c in correct)
    print(f"mixed questions (a right and a wrong answer): {mixed.sum()} of {n}; all right {n_all_right}, "
          f"all wrong {n - mixed.sum() - n_all_right}. Only mixed questions can differ between methods.")

    started = time.perf_counter()
    qvec = embedder.encode([q.question for q in queries])
    print(f"embedded the {len({q.question for q in queries})} distinct question texts once "
          f"({embedder.name}, {time.perf_counter() - started:.1f}s); folds look them up")
    seeds = list(args.seeds)
    tile = lambda v: np.tile(v, (len(seeds), 1))  # noqa: E731 - the same on every deal
    hits: dict[str, np.ndarray] = {RANDOM: tile(np.array([c.mean() for c in correct]))}
    singles = single_hits(queries, rms)
    hits[ORACLE] = tile(np.nanmax(singles, axis=1))  # among the RMs that score the question
    singles = np.where(np.isnan(singles), hits[RANDOM][0][:, None], singles)  # no score: a random pick
    for r, name in enumerate(rms):
        hits[name] = tile(singles[:, r])
    domain_of = np.array([q.domain or "unknown" for q in queries], dtype=object)
    domains = sorted(set(domain_of))
    labels = [BEST_TRAIN] + ([PER_DOMAIN] if len(domains) > 1 else [])
    neighbourhoods = list(dict.fromkeys(args.pres_neighbours))
    labels += [pres_label(label, norm, neighbourhood) for label, _, _ in PRES_METHODS for norm in NORMALIZERS
               for neighbourhood in neighbourhoods]
    if not args.pres_only:
        labels += [DEFAULT_LABEL, "stacker (previous default) [zscore]"]
    if len(domains) == 1 and not args.pres_only:  # one fit over every RM: a mixed-domain pool has none all score
        labels += [label for label, _ in LEARNER_ROWS] + [BLEND_ROW]
    for label in labels:
        hits[label] = np.full((len(seeds), n), np.nan)

    confidence = np.full((len(seeds), n), np.nan)  # the default's calibrated confidence on held-out questions
    inner = []  # the default fits' own reliability diagrams (cross-fitted on the pool, out of fold)
    fold_of = np.empty((len(seeds), n), dtype=int)
    chosen_single, per_domain_picks, stacker_info, pres_picks = [], [], [], {label: [] for label in labels}
    timing = {"build": 0.0, "select": 0.0}
    for s, seed in enumerate(seeds):
        fold_of[s, np.random.default_rng(seed).permutation(n)] = np.arange(n) % args.folds
        for f in range(args.folds):
            train_rows, test_rows = np.flatnonzero(fold_of[s] != f), np.flatnonzero(fold_of[s] == f)
            train, test = [queries[i] for i in train_rows], [queries[i] for i in test_rows]
            tvec = qvec[test_rows]
            for norm in NORMALIZERS:
                t0 = time.perf_counter()
                pool = build_pool(train, embedder, rm_names=rms, config=PoolConfig(normalizer=norm))
                timing["build"] += time.perf_counter() - t0
                if norm == "zscore":
                    best = int(np.argmax(singles[train_rows].mean(axis=0)))
                    chosen_single.append(rms[best])
                    hits[BEST_TRAIN][s, test_rows] = singles[test_rows, best]
                    if PER_DOMAIN in hits:  # the manual choice: per domain, the best single RM on its training set
                        picks = {}
                        for domain in domains:
                            inside = train_rows[domain_of[train_rows] == domain]
                            pick = int(np.argmax(singles[inside].mean(axis=0))) if len(inside) else best
                            picks[domain] = rms[pick]
                            where = test_rows[domain_of[test_rows] == domain]
                            hits[PER_DOMAIN][s, where] = singles[where, pick]
                        per_domain_picks.append(picks)
                methods = [(pres_label(label, norm, neighbourhood),
                             Router(pool, method, k=args.k, singles_only=singles_only, neighbourhood=neighbourhood))
                           for label, method, singles_only in PRES_METHODS for neighbourhood in neighbourhoods]
                if norm == "zscore" and not args.pres_only:
                    methods.append((DEFAULT_LABEL, Router(pool, k=args.k)))
                    methods.append(("stacker (previous default) [zscore]", Router(pool, "stacker", k=args.k)))
                    t0 = time.perf_counter()
                    if len(domains) == 1 and not args.no_learner_rows:
                        for label, values in learner_rows(pool, test, tvec, args.k).items():
                            hits[label][s, test_rows] = values
                    timing["select"] += time.perf_counter() - t0
                for label, router in methods:
                    t0 = time.perf_counter()
                    selections = router.select_many(test, vectors=tvec)
                    for row, query, selection in zip(test_rows, test, selections):
                        ranking = router.rank(query, selection)
                        hits[label][s, row] = expected_hit(ranking.scores, correct[row])
                        pres_picks[label].append(selection.choice.ensemble.name)
                        if label == DEFAULT_LABEL:
                            confidence[s, row] = ranking.confidence
                    timing["select"] += time.perf_counter() - t0
                    if label != DEFAULT_LABEL:
                        continue
                    fit = router.method.fit_for(frozenset(rms)) if len(domains) == 1 else None
                    if fit is not None and fit.report.get("reliability"):
                        inner.append(fit.report["reliability"])
                    for query, selection in zip(test, selections):  # which fit (or fallback) each query got
                        details = selection.choice.details
                        stacker_info.append((f"{query.domain}: " if len(domains) > 1 else "")
                                            + (details.get("learner") or details.get("fallback")))

    ref = hits[BEST_TRAIN]
    figures = {label: method_figures(values, fold_of, mixed, None if label == BEST_TRAIN else ref)
               for label, values in hits.items()}

    def row(label: str) -> str:
        st = figures[label]
        if st is None:
            return f"{label:<52} n/a: fewer than {MIN_MIXED} mixed pool questions to learn from"
        text = (f"{label:<52} {st['mean']:6.2f} {st['se']:6.2f} {st['sd_folds']:6.2f} {st['sd_seeds']:6.2f} "
                f"{st['mixed']:8.2f}")
        if "vs_best" not in st:  # the best single itself
            return text + f" {'':>8} {'':>7}"
        return text + f" {st['vs_best']:+8.2f} {st['wins']:>3}/{st['losses']:<3}"

    header = (f"{'method':<52} {'acc%':>6} {'SE%':>6} {'sd%':>6} {'sd%':>6} {'mixed%':>8} {'d pts':>8} {'+/- q':>7}\n"
              f"{'':<52} {'':>6} {'':>6} {'folds':>6} {'seeds':>6} {f'(n={mixed.sum()})':>8} {'vs best':>8} "
              f"{'vs best':>7}")
    print(f"\nmean over {len(seeds)} fold deal(s) (seeds {seeds}); sd over folds x deals, and of the deals' means")
    print("\nsingle RMs (sorted by accuracy; identical on every fold):")
    print(header)
    for name in sorted(rms, key=lambda nm: -np.nanmean(hits[nm])):
        print(row(name))
    print(row(RANDOM))
    print("\nselection (pool built from the training folds only):")
    print(header)
    for label in labels:
        print(row(label))
    print(row(ORACLE))
    se = np.nanmean(ref, axis=0).std(ddof=1) / np.sqrt(n)
    print(f"best single (chosen on train): SE of its mean {se * 100:.2f} points")
    paired = {}  # the neighbourhoods side by side, paired per question
    for label, _, _ in PRES_METHODS:
        for norm in NORMALIZERS:
            for other in neighbourhoods[1:]:
                base, alt = pres_label(label, norm, neighbourhoods[0]), pres_label(label, norm, other)
                diff = np.nanmean(hits[alt] - hits[base], axis=0)
                paired[alt] = {"versus": base, "points": float(diff.mean() * 100),
                               "se": float(diff.std(ddof=1) / np.sqrt(n) * 100),
                               "better": int((diff > 1e-12).sum()), "worse": int((diff < -1e-12).sum())}
                print(f"{alt} - {base}: {diff.mean() * 100:+.2f} points (paired SE "
                      f"{diff.std(ddof=1) / np.sqrt(n) * 100:.2f}), better on {(diff > 1e-12).sum()} questions, "
                      f"worse on {(diff < -1e-12).sum()}")
    if PER_DOMAIN in hits and not args.pres_only:
        for label in (DEFAULT_LABEL, "PRES (paper, with combinations) [zscore]"):
            diff = np.nanmean(hits[label] - hits[PER_DOMAIN], axis=0)
            print(f"{label} vs {PER_DOMAIN}: {diff.mean() * 100:+.2f} points (paired SE "
                  f"{diff.std(ddof=1) / np.sqrt(n) * 100:.2f}), better on {(diff > 1e-12).sum()} questions, "
                  f"worse on {(diff < -1e-12).sum()}")
    if mixed.sum() < 50:
        print(f"NOTE: only {mixed.sum()} mixed questions; differences here are a handful of questions, not a finding")
    print(f"\nbest single chosen on train per fold: {chosen_single}")
    if PER_DOMAIN in hits:
        print(f"best single per domain chosen on train, per fold: {per_domain_picks}")
        shown = [name for name in (*rms, *labels, ORACLE) if name in hits]
        print("\nby domain (accuracy %; questions, mixed): " + "; ".join(
            f"{d} ({(domain_of == d).sum()}, {(mixed & (domain_of == d)).sum()})" for d in domains))
        for name in shown:
            print(f"  {name:<52}" + "".join(f" {d} {np.nanmean(hits[name][:, domain_of == d]) * 100:6.2f}"
                                            for d in domains))
    for label in labels:
        picks = pres_picks[label]
        if not picks:
            continue
        counts = sorted(((picks.count(p), p) for p in set(picks)), reverse=True)
        shown = ", ".join(f"{p} x{c}" for c, p in counts[:4])
        print(f"picks of {label}: {len(set(picks))} distinct; top: {shown}")
    counts = sorted(((stacker_info.count(p), p) for p in set(stacker_info)), reverse=True)
    print("learned default's fits, by the test queries that used them:")
    for c, p in counts:
        print(f"  x{c}: {p}")
    print(f"time: pool builds {timing['build']:.1f}s, select+rank {timing['select']:.1f}s (all folds and deals)")
    held_out = ~np.isnan(confidence)
    reliability = None
    if not args.pres_only:
        reliability = {"held_out": conf.reliability(confidence[held_out], hits[DEFAULT_LABEL][held_out]),
                       "pool_out_of_fold": merged_reliability(inner) if inner else None}
    if reliability is not None:
        print(f"{DEFAULT_LABEL} confidence on held-out questions: ECE {reliability['held_out']['ece']:.3f} over "
              f"{reliability['held_out']['picks']} picks" + (f"; its fits' own out-of-fold diagrams (pool "
                                                             f"questions): ECE "
                                                             f"{reliability['pool_out_of_fold']['ece']:.3f}"
                                                             if inner else ""))
    return {"name": ds.name, "questions": n, "mixed": int(mixed.sum()), "rms": list(rms), "folds": args.folds,
            "seeds": seeds, "k": args.k, "readings": neighbourhoods, "paired": paired,
            "singles": sorted(rms, key=lambda nm: -figures[nm]["mean"]),
            "selection": labels, "methods": figures, "best_single_se": float(se * 100),
            "chosen_single": chosen_single, "default_fits": {p: c for c, p in counts}, "reliability": reliability,
            "roles": {"default": DEFAULT_LABEL, "best_single": BEST_TRAIN, "random": RANDOM, "oracle": ORACLE,
                      **({"per_domain": PER_DOMAIN} if PER_DOMAIN in hits else {})}}


def method_figures(values, fold_of, mixed, ref) -> dict | None:
    """A method's (deals, questions) hits as percentages: mean, sd of the per-fold means over folds x deals and
    of the deals' means, mean on mixed questions; against `ref` its points and questions won / lost."""
    import numpy as np

    if np.isnan(values).all():
        return None
    deals, folds = len(values), int(fold_of.max()) + 1
    per_fold = [np.nanmean(values[s][fold_of[s] == f]) for s in range(deals) for f in range(folds)]
    by_seed = np.nanmean(values, axis=1)
    per_question = np.nanmean(values, axis=0)
    out = {"mean": float(np.nanmean(values) * 100), "sd_folds": float(np.std(per_fold, ddof=1) * 100),
           "se": float(np.nanstd(per_question, ddof=1) / np.sqrt(np.isfinite(per_question).sum()) * 100),
           "sd_seeds": float(np.std(by_seed, ddof=1) * 100) if deals > 1 else 0.0,
           "mixed": float(np.nanmean(values[:, mixed]) * 100) if mixed.any() else float("nan")}
    if ref is not None:
        per_question, ref_question = np.nanmean(values, axis=0), np.nanmean(ref, axis=0)
        out.update(vs_best=out["mean"] - float(np.nanmean(ref) * 100),
                   wins=int((per_question > ref_question + 1e-12).sum()),
                   losses=int((per_question < ref_question - 1e-12).sum()))
    return out


def merged_reliability(diagrams: list[dict]) -> dict:
    """Several reliability diagrams over the same bins as one: counts added, means weighted by them."""
    from morkit.selection.confidence import calibration_error

    bins: dict[float, dict] = {}
    for diagram in diagrams:
        for b in diagram["bins"]:
            into = bins.setdefault(b["low"], {"low": b["low"], "high": b["high"], "count": 0, "confidence": 0.0,
                                              "accuracy": 0.0})
            into["count"] += b["count"]
            into["confidence"] += b["confidence"] * b["count"]
            into["accuracy"] += b["accuracy"] * b["count"]
    rows = [{**b, "confidence": b["confidence"] / b["count"], "accuracy": b["accuracy"] / b["count"]}
            for _, b in sorted(bins.items())]
    picks = sum(b["count"] for b in rows)
    return {"bins": rows, "ece": calibration_error(rows, picks), "picks": picks, "fits": len(diagrams)}


def add_data_args(parser: argparse.ArgumentParser) -> None:
    """The flags selection_data.load_dataset reads (but --keep-head-train), shared with bench/selection_curve.py."""
    parser.add_argument("--qwen-range", default="0:70",
                        help="START:STOP of qwen25_math_rm8 questions (before dropping head-training ones)")
    parser.add_argument("--gsm8k-range", default="0:1000",
                        help="START:STOP of gsm8k_model_solutions questions (before dropping head-training ones)")
    parser.add_argument("--humaneval-per-task", type=int, default=8,
                        help="completions per HumanEval task (the first N of the 200)")
    parser.add_argument("--humaneval-rms", nargs="+", default=["minilm-probe", "smollm2-orm"],
                        help="RMs scoring the HumanEval completions (code-tests would be the label itself)")
    parser.add_argument("--mixed-gsm8k-range", default="400:600",
                        help="START:STOP of gsm8k_model_solutions questions in the mixed set (before dropping the "
                             "heads' training questions; 400 on are held out from both)")
    parser.add_argument("--mixed-per-task", type=int, default=6, help="completions per HumanEval task in the mixed set")
    parser.add_argument("--mixed-rms", nargs="+", help="RMs of the mixed set",
                        default=["math-consensus", "code-tests", "minilm-probe", "smollm2-orm"])
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--datasets", nargs="*", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--k", type=int, default=100, help="pool neighbours per query for PRES")
    from morkit.selection.methods import DEFAULT_NEIGHBOURHOOD, NEIGHBOURHOODS

    parser.add_argument("--pres-neighbours", nargs="+", choices=NEIGHBOURHOODS, default=[DEFAULT_NEIGHBOURHOOD],
                        help="PRES's neighbourhoods to run, side by side: 'all' (the k nearest pool "
                             "questions), 'valid' (the k nearest with a correct and a wrong answer)")
    parser.add_argument("--pres-only", action="store_true",
                        help="PRES rows only: leave out the learned default, the stacker and the learner rows")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="one fold deal per seed; figures are means over them, with the spread")
    parser.add_argument("--no-learner-rows", action="store_true",
                        help="skip the rows of the learned selector restricted to one learner (faster)")
    add_data_args(parser)
    parser.add_argument("--keep-head-train", action="store_true",
                        help="keep questions the packaged minilm-probe head was trained on")
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--no-speed", action="store_true", help="accuracy only")
    speed.add_argument("--speed-only", action="store_true", help="speed only")
    parser.add_argument("--speed-questions", type=int, default=10_000)
    parser.add_argument("--speed-ensembles", type=int, default=1_000)
    parser.add_argument("--speed-queries", type=int, default=1_000)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 0],
                        help="time under each BLAS/OpenMP thread limit (threadpoolctl); 0 = as the libraries load")
    parser.add_argument("--noise", type=float, default=0.01, help="sd of the gaussian jitter on replicated embeddings")
    parser.add_argument("--plot", type=figure_path, help="write the accuracy figure (.svg or .png)")
    parser.add_argument("--reliability", type=figure_path,
                        help="write the default's confidence reliability diagram on held-out questions")
    parser.add_argument("--json", type=Path, help="write the accuracy figures (and reliability bins) as JSON")
    args = parser.parse_args()
    if args.speed_only and (args.plot or args.reliability):
        parser.error("--plot and --reliability draw the accuracy part: drop --speed-only")
    args.seed = args.seeds[0]  # the speed pool's

    import logging

    logging.basicConfig(level=logging.ERROR)
    from morkit.question_pool.embed import load_embedder

    started = time.perf_counter()
    embedder = LookupEmbedder(load_embedder())
    results = []
    if not args.speed_only:
        for key in args.datasets:
            results.append(run_accuracy(load_dataset(key, args), args, embedder))
    if not args.no_speed:
        run_speed(args, embedder)
    total = time.perf_counter() - started
    if args.json:
        write_json(args.json, {"datasets": results, "total_s": round(total, 1)})
    if results and (args.plot or args.reliability):
        from selection_figures import plot_accuracy, plot_reliability

        if args.plot:
            plot_accuracy(results, args.plot)
        if args.reliability:
            plot_reliability(results, args.reliability)
    print(f"\ntotal {total:.0f}s" + "".join(f"; wrote {p}" for p in (args.json, args.plot, args.reliability) if p))


if __name__ == "__main__":
    main()
