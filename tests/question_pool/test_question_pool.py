"""Question pool arithmetic: PRR through ranks, ensembles, normalisation, skips, store, add, index."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.question_pool.ensembles import (
    Ensemble,
    Normalizer,
    combine,
    enumerate_ensembles,
    member_weights,
)
from morkit.question_pool.index import IndexConfig, build_index, recall_at_k, search
from morkit.question_pool.pool import (
    PoolConfig,
    add_questions,
    build_pool,
    ensemble_statistics,
    load_pool,
)
from morkit.question_pool.prr import best_of_n_matrix, prr, prr_matrix


def pair_loop_prr(scores, correct) -> float:
    """PRR by its definition: every (correct, incorrect) pair, strictly right-ordered counts 1."""
    pairs = [(g, b) for g, cg in zip(scores, correct) if cg for b, cb in zip(scores, correct) if not cb]
    return float("nan") if not pairs else sum(g > b for g, b in pairs) / len(pairs)


def test_prr_hand_example_ties_count_wrong():
    # pairs (3,1) (3,2) (2,1) right; (2,2) is a tie -> wrong: 3/4
    assert prr([3, 1, 2, 2], [True, False, True, False]) == 0.75
    assert prr([1, 1], [True, False]) == 0.0
    assert math.isnan(prr([1, 2], [True, True]))


def test_prr_matrix_matches_pair_loop_with_ties_padding_and_missing():
    rng = np.random.default_rng(1)
    q, n, e = 200, 8, 4
    scores = rng.integers(0, 4, (q, n, e)).astype(float)
    correct = rng.random((q, n)) < 0.4
    valid = rng.random((q, n)) < 0.8
    scores[5, :, 2] = np.nan  # one scorer lacks scores on question 5
    got = prr_matrix(scores, correct, valid)
    for qi, ei in itertools.product(range(q), range(e)):
        s, c = scores[qi, valid[qi], ei], correct[qi, valid[qi]]
        want = float("nan") if np.isnan(s).any() else pair_loop_prr(s, c)
        assert (math.isnan(want) and math.isnan(got[qi, ei])) or abs(want - got[qi, ei]) < 1e-12, (qi, ei)
    assert math.isnan(got[5, 2]) == bool(valid[5].any())


def test_best_of_n_shares_ties():
    scores = np.array([[[2.0], [2.0], [1.0], [9.0]]])
    got = best_of_n_matrix(scores, np.array([[True, False, False, True]]), np.array([[True, True, True, False]]))
    assert got[0, 0] == 0.5  # the 9.0 is padding; the top tie is one right, one wrong


def test_weightings():
    assert member_weights("sum", [0.2, 0.8]) == (1.0, 1.0)
    assert member_weights("linear", [0.2, 0.6]) == pytest.approx((0.25, 0.75))
    soft = member_weights("softmax", [0.2, 0.6], temperature=0.1)
    assert soft == pytest.approx(tuple(np.exp([2, 6]) / np.exp([2, 6]).sum()))
    with pytest.raises(ValueError):
        member_weights("max", [0.1])


def test_enumerate_counts_and_names():
    names = ["a", "b", "c", "d"]
    ens = enumerate_ensembles(names, dict.fromkeys(names, 0.5), max_members=3)
    assert len(ens) == 4 + (6 + 4) * 3
    assert ens[0] == Ensemble(("a",), (1.0,)) and ens[4].name == "a+b@linear"
    assert len({e.name for e in ens}) == len(ens)


def test_combine_nan_only_hits_ensembles_using_the_member():
    normalised = np.array([[1.0, np.nan, 2.0]])
    w = np.array([[1.0, 0.5, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 1.0]])
    out = combine(normalised, w)
    assert out[0, 0] == 1.0 and math.isnan(out[0, 1]) and out[0, 2] == 2.0


def test_zscore_normaliser_uses_valid_candidates_only():
    scores = np.array([[[1.0], [3.0], [100.0]]])
    valid = np.array([[True, True, False]])
    z = Normalizer.fit("zscore", ["r"], scores, valid)
    assert z.shift["r"] == 2.0 and z.scale["r"] == 1.0
    assert Normalizer.fit("raw", ["r"], scores, valid).apply(["r"], scores)[0, 2, 0] == 100.0


def _query(qid, scores_by_rm, labels, domain="math", question=None):
    n = len(labels)
    cands = tuple(Candidate(text=f"answer {i}", correct=labels[i],
                            scores={rm: v[i] for rm, v in scores_by_rm.items() if v[i] is not None})
                  for i in range(n))
    return Query(qid, question or f"question {qid}", cands, domain=domain)


def small_queries():
    return [
        _query("q1", {"a": [3, 1, 2, 2], "b": [0.1, 0.9, 0.5, 0.2]}, [True, False, True, False]),
        _query("q2", {"a": [1, 2, 3], "b": [3, 2, 1]}, [False, False, True], domain="code"),
        _query("q3", {"a": [5, 4], "b": [1, 0]}, [True, True]),  # single label: PRR NaN
        _query("q4", {"a": [2, 1, 0], "b": [0.3, None, 0.1]}, [True, False, False]),  # b missing once
        _query("q5", {"a": [1], "b": [1]}, [True]),  # one candidate: skipped
        Query("q6", "unlabelled", (Candidate("x", scores={"a": 1, "b": 1}), Candidate("y", scores={"a": 2, "b": 2}))),
    ]


def test_build_pool_prr_skips_and_missing(hash_embedder):
    pool = build_pool(small_queries(), hash_embedder, config=PoolConfig(max_members=2))
    assert [q.id for q in pool.questions] == ["q1", "q2", "q3", "q4"]
    assert pool.meta["skipped"] == {"unlabelled": 1, "fewer_than_two_candidates": 1}
    assert pool.meta["missing_scores"] == {"a": 0, "b": 1}
    names = [e.name for e in pool.ensembles]
    a, b, ab_sum = names.index("a"), names.index("b"), names.index("a+b@sum")
    assert pool.prr[0, a] == 0.75 and pool.prr[1, a] == 1.0 and pool.prr[1, b] == 0.0
    assert math.isnan(pool.prr[2, a]) and pool.prr[3, a] == 1.0
    assert math.isnan(pool.prr[3, b]) and math.isnan(pool.prr[3, ab_sum])  # missing member -> NaN
    assert pool.global_prr["a"] == pytest.approx((0.75 + 1.0 + 1.0) / 3)
    # an ensemble's PRR equals the pair loop on the z-scored weighted sum
    z = pool.normalizer
    s = [z.apply(["a", "b"], np.array([[3, .1], [1, .9], [2, .5], [2, .2]])) @ np.array([1.0, 1.0])]
    assert pool.prr[0, ab_sum] == pytest.approx(pair_loop_prr(s[0], [True, False, True, False]))


def test_no_usable_questions_and_no_scores_are_errors(hash_embedder):
    with pytest.raises(InputError, match="no usable questions"):
        build_pool(small_queries()[4:], hash_embedder)
    bare = [Query("x", "q", (Candidate("a", correct=True), Candidate("b", correct=False)))]
    with pytest.raises(InputError, match="no RM scores"):
        build_pool(bare, hash_embedder)


def test_store_round_trip_and_atomic_replace(tmp_path, hash_embedder, monkeypatch):
    pool = build_pool(small_queries(), hash_embedder, provenance={"inputs": [{"dataset": "unit"}]})
    target = tmp_path / "pools" / "pool"
    pool.save(target)
    again = load_pool(target)
    for name in ("scores", "correct", "valid", "prr", "top1", "embeddings"):
        assert np.array_equal(getattr(pool, name), getattr(again, name), equal_nan=True), name
    assert again.ensembles == pool.ensembles and again.normalizer == pool.normalizer
    assert again.questions == pool.questions and again.config == pool.config
    assert again.meta["history"][0]["provenance"] == {"inputs": [{"dataset": "unit"}]}
    sims, ids = search(again.index, pool.embeddings[2], 2)
    assert ids[0, 0] == 2 and sims[0, 0] == pytest.approx(1.0, abs=1e-5)
    json.loads((target / "pool.json").read_text())  # standard JSON, no NaN tokens

    from morkit.question_pool import store

    def broken(index, path):
        raise OSError("disk full")

    monkeypatch.setattr(store, "write_index", broken)
    with pytest.raises(OSError):
        pool.save(target)
    assert load_pool(target).questions == pool.questions  # the old pool is intact
    assert sorted(p.name for p in target.parent.iterdir()) == ["pool"]  # no temp dirs left


def test_load_errors_say_what_is_wrong(tmp_path, hash_embedder):
    with pytest.raises(InputError, match="no such pool"):
        load_pool(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a pool directory"):
        load_pool(tmp_path / "empty")
    pool = build_pool(small_queries(), hash_embedder)
    pool.save(tmp_path / "p")
    np.save(tmp_path / "p" / "prr.npy", np.zeros((3, 2), np.float32))
    with pytest.raises(InputError, match=r"prr.npy: shape \(3, 2\)"):
        load_pool(tmp_path / "p")
    pool.save(tmp_path / "p")
    _edit_header(tmp_path / "p", lambda h: h.update(format_version=99))
    with pytest.raises(InputError, match="format version 99"):
        load_pool(tmp_path / "p")
    pool.save(tmp_path / "p")
    (tmp_path / "p" / "index.faiss").unlink()
    with pytest.raises(InputError, match="missing FAISS index"):
        load_pool(tmp_path / "p")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "thesis.tex").write_text("precious")
    with pytest.raises(InputError, match="not a pool directory"):
        pool.save(tmp_path / "user")


@pytest.mark.parametrize("damage,match", [
    (lambda d: (d / "pool.json").write_text("[]"), r"pool.json: not a JSON object"),
    (lambda d: (d / "pool.json").write_bytes(b"\xff\xfe"), r"pool.json: unreadable"),
    (lambda d: _edit_header(d, lambda h: h.pop("skipped")), r"pool.json: missing key 'skipped'"),
    (lambda d: _edit_header(d, lambda h: h["config"].update(max_members=0)), r"pool.json: malformed pool header"),
    (lambda d: _edit_header(d, lambda h: h.update(ensembles=[{"weights": [1.0]}] * len(h["ensembles"]))),
     r"pool.json: malformed pool header"),
    (lambda d: (d / "index.faiss").write_bytes(b"not an index"), r"index.faiss: unreadable FAISS index"),
    (lambda d: (d / "scores.npy").write_bytes(b"garbage"), r"scores.npy: unreadable array"),
])
def test_corrupt_pool_files_are_input_errors_naming_the_file(tmp_path, hash_embedder, damage, match):
    build_pool(small_queries(), hash_embedder).save(tmp_path / "p")
    damage(tmp_path / "p")
    with pytest.raises(InputError, match=match):
        load_pool(tmp_path / "p")


def _edit_header(root, change):
    header = json.loads((root / "pool.json").read_text())
    change(header)
    (root / "pool.json").write_text(json.dumps(header))


def test_add_questions_appends_without_touching_old_rows(hash_embedder):
    queries = small_queries()
    pool = build_pool(queries[:2], hash_embedder)
    extra = [_query("n1", {"a": [1, 2, 3, 4, 5, 6], "b": [6, 5, 4, 3, 2, 1]}, [False] * 5 + [True])]
    grown = add_questions(pool, extra, hash_embedder, provenance={"inputs": ["more"]})
    assert len(grown) == 3 and grown.meta["revision"] == 2 and grown.scores.shape[1] == 6
    assert np.array_equal(grown.prr[:2], pool.prr, equal_nan=True)
    assert grown.normalizer == pool.normalizer and grown.ensembles == pool.ensembles
    want, _ = ensemble_statistics(grown.scores[2:], grown.correct[2:], grown.valid[2:], pool.normalizer,
                                  pool.rm_names, pool.ensembles)
    assert np.array_equal(grown.prr[2:], want, equal_nan=True)
    assert grown.index.ntotal == 3 and pool.index.ntotal == 2  # the old pool object is unchanged
    with pytest.raises(InputError, match="already in the pool"):
        add_questions(grown, extra, hash_embedder)

    class Other:
        name = "other"

    with pytest.raises(InputError, match="built with embedder"):
        add_questions(pool, extra, Other())


def test_index_auto_threshold_ivf_and_hnsw_recall():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((20, 32))
    x = centers[rng.integers(0, 20, 3000)] + 0.3 * rng.standard_normal((3000, 32))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    flat, kind = build_index(x, IndexConfig())
    assert kind == "flat" and recall_at_k(flat, x, k=50, sample=100) == 1.0
    ivf, kind = build_index(x, IndexConfig(threshold=1000))
    assert kind == "ivf" and ivf.nlist == 3000 // 39 and ivf.nprobe == IndexConfig().nprobe
    assert 0.9 <= recall_at_k(ivf, x, k=50, sample=100) <= 1.0
    few, _ = build_index(x, IndexConfig(kind="ivf", nprobe=1))  # 76 lists: capped at 39 training points each
    assert recall_at_k(few, x, k=50, sample=100) < recall_at_k(ivf, x, k=50, sample=100)  # nprobe trades recall
    hnsw, kind = build_index(x, IndexConfig(kind="hnsw"))
    assert kind == "hnsw"
    assert 0.9 <= recall_at_k(hnsw, x, k=50, sample=100) <= 1.0


def test_rewardmath_pool_matches_pair_loop_on_raw_file(data_dir, hash_embedder):
    """PRR from the pool equals the definition computed straight from the upstream file, per RM."""
    from morkit.data.datasets import rewardmath_rm_scores

    pool = build_pool(rewardmath_rm_scores(data_dir)[:30], hash_embedder)
    names = [e.name for e in pool.ensembles]
    rows = [json.loads(line) for line in open(data_dir / "rewardmath_rm_scores" / "rewardmath_scores.first383.jsonl")]
    for qi in (0, 7, 29):
        row = rows[qi]
        for rm in ("internlm2", "gpt4", "Math_Shepherd"):
            values = [min(v) if isinstance(v, list) else v for v in row["scores"][rm]]
            assert pool.prr[qi, names.index(rm)] == pytest.approx(pair_loop_prr(values, row["is_correct"]))


def test_rm_without_global_prr_is_only_a_single():
    ens = enumerate_ensembles(["a", "b", "ghost"], {"a": 0.6, "b": 0.7, "ghost": float("nan")}, max_members=3)
    assert [e.name for e in ens if "ghost" in e.members] == ["ghost"]


def test_identical_member_scores_stay_tied_in_every_ensemble():
    """Two candidates with the same member scores must tie (PRR counts a tie as wrong), whatever the
    ensemble's weights and however many ensembles are evaluated together."""
    rng = np.random.default_rng(3)
    members = rng.standard_normal((1, 6, 5))
    members[0, 1] = members[0, 0]  # candidates 0 and 1 identical for every RM
    weights = rng.random((5, 400)) * (rng.random((5, 400)) < 0.6)
    out = combine(members, weights)
    assert np.array_equal(out[0, 0], out[0, 1])
    assert np.array_equal(combine(members, weights[:, :7]), out[:, :, :7])
