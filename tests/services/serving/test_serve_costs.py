"""Budgets and cascades end to end: `morkit serve` over real HTTP on 127.0.0.1 (costs per ranking, escalations and
spend on /metrics, the settings on /health), `morkit rank --cascade`, the TRL reward under a budget, the Ray Serve
ingress's options, and each bad flag combination. Real RewardMATH scores of four RMs (cached on every candidate, so
no model runs), costs made up here, the hash embedder and a small learned grid (fits of a second)."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from functools import partial

import httpx
import numpy as np
import pytest
from fakes.embedder import HashEmbedder
from fakes.serving import free_port, live

from morkit.cli import main
from morkit.data.contract import query_to_json, save_queries
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.reward_models.cost import CostTable
from morkit.reward_models.options import ScoringOptions
from morkit.selection import cascade as cascade_module
from morkit.selection import learned_method
from morkit.selection.budget import Budget
from morkit.selection.cascade import Cascade, CascadeOptions, LearnedWithPicks
from morkit.selection.learned import SETTINGS, fit_learned
from morkit.selection.methods import SelectOptions
from morkit.selection.router import Router
from morkit.services.serving.engine import RoutingEngine

CHEAP = ("Eurus-RM", "ReasonEval_7B")
THEN = ("internlm2_20b", "gpt4o")
RMS = CHEAP + THEN
TABLE = CostTable({"Eurus-RM": 14.0, "ReasonEval_7B": 14.0, "internlm2_20b": 40.0, "gpt4o": 300.0})
GRID = (SETTINGS[1], SETTINGS[9])
"""Two settings of the learned grid, one fold deal: the fits these tests make take about a second each."""
CASCADE = ["--cascade", *CHEAP, "--then", *THEN]


def metric(url: str, name: str) -> dict[str, float]:
    """Samples of one metric family: sample name -> value (these families have no labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name: s.value for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)
            if family.name == name for s in family.samples}


def _kept(query):
    return replace(query, candidates=tuple(replace(c, scores={k: c.scores[k] for k in RMS})
                                           for c in query.candidates))


@pytest.fixture(scope="module")
def small_grid():
    """For this module: cascades fit their routes on the small grid, once per pool's data (each CLI run loads its own
    copy of the pool: the fits made for the first are reused), and hash-embedded pools load the hash embedder."""
    from morkit.question_pool import embed

    fitted: dict[tuple, LearnedWithPicks] = {}

    def learned(pool):
        key = (tuple(pool.rm_names), len(pool), pool.embedder)
        return fitted.setdefault(key, LearnedWithPicks(pool, settings=GRID))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cascade_module, "LearnedWithPicks", learned)
        patch.setattr(cascade_module, "fit_learned", partial(fit_learned, repeats=1))
        patch.setattr(learned_method, "fit_learned", partial(fit_learned, repeats=1))
        patch.setattr(embed, "load_embedder", lambda name=None, device=None: HashEmbedder())
        yield


@pytest.fixture(scope="module")
def rewardmath(data_dir):
    from morkit.data.datasets import rewardmath_rm_scores

    return [_kept(q) for q in rewardmath_rm_scores(data_dir)[:110]]


@pytest.fixture(scope="module")
def pool(rewardmath, small_grid):
    """80 problems, four RMs, their costs and a learned fit over every RM (the small grid) stored."""
    built = build_pool(rewardmath[:80], HashEmbedder(), rm_names=RMS, config=PoolConfig(max_members=2))
    return replace(built, meta={**built.meta, "costs": TABLE.to_json(),
                                "learned": fit_learned(built, settings=GRID, repeats=1).to_json()})


@pytest.fixture(scope="module")
def pool_dir(pool, tmp_path_factory):
    out = tmp_path_factory.mktemp("costs") / "pool"
    replace(pool).save(out)  # a copy: saving binds a pool to its directory
    return out


@pytest.fixture(scope="module")
def queries(rewardmath):
    return [replace(q, candidates=tuple(replace(c, correct=None) for c in q.candidates)) for q in rewardmath[80:110]]


@pytest.fixture(scope="module")
def query_file(queries, tmp_path_factory):
    path = tmp_path_factory.mktemp("queries") / "q.jsonl"
    save_queries(path, queries[:8])
    return path


def _engine(pool, select):
    return RoutingEngine(pool, select, ScoringOptions(device="cpu", cache=None), embedder=HashEmbedder())


@pytest.fixture(scope="module")
def cascade_engine(pool, small_grid):
    """A cascade escalating half the pool's out-of-fold picks."""
    engine = _engine(pool, SelectOptions(cascade=CascadeOptions(CHEAP, THEN, spend=0.5)))
    yield engine
    engine.close()


def _rank(url, queries):
    reply = httpx.post(f"{url}/v1/rank", json={"queries": [query_to_json(q) for q in queries]}, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()["results"]


# ------------------------------------------------------------------------------------------------ serve
def test_without_the_new_settings_serve_is_unchanged(pool, queries, small_grid):
    engine = _engine(pool, SelectOptions())
    try:
        with live(engine) as url:
            got = _rank(url, queries[:6])
            health = httpx.get(f"{url}/health").json()
            routed = metric(url, "morkit_routed_queries")
            escalated, spent = metric(url, "morkit_escalations"), metric(url, "morkit_scoring_cost_gflop")
    finally:
        engine.close()
    want = Router.from_options(pool, SelectOptions(), embedder=HashEmbedder()).route(queries[:6])
    assert got == [r.to_json() for r in want]  # the pool stores costs, but none were asked for
    assert not any({"cost", "escalated", "budget"} & set(row) for row in got)
    assert not {"budget", "cascade"} & set(health) and engine.cascade is None
    assert routed == {"morkit_routed_queries_total": 6.0}
    assert escalated == {"morkit_escalations_total": 0.0} and spent == {"morkit_scoring_cost_gflop_total": 0.0}


def test_serve_under_a_budget_prices_each_ranking_and_metrics_sum_the_spend(pool, queries, small_grid):
    from morkit.services import routing

    select = SelectOptions(method="pres", budget=Budget(share=0.5))
    engine = _engine(pool, select)
    try:
        with live(engine) as url:
            got = _rank(url, queries[:4]) + _rank(url, queries[4:10])
            spent = metric(url, "morkit_scoring_cost_gflop")["morkit_scoring_cost_gflop_total"]
            routed = metric(url, "morkit_routed_queries")["morkit_routed_queries_total"]
            health = httpx.get(f"{url}/health").json()
    finally:
        engine.close()
    full = TABLE.of(RMS, 10)
    for row in got:
        assert row["cost"] == pytest.approx(TABLE.of(row["ensemble"]["members"], 10)) and "escalated" not in row
        assert row["cost"] <= 0.5 * full * (1 + 1e-9) and row["budget"]["limit"] == pytest.approx(0.5 * full)
    assert spent == pytest.approx(sum(row["cost"] for row in got)) and routed == 10
    assert health["budget"] == {"share": 0.5, "cost_weight": 0.0} and "cascade" not in health
    rank = routing.rank(queries[:10], pool, select, ScoringOptions(device="cpu", cache=None))
    assert got == [r.to_json() for r in rank]  # what `morkit rank --budget 50% --method pres` writes


def test_serve_with_a_cascade_ranks_as_the_cascade_does_and_counts_escalations(cascade_engine, queries):
    with live(cascade_engine) as url:
        got = _rank(url, queries[:5]) + _rank(url, queries[5:20])
        escalations = metric(url, "morkit_escalations")["morkit_escalations_total"]
        spent = metric(url, "morkit_scoring_cost_gflop")["morkit_scoring_cost_gflop_total"]
        health = httpx.get(f"{url}/health").json()
    # the engine's phases over micro-batches and Cascade.route over the list: one decision, the same rankings
    assert got == [r.to_json() for r in cascade_engine.cascade.route(queries[:20])]
    flags = [row["escalated"] for row in got]
    assert set(flags) == {True, False} and escalations == sum(flags)
    for row in got:
        ran = RMS if row["escalated"] else CHEAP  # every RM of each route's fit ran for it
        assert row["cost"] == pytest.approx(TABLE.of(ran, 10))
    assert spent == pytest.approx(sum(row["cost"] for row in got))
    cascade = health["cascade"]
    assert (cascade["cheap"], cascade["then"], cascade["spend"], cascade["below"]) == (list(CHEAP), list(THEN), 0.5,
                                                                                      None)
    assert cascade["threshold"] == cascade_engine.cascade.threshold and cascade["cost_unit"] == "GFLOP"
    assert health["method"].startswith("cascade: learned over Eurus-RM, ReasonEval_7B")


def test_a_failure_in_either_route_fails_its_job_alone(cascade_engine, queries, monkeypatch):
    cascade = cascade_engine.cascade
    want = cascade.route(queries[:8])
    kept = next(i for i, r in enumerate(want) if not r.escalated)
    raised = next(i for i, r in enumerate(want) if r.escalated)

    def failing(step, bad):
        def run(query, *args):
            if query.id == bad:
                raise ValueError(f"{query.id} failed")
            return step(query, *args)
        return run

    monkeypatch.setattr(cascade, "decide", failing(cascade.decide, queries[kept].id))  # the cheap route's last phase
    monkeypatch.setattr(cascade, "finish", failing(cascade.finish, queries[raised].id))  # the escalated route's
    result = cascade_engine.run([(q,) for q in queries[:8]])
    for i, (got, ranking) in enumerate(zip(result, want)):
        if i in (kept, raised):
            assert isinstance(got, ValueError) and queries[i].id in str(got)
        else:
            assert [r.to_json() for r in got] == [ranking.to_json()]


def _served(monkeypatch, flags, pool_dir, queries):
    """`morkit serve --pool DIR FLAGS` on a free port, asked /v1/rank for six queries, /metrics and /health, and
    shut down: (the results, the escalations counted, the spend counted, /health)."""
    from morkit.services.serving import server

    seen = {}

    def serve(engine, limits, *, api_key=None, sock=None, log_level="warning"):
        with live(engine, limits, sock=sock) as url:
            seen["rows"] = _rank(url, queries[:6])
            seen["escalations"] = metric(url, "morkit_escalations")["morkit_escalations_total"]
            seen["spend"] = metric(url, "morkit_scoring_cost_gflop")["morkit_scoring_cost_gflop_total"]
            seen["health"] = httpx.get(f"{url}/health").json()
        return True

    monkeypatch.setattr(server, "serve", serve)
    assert main(["serve", "--pool", str(pool_dir), "--port", str(free_port()), "--no-run", "-q", *flags]) == 0
    return seen["rows"], seen["escalations"], seen["spend"], seen["health"]


def test_morkit_serve_with_cascade_flags_escalates_every_query_below_1(pool_dir, queries, monkeypatch, capsys):
    rows, escalations, spend, health = _served(monkeypatch, [*CASCADE, "--below", "1"], pool_dir, queries)
    assert [row["escalated"] for row in rows] == [True] * 6 and escalations == 6
    assert all(row["cost"] == pytest.approx(TABLE.of(RMS, 10)) for row in rows)  # the pool's stored costs
    assert spend == pytest.approx(6 * TABLE.of(RMS, 10))
    assert health["cascade"]["below"] == 1.0 and health["resident_rms"] == []
    assert "morkit serve: pool" in capsys.readouterr().err


def test_morkit_serve_with_budget_flags(pool_dir, queries, monkeypatch):
    flags = ["--method", "pres", "--budget", "25%", "--cost-weight", "1e-6", "--cost", "gpt4o=100GFLOP"]
    rows, escalations, spend, health = _served(monkeypatch, flags, pool_dir, queries)
    costs = {**TABLE.per_candidate, "gpt4o": 100.0}  # --cost updates the stored table
    for row in rows:
        assert row["cost"] == pytest.approx(10 * sum(costs[n] for n in row["ensemble"]["members"]))
        assert row["budget"]["limit"] == pytest.approx(0.25 * 10 * sum(costs.values())) and "escalated" not in row
    assert spend == pytest.approx(sum(row["cost"] for row in rows)) and escalations == 0
    assert health["budget"] == {"share": 0.25, "cost_weight": 1e-6} and "cascade" not in health


# ------------------------------------------------------------------------------------------------ the CLI
def test_rank_with_a_cascade_end_to_end(pool_dir, query_file, tmp_path, capsys):
    out = tmp_path / "ranked.jsonl"
    assert main(["rank", "--pool", str(pool_dir), str(query_file), "-o", str(out), "--no-run", "-q", *CASCADE,
                 "--spend", "50%", "--cost", "gpt4o=100GFLOP"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    costs = {**TABLE.per_candidate, "gpt4o": 100.0}  # --cost updates the stored table
    for row in rows:
        assert row["cost"] == pytest.approx(10 * sum(costs[n] for n in (RMS if row["escalated"] else CHEAP)))
    count = sum(row["escalated"] for row in rows)
    err = capsys.readouterr().err
    assert f"; escalated {count} of {len(rows)} ({count / len(rows):.0%}); mean cost " in err
    assert f"mean cost {np.mean([r['cost'] for r in rows]):.4g} GFLOP per query -> " in err
    assert main(["rank", "--pool", str(pool_dir), "-o", str(out), "--no-run", "-q", *CASCADE, "--below", "0",
                 "--", str(query_file)]) == 0  # `--` ends the RM list before the input
    assert not any(json.loads(line)["escalated"] for line in out.read_text().splitlines())
    assert "; escalated 0 of 8 (0%)" in capsys.readouterr().err


@pytest.mark.parametrize("verb, flags, message", [
    ("rank", ["--then", "gpt4o"], "--then applies only with --cascade"),
    ("rank", ["--below", "0.5", "--spend", "0.2"], "--below, --spend apply only with --cascade"),
    ("rank", [*CASCADE, "--below", "0.5", "--spend", "0.2"], "give exactly one of --below"),
    ("rank", CASCADE, "give exactly one of --below"),
    ("rank", ["--cascade", *CHEAP, "--below", "0.5"], "--then: name at least one pool RM"),
    ("rank", ["--cascade", "nope", "--then", "gpt4o", "--below", "0.5"], "--cascade nope: not an RM of the pool"),
    ("rank", ["--cascade", *CHEAP, "--then", "gpt4o", "ghost", "--below", "0.5"], "--then ghost: not an RM of"),
    ("rank", ["--cascade", *CHEAP, "--then", "Eurus-RM", "--below", "0.5"], "--then Eurus-RM: also a cheap RM"),
    ("rank", [*CASCADE, "--below", "0.5", "--method", "pres"], "not with --method pres"),
    ("rank", [*CASCADE, "--below", "0.5", "--rm", "gpt4o"], "not with --rm"),
    ("rank", [*CASCADE, "--below", "0.5", "--budget", "50%"], "not with --budget/--cost-weight"),
    ("rank", [*CASCADE, "--spend", "150%"], "argument --spend: the share of queries to escalate must be between"),
    ("rank", [*CASCADE, "--below", "2"], "argument --below"),
    ("select", [*CASCADE, "--below", "0.5"], "select: a cascade decides which queries escalate"),
    ("serve", ["--then", "gpt4o"], "--then applies only with --cascade"),
    ("serve", [*CASCADE, "--below", "0.5", "--method", "stacker"], "not with --method stacker"),
])
def test_bad_cascade_flags_are_one_line_errors(pool_dir, query_file, tmp_path, capsys, verb, flags, message):
    args = ["--port", str(free_port())] if verb == "serve" else [str(query_file), "-o", str(tmp_path / "o.jsonl")]
    try:
        code = main([verb, "--pool", str(pool_dir), *args, "--no-run", "-q", *flags])
    except SystemExit as exc:  # argparse's own errors (a value out of range)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morkit: error:") and message in err and "\n" not in err, err
    assert not (tmp_path / "o.jsonl").exists()


def test_select_options_check_the_cascade_beside_other_options():
    cascade = CascadeOptions(CHEAP, THEN, below=0.5)
    options = SelectOptions(cascade=cascade)
    assert pickle.loads(pickle.dumps(options)) == options and options.rm_scope == RMS  # Ray Serve pickles it
    assert SelectOptions(rms=("gpt4o",), method="fixed").rm_scope == ("gpt4o",) and SelectOptions().rm_scope is None
    with pytest.raises(Exception, match="not with --rm .* or --budget/--cost-weight"):
        SelectOptions(method="fixed", rms=("gpt4o",), budget=Budget(share=0.5), cascade=cascade)


# ------------------------------------------------------------------------------------------------ TRL, Ray Serve
def test_the_trl_reward_under_a_budget_is_morkit_ranks(hash_pool, math_queries, tmp_path, small_grid):
    """The table RM and math-consensus, costed from their cards: the reward's scores are `morkit rank`'s under the
    same budget (1 GFLOP per query: math-consensus, the only one that runs here, at 0.0029 per candidate)."""
    from morkit.integrations.trl import RoutedReward
    from morkit.services.serving.protocol import group_responses

    groups = [math_queries[i] for i in (28, 37, 54)]
    prompts = [q.question for q in groups for _ in q.candidates]
    completions = [c.text for q in groups for c in q.candidates]
    reward = RoutedReward(pool=hash_pool, select=SelectOptions(method="pres", budget=Budget(per_query=1.0)),
                          scoring=ScoringOptions(device="cpu", cache=None))
    try:
        rewards = reward(prompts=prompts, completions=completions)
    finally:
        reward.close()
    replace(hash_pool).save(tmp_path / "pool")
    save_queries(tmp_path / "q.jsonl", group_responses(prompts, completions).queries)
    out = tmp_path / "ranked.jsonl"
    assert main(["rank", "--pool", str(tmp_path / "pool"), str(tmp_path / "q.jsonl"), "-o", str(out), "--method",
                 "pres", "--budget", "1", "--device", "cpu", "--no-cache", "-q"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s for row in rows for s in row["scores"]] == rewards and len(set(rewards)) > 1
    assert all(row["ensemble"]["members"] == ["math-consensus"] and row["cost"] > 0 for row in rows)
    assert all(row["budget"]["limit"] == 1.0 for row in rows)


def test_the_ray_serve_ingress_builds_the_same_cascade_from_pickled_options(pool_dir, cascade_engine, queries):
    from morkit.question_pool.pool import load_pool
    from morkit.services.serving import ray_serve
    from morkit.services.serving.app import ServeLimits

    select = pickle.loads(pickle.dumps(SelectOptions(cascade=CascadeOptions(CHEAP, THEN, spend=0.5))))
    ingress = ray_serve.Ingress(str(pool_dir), select, ScoringOptions(device="cpu", cache=None), ServeLimits(), None,
                                {}, embedder=HashEmbedder())
    try:
        assert isinstance(ingress.engine.cascade, Cascade)
        assert ingress.engine.health()["cascade"] == cascade_engine.health()["cascade"]
        got = ingress.engine.rank(queries[:6])
    finally:
        ingress.engine.close()
        ingress.engine = None
    assert [r.to_json() for r in got] == [r.to_json() for r in cascade_engine.rank(queries[:6])]
    assert ray_serve.model_rms(load_pool(pool_dir), select) == []  # none of these RMs is a model that runs here
