"""Per-query RM selection: best-of-n accuracy under cross-validation by problem, and select() latency.

A. Accuracy. Each data set's questions are split into `--folds` folds by a seeded permutation of
   the questions (never of answers). For each fold a question pool is built from the training
   questions only (`morkit.question_pool.pool.build_pool`; every question is embedded once with
   all-MiniLM-L6-v2 and looked up by text, so folds do not re-embed) and each held-out question is
   answered by:
     - every single RM (the same on every fold),
     - "best single (chosen on train)": the single RM with the highest mean best-of-n on the fold's pool,
     - "PRES singles" / "PRES (paper, with combinations)" / "PRES top-1 criterion":
       Selector(pool, "pres", singles_only=True) / Selector(pool, "pres") / Selector(pool, "pres-top1"),
       with --k neighbours, on a z-score pool (morkit's default) and on a raw pool (the paper's setting),
     - "morkit default": Selector(pool), the learned selector (morkit.selection.learned: learner and features
       chosen by an inner CV on the fold's pool), and "stacker": the previous default,
     - "learned: <learner> [<features>]": the learned selector restricted to one learner and feature set
       (its inner CV still picks the parameters), and the blend of those three, always (the default
       chooses between these and every single setting by its inner CV),
     - "per-query oracle": per question, the best single RM's hit (an upper bound for picking one RM).
   A method's hit on a question is its EXPECTED best-of-n correctness: the share of correct answers
   among the candidates tied for its top score (never the first by position). Scores come from
   Selector.select_many + Selector.rank_selected (Ranking.scores). Reported: mean over all questions
   (each is held out exactly once), the sd of the per-fold means, the same mean over "mixed" questions
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

B. Speed. select() latency per query, one query at a time, EXCLUDING embedding (vectors are given),
   at a pool of --speed-questions x --speed-ensembles: a real rewardmath pool REPLICATED (copies get
   suffixed ids and the real embedding plus gaussian noise, re-normalised; exact flat FAISS index) with
   its first ensembles kept. Timed: PRES (k=--k), the default learned selector after its one-time fit (fit time
   shown apart) and a plain numpy PRES (brute-force emb @ v, argpartition top-k, nansum of sim-weighted
   PRR, argmax), whose pick must equal morkit's on every timed query. Each is timed under every
   --threads limit (threadpoolctl over FAISS's OpenMP and BLAS; 0 = as loaded): on a busy machine
   FAISS's default of one thread per core makes a single-query search an order of magnitude slower.

    .venv/bin/python bench/selection.py [--datasets rewardmath qwen gsm8k] [--folds 5] [--k 100]
                                        [--no-speed | --speed-only] [--keep-head-train]
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, field

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATASETS = ("rewardmath", "qwen", "gsm8k", "humaneval")
DEFAULT_LABEL = "morkit default (learned) [zscore]"
LEARNER_ROWS = (  # (label, settings of morkit.selection.learned.SETTINGS it may choose between)
    ("learned: logit [scores] (CV penalty)", ("logit", "scores")),
    ("learned: logit [full] (CV penalty)", ("logit", "full")),
    ("learned: lambdarank [full] (CV params)", ("lambdarank", "full")),
)
BLEND_ROW = "learned: blend of the three above (always)"
BEST_TRAIN = "best single (chosen on train)"
ORACLE = "per-query oracle (best single per question)"
RANDOM = "random pick (expected)"
PRES_METHODS = (  # (label, selector method, singles_only)
    ("PRES singles", "pres", True),
    ("PRES (paper, with combinations)", "pres", False),
    ("PRES top-1 criterion", "pres-top1", False),
)
NORMALIZERS = ("zscore", "raw")


# --------------------------------------------------------------------------------------------- data
@dataclass
class Dataset:
    name: str
    queries: list
    rm_names: tuple[str, ...]
    notes: list[str] = field(default_factory=list)


class LookupEmbedder:
    """Stands in for the pool's SentenceEmbedder: same name and dim; each text is embedded once per run
    and then looked up, so pools built per fold (and the speed pool) never re-embed."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.name = embedder.name
        self.dim = embedder.dim
        self.table: dict = {}

    def encode(self, texts, *, batch_size: int = 64, progress: bool = False):
        import numpy as np

        todo = sorted({t for t in texts if t not in self.table})
        if todo:
            self.table.update(zip(todo, self.embedder.encode(todo, batch_size=batch_size, progress=progress)))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.ascontiguousarray(np.stack([self.table[t] for t in texts]), dtype=np.float32)


def head_training_ids(head: str = "minilm-probe") -> tuple[set[str], str]:
    """Ids of the questions a packaged head was fitted on, recomputed from its own metadata."""
    from morkit.reward_models.heads import load_packaged_head
    from morkit.services.train_heads import load_specs, split_by_question

    info = load_packaged_head(head).info
    split = split_by_question(load_specs(info["data"]), info["test_fraction"], info["seed"])
    if len(split.train) != info["train_questions"]:
        raise RuntimeError(f"recomputed {len(split.train)} training questions for {head}, "
                           f"its metadata says {info['train_questions']}")
    where = f"{head} head: seeded {1 - info['test_fraction']:.0%} of {' + '.join(info['data'])}"
    return {q.id for q in split.train}, where


def _score(queries, rm_names):
    from morkit.reward_models.cache import ScoreCache
    from morkit.reward_models.options import ScoringOptions
    from morkit.services.scoring import default_cache_path, score

    cache = ScoreCache(default_cache_path())
    started = time.perf_counter()
    out = score(queries, rm_names, options=ScoringOptions(progress=True), cache=cache)
    return out, time.perf_counter() - started, cache


def _parse_range(text: str) -> tuple[int, int]:
    start, _, stop = text.partition(":")
    return int(start or 0), int(stop) if stop else 10**9


def load_dataset(key: str, args) -> Dataset:
    from morkit.core import settings
    from morkit.data import datasets
    from morkit.reward_models.table import table_names

    data_dir = settings.data_dir(args.data_dir)
    if key == "rewardmath":
        queries = datasets.rewardmath_rm_scores(data_dir)
        rms = tuple(table_names(queries))
        full = sum(all(name in c.scores for c in q.candidates) for q in queries for name in rms)
        sizes = sorted({len(q.candidates) for q in queries})
        notes = [f"{len(rms)} RMs with cached scores; (question, RM) pairs where the RM scores every answer: "
                 f"{full} of {len(queries) * len(rms)} -> "
                 + ("every RM scores every problem" if full == len(queries) * len(rms) else "SOME MISSING"),
                 f"answers per problem: {sizes}; correct per problem: "
                 f"{sorted({sum(bool(c.correct) for c in q.candidates) for q in queries})}"]
        return Dataset("rewardmath_rm_scores", queries, rms, notes)

    if key == "humaneval":
        per_task = args.humaneval_per_task
        loaded = datasets.humaneval_davinci(data_dir, per_task=per_task)
        rms = tuple(args.humaneval_rms)
        chosen, seconds, cache = _score(loaded, rms)
        notes = [f"{len(loaded)} HumanEval tasks x the first {per_task} of 200 code-davinci-002 completions (labels: "
                 "the data set's own pass/fail); RMs " + ", ".join(rms) + " (none was trained on code)",
                 f"scored in {seconds:.1f}s (cache {cache.path}: {cache.hits} hits, {cache.misses} misses)"]
        return Dataset("humaneval_davinci_samples", chosen, rms, notes)
    trained, where = head_training_ids("minilm-probe")
    if key == "qwen":
        start, stop = _parse_range(args.qwen_range)
        name, loaded = "qwen25_math_rm8", datasets.qwen25_math_rm8(data_dir)
        rms = ("qwen2.5-math-rm-72b", "math-consensus", "minilm-probe")
    elif key == "gsm8k":
        start, stop = _parse_range(args.gsm8k_range)
        name, loaded = "gsm8k_model_solutions", datasets.gsm8k_model_solutions(data_dir)
        rms = ("minilm-probe", "math-consensus")
    else:
        raise ValueError(key)
    chosen = loaded[start:stop]
    overlap = [q for q in chosen if q.id in trained]
    notes = [f"questions {start}..{min(stop, len(loaded)) - 1} of {len(loaded)}; {len(overlap)} of these "
             f"{len(chosen)} trained the {where}"]
    if args.keep_head_train:
        notes.append("  KEPT (--keep-head-train): minilm-probe scores on them are in-sample")
    else:
        chosen = [q for q in chosen if q.id not in trained]
        notes.append(f"  dropped; {len(chosen)} held-out questions remain (--keep-head-train keeps them)")
    computed = tuple(r for r in rms if r != "qwen2.5-math-rm-72b")
    chosen, seconds, cache = _score(chosen, computed)
    notes.append(f"scored {', '.join(computed)} on {sum(len(q.candidates) for q in chosen)} answers in "
                 f"{seconds:.1f}s (cache {cache.path}: {cache.hits} hits, {cache.misses} misses; "
                 "math-consensus is never cached)")
    return Dataset(name, chosen, rms, notes)


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


def learner_rows(pool, test, rms) -> dict:
    """Expected best-of-n of each LEARNER_ROWS restriction of the learned selector on the fold's test questions:
    fitted (with its own inner CV over the learner's parameters) on the fold's pool, one fit over every RM
    (a test question missing an RM's score reads 0 for its features)."""
    import numpy as np

    from morkit.question_pool.prr import best_of_n_matrix
    from morkit.question_pool.rows import pool_rows
    from morkit.selection.learned import SETTINGS, TooFewMixed, blended, fit_learned

    rows = pool_rows(test, rms, pool.config.reduction, step_rms=pool.step_rms)
    out, parts = {}, []
    for label, (learner, features) in LEARNER_ROWS:
        try:
            fit = fit_learned(pool, settings=[s for s in SETTINGS if (s.learner, s.features) == (learner, features)])
        except TooFewMixed:
            continue
        with np.errstate(all="ignore"):
            scores = fit.scores(rows.scores, rows.steps, rows.valid, rms, pool.step_rms)
        out[label] = best_of_n_matrix(scores[:, :, None], rows.correct, rows.valid)[:, 0]
        parts.append(scores)
    if len(parts) == len(LEARNER_ROWS):
        scores = blended(parts, rows.valid)
        out[BLEND_ROW] = best_of_n_matrix(scores[:, :, None], rows.correct, rows.valid)[:, 0]
    return out


def run_accuracy(ds: Dataset, args, embedder) -> None:
    import numpy as np

    from morkit.question_pool.pool import PoolConfig, build_pool
    from morkit.question_pool.rows import nanmean_columns
    from morkit.selection.learned import MIN_MIXED
    from morkit.selection.selector import Selector

    queries, rms = ds.queries, ds.rm_names
    n = len(queries)
    print(f"\n=== {ds.name}: {n} questions, {len(rms)} RMs, {args.folds}-fold CV by problem (seed {args.seed}), "
          f"k={args.k} ===")
    for note in ds.notes:
        print(note)
    correct = [np.array([bool(c.correct) for c in q.candidates]) for q in queries]
    mixed = np.array([c.any() and not c.all() for c in correct])
    n_all_right = sum(c.all() for c in correct)
    print(f"mixed questions (a right and a wrong answer): {mixed.sum()} of {n}; all right {n_all_right}, "
          f"all wrong {n - mixed.sum() - n_all_right}. Only mixed questions can differ between methods.")

    started = time.perf_counter()
    qvec = embedder.encode([q.question for q in queries])
    print(f"embedded the {len({q.question for q in queries})} distinct question texts once "
          f"({embedder.name}, {time.perf_counter() - started:.1f}s); folds look them up")
    lookup = embedder

    singles = single_hits(queries, rms)
    hits: dict[str, np.ndarray] = {}
    for r, name in enumerate(rms):
        hits[name] = singles[:, r]
    hits[ORACLE] = np.nanmax(singles, axis=1)
    hits[RANDOM] = np.array([c.mean() for c in correct])
    hits[BEST_TRAIN] = np.full(n, np.nan)
    labels = []
    for label, _, _ in PRES_METHODS:
        for norm in NORMALIZERS:
            labels.append(f"{label} [{norm}]")
    labels.append(DEFAULT_LABEL)
    labels.append("stacker (previous default) [zscore]")
    labels += [label for label, _ in LEARNER_ROWS] + [BLEND_ROW]
    for label in labels:
        hits[label] = np.full(n, np.nan)

    fold_of = np.empty(n, dtype=int)
    fold_of[np.random.default_rng(args.seed).permutation(n)] = np.arange(n) % args.folds
    chosen_single, stacker_info, pres_picks = [], [], {label: [] for label in labels}
    timing = {"build": 0.0, "select": 0.0}
    for f in range(args.folds):
        train = [queries[i] for i in np.flatnonzero(fold_of != f)]
        test_rows = np.flatnonzero(fold_of == f)
        test = [queries[i] for i in test_rows]
        tvec = qvec[test_rows]
        for norm in NORMALIZERS:
            t0 = time.perf_counter()
            pool = build_pool(train, lookup, rm_names=rms, config=PoolConfig(normalizer=norm))
            timing["build"] += time.perf_counter() - t0
            if norm == "zscore":
                single_top1 = nanmean_columns(pool.top1[:, : len(rms)])
                best = int(np.nanargmax(single_top1))
                chosen_single.append(rms[best])
                hits[BEST_TRAIN][test_rows] = singles[test_rows, best]
            methods = [(f"{label} [{norm}]", Selector(pool, method, k=args.k, singles_only=singles_only))
                       for label, method, singles_only in PRES_METHODS]
            if norm == "zscore":
                methods.append((DEFAULT_LABEL, Selector(pool, k=args.k)))
                methods.append(("stacker (previous default) [zscore]", Selector(pool, "stacker", k=args.k)))
                t0 = time.perf_counter()
                for label, values in learner_rows(pool, test, rms).items():
                    hits[label][test_rows] = values
                timing["select"] += time.perf_counter() - t0
            for label, selector in methods:
                t0 = time.perf_counter()
                selections = selector.select_many(test, vectors=tvec)
                for row, query, selection in zip(test_rows, test, selections):
                    ranking = selector.rank_selected(query, selection)
                    hits[label][row] = expected_hit(ranking.scores, correct[row])
                    pres_picks[label].append(selection.choice.ensemble.name)
                timing["select"] += time.perf_counter() - t0
                if label == DEFAULT_LABEL:
                    fit = selector.method.fit_for(frozenset(rms))
                    stacker_info.append(f"fold {f}: " + ("PRES fallback (too few mixed questions)" if fit is None else
                                        f"CV chose {fit.label}, CV best-of-n {fit.cv_best_of_n:.3f}"))

    def row(label: str, values: np.ndarray, ref: np.ndarray | None) -> str:
        if np.isnan(values).all():
            return f"{label:<52} n/a: fewer than {MIN_MIXED} mixed pool questions to learn from"
        folds = [np.nanmean(values[fold_of == f]) for f in range(args.folds)]
        mean = np.nanmean(values)
        mix = np.nanmean(values[mixed]) if mixed.any() else float("nan")
        text = f"{label:<52} {mean * 100:6.2f} {np.std(folds, ddof=1) * 100:6.2f} {mix * 100:8.2f}"
        if ref is None:
            return text + f" {'':>8} {'':>7}"
        delta = (mean - np.nanmean(ref)) * 100
        wins, losses = int((values > ref + 1e-12).sum()), int((values < ref - 1e-12).sum())
        return text + f" {delta:+8.2f} {wins:>3}/{losses:<3}"

    ref = hits[BEST_TRAIN]
    header = (f"{'method':<52} {'acc%':>6} {'sd%':>6} {'mixed%':>8} {'d pts':>8} {'+/- q':>7}\n"
              f"{'':<52} {'':>6} {'folds':>6} {f'(n={mixed.sum()})':>8} {'vs best':>8} {'vs best':>7}")
    print("\nsingle RMs (sorted by accuracy; identical on every fold):")
    print(header)
    for name in sorted(rms, key=lambda nm: -np.nanmean(hits[nm])):
        print(row(name, hits[name], ref))
    print(row(RANDOM, hits[RANDOM], ref))
    print("\nselection (pool built from the training folds only):")
    print(header)
    print(row(BEST_TRAIN, ref, None))
    for label in labels:
        print(row(label, hits[label], ref))
    print(row(ORACLE, hits[ORACLE], ref))
    if mixed.sum() < 50:
        print(f"NOTE: only {mixed.sum()} mixed questions; differences here are a handful of questions, not a finding")
    print(f"\nbest single chosen on train per fold: {chosen_single}")
    for label in labels:
        picks = pres_picks[label]
        if not picks:
            continue
        counts = sorted(((picks.count(p), p) for p in set(picks)), reverse=True)
        shown = ", ".join(f"{p} x{c}" for c, p in counts[:4])
        print(f"picks of {label}: {len(set(picks))} distinct; top: {shown}")
    for line in stacker_info:
        print(f"learned default, {line}")
    print(f"time: pool builds {timing['build']:.1f}s, select+rank {timing['select']:.1f}s (all folds)")


# -------------------------------------------------------------------------------------------- speed
def replicated_pool(base, size: int, ensembles: int, noise: float, seed: int):
    """A pool of `size` questions tiled from `base`, embeddings jittered, first `ensembles` columns."""
    from dataclasses import replace

    import numpy as np

    from morkit.question_pool.index import build_index
    from morkit.question_pool.rows import PoolQuestion

    q = len(base)
    take = np.arange(size) % q
    questions = tuple(PoolQuestion(f"{base.questions[i].id} [copy {j // q}]" if j >= q else base.questions[i].id,
                                   base.questions[i].question, base.questions[i].domain,
                                   base.questions[i].n_candidates) for j, i in enumerate(take))
    rng = np.random.default_rng(seed)
    emb = base.embeddings[take] + rng.normal(0.0, noise, (size, base.embeddings.shape[1])).astype(np.float32)
    emb = np.ascontiguousarray(emb / np.linalg.norm(emb, axis=1, keepdims=True), dtype=np.float32)
    index, kind = build_index(emb, base.config.index)
    meta = {**base.meta, "index": {"kind": kind}}
    return replace(base, questions=questions, scores=base.scores[take], correct=base.correct[take],
                   valid=base.valid[take], steps=None if base.steps is None else base.steps[take],
                   ensembles=base.ensembles[:ensembles],
                   prr=np.ascontiguousarray(base.prr[take][:, :ensembles]),
                   top1=np.ascontiguousarray(base.top1[take][:, :ensembles]),
                   embeddings=emb, index=index, meta=meta), kind


def _pct(values) -> str:
    import numpy as np

    a = np.asarray(values) * 1e3
    return f"{np.percentile(a, 50):8.3f} {np.percentile(a, 99):8.3f} {a.mean():8.3f}"


def run_speed(args, embedder) -> None:
    import numpy as np

    from morkit.core import settings
    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.question_pool.pool import build_pool
    from morkit.selection.learned import LEARN_SAMPLE
    from morkit.selection.selector import Selector

    queries = rewardmath_rm_scores(settings.data_dir(args.data_dir))
    print(f"\n=== speed: select() per query at {args.speed_questions} questions x {args.speed_ensembles} "
          f"ensembles, k={args.k}, embedding excluded ===")
    t0 = time.perf_counter()
    base = build_pool(queries, embedder)
    print(f"real pool: rewardmath_rm_scores, {len(base)} questions, {len(base.rm_names)} RMs, "
          f"{len(base.ensembles)} ensembles (max 3 members), built in {time.perf_counter() - t0:.1f}s "
          "(embeddings reused if computed above)")
    pool, kind = replicated_pool(base, args.speed_questions, args.speed_ensembles, args.noise, args.seed)
    copies = -(-args.speed_questions // len(base))
    print(f"timed pool: the {len(base)} questions REPLICATED to {len(pool)} (up to {copies} copies each; copies "
          f"share scores/labels/PRR, ids get ' [copy j]', embeddings = real + N(0, {args.noise}^2) noise, "
          f"re-normalised); first {len(pool.ensembles)} ensembles; FAISS index '{kind}'")

    rng = np.random.default_rng(args.seed + 1)
    picks = rng.integers(0, len(queries), args.speed_queries)
    by_id = {q.id: i for i, q in enumerate(base.questions)}
    tq = [queries[i] for i in picks]
    vec = base.embeddings[[by_id[q.id] for q in tq]] + rng.normal(0, args.noise, (len(tq), base.embeddings.shape[1]))
    vec = np.ascontiguousarray(vec / np.linalg.norm(vec, axis=1, keepdims=True), dtype=np.float32)
    print(f"{len(tq)} timed queries: rewardmath questions with fresh embedding noise, one select_many([q]) "
          f"call each after {args.warmup} warm-up calls")

    # Plain numpy PRES: what one writes by hand, no FAISS, no availability masks, no runner-ups.
    emb, prr, k = pool.embeddings, pool.prr, args.k
    names = [e.name for e in pool.ensembles]

    def numpy_pres(v):
        sims = emb @ v
        rows = np.argpartition(-sims, k - 1)[:k]
        evidence = np.nansum(sims[rows, None] * prr[rows], axis=0)
        return int(np.argmax(evidence)), evidence

    def timed_loop(fn):
        for i in range(args.warmup):
            fn(i)
        seconds, out = [], []
        for i in range(len(tq)):
            t0 = time.perf_counter()
            value = fn(i)
            seconds.append(time.perf_counter() - t0)
            out.append(value)
        return seconds, out

    import faiss
    from threadpoolctl import threadpool_info, threadpool_limits

    pres = Selector(pool, "pres", k=args.k)
    default = Selector(pool, k=args.k)
    t0 = time.perf_counter()
    fit = default.method.fit_for(frozenset(pool.rm_names))
    fit_s = time.perf_counter() - t0
    pools = ", ".join(sorted({f"{i['prefix']} {i['num_threads']}" for i in threadpool_info()}))
    print(f"machine: {os.cpu_count()} cores shared with other jobs; thread pools as loaded: {pools} "
          f"(faiss.omp_get_max_threads() = {faiss.omp_get_max_threads()})")
    for threads in args.threads:
        limit = threadpool_limits(limits=threads) if threads else None
        try:
            pres_t, pres_sel = timed_loop(lambda i: pres.select_many([tq[i]], vectors=vec[i : i + 1])[0])
            search_t, _ = timed_loop(lambda i: pres.neighbours(vec[i : i + 1]))
            np_t, np_out = timed_loop(lambda i: numpy_pres(vec[i]))
            st_t, _ = timed_loop(lambda i: default.select_many([tq[i]], vectors=vec[i : i + 1]))
        finally:
            if limit is not None:
                limit.restore_original_limits()
        pres_pick = [sel.choice.ensemble.name for sel in pres_sel]
        np_pick = [names[best] for best, _ in np_out]
        gaps = [float(ev[best] - ev[names.index(p)]) for (best, ev), p, q in zip(np_out, pres_pick, np_pick) if p != q]
        same = len(tq) - len(gaps)
        where = f"{threads} thread" + ("s" if threads != 1 else "") if threads else "library default threads"
        print(f"\n{'path (per query, ms), ' + where:<60} {'p50':>8} {'p99':>8} {'mean':>8}")
        print(f"{'morkit PRES: Selector(pool, pres).select_many([q], vectors=v)':<60} {_pct(pres_t)}")
        print(f"{'  of which kNN search (Selector.neighbours, FAISS flat)':<60} {_pct(search_t)}")
        print(f"{'plain numpy PRES (emb @ v, argpartition, nansum, argmax)':<60} {_pct(np_t)}")
        print(f"{'morkit default learned: Selector(pool).select_many, fitted':<60} {_pct(st_t)}")
        print(f"ratio morkit PRES / numpy PRES: p50 {np.percentile(pres_t, 50) / np.percentile(np_t, 50):.2f}x, "
              f"p99 {np.percentile(pres_t, 99) / np.percentile(np_t, 99):.2f}x")
        print(f"PRES pick equals the numpy pick on {same} of {len(tq)} timed queries"
              + ("" if not gaps else f"; numpy-evidence gaps where they differ: {sorted(gaps)[:5]}")
              + f"; {len(set(pres_pick))} distinct picks")
    print(f"\nlearned default one-time fit (CV over {len(fit.cv_table)} settings x {default.method.folds} folds + "
          f"final fit on {min(len(pool), LEARN_SAMPLE)} of {len(pool)} replicated questions x {len(pool.rm_names)} RMs, "
          f"library default threads): {fit_s:.1f}s -> {fit.label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:]))
    parser.add_argument("--datasets", nargs="*", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--k", type=int, default=100, help="pool neighbours per query for PRES")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--qwen-range", default="0:70",
                        help="START:STOP of qwen25_math_rm8 questions (before dropping head-training ones)")
    parser.add_argument("--gsm8k-range", default="0:1000",
                        help="START:STOP of gsm8k_model_solutions questions (before dropping head-training ones)")
    parser.add_argument("--humaneval-per-task", type=int, default=8,
                        help="completions per HumanEval task (the first N of the 200)")
    parser.add_argument("--humaneval-rms", nargs="+", default=["minilm-probe", "smollm2-orm"],
                        help="RMs scoring the HumanEval completions (code-tests would be the label itself)")
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
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    args = parser.parse_args()

    import logging

    logging.basicConfig(level=logging.ERROR)
    from morkit.question_pool.embed import load_embedder

    started = time.perf_counter()
    embedder = LookupEmbedder(load_embedder())
    if not args.speed_only:
        for key in args.datasets:
            run_accuracy(load_dataset(key, args), args, embedder)
    if not args.no_speed:
        run_speed(args, embedder)
    print(f"\ntotal {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
