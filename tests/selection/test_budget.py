"""Routing under a budget: the Budget and cost options, each query's cost limit, PRES and the learned selector
(with its budget routes) under a cap and a cost weight, the routes stored with a pool, and the CLI flags; on
real RewardMATH scores of five RMs, with costs made up here (GFLOP-equivalents per candidate)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from fakes.embedder import HashEmbedder
from fakes.queries import scored_query

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.data.contract import save_queries
from morkit.question_pool.pool import PoolConfig, build_pool, load_pool
from morkit.reward_models.cost import CostTable, RMCost
from morkit.selection import learned as learned_module
from morkit.selection.budget import (
    Budget,
    CostOptions,
    cost_limit,
    fit_budget_routes,
    ladder,
    resolve_costs,
    stored_routes,
)
from morkit.selection.learned_method import with_budget_routes
from morkit.selection.learned import SETTINGS, fit_learned
from morkit.selection.methods import SelectOptions
from morkit.selection.pres import PRES
from morkit.selection.router import Router

RMS = ("internlm2", "gpt4o", "skywork_llama3", "internlm2_20b", "beaver")
TABLE = CostTable({"internlm2": 7168.0, "gpt4o": 40000.0, "skywork_llama3": 8192.0, "internlm2_20b": 20480.0,
                   "beaver": 7168.0})
GRID = {"settings": (SETTINGS[1], SETTINGS[9]), "repeats": 1}
"""Two settings of the learned grid and one fold deal: fits of a second, not half a minute."""


def _kept(query):
    return replace(query, candidates=tuple(replace(c, scores={k: c.scores[k] for k in RMS})
                                           for c in query.candidates))


@pytest.fixture(scope="module")
def rewardmath(data_dir):
    from morkit.data.datasets import rewardmath_rm_scores

    return [_kept(q) for q in rewardmath_rm_scores(data_dir)[:110]]


@pytest.fixture(scope="module")
def bare_pool(rewardmath):
    """80 problems, its learned fit over every RM stored (a small grid), no costs."""
    pool = build_pool(rewardmath[:80], HashEmbedder(), rm_names=RMS, config=PoolConfig(max_members=2))
    return replace(pool, meta={**pool.meta, "learned": fit_learned(pool, **GRID).to_json()})


@pytest.fixture(scope="module")
def pool(bare_pool):
    """The pool with its costs and budget routes stored."""
    from morkit.selection.learned import LearnedFit

    full = LearnedFit.from_json(bare_pool.meta["learned"])
    routes = fit_budget_routes(bare_pool, TABLE, full, **GRID)
    return replace(bare_pool, meta={**bare_pool.meta, "costs": TABLE.to_json(),
                                    "budget_routes": [r.to_json() for r in routes]})


@pytest.fixture(scope="module")
def queries(rewardmath):
    return rewardmath[80:110]


def _router(pool, method="learned", **kw):
    return Router(pool, method, embedder=HashEmbedder(), **kw)


def _saved(pool, path):
    """Save a copy (saving binds a pool object to its directory; the fixture's stays unbound)."""
    replace(pool).save(path)
    return path


def _within(selection):
    """The selection's per-query cost, checked against its limit and the table."""
    budget = selection.choice.details["budget"]
    n = 10  # RewardMATH: ten answers per problem
    assert budget["cost"] == pytest.approx(TABLE.of(selection.choice.ensemble.members, n))
    assert selection.cost == pytest.approx(budget["cost"]) and selection.full_cost == pytest.approx(TABLE.of(RMS, n))
    if budget["limit"] is not None:
        assert budget["cost"] <= budget["limit"] * (1 + 1e-9)
    return budget["cost"]


# ------------------------------------------------------------------------------------------------ options
def test_budget_parses_and_checks_its_values():
    assert Budget.parse("25%") == Budget(share=0.25)
    assert Budget.parse("3e5", 1e-6) == Budget(per_query=3e5, cost_weight=1e-6)
    assert Budget.parse("40 GFLOP") == Budget(per_query=40.0)
    assert not Budget().active and Budget(cost_weight=0.1).active and Budget(share=1.0).active
    for text, message in (("150%", r"--budget '150%'.*share must be in \(0, 1\]"), ("0%", "share"),
                          ("cheap", "give GFLOP-equivalents per query"), ("-3", "give GFLOP"), ("0", "per_query")):
        with pytest.raises(InputError, match=message):
            Budget.parse(text)
    with pytest.raises(InputError, match="not both"):
        Budget(per_query=1.0, share=0.5)
    with pytest.raises(InputError, match="cost_weight"):
        Budget(cost_weight=-1.0)
    assert CostOptions.parse_given("internlm2=7B") == ("internlm2", RMCost(active_params=7e9,
                                                                            source="given by the user"))
    for text in ("internlm2", "=7B"):
        with pytest.raises(InputError, match="--cost .*NAME=VALUE"):
            CostOptions.parse_given(text)
    with pytest.raises(InputError, match="--cost internlm2"):
        CostOptions.parse_given("internlm2=lots")


@pytest.mark.parametrize("method", ["stacker", "fixed"])
def test_methods_without_a_budget_refuse_one_naming_those_that_take_it(pool, method):
    rms = ("internlm2",) if method == "fixed" else ()
    message = f"does not apply to '{method}'; it is an option of learned, pres, pres-top1"
    with pytest.raises(InputError, match=message):
        SelectOptions(method=method, rms=rms, budget=Budget(share=0.5))
    with pytest.raises(InputError, match=message):
        _router(pool, method, rms=rms, budget=Budget(cost_weight=1e-6))
    costs_only = _router(pool, method, rms=rms, costs=TABLE)  # costs alone only price the rankings
    assert costs_only.budget is None and costs_only.costs is TABLE


def test_the_limit_is_the_budget_per_candidate_and_the_weight_per_query():
    names = list(TABLE.per_candidate)
    limit = cost_limit(Budget(per_query=1e5, cost_weight=2e-6), TABLE, names, names, 10)
    assert limit.most == 1e4 and limit.weight == pytest.approx(2e-5) and limit.candidates == 10
    assert limit.cost(("gpt4o", "beaver")) == 47168.0 and limit.per_query(1.0) == 10.0
    share = cost_limit(Budget(share=0.5), TABLE, names, ["internlm2", "gpt4o"], 4)
    assert share.most == pytest.approx(0.5 * (7168 + 40000)) and share.weight == 0.0  # of the usable RMs only
    assert bool(share.affords(share.most)) and not bool(share.affords(share.most * 1.001))
    assert cost_limit(Budget(per_query=1.0), TABLE, names, names, 0).most == np.inf  # nothing to score


def test_costs_come_from_the_pool_updated_by_the_options(pool, bare_pool, tmp_path):
    assert resolve_costs(pool) is None  # neither needed nor given
    assert resolve_costs(pool, needed=True).per_candidate == TABLE.per_candidate
    (tmp_path / "c.toml").write_text('[costs.beaver]\ngflop = 1.5\nsource = "a test"\n')
    updated = resolve_costs(pool, CostOptions(("" + str(tmp_path / "c.toml"),), (("gpt4o", RMCost(gflop=2.0)),)))
    assert updated.per_candidate == {**TABLE.per_candidate, "beaver": 1.5, "gpt4o": 2.0}
    assert list(updated.per_candidate) == list(RMS) and updated.sources["beaver"] == "a test"
    with pytest.raises(InputError, match="no cost for internlm2, gpt4o.*--cost NAME=VALUE"):
        resolve_costs(bare_pool, needed=True)  # table-only RMs with no card: every one named
    with pytest.raises(InputError, match="no cost for"):
        _router(bare_pool, "pres", budget=Budget(share=0.5))


def test_options_that_price_every_rm_replace_a_damaged_stored_table(pool):
    damaged = replace(pool, meta={**pool.meta, "costs": {"per_candidate": ["not", "a", "table"]}})
    every = tuple((n, RMCost(gflop=v)) for n, v in TABLE.per_candidate.items())
    assert resolve_costs(damaged, CostOptions(given=every)).per_candidate == TABLE.per_candidate
    with pytest.raises(InputError, match="malformed costs: per_candidate: expected a table of RM -> number") as info:
        resolve_costs(damaged, CostOptions(given=every[1:]))  # internlm2's cost would come from the damaged table
    assert "attribute" not in str(info.value) and "pricing every pool RM replaces it" in str(info.value)


def test_a_budget_reads_costs_in_gflop_only(pool):
    seconds = CostTable(dict(TABLE.per_candidate), unit="seconds")
    with pytest.raises(InputError, match="costs are in seconds, but a budget and a cost weight are in GFLOP"):
        _router(pool, "pres", budget=Budget(share=0.5), costs=seconds)
    assert _router(pool, "pres", costs=seconds).costs is seconds  # no budget: they only price the rankings
    stored = replace(pool, meta={**pool.meta, "costs": seconds.to_json()})
    with pytest.raises(InputError, match="the costs the pool stores are in seconds"):
        resolve_costs(stored, needed=True)


def test_a_budget_that_limits_nothing_is_no_budget(pool, bare_pool):
    for budget in (Budget(), Budget(cost_weight=0.0)):
        fixed = _router(pool, "fixed", rms=("internlm2",), budget=budget)  # fixed takes no budget: none is set
        assert fixed.budget is None
        unpriced = _router(bare_pool, "pres", budget=budget)  # no costs resolved: table RMs need none
        assert unpriced.budget is None and unpriced.costs is None
        options = replace(SelectOptions(method="pres"), budget=budget)
        assert Router.from_options(bare_pool, options, embedder=HashEmbedder()).costs is None


# ------------------------------------------------------------------------------------------------ unchanged
@pytest.mark.parametrize("method", ["learned", "pres"])
def test_without_a_budget_selection_is_unchanged_and_costs_only_add_the_cost(pool, queries, method):
    plain = _router(pool, method).route(queries)
    priced = _router(pool, method, costs=TABLE).route(queries)
    for a, b in zip(plain, priced):
        assert "cost" not in a.to_json() and "budget" not in a.to_json() and "escalated" not in a.to_json()
        assert "cost" not in a.selection.to_json() and a.cost is None and a.escalated is None
        record = b.to_json()
        assert record.pop("cost") == pytest.approx(TABLE.of(b.selection.choice.ensemble.members, 10))
        assert record == a.to_json()
        selection = b.selection.to_json()
        assert selection.pop("cost") == pytest.approx(b.cost) and selection == a.selection.to_json()


def test_a_budget_that_affords_everything_leaves_pres_as_it_was(pool, queries):
    plain = _router(pool, "pres").select_many(queries)
    full = _router(pool, "pres", budget=Budget(share=1.0)).select_many(queries)
    assert [s.choice.ensemble for s in full] == [s.choice.ensemble for s in plain]
    assert [s.choice.score for s in full] == [s.choice.score for s in plain]


# ------------------------------------------------------------------------------------------------ the cap
@pytest.mark.parametrize("method", ["pres", "pres-top1", "learned"])
def test_every_pick_fits_its_budget(pool, queries, method):
    spent = {}
    for budget in (Budget(share=1.0), Budget(share=0.5), Budget(share=0.25), Budget(share=0.1),
                   Budget(per_query=2e5), Budget(per_query=1e5), Budget(per_query=1e5, cost_weight=1e-6)):
        selections = _router(pool, method, budget=budget).select_many(queries)
        spent[budget] = [_within(s) for s in selections]
        for s in selections:
            assert s.to_json()["budget"]["route"] == list(s.choice.ensemble.members)
    assert max(spent[Budget(share=0.1)]) <= 0.1 * TABLE.of(RMS, 10)
    assert np.mean(spent[Budget(share=1.0)]) >= np.mean(spent[Budget(share=0.1)])


def test_the_learned_selector_picks_the_best_affordable_route(pool, queries):
    routes = stored_routes(pool)
    assert routes and all(TABLE.of(r.members) == pytest.approx(r.cost) for r in routes)
    assert [len(r.members) for r in routes] == sorted((len(r.members) for r in routes), reverse=True)
    assert len(routes[-1].members) == 1  # the ladder ends at one RM
    router = _router(pool, budget=Budget(share=0.2))
    for selection in router.select_many(queries[:5]):
        members = selection.choice.ensemble.members
        assert selection.method == "learned" and selection.choice.scorer is not None  # a learned ranker, not PRES
        fits = [r for r in routes if r.members == members]
        assert fits and selection.choice.score == fits[0].fit.cv_best_of_n
        affordable = [r for r in routes if r.cost <= 0.2 * TABLE.of(RMS) * (1 + 1e-9)]
        assert selection.choice.score == max(r.fit.cv_best_of_n for r in affordable)


def test_a_budget_below_the_cheapest_rm_names_the_query(pool, queries):
    for method in ("pres", "learned"):
        with pytest.raises(InputError) as caught:
            _router(pool, method, budget=Budget(per_query=1000.0)).select_many(queries[:3])
        message = str(caught.value)
        assert "\n" not in message and f"query {queries[0].id!r}" in message
        assert "no pool ensemble fits the budget of 1000 GFLOP per query" in message
        assert "the cheapest it can use" in message and "7.168e+04 GFLOP" in message


# ------------------------------------------------------------------------------------------------ the weight
@pytest.mark.parametrize("method", ["pres", "learned"])
def test_a_larger_cost_weight_never_picks_a_costlier_route(pool, queries, method):
    weights = (0.0, 1e-8, 1e-7, 3e-7, 1e-6, 3e-6, 1e-5, 1e-4, 1e-2)
    costs = np.array([[_within(s) for s in _router(pool, method, budget=Budget(share=1.0, cost_weight=w))
                       .select_many(queries)] for w in weights])
    assert (np.diff(costs, axis=0) <= 1e-6).all(), costs
    assert (costs[-1] == 71680).all()  # at a high enough weight: a 7,168 GFLOP RM alone, ten candidates
    if method == "pres":
        assert costs[0].mean() > costs[-1].mean()  # the weight did move picks (the learned routes tie: below)


def test_pres_under_a_weight_is_mean_evidence_less_weight_times_cost(pool, queries):
    router = _router(pool, "pres", budget=Budget(cost_weight=1e-6), k=20)
    query = queries[0]
    selection = router.select(query)
    near = selection.neighbours
    pres = PRES(pool)
    cost = np.array([TABLE.of(e.members) for e in pool.ensembles])
    criterion = pres.scores(near) / np.abs(near.similarities).sum() - 1e-6 * 10 * cost
    assert selection.choice.score == pytest.approx(criterion.max(), rel=1e-5)
    assert selection.choice.details["criterion"] == "prr per similarity - cost weight x cost"


# ------------------------------------------------------------------------------------------------ storage
def test_budget_routes_round_trip_through_pool_json(pool, queries, tmp_path, monkeypatch):
    loaded = load_pool(_saved(pool, tmp_path / "p"))
    assert loaded.meta["costs"] == TABLE.to_json()
    before, after = stored_routes(pool), stored_routes(loaded)
    assert [(r.members, r.cost, r.fit.to_json()) for r in after] == [(r.members, r.cost, r.fit.to_json())
                                                                     for r in before]
    monkeypatch.setattr(learned_module, "fit_learned", lambda *a, **k: pytest.fail("refitted"))
    for budget in (Budget(share=0.2), Budget(cost_weight=1e-6)):
        want = _router(pool, budget=budget).route(queries[:5])
        got = _router(loaded, budget=budget).route(queries[:5])
        assert [r.to_json() for r in got] == [r.to_json() for r in want]
    grown = loaded.add([queries[-1]], embedder=HashEmbedder())  # new rows: the routes are stale, the costs stay
    assert "budget_routes" not in grown.meta and grown.meta["costs"] == TABLE.to_json()


@pytest.mark.parametrize("damage, field", [
    (lambda h: h["budget_routes"][0].pop("members"), r"budget_routes\[0\]: missing 'members'"),
    (lambda h: h["budget_routes"][1].update(members=["ghost"]), r"budget_routes\[1\]: members"),
    (lambda h: h["budget_routes"][0].update(cost=-1), r"budget_routes\[0\]: cost"),
    (lambda h: h["budget_routes"][0]["fit"].update(calibrator={}), r"budget_routes\[0\]: fit: calibrator"),
    (lambda h: h["budget_routes"][0].update(members=h["budget_routes"][1]["members"]),
     r"budget_routes\[0\]: fit: it reads other RMs"),
    (lambda h: h.update(budget_routes={"a": 1}), "budget_routes: expected a list"),
    (lambda h: h["costs"].update(per_candidate={"internlm2": "a lot"}), "costs: "),
    (lambda h: h["costs"].update(per_candidate=[1, 2]), "costs: "),
    (lambda h: h["costs"].update(per_candidate={"internlm2": True}), "costs: "),
])
def test_a_damaged_stored_route_or_cost_table_is_a_one_line_error(pool, queries, tmp_path, damage, field):
    _saved(pool, tmp_path / "p")
    header = json.loads((tmp_path / "p" / "pool.json").read_text())
    damage(header)
    (tmp_path / "p" / "pool.json").write_text(json.dumps(header))
    with pytest.raises(InputError, match=f"pool.json: malformed {field}") as caught:
        _router(load_pool(tmp_path / "p"), budget=Budget(share=0.5)).select_many(queries[:1])
    repair = ("`morkit pool add POOL FILES --costs NAME --cost RM=VALUE` pricing every pool RM replaces it"
              if field == "costs: " else "`morkit pool add POOL FILES` refits the budget routes")
    assert "\n" not in str(caught.value) and repair in str(caught.value) and "or rebuild the pool" in str(caught.value)


def test_a_pool_without_routes_fits_them_on_first_use(bare_pool, pool, queries, monkeypatch, caplog):
    monkeypatch.setattr(learned_module, "fit_learned", partial(fit_learned, repeats=1))
    router = _router(bare_pool, budget=Budget(share=0.2), costs=TABLE)
    router.method.settings = GRID["settings"]  # the small grid the stored fit was chosen from
    with caplog.at_level(logging.INFO, logger="morkit.selection.learned_method"):
        got = router.select_many(queries[:5])
    assert "the pool stores no budget routes: fitted 3 on first use in" in caplog.text
    want = _router(pool, budget=Budget(share=0.2)).select_many(queries[:5])
    assert [s.to_json() for s in got] == [s.to_json() for s in want]


def test_the_ladder_takes_rms_by_value_per_cost_down_to_one():
    costs = CostTable({"a": 10.0, "b": 1.0, "c": 4.0, "d": 1.0})
    values = {"a": 0.5, "b": 0.1, "c": 0.3, "d": -0.1}  # d is worse than chance: never taken
    # all cost 16: 1/2 -> 8 affords b (0.1/1), c (0.3/4); 1/4 -> 4: b, then c does not fit; 1/8 -> 2: b alone
    assert ladder(list(costs.per_candidate), costs, values) == [("b", "c"), ("b",)]
    free = CostTable({"a": 0.0, "b": 0.0})
    assert ladder(["a", "b"], free, {"a": 0.2, "b": 0.1}) == []  # every subset is the full set: nothing to add


def test_with_budget_routes_stores_costs_and_routes(bare_pool, monkeypatch):
    monkeypatch.setattr(learned_module, "fit_learned", partial(fit_learned, **GRID))
    assert with_budget_routes(bare_pool) is bare_pool  # no costs given or stored: unchanged
    given = tuple((n, RMCost(gflop=v)) for n, v in TABLE.per_candidate.items())
    stored = with_budget_routes(bare_pool, CostOptions(given=given))
    assert CostTable.from_json(stored.meta["costs"]).per_candidate == TABLE.per_candidate
    assert [r["members"] for r in stored.meta["budget_routes"]] == [list(r.members) for r in stored_routes(stored)]
    assert len(stored.meta["budget_routes"]) == 3
    no_fit = replace(bare_pool, meta={k: v for k, v in bare_pool.meta.items() if k != "learned"})
    assert with_budget_routes(no_fit, CostOptions(given=given)).meta["budget_routes"] == []


# ------------------------------------------------------------------------------------------------ the CLI
def test_rank_and_select_with_a_budget_end_to_end(pool, queries, tmp_path, monkeypatch, capsys):
    from morkit.question_pool import embed

    monkeypatch.setattr(embed, "load_embedder", lambda name=None, device=None: HashEmbedder())
    _saved(pool, tmp_path / "pool")
    save_queries(tmp_path / "q.jsonl", [replace(q, candidates=tuple(replace(c, correct=None) for c in q.candidates))
                                        for q in queries[:6]])
    out = tmp_path / "ranked.jsonl"
    assert main(["rank", "--pool", str(tmp_path / "pool"), str(tmp_path / "q.jsonl"), "-o", str(out),
                 "--budget", "25%", "--no-run", "-q"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    full = TABLE.of(RMS, 10)
    for row in rows:
        assert row["cost"] <= 0.25 * full * (1 + 1e-9) and row["budget"]["limit"] == pytest.approx(0.25 * full)
        assert row["cost"] == pytest.approx(TABLE.of(row["ensemble"]["members"], 10))
    mean = np.mean([r["cost"] for r in rows])
    err = capsys.readouterr().err
    assert f"mean cost {mean:.4g} GFLOP per query, {mean / full:.0%} of the full route's" in err
    sel = tmp_path / "sel.jsonl"
    assert main(["select", "--pool", str(tmp_path / "pool"), str(tmp_path / "q.jsonl"), "-o", str(sel),
                 "--method", "pres", "--cost-weight", "1e-5", "--cost", "beaver=1GFLOP", "--no-run", "-q"]) == 0
    picks = [json.loads(line) for line in sel.read_text().splitlines()]
    assert all(p["ensemble"]["members"] == ["beaver"] and p["cost"] == 10.0 for p in picks)  # nearly free now
    assert main(["rank", "--pool", str(tmp_path / "pool"), str(tmp_path / "q.jsonl"), "-o", str(out),
                 "--budget", "5e4", "--no-run"]) == 2
    assert f"query {queries[0].id!r}: no pool ensemble fits the budget" in capsys.readouterr().err
    for flags, message in ((["--budget", "200%"], "--budget '200%'"), (["--cost", "beaver"], "--cost 'beaver'"),
                           (["--method", "stacker", "--budget", "10%"], "does not apply to 'stacker'")):
        assert main(["rank", "--pool", str(tmp_path / "pool"), str(tmp_path / "q.jsonl"), "-o", str(out),
                     *flags]) == 2
        assert message in capsys.readouterr().err


def test_pool_build_and_add_store_costs_from_the_flags(tmp_path, monkeypatch, capsys):
    from morkit.services import pools

    monkeypatch.setattr(pools, "load_embedder", lambda name=None, device=None: HashEmbedder())
    rng = np.random.default_rng(0)
    rows = [scored_query(f"q{i}", {"a": rng.random(3).tolist(), "b": rng.random(3).tolist()}, [True, False, False],
                         question=f"topic {i}") for i in range(8)]
    save_queries(tmp_path / "pool.jsonl", rows[:6])
    save_queries(tmp_path / "more.jsonl", rows[6:])
    (tmp_path / "c.toml").write_text("[costs.a]\nparams = 1e9\n")
    assert main(["pool", "build", str(tmp_path / "pool.jsonl"), "-o", str(tmp_path / "p"), "--costs",
                 str(tmp_path / "c.toml"), "--cost", "b=2GFLOP", "-q", "--no-cache"]) == 0
    header = json.loads((tmp_path / "p" / "pool.json").read_text())
    assert header["costs"]["per_candidate"] == {"a": 1024.0, "b": 2.0}  # 2 x 1e9 x 512 tokens
    assert header["budget_routes"] == []  # too few questions to learn from: no fit, no routes
    assert main(["pool", "add", str(tmp_path / "p"), str(tmp_path / "more.jsonl"), "--cost", "a=4GFLOP",
                 "-q", "--no-cache"]) == 0
    header = json.loads((tmp_path / "p" / "pool.json").read_text())
    assert header["costs"]["per_candidate"] == {"a": 4.0, "b": 2.0} and header["budget_routes"] == []
    header["costs"]["per_candidate"] = [4.0, 2.0]  # damaged: pricing every RM replaces it, pricing some does not
    (tmp_path / "p" / "pool.json").write_text(json.dumps(header))
    save_queries(tmp_path / "last.jsonl", [scored_query(f"r{i}", {"a": [0.1, 0.9], "b": [0.2, 0.3]}, [True, False],
                                                        question=f"other {i}") for i in range(2)])
    capsys.readouterr()
    assert main(["pool", "add", str(tmp_path / "p"), str(tmp_path / "last.jsonl"), "--cost", "a=4GFLOP",
                 "-q", "--no-cache"]) == 2
    assert "malformed costs: per_candidate: expected a table of RM -> number" in capsys.readouterr().err
    assert main(["pool", "add", str(tmp_path / "p"), str(tmp_path / "last.jsonl"), "--cost", "a=3GFLOP",
                 "--cost", "b=1GFLOP", "-q", "--no-cache"]) == 0
    assert json.loads((tmp_path / "p" / "pool.json").read_text())["costs"]["per_candidate"] == {"a": 3.0, "b": 1.0}
    capsys.readouterr()
    assert main(["pool", "build", str(tmp_path / "pool.jsonl"), "-o", str(tmp_path / "q"), "--cost", "a=1B",
                 "-q", "--no-cache"]) == 2
    assert "no cost for b" in capsys.readouterr().err and not (tmp_path / "q").exists()
