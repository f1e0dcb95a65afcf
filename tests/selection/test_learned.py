"""The learned selector: candidate features, the learners, CV choice, calibrated confidence, fallbacks."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import numpy as np
import pytest
from fakes.embedder import HashEmbedder

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.data.contract import save_queries
from morkit.question_pool.pool import build_pool, load_pool
from morkit.question_pool.rows import STEP_REDUCTIONS
from morkit.selection.confidence import Calibrator, reliability, signals
from morkit.selection.features import FEATURE_SETS, feature_spec
from morkit.selection.learned import (
    MIN_MIXED,
    LearnedFit,
    Setting,
    fit_learned,
)
from morkit.selection.learned_method import with_stored_learned
from morkit.selection.learners import ConditionalLogit, LambdaRank
from morkit.selection.router import Router


def _candidate(correct, **scores):
    return Candidate(text=f"answer {correct} {sorted(scores.items())}", correct=correct, scores=scores)


def _step_queries(n=80, seed=0):
    """A PRM whose LAST step finds the right answer while its MIN (the pool's reduction) does not, a noisy
    ORM, and a judge with ties: only features beyond one reduced score can learn the PRM's signal."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        right = int(rng.integers(0, 5))
        cands = []
        for c in range(5):
            last = float(rng.uniform(0.6, 1.0) if c == right else rng.uniform(0.0, 0.8))
            steps = (float(rng.uniform(0.0, 0.5)), float(rng.uniform(0.2, 0.8)), last)
            cands.append(_candidate(c == right, prm=steps, orm=float(rng.normal() + (0.7 if c == right else 0.0)),
                                    judge=float(rng.integers(5, 8))))
        out.append(Query(f"s{i}", f"step question {i} about topic {i % 7}", tuple(cands), domain="math"))
    return out


@pytest.fixture(scope="module")
def step_pool():
    return build_pool(_step_queries(), HashEmbedder(), rm_names=("prm", "orm", "judge"))


def test_pool_keeps_step_scores_under_every_reduction(step_pool, tmp_path):
    assert step_pool.step_rms == ("prm",) and step_pool.steps.shape == (80, 5, 1, len(STEP_REDUCTIONS))
    q0 = _step_queries()[0]
    steps = q0.candidates[0].scores["prm"]
    assert step_pool.steps[0, 0, 0].tolist() == [min(steps), sum(steps) / 3, steps[-1]]
    step_pool.save(tmp_path / "pool")
    loaded = load_pool(tmp_path / "pool")
    assert loaded.step_rms == ("prm",) and np.array_equal(loaded.steps, step_pool.steps)


def test_features_by_hand():
    scores = np.array([[[1.0, 5.0], [3.0, 5.0], [2.0, np.nan], [0.0, 4.0]]])  # one query, 4 candidates, 2 RMs
    valid = np.array([[True, True, True, True]])
    spec = feature_spec(FEATURE_SETS["full"], ("a", "b"), (), "min", scores, None, valid)
    raw = spec.raw(scores, None, valid)
    col = {name: i for i, name in enumerate(spec.names())}
    assert raw[0, :, col["rank:a"]] == pytest.approx([-1 / 6, 0.5, 1 / 6, -0.5])
    assert raw[0, :, col["rank:b"]] == pytest.approx([0.25, 0.25, 0.0, -0.5])  # a tie shares the rank; missing is 0
    assert raw[0, :, col["top:b"]].tolist() == [1, 1, 0, 0] and raw[0, :, col["tie:b"]].tolist() == [1, 1, 0, 0]
    assert raw[0, :, col["tie:a"]].tolist() == [0, 0, 0, 0] and raw[0, :, col["top:a"]].tolist() == [0, 1, 0, 0]
    assert raw[0, :, col["agreement:votes"]] == pytest.approx([0.25, 0.75, 0.0, 0.0])
    assert raw[0, 2, col["pool-z:b"]] == 0.0 and raw[0, 2, col["query-z:b"]] == 0.0
    assert spec.apply(scores, None, valid).shape == (1, 4, len(spec.names()))


@pytest.mark.slow
def test_features_of_a_query_do_not_depend_on_its_batch(step_pool):
    fit = fit_learned(step_pool, folds=3)
    rows = np.arange(10)
    args = (step_pool.rm_names, step_pool.step_rms)
    batch = fit.scores(step_pool.scores[rows], step_pool.steps[rows], step_pool.valid[rows], *args)
    alone = [fit.scores(step_pool.scores[[r]], step_pool.steps[[r]], step_pool.valid[[r]], *args)[0] for r in rows]
    assert np.array_equal(batch, np.stack(alone))


@pytest.mark.slow
def test_cv_picks_the_setting_that_reads_the_steps(step_pool):
    fit = fit_learned(step_pool, folds=4)
    table = {label: score for label, score, _ in fit.cv_table}
    assert all(c.setting.features in ("scores", "full", "scores+local", "full+local")  # all read the steps
               for c in fit.components)
    assert fit.cv_best_of_n == max(table.values()) > 0.8
    only_min = fit_learned(step_pool, folds=4, settings=[Setting("logit", "scores", {"penalty": 1.0})])
    from morkit.selection.learned import STACKER_SETTINGS

    stacker = fit_learned(step_pool, settings=STACKER_SETTINGS, baselines=False, min_mixed=1)  # the former stacker
    assert stacker.cv_best_of_n < fit.cv_best_of_n - 0.2  # one reduced score cannot see it
    assert only_min.cv_best_of_n > 0.8
    rel = fit.report["reliability"]
    assert sum(b["count"] for b in rel["bins"]) == rel["picks"] == 80 and 0 <= rel["ece"] <= 1
    assert fit.report["domains"]["math"]["questions"] == 80
    assert set(fit.report["importances"]) == set().union(*(c.spec.names() for c in fit.components))
    blend = [row for row in fit.cv_table if row[0].startswith("blend of")]
    assert len(blend) == 1 and blend[0][0].count(" + ") == 5  # logit x4 feature sets, lambdarank x2
    assert fit.report["repeats"] == 3 and "PRES (paper, with combinations)" in table


@pytest.mark.slow
def test_fit_round_trips_through_json_with_identical_scores(step_pool):
    blend = [Setting("logit", "scores", {"penalty": 3.0}), Setting("lambdarank", "full", {"rounds": 20})]
    for settings in ([Setting("logit", "full", {"penalty": 3.0})], [blend[1]], blend):
        fit = fit_learned(step_pool, folds=3, settings=settings)
        if len(settings) == 2:  # make the blend the pick, to round-trip a two-model fit
            fit = replace(fit, components=fit_learned(step_pool, folds=3, settings=blend[:1]).components
                          + fit_learned(step_pool, folds=3, settings=blend[1:]).components)
        setting = settings[0]
        again = LearnedFit.from_json(json.loads(json.dumps(fit.to_json())))
        args = (step_pool.scores, step_pool.steps, step_pool.valid, step_pool.rm_names, step_pool.step_rms)
        assert np.array_equal(fit.scores(*args), again.scores(*args), equal_nan=True)
        assert isinstance(again.components[0].model, ConditionalLogit if setting.learner == "logit" else LambdaRank)
        assert len(again.components) == len(fit.components) and again.label == fit.label


def test_calibrator_tracks_the_hit_rate():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 4))
    p = 1 / (1 + np.exp(-(0.3 + 1.5 * x[:, 0])))
    hits = (rng.random(2000) < p).astype(float)
    cal = Calibrator.fit(x, hits)
    assert np.abs(cal.predict(x) - p).mean() < 0.05
    assert reliability(cal.predict(x), hits)["ece"] < 0.05
    assert Calibrator.from_json(cal.to_json()) == cal


def test_signals_by_hand():
    scores = np.array([[3.0, 1.0, 1.0, 1.0]])
    members = np.array([[[5.0, 0.0], [1.0, 9.0], [1.0, 0.0], [1.0, 0.0]]])
    s = signals(scores, members, np.ones((1, 4), bool))[0]
    assert s[0] == pytest.approx(2 / np.sqrt(0.75)) and s[2] == 0.5 and s[3] == pytest.approx(np.log(4))


@pytest.mark.slow
def test_rank_lines_carry_confidence_and_abstain(embedder, tmp_path):
    pool = with_stored_learned(build_pool(_step_queries(), embedder, rm_names=("prm", "orm", "judge")))
    pool.save(tmp_path / "pool")
    queries = _step_queries(12, seed=5)
    save_queries(tmp_path / "q.jsonl", queries)
    out = tmp_path / "out.jsonl"
    assert main(["rank", str(tmp_path / "q.jsonl"), "--pool", str(tmp_path / "pool"), "-o", str(out),
                 "--no-run", "--abstain-below", "0.7"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 12 and all(0 < line["confidence"] < 1 for line in lines)
    assert all(line["abstain"] == (line["confidence"] < 0.7) for line in lines)
    assert {line["method"] for line in lines} == {"learned"} and all("learner" in line for line in lines)
    hits = [q.candidates[line["best_index"]].correct for q, line in zip(queries, lines)]
    assert np.mean(hits) > 0.6  # the steps' signal carries over to new questions
    for method in ("pres", "stacker"):  # methods without their own CV are calibrated leave-one-out
        assert main(["rank", str(tmp_path / "q.jsonl"), "--pool", str(tmp_path / "pool"), "-o", str(out),
                     "--no-run", "--method", method]) == 0
        assert all(0 < json.loads(line)["confidence"] < 1 for line in out.read_text().splitlines())


def test_bad_abstain_value_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["rank", "q.jsonl", "--pool", "p", "-o", str(tmp_path / "o"), "--abstain-below", "1.5"])
    assert exc.value.code == 2 and "--abstain-below" in capsys.readouterr().err


@pytest.mark.slow
def test_partial_availability_refits_and_says_so(step_pool):
    pool = with_stored_learned(step_pool)
    router = Router(pool, "learned", embedder=HashEmbedder())
    query = _step_queries(1, seed=9)[0]
    stripped = replace(query, candidates=tuple(replace(c, scores={k: v for k, v in c.scores.items() if k != "judge"})
                                               for c in query.candidates))
    ranking = router.route([stripped])[0].to_json()
    assert ranking["missing_rms"] == ["judge"] and "judge" not in ranking["ensemble"]["members"]
    assert router.route([query])[0].to_json().get("missing_rms") is None


def test_small_pool_falls_back_to_pres_with_a_warning(caplog):
    pool = build_pool(_step_queries(MIN_MIXED - 5), HashEmbedder(), rm_names=("prm", "orm", "judge"))
    with caplog.at_level(logging.WARNING):
        stored = with_stored_learned(pool)
    assert "learned" not in stored.meta and "PRES" in caplog.text
    ranking = Router(stored, embedder=HashEmbedder()).route([_step_queries(1, seed=3)[0]])[0].to_json()
    assert ranking["method"] == f"pres (learned needs {MIN_MIXED} mixed pool questions)"  # what chose, and why
    assert ranking["fallback"].startswith("pres")
    assert 0 <= ranking["confidence"] <= 1


@pytest.mark.slow
def test_damaged_stored_fit_is_an_input_error(step_pool):
    pool = with_stored_learned(step_pool)
    damaged = replace(pool, meta={**pool.meta, "learned": {**pool.meta["learned"], "components": []}})
    with pytest.raises(InputError, match="malformed learned selector"):
        Router(damaged, embedder=HashEmbedder()).route([_step_queries(1, seed=3)[0]])[0]


class _LookupRM:
    """A pair RM that returns the scores the step queries cached for each answer text (steps included)."""

    kind = "orm"

    def __init__(self, name, queries):
        self.name = name
        self.table = {c.text: c.scores[name] for q in queries for c in q.candidates}

    def score(self, pairs):
        from morkit.core.types import Score

        out = []
        for _, answer in pairs:
            value = self.table[answer]
            out.append(Score(min(value), steps=value) if isinstance(value, tuple) else Score(float(value)))
        return out


@pytest.mark.slow
def test_mor_verifier_scores_with_the_learned_ranker(step_pool):
    from morkit.verify.mor import query_verifier

    pool = with_stored_learned(step_pool)
    router = Router(pool, embedder=HashEmbedder())
    query = _step_queries(1, seed=4)[0]
    rms = {name: _LookupRM(name, [query]) for name in pool.rm_names}
    selection, verifier = query_verifier(router, query, rms)
    texts = [c.text for c in query.candidates]
    verdicts = verifier.verify(query.question, texts, context=texts)
    want = router.rank(query, selection).scores
    assert [v.score for v in verdicts] == pytest.approx(want) and verdicts[0].feedback.startswith("learned")


def test_the_margin_grows_with_the_rows_compared():
    """One learned row keeps the one-standard-error rule; the best of many must clear more (Bonferroni over the
    rule's one-sided rate P(Z > 1)), since the largest of many noisy CV estimates is biased upward."""
    from morkit.selection.cv import margin

    assert margin(1) == pytest.approx(1.0) and margin(0) == pytest.approx(1.0)
    assert margin(12) == pytest.approx(2.2196, abs=1e-3)
    assert margin(2) < margin(4) < margin(12)



def test_a_large_pool_weighs_the_grid_on_a_sample_and_refits_the_pick_on_all(step_pool, monkeypatch):
    from morkit.selection import learned

    monkeypatch.setattr(learned, "REPEATS_UP_TO", 60)  # the step pool's 80 questions count as a large pool
    settings = [Setting("logit", "scores", {"penalty": 1.0})]
    fits = {}
    for sample in (50, 80):
        fits[sample] = fit_learned(step_pool, folds=4, settings=settings, baselines=False, cv_sample=sample)
    fit = fits[50]
    assert fit.report["cv_questions"] == 50 and fit.report["questions"] == 80 and fit.report["repeats"] == 1
    assert fit.report["reliability"]["picks"] == 50  # out-of-fold picks: the CV's questions only
    assert fit.cv_table != fits[80].cv_table  # weighed on fewer questions ...
    assert fit.components[0].to_json() == fits[80].components[0].to_json()  # ... and refitted on all of them
