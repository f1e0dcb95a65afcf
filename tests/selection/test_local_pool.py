"""A fit's neighbours from the whole pool: on a pool larger than the fit's samples, its questions find their
neighbours among every question its RMs cover (in the pool's index, as a query's are), never their own held-out
fold; on a pool the fit reads whole, nothing changes."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from fakes.embedder import TopicEmbedder
from fakes.queries import topic_queries

from morkit.core.errors import InputError
from morkit.question_pool.pool import build_pool
from morkit.selection import learned as L
from morkit.selection import local
from morkit.selection.base import Neighbours
from morkit.selection.learned import Setting, fit_learned
from morkit.selection.local import Neighbourhood, single_stats
from morkit.selection.mor import scores_under
from morkit.selection.pres import PRES

SIZE, REPEATED = 3000, 100
"""Pool questions; the last REPEATED repeat the text of the first ones (a repeated question is one group)."""


def _queries(n=SIZE):
    """Two topics and a third RM of noise that skips every tenth question (those are not covered by a fit over all
    three); the last REPEATED questions repeat earlier texts."""
    return topic_queries(n, gappy_rm=True, repeated=REPEATED)


@pytest.fixture(scope="module")
def pool():
    return build_pool(_queries(), TopicEmbedder(), rm_names=("alpha", "beta", "gamma"))


@pytest.fixture
def small_samples(monkeypatch):
    """The pool counts as large: the fit learns from 1,000 of its questions and weighs its grid on 300."""
    monkeypatch.setattr(L, "LEARN_SAMPLE", 1000)
    monkeypatch.setattr(L, "REPEATS_UP_TO", 500)


def _spy(monkeypatch, module, name):
    """Record every call's result of module.name (a function or a classmethod's bound function)."""
    calls = []
    real = getattr(module, name)

    def spying(*args, **kwargs):
        calls.append((args, kwargs, real(*args, **kwargs)))
        return calls[-1][2]

    monkeypatch.setattr(module, name, spying)
    return calls


def _text(pool, row):
    return pool.questions[int(row)].question


def test_a_large_pools_fit_reads_neighbours_from_the_whole_pool_and_never_the_held_out_fold(pool, small_samples,
                                                                                            monkeypatch):
    found = _spy(monkeypatch, Neighbourhood, "in_pool")
    served = _spy(monkeypatch, L, "pres_served_out_of_fold")
    fit = fit_learned(pool, settings=[Setting("logit", "scores+local", {"penalty": 1.0})], cv_sample=300)
    data_rows, folds = fit.out_of_fold.rows, fit.out_of_fold.folds
    assert fit.report["cv_questions"] == 300 and fit.report["questions"] == 1000 and fit.report["repeats"] == 1
    cv = [near for args, kwargs, near in found if len(args[1]) == 300]
    assert len(cv) == 1 and len(served) == 1
    near = cv[0]
    covered = np.array([i % 10 != 3 for i in range(SIZE)])
    learning = L.covered_rows(pool, pool.rm_names, 1000)
    reached = near.reference[near.lists.rows[near.lists.rows >= 0]]
    assert covered[reached].all()  # only questions all three RMs scored
    assert not np.isin(reached, learning).all()  # beyond the learning sample: the whole pool
    vectors = np.asarray(pool.embeddings)
    for i, row in enumerate(data_rows):
        mine = near.reference[near.lists.rows[i][near.lists.rows[i] >= 0]]
        assert row not in mine and all(_text(pool, r) != _text(pool, row) for r in mine)
        if i < 20:  # exactly the nearest covered others (a flat index): what a query of the same vector finds
            others = [r for r in np.flatnonzero(covered) if r != row and _text(pool, r) != _text(pool, row)]
            best = np.sort(vectors[others] @ vectors[row])[::-1][:len(mine)]
            assert near.lists.sims[i][:len(mine)] == pytest.approx(best, abs=1e-6)
    for fold in np.unique(folds):
        train = folds != fold
        keep = near.lists.first(L.PRES_K, near.allowed(train))
        for i in np.flatnonzero(~train):
            mine = near.reference[near.lists.rows[i][keep[i]]]
            assert len(mine) == L.PRES_K and not np.isin(mine, data_rows[~train]).any()  # never its held-out fold
    # PRES's out-of-fold picks: each held-out question routed as a query is, from those neighbours
    pres, scores = PRES(pool), served[0][2][0]
    for fold in np.unique(folds)[:2]:
        train = folds != fold
        keep = near.lists.first(L.PRES_K, near.allowed(train))
        for i in np.flatnonzero(~train)[:10]:
            choice = pres.choose(Neighbours(near.reference[near.lists.rows[i][keep[i]]], (),
                                            near.lists.sims[i][keep[i]]), frozenset(pool.rm_names))
            row = data_rows[i]
            want = scores_under(choice, pool.scores[[row]], None, pool.valid[[row]], pool.normalizer,
                                pool.rm_names, ())[0]
            assert np.array_equal(np.argsort(scores[i]), np.argsort(want))


def test_no_held_out_label_reaches_a_held_out_questions_local_features(small_samples, monkeypatch):
    """Relabel the CV's first held-out fold at random: its questions' out-of-fold scores stay the same, though
    its questions sit in the pool every neighbour is found in; the other folds' change. The refit reads each
    learning question's 20 nearest in the pool, as a query does."""
    queries = _queries()
    settings = [Setting("logit", "scores+local", {"penalty": 1.0})]
    found = _spy(monkeypatch, Neighbourhood, "in_pool")
    first = fit_learned(build_pool(queries, TopicEmbedder(), rm_names=("alpha", "beta", "gamma")),
                        settings=settings, baselines=False, cv_sample=300)
    refit = [near for args, kwargs, near in found if len(args[1]) == 1000]
    assert first.local_k == L.LOCAL_K and len(refit) == 1 and refit[0].lists.rows.shape[1] == L.LOCAL_K
    assert (refit[0].place < 0).any()
    rows, folds = first.out_of_fold.rows, first.out_of_fold.folds
    held = set(rows[folds == 0].tolist())
    rng = np.random.default_rng(5)

    def relabel(q):
        right = int(rng.integers(0, len(q.candidates)))
        return replace(q, candidates=tuple(replace(c, correct=j == right) for j, c in enumerate(q.candidates)))

    again = fit_learned(build_pool([relabel(q) if i in held else q for i, q in enumerate(queries)],
                                   TopicEmbedder(), rm_names=("alpha", "beta", "gamma")),
                        settings=settings, baselines=False, cv_sample=300)
    assert np.array_equal(again.out_of_fold.rows, rows) and np.array_equal(again.out_of_fold.folds, folds)
    assert np.array_equal(first.out_of_fold.signals[folds == 0], again.out_of_fold.signals[folds == 0])
    assert not np.array_equal(first.out_of_fold.signals[folds != 0], again.out_of_fold.signals[folds != 0])


def test_a_pool_the_fit_reads_whole_keeps_its_neighbours_among_its_own_questions(pool, monkeypatch):
    """Up to REPEATS_UP_TO questions the CV reads every covered question: the pool holds no other neighbour, and
    the fit is the one that "sample" makes, byte for byte (no index search)."""
    monkeypatch.setattr(L, "LEARN_SAMPLE", 400)
    monkeypatch.setattr(L, "REPEATS_UP_TO", 400)
    found = _spy(monkeypatch, Neighbourhood, "in_pool")
    small = build_pool(_queries(400), TopicEmbedder(), rm_names=("alpha", "beta", "gamma"))
    settings = [Setting("logit", "scores+local", {"penalty": 1.0}), Setting("logit", "full", {"penalty": 3.0})]
    fits = {how: fit_learned(small, settings=settings, repeats=1, neighbours=how) for how in L.NEIGHBOURS}
    assert not found
    assert json.dumps(fits["pool"].to_json(), sort_keys=True) == json.dumps(fits["sample"].to_json(), sort_keys=True)
    assert np.array_equal(fits["pool"].out_of_fold.signals, fits["sample"].out_of_fold.signals)
    with pytest.raises(InputError, match="neighbours"):
        fit_learned(small, settings=settings, neighbours="nearby")


def test_sample_neighbours_stay_among_the_fits_own_questions(pool, small_samples, monkeypatch):
    found = _spy(monkeypatch, Neighbourhood, "in_pool")
    served = _spy(monkeypatch, L, "pres_served_out_of_fold")
    fit = fit_learned(pool, settings=[Setting("logit", "scores+local", {"penalty": 1.0})], cv_sample=300,
                      neighbours="sample")
    assert not found and not served and fit.report["cv_questions"] == 300


def test_pool_lists_reach_past_repeats_and_far_enough_for_every_fold(pool):
    """A list skips the question's own row and its repeated text, and reaches k neighbours outside each fold of
    each deal, searching further where one fold crowds the nearest."""
    covered = np.flatnonzero([i % 10 != 3 for i in range(SIZE)])
    rows = covered[:1500]  # over half of the covered questions: the neighbours crowd into the fit's folds
    folds = np.stack([np.arange(len(rows)) % 2, np.zeros(len(rows), int)])  # a deal of two folds; one of one fold
    within = np.zeros(SIZE, bool)
    within[covered] = True
    near = Neighbourhood.in_pool(pool, rows, pool.rm_names, 30, within, folds)
    repeated = [i for i, r in enumerate(rows) if r < REPEATED]
    assert repeated and all(_text(pool, r) != _text(pool, rows[i]) for i in repeated
                            for r in near.reference[near.lists.rows[i][near.lists.rows[i] >= 0]])
    for deal in folds:
        for fold in np.unique(deal):
            keep = near.lists.first(30, near.allowed(deal != fold))
            assert (keep.sum(axis=1) == 30).all()  # k outside the fold for every question
    assert near.lists.rows.shape[1] > 30 + 30 // 4 + 2  # its one fold holds every fit question: past the first fetch
    stats = single_stats(pool, near.reference, pool.rm_names)
    assert near.stats.dtype == np.float32 and np.array_equal(near.stats, stats.astype(np.float32))
    everything = near.evidence(20)
    assert everything.shape == (len(rows), 2, 3) and np.isfinite(everything).all()


def test_statistics_are_read_in_chunks_with_the_same_values(pool, monkeypatch):
    rows = np.arange(0, SIZE, 3)
    whole = single_stats(pool, rows, ("gamma", "alpha"))
    monkeypatch.setattr(local, "STATS_CHUNK", 97)
    assert np.array_equal(single_stats(pool, rows, ("gamma", "alpha")), whole, equal_nan=True)
