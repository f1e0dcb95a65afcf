"""Local evidence from a query's neighbours, repeated cross-validation, PRES scored out of fold, and a fit that
CV hands to PRES."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from fakes.embedder import TopicEmbedder
from fakes.queries import topic_queries

from morkit.question_pool.pool import build_pool
from morkit.selection.base import Neighbours
from morkit.selection.cv import CVResult, Folds, pick
from morkit.selection.features import FEATURE_SETS, feature_spec
from morkit.selection.learned import LearnedFit, Setting, fit_learned
from morkit.selection.learned_method import Learned
from morkit.selection.learners import LambdaRank
from morkit.selection.local import NeighbourLists, query_evidence, single_stats, weighted
from morkit.selection.mor import scores_under
from morkit.selection.pres import PRES, pres_out_of_fold
from morkit.selection.router import Router


@pytest.fixture(scope="module")
def topic_pool():
    return build_pool(topic_queries(90), TopicEmbedder(), rm_names=("alpha", "beta"))


def test_weighted_means_skip_undefined_values_and_negative_similarity():
    stats = np.array([[[1.0, np.nan]], [[0.0, 0.5]], [[0.5, 1.0]]])[None, :, :, :]  # (1, K=3, 1 stat, 2 RMs)
    out = weighted(stats, np.array([[0.5, 0.5, -1.0]]))
    assert out[0, 0].tolist() == pytest.approx([0.5, 0.5])  # the negative neighbour weighs nothing
    assert np.isnan(weighted(stats[:, :1], np.array([[1.0]]))[0, 0, 1])


def test_neighbour_lists_never_hold_the_row_itself_and_respect_the_allowed_rows():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(30, 8)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    lists = NeighbourLists.among(v, 10)
    assert not (lists.rows == np.arange(30)[:, None]).any()
    exact = np.argsort(-(v @ v.T - 10 * np.eye(30)), axis=1)[:, :10]
    assert np.array_equal(lists.rows, exact)
    allowed = np.arange(30) % 3 != 0
    keep = lists.first(4, allowed)
    assert (keep.sum(axis=1) <= 4).all() and allowed[lists.rows[keep]].all()
    stats = rng.random((30, 2, 3))
    got = lists.evidence(stats, 4, allowed)
    row = 5
    rows, sims = lists.rows[row][keep[row]], lists.sims[row][keep[row]]
    want = (stats[rows] * sims[:, None, None]).sum(axis=0) / sims.sum()
    assert got[row] == pytest.approx(want)


def test_query_evidence_reads_the_pool_rows_of_its_neighbours(topic_pool):
    rows, sims = np.array([0, 2, 4]), np.array([0.9, 0.8, 0.7])
    got = query_evidence(topic_pool, rows, sims, ("beta", "alpha"), k=2)
    stats = single_stats(topic_pool, rows[:2], ("beta", "alpha"))
    assert got.shape == (1, 2, 2) and got[0] == pytest.approx((stats * sims[:2, None, None]).sum(0) / sims[:2].sum())


def test_local_features_scale_each_rms_query_z_by_its_local_lead():
    scores = np.array([[[1.0, 3.0], [2.0, 1.0], [3.0, 2.0]]])  # one query, 3 candidates, 2 RMs
    valid = np.ones((1, 3), bool)
    local = np.array([[[0.9, 0.2], [1.0, 0.0]]])  # PRR then hit, per RM: a leads here
    spec = feature_spec(FEATURE_SETS["scores+local"], ("a", "b"), (), "min", scores, None, valid, local, 20)
    raw = spec.raw(scores, None, valid, local)
    col = {name: i for i, name in enumerate(spec.names())}
    assert spec.local_centre == pytest.approx((0.9, 0.2, 1.0, 0.0))  # fitted on this one query: all centred to 0
    assert raw[0, :, col["local-prr:a"]] == pytest.approx([0, 0, 0])
    other = np.array([[[0.5, 0.6], [0.5, 1.0]]])  # another query where b leads
    raw = spec.raw(scores, None, valid, other)
    z = raw[0, :, col["query-z:b"]]
    assert raw[0, :, col["local-prr:b"]] == pytest.approx(z * 0.4)
    assert raw[0, :, col["local-hit:b"]] == pytest.approx(z * 1.0)
    assert raw[0, :, col["local:best-prr"]] == pytest.approx(z)  # b has the best local PRR
    with pytest.raises(ValueError, match="local evidence"):
        spec.raw(scores, None, valid)
    again = type(spec).from_json(json.loads(json.dumps(spec.to_json())))
    assert again == spec and again.local_k == 20


def test_local_features_let_the_neighbours_say_which_rm_to_trust(topic_pool):
    plain = fit_learned(topic_pool, settings=[Setting("logit", "scores", {"penalty": 1.0})], baselines=False,
                        repeats=1)
    local = fit_learned(topic_pool, settings=[Setting("logit", "scores+local", {"penalty": 1.0})],
                        baselines=False, repeats=1)
    assert local.cv_best_of_n > plain.cv_best_of_n + 0.08 and local.local_k > 0
    pool = replace(topic_pool, meta={**topic_pool.meta, "learned": local.to_json()})
    router = Router(pool, embedder=TopicEmbedder(), k=10)
    hits = []
    for query in topic_queries(20, seed=7):
        ranking = router.route([query])[0]
        hits.append(query.candidates[ranking.best_index].correct)
        assert ranking.selection.choice.scorer.fit.label == local.label  # bound to this query's evidence
    assert np.mean(hits) > 0.75


def test_cv_averages_over_fold_deals_and_keeps_the_single_rm_when_the_gain_is_noise():
    dealt = Folds.dealt(40, 4, seed=0, repeats=3)
    assert dealt.of.shape == (3, 40) and not np.array_equal(dealt.of[0], dealt.of[1])
    assert len(dealt.splits()) == 12 and all(train.sum() == 30 for _, train in dealt.splits())
    result = CVResult(dealt, {}, {}, {})
    single = np.tile((np.arange(40) % 2).astype(float), (3, 1))
    single[:, :4], single[:, 4:6] = 0.0, 1.0
    lucky = single.copy()
    lucky[:, :4], lucky[:, 4:6] = 1.0, 0.0  # better on 4 questions, worse on 2: z ~ 0.8
    result.add("single RM: a", None, single, ["a"])
    result.add("lucky", None, lucky, ["x"])
    assert pick(result, ["lucky"], ["single RM: a"]) == "single RM: a"  # a few questions: within the margin
    result.add("clear", None, np.ones((3, 40)), ["y"])
    assert pick(result, ["lucky", "clear"], ["single RM: a"]) == "clear"
    label, mean, sd = result.row("clear")
    assert mean == 1.0 and sd == 0.0
    # a rule with nothing fitted (PRES) competes with the single RMs on its mean alone, and sets the bar
    result = CVResult(dealt, {}, {}, {})
    result.add("single RM: a", None, single, ["a"])
    result.add("PRES", None, lucky, ["PRES"])
    assert pick(result, [], ["single RM: a", "PRES"]) == "PRES"
    result.add("learned", None, np.minimum(lucky + np.isin(np.arange(40), [8, 10]), 1.0), ["x"])  # 2 better: z 1.4
    assert pick(result, ["learned"], ["single RM: a", "PRES"]) == "learned"  # one row: the 1-SE rule
    assert pick(result, ["learned"] + [f"other {i}" for i in range(11)], ["single RM: a", "PRES"]) == "PRES"


def test_pres_out_of_fold_picks_what_pres_picks_from_the_training_neighbours(topic_pool):
    from morkit.selection.learned import PoolSlice

    rows = np.arange(len(topic_pool))
    lists = NeighbourLists.among(np.asarray(topic_pool.embeddings), 40)
    dealt = Folds.dealt(len(rows), 3, seed=1, repeats=1)
    oof = pres_out_of_fold(topic_pool, PoolSlice.of(topic_pool, rows, topic_pool.rm_names), lists, dealt, k=15)
    pres = PRES(topic_pool)
    available = frozenset(topic_pool.rm_names)
    for repeat, train in dealt.splits():
        keep = lists.first(15, train)
        for row in np.flatnonzero(~train)[:10]:
            nbrs = Neighbours(lists.rows[row][keep[row]], (), lists.sims[row][keep[row]])
            choice = pres.choose(nbrs, available)
            want = scores_under(choice, topic_pool.scores[[row]], None, topic_pool.valid[[row]],
                                topic_pool.normalizer, topic_pool.rm_names, ())[0]
            # tied ensembles (the same members, weights in proportion) may differ in scale, never in order
            assert np.array_equal(np.argsort(oof[repeat, row]), np.argsort(want))


def test_a_fit_that_cv_handed_to_pres_routes_by_pres(topic_pool):
    fit = fit_learned(topic_pool, repeats=1, settings=[Setting("logit", "scores", {"penalty": 1.0})])
    pres_fit = replace(fit, label="PRES (paper, with combinations)", components=(),
                       pres_members=topic_pool.rm_names)
    again = LearnedFit.from_json(json.loads(json.dumps(pres_fit.to_json())))
    assert again.is_pres and again.members == topic_pool.rm_names
    pool = replace(topic_pool, meta={**topic_pool.meta, "learned": again.to_json()})
    method = Learned(pool)
    nbrs = Neighbours(np.arange(10), (), np.linspace(0.9, 0.5, 10))
    choice = method.choose(nbrs, frozenset(pool.rm_names))
    want = PRES(pool).choose(nbrs, frozenset(pool.rm_names))
    assert choice.ensemble == want.ensemble and choice.details["learner"].startswith("PRES")
    assert choice.calibrator is None  # calibrated on PRES's own leave-one-out picks, over its ensemble's signals
    ranking = Router(pool, embedder=TopicEmbedder(), k=10).route([topic_queries(1, seed=3)[0]])[0]
    assert 0 <= ranking.confidence <= 1
    with pytest.raises(TypeError, match="PRES"):
        again.scores(pool.scores, None, pool.valid, pool.rm_names, ())
    from morkit.selection.report import _importances

    part = _importances(again.to_json(), again.importances())  # its page text: "Cross-validation chose PRES ..."
    assert part["pres"] and part["table"] is None  # (tests/data/test_html_reports.py, "selection-pres-chosen")
    # rules only (the single RMs and PRES): each topic has its own good RM, so PRES's neighbours win the CV
    fit = fit_learned(topic_pool, repeats=1, settings=[])
    assert fit.is_pres and fit.members == topic_pool.rm_names and fit.report["reliability"] == {}


def test_a_bagged_lambdarank_averages_its_boosters(topic_pool):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4, 3))
    correct = np.zeros((60, 4), bool)
    correct[np.arange(60), np.argmax(x[:, :, 0] + 0.3 * rng.normal(size=(60, 4)), axis=1)] = True
    valid = np.ones((60, 4), bool)
    bag = LambdaRank.fit(x, correct, valid, rounds=10, min_leaf=5, bag=3)
    assert len(bag.models) == 3 and len(set(bag.models)) == 3
    parts = [LambdaRank((m,)).scores(x) for m in bag.models]
    assert bag.scores(x) == pytest.approx(np.mean(parts, axis=0))
    assert LambdaRank.fit(x, correct, valid, rounds=10, min_leaf=5, bag=3) == bag  # deterministic


def test_no_held_out_label_reaches_its_own_out_of_fold_scores():
    """Relabel one fold's questions at random: every row's out-of-fold scores in that fold stay the same (the
    local evidence, its centre, the scales and PRES read training labels only), while other folds' change."""
    from morkit.selection import learned as L

    queries = topic_queries(120)
    dealt = Folds.dealt(len(queries), 4, seed=3, repeats=1)
    held = dealt.of[0] == 2
    rng = np.random.default_rng(5)

    def relabel(q):
        right = int(rng.integers(0, len(q.candidates)))
        return replace(q, candidates=tuple(replace(c, correct=i == right) for i, c in enumerate(q.candidates)))

    def out_of_fold(qs):
        pool = build_pool(qs, TopicEmbedder(), rm_names=("alpha", "beta"))
        data = L.PoolSlice.of(pool, np.arange(len(pool)), pool.rm_names)
        lists = NeighbourLists.among(data.vectors, 60, data.groups)

        def spec_of(features, part, local):
            return feature_spec(FEATURE_SETS[features], pool.rm_names, (), "min", part.scores, part.steps, part.valid,
                                local, L.LOCAL_K)

        settings = [Setting("logit", "scores+local", {"penalty": 1.0}),
                    Setting("lambdarank", "full+local", {"rounds": 20, "bag": 2})]
        result = L._cross_validate(settings, data, dealt, spec_of,
                                   lambda train: lists.evidence(data.stats, L.LOCAL_K, train), blend=False)
        out = {label: scores[0] for label, scores in result.scores.items()}
        out["PRES"] = pres_out_of_fold(pool, data, lists, dealt, 30)[0]
        return out

    before, after = out_of_fold(queries), out_of_fold([relabel(q) if h else q for q, h in zip(queries, held)])
    for label in before:
        assert np.allclose(before[label][held], after[label][held], equal_nan=True), label
        assert not np.allclose(before[label][~held], after[label][~held], equal_nan=True), label


def test_a_repeated_question_is_one_group_in_the_folds_and_never_its_own_neighbour():
    texts = np.array(["a", "b", "a", "c", "b", "d"])
    dealt = Folds.dealt(6, 3, seed=0, repeats=4, groups=texts)
    assert all(d[0] == d[2] and d[1] == d[4] for d in dealt.of)
    v = np.eye(6, dtype=np.float32)[[0, 1, 0, 2, 1, 3]]  # a repeated text has the same vector
    lists = NeighbourLists.among(v, 5, np.unique(texts, return_inverse=True)[1])
    assert 2 not in lists.rows[0] and 0 not in lists.rows[2] and 4 not in lists.rows[1]
    assert (lists.rows[0] >= 0).sum() == 4  # the five others, less its repeat


def test_folds_fitted_in_threads_give_the_numbers_of_one_fold_at_a_time(topic_pool, monkeypatch):
    """LightGBM, the logit and PRES, fitted two folds at a time, store exactly the fit of a serial run."""
    from morkit.selection import cv

    settings = [Setting("logit", "full+local", {"penalty": 3.0}),
                Setting("lambdarank", "full", {"rounds": 30, "learning_rate": 0.05, "leaves": 4, "bag": 2})]
    monkeypatch.setattr(cv.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # two cores, even on one
    pools = []
    real_pool = cv.ThreadPoolExecutor
    monkeypatch.setattr(cv, "ThreadPoolExecutor", lambda workers: pools.append(workers) or real_pool(workers))
    fits = {}
    for threads in (1, 2):
        monkeypatch.setattr(cv, "CV_THREADS", threads)
        fits[threads] = json.dumps(fit_learned(topic_pool, repeats=2, settings=settings).to_json(), sort_keys=True)
    assert pools and set(pools) == {2}  # the threaded run did run its folds in two threads
    assert fits[1] == fits[2]
