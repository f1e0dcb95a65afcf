"""The cascade: a cheap route, escalated to an expensive one where its calibrated confidence is low; the threshold
from a spend, conditional calibrators, what each query costs, and its options. Real RewardMATH scores, two cheap RMs
and two expensive ones, a pool of 283 questions and 100 held out (the real MiniLM embedder)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from morkit.core.errors import InputError
from morkit.question_pool.pool import build_pool
from morkit.question_pool.prr import best_of_n_matrix
from morkit.reward_models.cost import CostTable
from morkit.selection import confidence as conf
from morkit.selection.cascade import Cascade, CascadeOptions, _signals
from morkit.selection.learned import Setting, fit_learned
from morkit.selection.router import Ranking

CHEAP = ("Eurus-RM", "ReasonEval_7B")
THEN = ("internlm2_20b", "gpt4o")
COSTS = CostTable({"Eurus-RM": 14.0, "ReasonEval_7B": 14.0, "internlm2_20b": 40.0, "gpt4o": 300.0})
SPEND = 0.3


@pytest.fixture(scope="session")
def split(data_dir):
    from morkit.data.datasets import rewardmath_rm_scores

    queries = rewardmath_rm_scores(data_dir)
    order = np.random.default_rng(0).permutation(len(queries))
    return [queries[i] for i in order[:283]], [queries[i] for i in order[283:]]


@pytest.fixture(scope="session")
def pool(split, embedder):
    return build_pool(split[0], embedder, rm_names=CHEAP + THEN)


@pytest.fixture(scope="session")
def spent(pool, embedder):
    """The cascade escalating the SPEND share of the pool's out-of-fold picks, with costs."""
    return Cascade.fit(pool, CascadeOptions(CHEAP, THEN, spend=SPEND), embedder=embedder, costs=COSTS)


@pytest.fixture(scope="session")
def held_rankings(spent, split):
    return spent.route(split[1])


def _hit(query, ranking):
    return float(np.mean([query.candidates[i].correct for i in ranking.tied]))


def _cascade(spent, below):
    """The spent cascade's routers and fits at another threshold (its routers' calibrators already fitted)."""
    return Cascade(spent.pool, CascadeOptions(CHEAP, THEN, below=below), spent.cheap, spent.escalated, spent.learned,
                   below)


def test_out_of_fold_picks_map_to_pool_rows_and_stay_out_of_the_stored_fit(pool):
    from morkit.selection.learned import LearnedFit

    single = Setting("single", "query-z", {"column": 1}, "only the second")
    fit = fit_learned(pool, CHEAP, settings=[single], baselines=False, min_mixed=1)
    picks = fit.out_of_fold
    assert picks is not None and len(picks.rows) == len(pool) == len(picks.hits) == len(picks.signals)
    rows = np.sort(picks.rows)
    assert np.array_equal(rows, np.arange(len(pool)))
    # the pick of a single RM is its top-scored candidate: its hit on each pool row is that RM's best-of-n there
    column = pool.rm_names.index(CHEAP[1])
    scores = np.asarray(pool.scores[picks.rows])[:, :, [column]]
    expected = best_of_n_matrix(scores, np.asarray(pool.correct[picks.rows]), np.asarray(pool.valid[picks.rows]))
    assert np.allclose(picks.hits, expected[:, 0])
    assert picks.signals.shape == (len(pool), len(conf.SIGNALS)) and len(np.unique(picks.folds)) == 5
    assert "out_of_fold" not in fit.to_json()
    assert LearnedFit.from_json(fit.to_json()).out_of_fold is None


def test_spend_escalates_that_share_of_the_pool_and_about_it_of_held_out_queries(spent, held_rankings):
    report = spent.report
    assert report["spend"] == SPEND and report["picks"] == 283
    assert abs(report["escalated_share"] - SPEND) <= 1 / 283
    cheap = spent.learned.fit_for(frozenset(CHEAP))
    decided = cheap.calibrator.predict(cheap.out_of_fold.signals)
    assert np.mean(decided < spent.threshold) == report["escalated_share"]
    held_share = np.mean([r.escalated for r in held_rankings])
    assert abs(held_share - SPEND) < 0.15, held_share
    accuracy = report["accuracy"]
    assert accuracy["cheap"] < accuracy["cascade"] < accuracy["escalated"]  # it escalates where the cheap route errs
    assert report["notes"] == []
    for side in ("kept", "escalated"):  # cross-fitted on the pool: conditioning does not make the ECE worse
        assert report[side]["conditional"]["ece"] <= report[side]["unconditional"]["ece"], report[side]
    assert report["cost_per_candidate"]["cheap"] == 28.0 and report["cost_per_candidate"]["escalated"] == 368.0
    assert report["cost_per_candidate"]["cascade"] == pytest.approx(28.0 + 340.0 * report["escalated_share"])


def test_below_0_never_escalates_and_below_1_always(pool, spent, split):
    held = split[1]
    never = _cascade(spent, 0.0).route(held)
    cheap = spent.cheap.route(held)
    assert not any(r.escalated for r in never) and all(r.cost is None for r in never)
    assert [(r.best_index, r.scores, r.selection.to_json()) for r in never] == [
        (r.best_index, r.scores, r.selection.to_json()) for r in cheap]
    fit = spent.learned.fit_for(frozenset(CHEAP))
    stage = spent.stage(frozenset(pool.rm_names))
    expected = [float(fit.calibrator.predict(_signals(q, r, stage.cheap, "min"))[0]) for q, r in zip(held, never)]
    assert [r.confidence for r in never] == pytest.approx(expected)  # nothing escalated: the route's own calibrator

    always = _cascade(spent, 1.0)
    assert always.stage(frozenset(pool.rm_names)).report["escalated_share"] == 1.0
    raised = always.route(held)
    assert all(r.escalated for r in raised)
    direct = spent.escalated.route(held)
    assert [(r.best_index, r.scores) for r in raised] == [(r.best_index, r.scores) for r in direct]


def test_escalated_confidence_comes_from_the_conditional_calibrator(spent, split, held_rankings):
    held = split[1]
    stage = spent.stage(frozenset(spent.pool.rm_names))
    above = spent.learned.fit_for(frozenset(CHEAP + THEN))
    cheap = spent.learned.fit_for(frozenset(CHEAP))
    assert stage.raised is not above.calibrator and stage.kept is not cheap.calibrator
    assert stage.raised.fitted_on == spent.report["escalated"]["picks"]
    moved = 0
    for query, ranking, first in zip(held, held_rankings, spent.cheap.route(held)):
        members = stage.escalated if ranking.escalated else stage.cheap
        x = _signals(query, ranking, members, "min")
        conditional = (stage.raised if ranking.escalated else stage.kept).predict(x)[0]
        unconditional = (above if ranking.escalated else cheap).calibrator.predict(x)[0]
        assert ranking.confidence == pytest.approx(conditional)
        if ranking.escalated:
            moved += abs(conditional - unconditional) > 1e-3
            assert cheap.calibrator.predict(_signals(query, first, stage.cheap, "min"))[0] < spent.threshold
    assert moved > 0


def test_conditional_calibration_on_held_out_queries(spent, split, held_rankings):
    """On the held-out queries the cascade escalates, the conditional calibrator's mean confidence is closer to
    their accuracy than the escalated route's unconditional calibrator's."""
    held = split[1]
    stage = spent.stage(frozenset(spent.pool.rm_names))
    above = spent.learned.fit_for(frozenset(CHEAP + THEN))
    up = [(q, r) for q, r in zip(held, held_rankings) if r.escalated]
    hits = np.array([_hit(q, r) for q, r in up])
    conditional = np.array([r.confidence for _, r in up])
    unconditional = np.array([above.calibrator.predict(_signals(q, r, stage.escalated, "min"))[0] for q, r in up])
    assert abs(conditional.mean() - hits.mean()) < abs(unconditional.mean() - hits.mean())


@pytest.mark.slow
def test_conditional_calibration_over_every_question_held_out_once(split, embedder):
    """Five pools, each holding out a fifth of the 383 questions: on all the queries the cascades escalate, the
    conditional calibrator's mean confidence is closer to their accuracy than the unconditional one's."""
    queries = split[0] + split[1]
    hits, conditional, unconditional = [], [], []
    for k in range(5):
        held = queries[k::5]
        pool = build_pool([q for i, q in enumerate(queries) if i % 5 != k], embedder, rm_names=CHEAP + THEN)
        cascade = Cascade.fit(pool, CascadeOptions(CHEAP, THEN, spend=SPEND), embedder=embedder)
        stage = cascade.stage(frozenset(pool.rm_names))
        above = cascade.learned.fit_for(frozenset(CHEAP + THEN))
        for query, ranking in zip(held, cascade.route(held)):
            if ranking.escalated:
                hits.append(_hit(query, ranking))
                conditional.append(ranking.confidence)
                unconditional.append(above.calibrator.predict(_signals(query, ranking, stage.escalated, "min"))[0])
    accuracy = np.mean(hits)
    assert abs(np.mean(conditional) - accuracy) < abs(np.mean(unconditional) - accuracy)


def test_cost_is_what_ran_for_each_query(pool, embedder, spent, split):
    """Candidates without scores: a session fills what each route asks for, and each ranking costs that."""
    held = [replace(q, candidates=tuple(replace(c, text=f"answer {i}", scores={}) for i, c in enumerate(q.candidates)))
            for q in split[1][:40]]
    full = {q.id: q for q in split[1]}
    asked: dict[str, list[str]] = {}

    class Session:
        def fill(self, queries, wanted):
            out = []
            for query, names in zip(queries, wanted):
                names = list(names)
                asked.setdefault(query.id, []).extend(names)
                source = full[query.id].candidates
                out.append(replace(query, candidates=tuple(
                    replace(c, scores={**c.scores, **{n: s.scores[n] for n in names}})
                    for c, s in zip(query.candidates, source))))
            return out

    cascade = Cascade.fit(pool, CascadeOptions(CHEAP, THEN, spend=SPEND), embedder=embedder, costs=COSTS,
                          runnable=pool.rm_names, session=Session(), learned=spent.learned)
    rankings = cascade.route(held)
    assert {r.escalated for r in rankings} == {True, False}
    for query, ranking in zip(held, rankings):
        ran = set(asked[query.id])
        assert ran == (set(CHEAP + THEN) if ranking.escalated else set(CHEAP))
        assert ranking.cost == pytest.approx(COSTS.of(ran, len(query.candidates)))
        assert ranking.to_json()["cost"] == ranking.cost and ranking.to_json()["escalated"] == ranking.escalated


def test_a_lone_answer_or_no_answer_is_ranked_as_the_cheap_route_ranks_it(spent, split):
    query = split[1][0]
    lone, empty = replace(query, id="lone", candidates=query.candidates[:1]), replace(query, id="none", candidates=())
    got = spent.route([lone, empty])
    cheap = spent.cheap.route([lone, empty])
    assert [r.escalated for r in got] == [False, False]
    assert got[0].confidence == cheap[0].confidence and got[0].best_index == 0
    assert got[1].best_index is None and got[1].cost == 0.0
    assert got[0].cost == COSTS.of(got[0].selection.choice.ensemble.members, 1)


def test_a_query_without_the_cheap_rms_escalates(spent, split):
    """A query whose candidates lack the cheap RMs' scores (and may not run them) has no cheap pick: it escalates to
    the learned selector over the expensive RMs it has."""
    query = split[1][0]
    bare = replace(query, id="bare", candidates=tuple(
        replace(c, scores={n: v for n, v in c.scores.items() if n in THEN}) for c in query.candidates))
    got = spent.route([bare])[0]
    assert got.escalated and got.selection.choice.ensemble.members
    assert set(got.selection.choice.ensemble.members) <= set(THEN)
    assert np.isfinite(got.confidence)
    note = spent.stage(frozenset(THEN)).report["notes"]
    assert any("no learned fit" in n for n in note)


def test_a_fit_stored_with_the_pool_is_fitted_again_for_its_picks(pool, spent):
    from morkit.selection.cascade import LearnedWithPicks

    everything = frozenset(pool.rm_names)
    stored = replace(pool, meta={**pool.meta, "learned": spent.learned.fit_for(everything).to_json()})
    fit = LearnedWithPicks(stored).fit_for(everything)
    assert fit.out_of_fold is not None and fit.label == spent.learned.fit_for(everything).label


def test_ranking_json_carries_cost_and_escalated_only_when_set(held_rankings):
    plain = replace(held_rankings[0], cost=None, escalated=None).to_json()
    assert "cost" not in plain and "escalated" not in plain
    assert {"cost", "escalated"} <= set(held_rankings[0].to_json())
    assert Ranking.__dataclass_fields__["cost"].default is None


@pytest.mark.parametrize("kwargs, message", [
    ({"cheap": ("a",), "then": ("a", "b"), "below": 0.5}, "--then a: also a cheap RM"),
    ({"cheap": ("a",), "then": ("b",)}, "give exactly one of --below"),
    ({"cheap": ("a",), "then": ("b",), "below": 0.5, "spend": 0.2}, "not both"),
    ({"cheap": (), "then": ("b",), "below": 0.5}, "--cascade: name at least one"),
    ({"cheap": ("a",), "then": (), "below": 0.5}, "--then: name at least one"),
    ({"cheap": ("a", "a"), "then": ("b",), "below": 0.5}, "--cascade a: named twice"),
    ({"cheap": ("a",), "then": ("b",), "below": 1.5}, "--below must be in"),
    ({"cheap": ("a",), "then": ("b",), "spend": 1.0}, "--spend must be between"),
])
def test_bad_options_are_one_line_errors(kwargs, message):
    with pytest.raises(InputError, match=message) as caught:
        CascadeOptions(**kwargs)
    assert "\n" not in str(caught.value)


def test_rms_outside_the_pool_are_named(pool):
    for options, message in ((CascadeOptions(("nope",), THEN, below=0.5), "--cascade nope: not an RM of the pool"),
                             (CascadeOptions(CHEAP, ("gpt4o", "nope"), below=0.5), "--then nope: not an RM")):
        with pytest.raises(InputError, match=message) as caught:
            Cascade.fit(pool, options)
        assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match="no cost for internlm2_20b, gpt4o: "):
        Cascade.fit(pool, CascadeOptions(CHEAP, THEN, below=0.5), costs=CostTable({n: 1.0 for n in CHEAP}))
