"""The `fixed` selection method: one ensemble of the pool for every query, chosen by its RMs (`--rm`, `rms=`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakes.queries import scored_query

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.selection.fixed import FixedEnsemble
from morkit.selection.methods import SELECTION_METHODS, SelectOptions
from morkit.selection.router import Router


def _pool_queries(n: int = 12):
    rng = np.random.default_rng(0)
    return [scored_query(f"p{i}", {"good": [1.0, 0.0, 0.2], "flip": [0.0, 1.0, 0.2], "bad": rng.random(3).tolist()},
                         [True, False, False], question=f"topic {i}") for i in range(n)]


@pytest.fixture(scope="module")
def pool():
    from fakes.embedder import HashEmbedder

    return build_pool(_pool_queries(), HashEmbedder(), config=PoolConfig(max_members=2))


def test_fixed_is_a_registered_method_that_takes_its_rms():
    entry = SELECTION_METHODS.get("fixed")
    assert entry.load() is FixedEnsemble and entry.meta["rms"] is True
    assert SelectOptions(method="fixed", rms=["good"]).rms == ("good",)  # a list given is kept as a tuple


def test_every_query_gets_the_pools_best_ensemble_of_exactly_those_rms(pool, hash_embedder):
    router = Router(pool, "fixed", rms=("flip", "good"), embedder=hash_embedder, k=5)
    rows = [r for r in pool.ensemble_table() if set(r["ensemble"].members) == {"good", "flip"}]
    best = max(rows, key=lambda r: r["mean_prr"])["ensemble"]
    queries = [scored_query(f"new{i}", {"good": [0.1, 0.9], "flip": [0.9, 0.1], "bad": [0.5, 0.5]},
                            question=f"new topic {i}") for i in range(3)]
    rankings = router.route(queries)
    assert router.method_name == "fixed"
    for ranking in rankings:
        assert ranking.selection.method == "fixed" and ranking.selection.choice.ensemble == best
        assert ranking.selection.choice.details["criterion"] == "fixed (pool mean PRR)"
        assert np.isfinite(ranking.confidence)  # calibrated on leave-one-out picks of the fixed ensemble


@pytest.mark.parametrize("build, message", [
    (lambda pool: SelectOptions(method="fixed"), "the 'fixed' method needs the RMs of its ensemble"),
    (lambda pool: SelectOptions(method="pres", rms=("good",)), r"--rm .* does not apply to 'pres'; .* of fixed"),
    (lambda pool: Router(pool, "fixed"), "the 'fixed' method needs the RMs of its ensemble"),
    (lambda pool: Router(pool, "fixed", rms=("ghost",)), "--rm ghost: not an RM of this pool"),
    (lambda pool: FixedEnsemble(pool), "the fixed method needs its ensemble's RMs"),
])
def test_bad_fixed_options_are_one_line_errors(pool, build, message):
    with pytest.raises(InputError, match=message):
        build(pool)


def test_a_query_that_cannot_use_a_member_fails_naming_it(pool, hash_embedder):
    router = Router(pool, "fixed", rms=("good",), embedder=hash_embedder)
    lacking = scored_query("new", {"flip": [0.9, 0.1]}, question="new topic", text=False)
    with pytest.raises(InputError, match="query 'new': the fixed ensemble needs good"):
        router.select(lacking)


def test_rank_with_rm_flags_ranks_with_the_fixed_ensemble(pool, tmp_path, monkeypatch):
    from fakes.embedder import HashEmbedder

    from morkit.data.contract import save_queries
    from morkit.question_pool import embed

    pool.save(tmp_path / "pool")
    save_queries(tmp_path / "in.jsonl", [scored_query("new", {"good": [0.1, 0.9], "flip": [0.9, 0.1]},
                                                      question="new topic")])
    monkeypatch.setattr(embed, "load_embedder", lambda name, device=None: HashEmbedder())
    for verb in ("select", "rank"):
        out = tmp_path / f"{verb}.jsonl"
        assert main([verb, str(tmp_path / "in.jsonl"), "--pool", str(tmp_path / "pool"), "-o", str(out),
                     "--rm", "good", "--no-run", "-q"]) == 0
        line = json.loads(out.read_text())
        assert line["method"] == "fixed" and line["ensemble"]["members"] == ["good"]


def test_rm_beside_another_method_is_a_one_line_error_and_alone_selects_fixed(pool, tmp_path, monkeypatch, capsys):
    """`--rm` never silently overrides a `--method` given: another method beside it fails naming both; `--rm`
    alone, or with `--method fixed`, selects the fixed ensemble; no flag keeps the default method."""
    import argparse

    from fakes.embedder import HashEmbedder

    from morkit.cli.args import add_fixed_option, add_select_options, select_options
    from morkit.data.contract import save_queries
    from morkit.question_pool import embed
    from morkit.selection.methods import DEFAULT_METHOD

    parser = argparse.ArgumentParser()
    add_select_options(parser)
    add_fixed_option(parser)
    assert select_options(parser.parse_args(["--rm", "good"])).method == "fixed"
    assert select_options(parser.parse_args(["--method", "fixed", "--rm", "good"])).rms == ("good",)
    assert select_options(parser.parse_args([])).method == DEFAULT_METHOD
    with pytest.raises(InputError, match=r"--rm .* does not apply to 'pres'"):
        select_options(parser.parse_args(["--method", "pres", "--rm", "good"]))

    pool.save(tmp_path / "pool")
    save_queries(tmp_path / "in.jsonl", [scored_query("new", {"good": [0.1, 0.9]}, question="new topic")])
    monkeypatch.setattr(embed, "load_embedder", lambda name, device=None: HashEmbedder())
    capsys.readouterr()
    for method in ("pres", "learned"):
        assert main(["select", str(tmp_path / "in.jsonl"), "--pool", str(tmp_path / "pool"), "-o",
                     str(tmp_path / "out.jsonl"), "--method", method, "--rm", "good", "-q"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"--rm (the RMs of a fixed ensemble) does not apply to {method!r}" in err
    assert not (tmp_path / "out.jsonl").exists()
