"""Outputs name the selection method that actually chose: a fallback says PRES and why, in the Selection, the
Ranking JSON, the Router's name, the run summaries of `morkit select` / `morkit rank`, and each output line."""

from __future__ import annotations

import json

import numpy as np
from fakes.queries import scored_query as _query

from morkit.core.types import Candidate, Query
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.selection.chooser import method_summary
from morkit.selection.learned import Setting
from morkit.selection.learned_method import Learned
from morkit.selection.router import Router

TOO_FEW = "pres (learned needs 20 mixed pool questions)"


def _pool_queries(n: int, seed: int = 0) -> list[Query]:
    """'good' puts the right answer first on even questions, 'flip' on odd ones; 'bad' is noise."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        good = [1.0, 0.0, 0.1, 0.2, 0.3] if i % 2 == 0 else [0.0, 1.0, 0.1, 0.2, 0.3]
        flip = [0.0, 1.0, 0.1, 0.2, 0.3] if i % 2 == 0 else [1.0, 0.0, 0.1, 0.2, 0.3]
        out.append(_query(f"p{i}", {"good": good, "bad": rng.random(5).tolist(), "flip": flip},
                          [True] + [False] * 4, question=("even" if i % 2 == 0 else "odd") + f" topic {i}"))
    return out


def _new(qid: str = "new", answers: int = 3) -> Query:
    scores = {"good": [0.2, 0.9, 0.1], "bad": [0.5, 0.5, 0.4], "flip": [0.9, 0.2, 0.1]}
    return _query(qid, {k: v[:answers] for k, v in scores.items()}, question="even topic 2")


def test_a_pool_too_small_to_learn_from_names_pres_and_why(hash_embedder):
    pool = build_pool(_pool_queries(10), hash_embedder, config=PoolConfig(max_members=2))  # 10 mixed questions
    router = Router(pool, embedder=hash_embedder, k=5)  # the learned selector was asked for
    ranking = router.route([_new()])[0]
    assert ranking.selection.method == TOO_FEW
    line = ranking.to_json()
    assert line["method"] == TOO_FEW and line["fallback"] == "pres: fewer than 20 mixed pool questions"
    assert router.method_name == TOO_FEW
    assert method_summary([ranking.selection]) == "pres: learned needs 20 mixed pool questions"
    assert Router(pool, "pres", embedder=hash_embedder, k=5).select(_new()).method == "pres"


def test_a_run_where_both_chose_counts_each_and_says_why(hash_embedder):
    pool = build_pool(_pool_queries(40), hash_embedder, config=PoolConfig(max_members=2))
    router = Router(pool, embedder=hash_embedder, k=5)
    router.use(Learned(pool, settings=(Setting("logit", "query-z", {"penalty": 1.0}),), baselines=False),
                 "learned")  # a ranker whose features only compare answers
    assert router.method_name == "learned"
    pair, lone = router.select_many([_new("pair"), _new("lone", answers=1)])
    assert pair.method == "learned" and pair.choice.scorer is not None
    assert lone.method == "pres (lone answer: the learned ranker compares answers)"
    assert lone.choice.details["fallback"].startswith("pres: the learned ranker scores a lone answer alike")
    assert method_summary([pair, lone]) == "learned 1, pres 1: lone answer: the learned ranker compares answers"
    assert method_summary([pair, pair]) == "learned" and method_summary([]) == "no queries"


def test_cli_rank_and_select_name_the_fallback_on_every_line_and_in_the_summary(tmp_path, capsys):
    from morkit.cli import main
    from morkit.data.contract import save_queries
    from morkit.services.pools import build_pool as build_saved_pool

    build_saved_pool(_pool_queries(10), ["good", "bad", "flip"]).save(tmp_path / "pool")
    new = [_new("a"), _new("b")]
    save_queries(tmp_path / "new.jsonl", [Query(q.id, q.question, tuple(Candidate(c.text, scores=c.scores)
                                                                        for c in q.candidates)) for q in new])
    for command in ("rank", "select"):
        out = tmp_path / f"{command}.jsonl"
        capsys.readouterr()
        assert main([command, "--pool", str(tmp_path / "pool"), str(tmp_path / "new.jsonl"), "-o", str(out),
                     "--device", "cpu", "-q"]) == 0
        assert "(pres: learned needs 20 mixed pool questions)" in capsys.readouterr().err
        assert [json.loads(row)["method"] for row in out.read_text().splitlines()] == [TOO_FEW, TOO_FEW]
