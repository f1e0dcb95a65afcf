"""Leak warnings (morkit.question_pool.leakage): an RM far ahead of every other on a pool is flagged, with its
agreement with the other RMs and its accuracy when alone; in `pool info` (text and --json) and `pool report`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from morkit.cli import main
from morkit.core.types import Candidate, Query
from morkit.question_pool import leakage
from morkit.question_pool.leakage import (
    LEAD,
    MIN_SHARED,
    Z,
    Paired,
    evidence_from_arrays,
    leak_warnings,
    rm_evidence,
)
from morkit.question_pool.pool import PoolConfig, build_pool, load_pool
from morkit.question_pool.report import write_report


def _query(qid, scores_by_rm, labels):
    return Query(qid, f"question {qid}?", tuple(
        Candidate(text=f"answer {i}", correct=ok,
                  scores={rm: float(v[i]) for rm, v in scores_by_rm.items() if v[i] is not None})
        for i, ok in enumerate(labels)), domain="math")


def leaky_queries(questions=80, n=4, seed=0, knower="oracle", noisy=("rm-a", "rm-b")):
    """Mixed questions: `knower` scores every answer by its label (it memorised them), the others weakly."""
    rng = np.random.default_rng(seed)
    out = []
    for q in range(questions):
        labels = rng.permutation([True, False] + list(rng.random(n - 2) < 0.4))
        scores = {name: labels * 0.3 + rng.normal(size=n) for name in noisy}
        if knower:
            scores[knower] = labels.astype(float)
        out.append(_query(f"q{q}", scores, [bool(x) for x in labels]))
    return out


def test_hand_made_pool_agreement_and_accuracy_alone(hash_embedder):
    queries = [
        _query("q1", {"a": [3, 1, 2], "b": [1, 3, 2], "c": [1, 3, 3]}, [True, False, False]),
        _query("q2", {"a": [1, 2, 2], "b": [1, 2, 3], "c": [0, 1, 0]}, [False, True, False]),
        _query("q3", {"a": [1, 2], "b": [1, 2], "c": [1, 2]}, [True, True]),  # not mixed: left out
        _query("q4", {"a": [1, 0], "b": [1, None], "c": [0, 1]}, [True, False]),  # b does not score it
    ]
    pool = build_pool(queries, hash_embedder, config=PoolConfig(max_members=1))
    ev = rm_evidence(pool, min_alone=1)
    # picks: q1 a->0 (right), b->1, c->{1,2}; q2 a->{1,2} (half right), b->2, c->1 (right); q4 a->0 (right), c->1
    # hits: a 1, .5, 1; b 0, 0; c 0, 1, 0
    assert (ev["a"].questions, ev["b"].questions, ev["c"].questions) == (3, 2, 3)
    assert ev["a"].accuracy == pytest.approx(2.5 / 3) and ev["b"].accuracy == 0
    assert ev["c"].accuracy == pytest.approx(1 / 3)
    # a: q1 0 (b), 0 (c); q2 .5 (b), .5 (c); q4 0 (c) -> 1/5.  b: q1 0, .5; q2 .5, 0 -> 1/4.  c: 0, .5, .5, 0, 0
    assert ev["a"].agreement == pytest.approx(0.2) and ev["b"].agreement == pytest.approx(0.25)
    assert ev["c"].agreement == pytest.approx(0.2)
    # alone = mean agreement with the others below 1/2: a on q1, q4 (not q2, exactly 1/2); b on q1, q2; c on all
    assert (ev["a"].alone, ev["b"].alone, ev["c"].alone) == (2, 2, 3)
    assert ev["a"].accuracy_alone == 1.0 and ev["b"].accuracy_alone == 0.0
    assert ev["c"].accuracy_alone == pytest.approx(1 / 3)
    # paired a - b over q1, q2: differences 1 and .5 -> mean .75, sd .3536, se .25, z 3
    ab = ev["a"].versus["b"]
    assert (ab.questions, ab.mean, ab.std_error) == (2, pytest.approx(0.75), pytest.approx(0.25))
    assert ab.z == pytest.approx(3)
    assert ev["b"].versus["a"].mean == pytest.approx(-0.75) and ev["a"].versus["c"].questions == 3
    assert ev["a"].versus["c"].mean == pytest.approx((1 - 0.5 + 1) / 3)
    assert all(math.isnan(e.accuracy_alone) for e in rm_evidence(pool).values())  # default: under 10 questions
    assert leak_warnings(pool) == []  # 2 shared questions, far under MIN_SHARED


def test_an_rm_that_knows_the_labels_is_flagged(hash_embedder):
    pool = build_pool(leaky_queries(), hash_embedder)
    ev = rm_evidence(pool)
    assert ev["oracle"].accuracy == 1.0 and ev["oracle"].questions == 80
    assert max(ev["rm-a"].accuracy, ev["rm-b"].accuracy) <= 1.0 - LEAD
    assert ev["oracle"].accuracy_alone == 1.0 and ev["oracle"].alone >= 10
    warnings = leak_warnings(pool)
    assert len(warnings) == 1 and leak_warnings(ev) == warnings
    note = warnings[0]
    assert note.startswith("oracle is far ahead of every other RM") and "\n" not in note
    runner = max(("rm-a", "rm-b"), key=lambda r: ev[r].accuracy)
    assert f"best-of-n 1.00 against {ev[runner].accuracy:.2f} for the runner-up {runner}" in note
    assert f"1.00 on the {ev['oracle'].alone} questions where its pick goes against the others'" in note
    assert "own training questions" in note and "check that none of the pool's questions were used to train" in note


def test_two_good_rms_that_agree_are_not_flagged(hash_embedder):
    queries = leaky_queries(knower=None, noisy=("rm-a",))
    rng = np.random.default_rng(1)
    agreeing = []
    for q in queries:
        good = [float(c.correct) + 0.1 * rng.random() for c in q.candidates]
        agreeing.append(Query(q.id, q.question, tuple(
            Candidate(c.text, correct=c.correct, scores={**c.scores, "good-1": g, "good-2": 2 * g + 1})
            for c, g in zip(q.candidates, good)), domain=q.domain))
    ev = rm_evidence(build_pool(agreeing, hash_embedder))
    assert ev["good-1"].accuracy == ev["good-2"].accuracy == 1.0
    assert ev["good-1"].versus["good-2"].mean == 0 and ev["good-1"].versus["rm-a"].z > Z
    assert leak_warnings(ev) == []


def test_one_rm_and_too_few_questions_give_no_warning(hash_embedder):
    alone = [Query(q.id, q.question, tuple(Candidate(c.text, correct=c.correct, scores={"oracle": c.scores["oracle"]})
                                           for c in q.candidates)) for q in leaky_queries()]
    ev = rm_evidence(build_pool(alone, hash_embedder))
    assert ev["oracle"].accuracy == 1.0 and math.isnan(ev["oracle"].agreement) and ev["oracle"].versus == {}
    assert leak_warnings(ev) == []
    few = rm_evidence(build_pool(leaky_queries(questions=MIN_SHARED - 1), hash_embedder))
    assert few["oracle"].versus["rm-a"].z >= Z and leak_warnings(few) == []


def test_a_zero_spread_difference_counts_as_clear():
    assert Paired(40, 0.5, 0.0).z == math.inf and Paired(40, 0.0, 0.0).z == 0.0
    assert math.isnan(Paired(1, 0.5, float("nan")).z)


def test_chunks_and_an_on_the_fly_sample_give_the_same_evidence(hash_embedder, monkeypatch, tmp_path):
    pool = build_pool(leaky_queries(questions=60), hash_embedder)
    whole = rm_evidence(pool)
    monkeypatch.setattr(leakage, "CHUNK", 7)
    chunked = rm_evidence(pool)
    for name in pool.rm_names:
        assert chunked[name].accuracy == pytest.approx(whole[name].accuracy)
        assert chunked[name].agreement == pytest.approx(whole[name].agreement)
        assert chunked[name].versus["rm-a" if name != "rm-a" else "rm-b"].z == pytest.approx(
            whole[name].versus["rm-a" if name != "rm-a" else "rm-b"].z)
    on_the_fly = build_pool(leaky_queries(questions=60), hash_embedder, config=PoolConfig(statistics="on-the-fly"))
    on_the_fly.save(tmp_path / "pool")
    loaded = load_pool(tmp_path / "pool")  # memory-mapped arrays
    monkeypatch.setattr(leakage, "SAMPLE", 40)
    sampled = rm_evidence(loaded)
    rows = leakage.sample_rows(60, 40, seed=0)
    expected = evidence_from_arrays(pool.scores[rows], pool.correct[rows], pool.valid[rows], pool.rm_names)
    assert sampled["oracle"].sampled == (40, 60)
    assert sampled["rm-a"].accuracy == pytest.approx(expected["rm-a"].accuracy)
    assert sampled["rm-a"].agreement == pytest.approx(expected["rm-a"].agreement)
    (note,) = leak_warnings(sampled)
    assert "(a seeded sample of 40 of 60 questions)" in note


def test_pool_info_and_report_show_the_warning(hash_embedder, tmp_path, capsys):
    out = tmp_path / "pool"
    build_pool(leaky_queries(), hash_embedder).save(out)
    assert main(["pool", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "agreement" in text and "acc alone" in text
    (line,) = [row for row in text.splitlines() if "warning:" in row]
    assert line.startswith("  warning: oracle is far ahead of every other RM")
    assert main(["pool", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert len(info["warnings"]) == 1 and info["warnings"][0].startswith("oracle is far ahead")
    assert info["rms"]["oracle"]["accuracy_alone"] == 1.0 and 0 <= info["rms"]["oracle"]["agreement"] < 1
    page = write_report(load_pool(out), tmp_path / "report.html").read_text()
    assert 'role="alert"' in page and "oracle is far ahead of every other RM" in page
    assert page.index('role="alert"') < page.index("PRR by reward model and domain")  # near the top
    assert "Reward models against each other" in page and "best-of-n alone" in page


def test_a_pool_without_a_leak_has_no_warning_box(hash_embedder, tmp_path):
    pool = build_pool(leaky_queries(knower=None), hash_embedder)
    assert pool.summary()["warnings"] == []
    page = write_report(pool, tmp_path / "report.html").read_text()
    assert 'role="alert"' not in page and "Reward models against each other" in page


def test_the_report_escapes_an_rm_name_in_a_warning(hash_embedder, tmp_path):
    evil = "<script>alert(1)</script>"
    page = write_report(build_pool(leaky_queries(knower=evil), hash_embedder), tmp_path / "report.html").read_text()
    assert "<script" not in page and 'role="alert"' in page and "&lt;script&gt;alert(1)&lt;/script&gt; is far" in page
