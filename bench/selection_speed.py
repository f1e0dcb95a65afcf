"""Part B of bench/selection.py: select() latency on a replicated pool (see that script's docstring).

Run bench/selection.py --speed-only; this module holds the replicated pool and the timing loop.
"""

from __future__ import annotations

import os
import time


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
    from morkit.selection.router import Router

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

    pres = Router(pool, "pres", k=args.k)
    default = Router(pool, k=args.k)
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
            search_t, _ = timed_loop(lambda i: pres.chooser.neighbours(vec[i : i + 1]))
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
        print(f"{'morkit PRES: Router(pool, pres).select_many([q], vectors=v)':<60} {_pct(pres_t)}")
        print(f"{'  of which kNN search (Router.chooser.neighbours, FAISS flat)':<60} {_pct(search_t)}")
        print(f"{'plain numpy PRES (emb @ v, argpartition, nansum, argmax)':<60} {_pct(np_t)}")
        print(f"{'morkit default learned: Router(pool).select_many, fitted':<60} {_pct(st_t)}")
        print(f"ratio morkit PRES / numpy PRES: p50 {np.percentile(pres_t, 50) / np.percentile(np_t, 50):.2f}x, "
              f"p99 {np.percentile(pres_t, 99) / np.percentile(np_t, 99):.2f}x")
        print(f"PRES pick equals the numpy pick on {same} of {len(tq)} timed queries"
              + ("" if not gaps else f"; numpy-evidence gaps where they differ: {sorted(gaps)[:5]}")
              + f"; {len(set(pres_pick))} distinct picks")
    print(f"\nlearned default one-time fit (CV over {len(fit.cv_table)} settings x {default.method.folds} folds + "
          f"final fit on {min(len(pool), LEARN_SAMPLE)} of {len(pool)} replicated questions x {len(pool.rm_names)} RMs, "
          f"library default threads): {fit_s:.1f}s -> {fit.label}")
