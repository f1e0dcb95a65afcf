"""Per-query selection (PRES, the learned selector and its "stacker" grid) and MoR ranking: rules by hand, then real rewardmath scores."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from fakes.queries import scored_query as _query

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.selection.base import Neighbours
from morkit.selection.mor import member_matrix, pick_best, query_zscore
from morkit.selection.pres import PRES
from morkit.selection.router import Router
from morkit.selection.learned import STACKER_SETTINGS, fit_learned


def test_query_zscore_and_member_matrix():
    q = _query("a", {"r": [1.0, 2.0, 3.0], "flat": [5.0, 5.0, 5.0], "prm": [(0.9, 0.1), (0.5, 0.6), (0.2, 0.9)]})
    m = member_matrix(q, ["r", "flat", "prm", "absent"])
    assert m[:, 2].tolist() == [0.1, 0.5, 0.2] and np.isnan(m[:, 3]).all()
    z = query_zscore(m[:, :2])
    assert z[:, 0] == pytest.approx([-1.2247449, 0, 1.2247449]) and (z[:, 1] == 0).all()


def test_ties_are_broken_by_query_id_never_by_position():
    picks = {pick_best(f"q{i}", np.zeros(4)).best_index for i in range(40)}
    assert picks == {0, 1, 2, 3}
    assert pick_best("same", np.zeros(4)) == pick_best("same", np.zeros(4))
    assert pick_best("x", np.array([0.0, 3.0, 1.0])).best_index == 1


def _pool_queries(n=40, seed=0):
    """'good' ranks answers right on even questions only; 'bad' is noise; 'flip' is right on odd questions."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        labels = [True] + [False] * 4
        good = [1.0, 0.0, 0.1, 0.2, 0.3] if i % 2 == 0 else [0.0, 1.0, 0.1, 0.2, 0.3]
        flip = [0.0, 1.0, 0.1, 0.2, 0.3] if i % 2 == 0 else [1.0, 0.0, 0.1, 0.2, 0.3]
        out.append(_query(f"p{i}", {"good": good, "bad": rng.random(5).tolist(), "flip": flip}, labels,
                          question=("even topic" if i % 2 == 0 else "odd topic") + f" number {i}"))
    return out


def test_pres_is_similarity_weighted_prr_argmax(hash_embedder):
    pool = build_pool(_pool_queries(), hash_embedder, config=PoolConfig(max_members=2))
    pres = PRES(pool)
    rows = np.array([0, 2, 5])  # two even questions, one odd
    sims = np.array([0.9, 0.8, 0.1], dtype=np.float32)
    nb = Neighbours(rows, tuple(pool.questions[r].id for r in rows), sims)
    want = np.nansum(sims[:, None] * pool.prr[rows], axis=0)
    choice = pres.choose(nb, frozenset(pool.rm_names))
    assert choice.score == pytest.approx(want.max(), rel=1e-6)
    chosen = pool.ensembles.index(choice.ensemble)
    assert want[chosen] == pytest.approx(want.max(), rel=1e-6)
    tied = [e for e in range(len(want)) if want[e] == pytest.approx(want.max(), rel=1e-6)]
    overall = np.nanmean(pool.prr, axis=0)
    assert overall[chosen] == max(overall[e] for e in tied)  # ties go to the pool-wide mean, not position
    assert "flip" not in choice.ensemble.members or choice.ensemble.weights[choice.ensemble.members.index("flip")] < 0.5
    only_flip = pres.choose(nb, frozenset({"flip", "bad"}))
    assert set(only_flip.ensemble.members) <= {"flip", "bad"} and only_flip.details["skipped_ensembles"] > 0
    singles = PRES(pool, singles_only=True).choose(nb, frozenset(pool.rm_names))
    assert len(singles.ensemble.members) == 1
    with pytest.raises(LookupError):
        pres.choose(nb, frozenset())


def test_stacker_learns_the_informative_rm(hash_embedder):
    rng = np.random.default_rng(1)
    queries = []
    for i in range(60):
        labels = [bool(x) for x in rng.random(6) < 0.3]
        labels[0] = True
        signal = [float(l) + 0.8 * rng.standard_normal() for l in labels]
        queries.append(_query(f"s{i}", {"signal": signal, "noise": rng.standard_normal(6).tolist()}, labels))
    pool = build_pool(queries, hash_embedder, config=PoolConfig(max_members=2))
    fit = fit_learned(pool, settings=STACKER_SETTINGS, baselines=False, min_mixed=1)  # the "stacker" grid
    w = {name.split(":")[1]: value for name, value in fit.importances().items()}
    assert w["signal"] > 3 * abs(w["noise"])
    assert len(fit.cv_table) == 8 and fit.cv_best_of_n == max(row[1] for row in fit.cv_table)


def test_selector_errors_and_rank_contract(hash_embedder):
    pool = build_pool(_pool_queries(), hash_embedder, config=PoolConfig(max_members=2))

    class Other:
        name = "other-embedder"

    with pytest.raises(InputError, match="built with embedder 'hash-embedder'"):
        Router(pool, embedder=Other())
    with pytest.raises(InputError, match="unknown selection method"):
        Router(pool, "magic")
    router = Router(pool, "pres", embedder=hash_embedder, k=5)
    query = _query("new", {"good": [0.2, 0.9, 0.1], "bad": [0.5, 0.5, 0.4], "flip": [0.9, 0.2, 0.1]},
                   question="even topic number 2")
    ranking = router.route([query])[0]
    record = ranking.to_json()
    assert set(record) >= {"id", "best_index", "ensemble", "scores"} and len(record["scores"]) == 3
    assert set(record["ensemble"]) >= {"members", "weights", "normalizer"}
    assert record["scores"][record["best_index"]] == max(record["scores"])
    lacking = replace(query, candidates=tuple(replace(c, scores={"bad": 1.0}) for c in query.candidates))
    selection = router.select(lacking)
    assert selection.choice.ensemble.members == ("bad",) and selection.missing_rms == ("good", "flip")
    assert selection.to_json()["skipped"]["missing_rms"] == ["good", "flip"]
    nothing = replace(query, candidates=tuple(replace(c, scores={}) for c in query.candidates))
    with pytest.raises(InputError, match="query 'new'"):
        router.select(nothing)
    with pytest.raises(InputError, match="lack scores"):
        router.rank(nothing, selection)


@pytest.mark.slow
def test_stacker_beats_best_single_on_held_out_rewardmath(data_dir, hash_embedder):
    """A check that can fail: trained on problems 0-249, tested on 250-382 of real RM scores."""
    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.question_pool.prr import best_of_n_hit

    queries = rewardmath_rm_scores(data_dir)
    pool = build_pool(queries[:250], hash_embedder, config=PoolConfig(max_members=1))
    test = queries[250:]
    best_single = max(pool.ensemble_table(), key=lambda r: r["best_of_n"])["ensemble"].members[0]

    def accuracy(scores_of):
        return np.mean([best_of_n_hit(scores_of(q), [c.correct for c in q.candidates]) for q in test])

    single = accuracy(lambda q: member_matrix(q, [best_single])[:, 0])
    router = Router(pool, embedder=hash_embedder)
    stacked = accuracy(lambda q: np.array(router.route([q])[0].scores))
    assert stacked > single + 0.05, (stacked, single, best_single)


@pytest.mark.slow
def test_cli_select_and_rank_with_cached_scores_and_a_run_rule(tmp_path, data_dir, embedder, capsys):
    from morkit.data.contract import save_queries
    from morkit.data.datasets import qwen25_math_rm8

    queries = qwen25_math_rm8(data_dir)
    pool_dir = tmp_path / "pool"
    assert main(["pool", "build", "--dataset", "qwen25_math_rm8:40", "--data-dir", str(data_dir), "--rm",
                 "qwen2.5-math-rm-72b", "--rm", "math-consensus", "-o", str(pool_dir), "-q", "--device", "cpu"]) == 0
    new = [replace(q, candidates=tuple(replace(c, correct=None, scores={k: v for k, v in c.scores.items()
                                                                        if k != "math-consensus"})
                                       for c in q.candidates)) for q in queries[60:64]]
    save_queries(tmp_path / "new.jsonl", new)
    out = tmp_path / "rank.jsonl"
    assert main(["rank", "--pool", str(pool_dir), str(tmp_path / "new.jsonl"), "-o", str(out), "--method", "pres",
                 "-q", "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [q.id for q in new]
    for row, query in zip(rows, new):
        assert 0 <= row["best_index"] < len(query.candidates) and len(row["scores"]) == len(query.candidates)
    sel = tmp_path / "sel.jsonl"
    assert main(["select", "--pool", str(pool_dir), str(tmp_path / "new.jsonl"), "-o", str(sel), "--no-run",
                 "-q", "--device", "cpu"]) == 0
    first = json.loads(sel.read_text().splitlines()[0])
    assert first["ensemble"]["members"] == ["qwen2.5-math-rm-72b"]  # math-consensus not cached, not run
    assert first["skipped"]["missing_rms"] == ["math-consensus"] and len(first["neighbours"]) == 40
    assert main(["rank", "--pool", str(tmp_path / "nope"), str(tmp_path / "new.jsonl"), "-o", str(out)]) == 2
    assert "no such pool" in capsys.readouterr().err


@pytest.mark.slow
def test_learned_fit_is_stored_with_the_pool_and_reused(tmp_path, hash_embedder, monkeypatch):
    from morkit.question_pool.pool import add_questions, load_pool
    from morkit.selection import learned_method
    from morkit.selection.learned_method import with_stored_learned

    pool = with_stored_learned(build_pool(_pool_queries(), hash_embedder, config=PoolConfig(max_members=2)))
    assert "learned" in pool.meta and "stacker" not in pool.meta  # one learned method, one store slot
    pool.save(tmp_path / "p")
    loaded = load_pool(tmp_path / "p")
    calls = []
    monkeypatch.setattr(learned_method, "fit_learned", lambda *a, **k: calls.append(a) or pytest.fail("refit"))
    choice = Router(loaded, embedder=hash_embedder).select(_pool_queries(1)[0]).choice
    assert choice.ensemble.members == loaded.rm_names and not calls
    grown = add_questions(loaded, [_query("x", {"good": [1, 0], "bad": [0, 1], "flip": [0, 1]}, [True, False])],
                          hash_embedder)
    assert "stacker" not in grown.meta and "learned" not in grown.meta


def test_an_older_pool_with_a_stacker_slot_upgrades_and_the_slot_is_dropped(tmp_path, hash_embedder):
    from question_pool.legacy_pools import to_legacy

    from morkit.question_pool.pool import load_pool
    from morkit.services.pool_upgrade import upgrade_pool

    pool = build_pool(_pool_queries(), hash_embedder, config=PoolConfig(max_members=2))
    pool.save(tmp_path / "p")
    to_legacy(tmp_path / "p")
    header = json.loads((tmp_path / "p" / "pool.json").read_text())
    header["stacker"] = {"members": list(pool.rm_names), "weights": [1.0] * len(pool.rm_names),
                         "weighting": "stacked", "transform": "query-zscore", "penalty": 1.0,
                         "cv_best_of_n": 0.5, "cv_table": [["query-zscore", 1.0, 0.5]]}
    (tmp_path / "p" / "pool.json").write_text(json.dumps(header))
    assert upgrade_pool(tmp_path / "p").changed
    loaded = load_pool(tmp_path / "p")
    assert "stacker" not in loaded.meta
    ranking = Router(loaded, "stacker", embedder=hash_embedder).route([_pool_queries(1)[0]])[0]
    assert ranking.selection.method == "stacker" and ranking.selection.choice.details["learner"] in {
        s.label for s in STACKER_SETTINGS}  # refitted on the pool's rows, not read from the old slot


def test_the_stacker_name_is_the_learned_selector_on_the_stacker_grid(hash_embedder):
    from morkit.selection.learned_method import Learned

    pool = build_pool(_pool_queries(), hash_embedder, config=PoolConfig(max_members=2))
    router = Router(pool, "stacker", embedder=hash_embedder)
    assert isinstance(router.method, Learned) and router.method.settings == STACKER_SETTINGS
    choice = router.select(_pool_queries(1)[0]).choice
    assert choice.ensemble.members == pool.rm_names and choice.calibrator is not None
    assert choice.details["learner"] in {s.label for s in STACKER_SETTINGS}


def test_the_router_selects_with_its_chooser_fills_in_its_session_and_ranks(hash_embedder):
    from morkit.selection.chooser import EnsembleChooser

    pool = build_pool(_pool_queries(), hash_embedder, config=PoolConfig(max_members=2))
    router = Router(pool, "pres", embedder=hash_embedder, k=5, runnable=("good", "ghost"))
    assert isinstance(router.chooser, EnsembleChooser) and router.session is None
    assert router.runnable == {"good"} and router.k == 5 and router.pool is pool
    query = _pool_queries(1)[0]
    selection = router.chooser.choose_many([query])[0]
    assert router.rank(query, selection).to_json() == router.route([query])[0].to_json()

    class Session:  # the Filler role: what route asks of a ScoringSession
        def __init__(self):
            self.wanted = []

        def fill(self, queries, wanted):
            self.wanted += [tuple(w) for w in wanted]
            return [replace(q, candidates=q.candidates[::-1]) for q in queries]  # what route must rank

    session = Session()
    routed = Router(pool, "pres", embedder=hash_embedder, k=5, session=session).route([query])[0]
    assert session.wanted == [selection.choice.ensemble.members]
    assert routed.scores == router.rank(query, selection).scores[::-1]
