"""PRES on the fly at a size where both paths fit: a 20,000-question pool read from its dense tables and the same
pool forced to compute each query's neighbour PRR from member scores must pick identically."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from morkit.question_pool.pool import PoolConfig, pool_from_rows
from morkit.question_pool.rows import PoolQuestion, pool_rows
from morkit.selection.pres import PRES
from morkit.selection.router import Router

SIZE = 20_000


class _Vectors:
    """An embedder stand-in: clustered unit vectors (a topic per 40 rows), so neighbours are close but not equal."""

    name = "test-clustered"

    def __init__(self, count: int, dim: int = 32, seed: int = 0):
        rng = np.random.default_rng(seed)
        topics = rng.standard_normal((count // 40 + 1, dim))
        vectors = topics[np.arange(count) // 40] + 0.5 * rng.standard_normal((count, dim))
        self.vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)

    def encode(self, texts, progress: bool = False):
        return self.vectors[: len(texts)]


def _tiled(rows, size):
    """`size` rows cycling through `rows` (copy k > 0 with " [copy k]" on its id and text)."""
    n = len(rows.questions)
    order = np.arange(size) % n
    tag = [f" [copy {j // n}]" if j >= n else "" for j in range(size)]
    questions = tuple(PoolQuestion(q.id + tag[j], q.question + tag[j], q.domain, q.n_candidates)
                      for j, q in ((j, rows.questions[j % n]) for j in range(size)))
    return replace(rows, questions=questions, scores=rows.scores[order], correct=rows.correct[order],
                   valid=rows.valid[order], steps=None if rows.steps is None else rows.steps[order])


@pytest.mark.slow
def test_on_the_fly_pres_picks_exactly_what_the_dense_tables_pick_at_20000_questions(data_dir):
    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.reward_models.rules.table import table_names

    base = rewardmath_rm_scores(data_dir)
    rm_names = tuple(table_names(base))
    rows = _tiled(pool_rows(base, rm_names, "min"), SIZE)
    vectors = _Vectors(SIZE)
    dense = pool_from_rows(rows, rm_names, vectors, config=PoolConfig())
    mean_prr, mean_top1, defined = dense.ensemble_means()  # what sampling every question stores (built once)
    means = {"sample": SIZE, "mean_prr": [None if np.isnan(v) else float(v) for v in mean_prr],
             "mean_top1": [None if np.isnan(v) else float(v) for v in mean_top1], "questions": defined.tolist()}
    fly = replace(dense, prr=None, top1=None, config=replace(dense.config, statistics="on-the-fly"),
                  meta={**dense.meta, "statistics": means})
    assert dense.dense and not fly.dense and len(fly.ensembles) == 5335  # small enough for the dense tables
    a, b = PRES(dense), PRES(fly)
    everything = frozenset(dense.rm_names)
    queries = np.random.default_rng(1).choice(SIZE, 150, replace=False)
    neighbours = Router(dense, "pres", embedder=vectors, k=100).chooser.neighbours(vectors.vectors[queries])
    for found in neighbours:
        assert np.array_equal(a.scores(found), b.scores(found))  # the same float32 sums, not merely close
        picked, flown = a.choose(found, everything), b.choose(found, everything)
        assert (picked.ensemble.members, picked.ensemble.weights) == (flown.ensemble.members, flown.ensemble.weights)
        assert picked.score == flown.score and picked.alternatives == flown.alternatives


def _scores(rng, questions, rm_names, *, grades=(), nan_share=0.05, width=12):
    """Member scores (Q, N, R) with padding: candidates per question 1..width, a few labels all alike; `grades`:
    RMs scoring in quarters (a judge's grades: ties everywhere), the last one a copy of the first (ties across RMs);
    `nan_share` of the real candidates' scores missing."""
    scores = rng.standard_normal((questions, width, len(rm_names)))
    for r, name in enumerate(rm_names):
        if name in grades:
            scores[:, :, r] = rng.integers(0, 5, (questions, width)) / 4
    if len(grades) > 1:
        scores[:, :, rm_names.index(grades[-1])] = scores[:, :, rm_names.index(grades[0])]
    sizes = rng.integers(1, width + 1, questions)
    valid = np.arange(width)[None, :] < sizes[:, None]
    share = rng.choice([0.0, 0.3, 0.7, 1.0], questions, p=[0.1, 0.4, 0.4, 0.1])  # some questions all right, all wrong
    correct = rng.random((questions, width)) < share[:, None]
    scores[~valid] = np.nan  # padding
    scores[valid[:, :, None] & (rng.random(scores.shape) < nan_share)] = np.nan
    return scores, correct & valid | ~valid & (rng.random(valid.shape) < 0.5), valid


def _ensembles(rm_names, rng, max_members):
    from morkit.question_pool.ensembles import Ensemble, enumerate_ensembles

    quality = {name: float(rng.uniform(0.3, 0.9)) for name in rm_names}
    out = enumerate_ensembles(rm_names, quality, max_members=max_members)
    if len(rm_names) > 1:  # a zero weight (not a member for combine), no weight at all, a negative weight
        a, b = rm_names[:2]
        out += [Ensemble((a, b), (0.0, 0.7), "linear"), Ensemble((a, b), (0.0, 0.0), "linear"),
                Ensemble((a, b), (-0.4, 1.3), "linear")]
    return out


@pytest.mark.parametrize("case,threads", [(case, 1) for case in ("ties, grades, gaps, 4 members", "one RM",
                                                                   "no mixed pair", "raw scores", "permuted scores")]
                         + [("ties, grades, gaps, 4 members", 3), ("permuted scores", 3)])
def test_neighbour_prr_is_the_dense_table_bit_for_bit(case, threads, monkeypatch):
    from morkit.question_pool import pair_wins
    from morkit.question_pool.ensembles import Normalizer
    from morkit.question_pool.neighbour_prr import EnsembleMatrix, neighbour_prr, prr_evidence, weighted_rows
    from morkit.question_pool.rows import ensemble_statistics

    monkeypatch.setattr(pair_wins, "THREADED_FROM", 0)  # every count split over the threads asked for
    monkeypatch.setenv("MORKIT_PRR_THREADS", str(threads))
    rng = np.random.default_rng(7)
    rm_names = ["solo"] if case == "one RM" else ["judge", "prm", "orm", "rule", "grader", "judge-copy"]
    scores, correct, valid = _scores(rng, 90, rm_names, grades=() if case == "one RM" else
                                     ("judge", "rule", "judge-copy"), nan_share=0 if case == "raw scores" else 0.03)
    if case == "no mixed pair":
        correct[:] = (np.arange(len(correct)) % 2 == 0)[:, None]
    if case == "permuted scores":  # every answer's member scores the same values in another order: their exact sums
        values = rng.random((len(scores), len(rm_names)))  # tie, so rounding alone (the order of the additions)
        for q, c in np.ndindex(scores.shape[:2]):  # decides which answer an equal-weight ensemble ranks higher
            scores[q, c] = rng.permutation(values[q])
    kind = "raw" if case in ("raw scores", "permuted scores") else "zscore"
    normalizer = Normalizer.fit(kind, rm_names, scores, valid)
    ensembles = _ensembles(rm_names, rng, max_members=1 if case == "one RM" else 4)
    matrix = EnsembleMatrix.of(ensembles, rm_names)
    want = ensemble_statistics(scores, correct, valid, normalizer, rm_names, ensembles, best_of_n=False)[0]
    got = neighbour_prr(scores, correct, valid, normalizer, rm_names, matrix)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    zeroed = neighbour_prr(scores, correct, valid, normalizer, rm_names, matrix, undefined=0.0)
    assert np.array_equal(zeroed.view(np.uint32), np.nan_to_num(want, nan=0.0).view(np.uint32))
    sims = rng.random(len(scores))
    evidence = prr_evidence(scores, correct, valid, normalizer, rm_names, matrix, sims)
    assert np.array_equal(evidence, weighted_rows(sims, np.nan_to_num(want, nan=0.0)).astype(np.float64))
    defined = ~np.isnan(want)
    assert defined.any() != (case == "no mixed pair")
    if case != "no mixed pair":  # what the kernel must get right occurs here
        assert ((want > 0) & (want < 1)).any()
        good, bad = correct & valid, ~correct & valid
        ties = (scores[:, :, None, 0] == scores[:, None, :, 0]) & good[:, :, None] & bad[:, None, :]
        assert ties.any() == (case != "one RM")  # a graded RM scores some right and wrong answer alike
    if case == "ties, grades, gaps, 4 members":  # a missing score undefines only the ensembles using that RM
        assert (np.isnan(want).any(axis=1) & defined.any(axis=1)).any()
    if threads > 1 and len(ensembles) > pair_wins.BLOCK:  # the count was split: a worker thread of its own ran
        import threading

        assert any(t.name.startswith("morkit-prr") for t in threading.enumerate())


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 50])
def test_a_split_count_walks_every_ensemble_once_in_whole_blocks(parts):
    from morkit.question_pool.pair_wins import groups, split_blocks

    rng = np.random.default_rng(parts)
    sizes = rng.integers(1, 4, 200).astype(np.int64)
    members = np.where(np.arange(3)[:, None] < sizes, rng.integers(0, 5, (3, 200)), 0).astype(np.int64)
    _, blocks = groups(members, sizes)
    runs = split_blocks(blocks, sizes, parts)
    assert 1 <= len(runs) <= parts and all(run.flags.c_contiguous and len(run) >= 2 for run in runs)
    assert np.array_equal(np.concatenate([runs[0], *(run[1:] for run in runs[1:])]), blocks)
    if parts == 2:  # about equal work: members per run
        work = [int(np.maximum(sizes[run[0] : run[-1]], 1).sum()) for run in runs]
        assert max(work) - min(work) <= 3 * 18  # cut at the bound nearest half: at most a block's work apart


def test_on_the_fly_pres_evidence_and_picks_are_the_dense_ones_bit_for_bit(hash_embedder):
    from morkit.core.types import Candidate, Query
    from morkit.question_pool.pool import build_pool
    from morkit.reward_models.cost import CostTable
    from morkit.selection.base import CostLimit

    rng = np.random.default_rng(3)
    rm_names = ["judge", "prm", "orm", "rule"]
    scores, correct, valid = _scores(rng, 80, rm_names, grades=("judge", "rule"), width=8)
    queries = [Query(f"q{i}", f"question {i} about topic {i % 5}",
                     tuple(Candidate(f"answer {c}", correct=bool(correct[i, c]),
                                     scores={n: float(scores[i, c, r]) for r, n in enumerate(rm_names)
                                             if not np.isnan(scores[i, c, r])})
                           for c in range(int(valid[i].sum()))), domain="math") for i in range(len(scores))]
    dense = build_pool(queries, hash_embedder, config=PoolConfig(statistics="dense"))
    fly = replace(dense, prr=None, top1=None, config=replace(dense.config, statistics="on-the-fly"),
                  meta={**dense.meta, "statistics": {"sample": len(dense), **{
                      key: [None if np.isnan(v) else float(v) for v in values] for key, values in
                      zip(("mean_prr", "mean_top1"), dense.ensemble_means()[:2])},
                      "questions": dense.ensemble_means()[2].tolist()}})
    assert dense.dense and not fly.dense
    a, b = PRES(dense), PRES(fly)
    everything = frozenset(dense.rm_names)
    limit = CostLimit(CostTable({n: float(c) for n, c in zip(rm_names, (3.0, 1.0, 2.0, 0.5))}), tuple(rm_names),
                      most=3.5, weight=0.01, candidates=8)
    for found in Router(dense, "pres", embedder=hash_embedder, k=12).chooser.neighbours(dense.embeddings[::3]):
        assert np.array_equal(a.scores(found), b.scores(found))  # neighbours in query order, not row order
        for args in ((everything,), (everything, limit), (frozenset(rm_names[1:]), limit)):
            picked, flown = a.choose(found, *args), b.choose(found, *args)
            assert (picked.ensemble, picked.score, picked.alternatives) == (flown.ensemble, flown.score,
                                                                            flown.alternatives)


def test_a_cache_numba_cannot_use_costs_a_compile_not_a_query(monkeypatch, caplog):
    """Where numba finds no writable cache folder, or its cached copy is unreadable, the loop is compiled
    (here: a stand-in numba that runs it as Python) and a warning says so."""
    import sys
    import types

    from morkit.question_pool import pair_wins
    from morkit.question_pool.ensembles import Normalizer
    from morkit.question_pool.neighbour_prr import EnsembleMatrix, neighbour_prr
    from morkit.question_pool.rows import ensemble_statistics

    def njit(signature, cache=False, nogil=False):
        assert signature == pair_wins.SIGNATURE and nogil
        if cache:
            raise RuntimeError("cannot cache function '_count_wins': no locator available")
        return lambda function: function

    monkeypatch.setitem(sys.modules, "numba", types.SimpleNamespace(njit=njit))
    monkeypatch.setattr(pair_wins, "_compiled", [])
    rng = np.random.default_rng(0)
    rm_names = ["a", "b", "c"]
    scores, correct, valid = _scores(rng, 12, rm_names, grades=("a",), width=5)
    normalizer = Normalizer.fit("zscore", rm_names, scores, valid)
    ensembles = _ensembles(rm_names, rng, max_members=3)
    with caplog.at_level("WARNING", logger="morkit.question_pool.pair_wins"):
        got = neighbour_prr(scores, correct, valid, normalizer, rm_names, EnsembleMatrix.of(ensembles, rm_names))
    assert "could not cache" in caplog.text and "no locator" in caplog.text
    want = ensemble_statistics(scores, correct, valid, normalizer, rm_names, ensembles, best_of_n=False)[0]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.slow
def test_the_compiled_loop_rounds_each_product_and_sum_as_numpy_does():
    """No fused multiply-add and no fast-math flag in the compiled loop (either would round differently from the
    dense table's numpy sums). Compiled afresh: numba cannot show the code of a copy loaded from its cache."""
    import re

    import numba

    from morkit.question_pool import pair_wins

    kernel = numba.njit(pair_wins.SIGNATURE, nogil=True)(pair_wins._count_wins)
    ir = kernel.inspect_llvm(kernel.signatures[0])
    assert re.search(r"= fmul double", ir) and re.search(r"= fadd double", ir)  # the plain instructions are there
    assert not re.search(r"= f(?:mul|add|sub) (?:fast|reassoc|contract|nnan|ninf|nsz|arcp|afn)", ir)
    assert "fmuladd" not in ir and "llvm.fma" not in ir
    assert not re.search(r"\bv?f(?:n)?m(?:add|sub)\d*[a-z]*\b", kernel.inspect_asm(kernel.signatures[0]).lower())


def test_prr_threads_come_from_the_environment_or_the_usable_cores(monkeypatch):
    from morkit.core import settings
    from morkit.core.errors import InputError

    monkeypatch.delenv("MORKIT_PRR_THREADS", raising=False)
    assert 1 <= settings.prr_threads() <= 4
    monkeypatch.setenv("MORKIT_PRR_THREADS", "2")
    assert settings.prr_threads() == 2
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("MORKIT_PRR_THREADS", bad)
        with pytest.raises(InputError, match="MORKIT_PRR_THREADS"):
            settings.prr_threads()


def test_a_forked_process_counts_on_threads_of_its_own(monkeypatch):
    """A child forked after a split count inherits no worker thread: its next split count must still finish."""
    import os
    import time

    from morkit.question_pool import pair_wins
    from morkit.question_pool.ensembles import Normalizer
    from morkit.question_pool.neighbour_prr import EnsembleMatrix, neighbour_prr

    monkeypatch.setattr(pair_wins, "THREADED_FROM", 0)
    monkeypatch.setenv("MORKIT_PRR_THREADS", "2")
    rng = np.random.default_rng(3)
    rm_names = ["a", "b", "c", "d"]
    scores, correct, valid = _scores(rng, 20, rm_names)
    normalizer = Normalizer.fit("zscore", rm_names, scores, valid)
    matrix = EnsembleMatrix.of(_ensembles(rm_names, rng, max_members=3), rm_names)
    want = neighbour_prr(scores, correct, valid, normalizer, rm_names, matrix)  # the parent's workers start
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports by its exit code
        got = neighbour_prr(scores, correct, valid, normalizer, rm_names, matrix)
        os._exit(0 if np.array_equal(got, want, equal_nan=True) else 1)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(child, 9)
        os.waitpid(child, 0)
        pytest.fail("the forked child's split count never finished")
    assert os.waitstatus_to_exitcode(done[1]) == 0
