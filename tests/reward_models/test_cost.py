"""What an RM costs (morkit.reward_models.cost): the forms a cost is given in, cost files and their errors, the cost
table's precedence and units, the cards' figures (counted again from the packaged weights), and the packaged
RewardMATH file against the data set's columns."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from morkit.core.errors import InputError
from morkit.reward_models import cost as costs
from morkit.reward_models.catalog import REWARD_MODELS
from morkit.reward_models.cost import (
    COST_UNIT, CostRates, CostTable, RMCost, cost_file_entries, cost_table, packaged_cost_files, read_cost_file,
)
from morkit.reward_models.timing import Meter, record


def _file(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---- RMCost: its forms ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, field, value", [
    ("8B", "active_params", 8e9), ("135M", "active_params", 135e6), ("8e9params", "active_params", 8e9),
    ("1_000params", "active_params", 1000.0), ("$0.02", "usd_per_call", 0.02), ("$ 3", "usd_per_call", 3.0),
    ("3ms", "cpu_seconds", 0.003), ("0.003s", "cpu_seconds", 0.003), ("40GFLOP", "gflop", 40.0),
    ("40gflop", "gflop", 40.0), ("8b", "active_params", 8e9), ("3MS", "cpu_seconds", 0.003),
])
def test_parse_reads_every_form(text, field, value):
    cost = RMCost.parse(text)
    assert getattr(cost, field) == pytest.approx(value) and cost.source == "given by the user"


@pytest.mark.parametrize("text", ["", "8", "$8B", "eight", "8 GB", "-3ms", "$", "1.2.3B", "8m", "nanB", "1e999B"])
def test_parse_refuses_other_text_in_one_line_naming_the_flag(text):
    with pytest.raises(InputError, match=r"^--cost .*give the active parameters") as info:
        RMCost.parse(text)
    assert "\n" not in str(info.value)


def test_a_cost_has_exactly_one_non_negative_figure():
    with pytest.raises(InputError, match="exactly one .* got none"):
        RMCost()
    with pytest.raises(InputError, match="got active_params, gflop"):
        RMCost(active_params=1e9, gflop=2.0)
    for bad in (-1.0, math.nan, math.inf, True, "8B"):
        with pytest.raises(InputError, match="non-negative number"):
            RMCost(gflop=bad)
    with pytest.raises(InputError, match="generates=true needs active_params"):
        RMCost(usd_per_call=0.01, generates=True)


def test_per_candidate_in_gflop_equivalents_at_the_rates():
    rates = CostRates()
    assert RMCost(active_params=1e9).per_candidate() == pytest.approx(2 * 512)  # 2 FLOPs x 1e9 x 512 tokens
    assert RMCost(active_params=1e9, generates=True).per_candidate() == pytest.approx(2 * (512 + 256))
    assert RMCost(usd_per_call=1.0).per_candidate() == pytest.approx(rates.flop_per_usd / 1e9)
    assert RMCost(cpu_seconds=0.5).per_candidate() == pytest.approx(50.0)  # 1e11 FLOP per CPU second
    assert RMCost(gflop=40).per_candidate() == 40.0
    assert RMCost(active_params=1e9).per_candidate(CostRates(tokens_per_pair=100)) == pytest.approx(200.0)
    # An open judge that generates costs what an API sells its forward passes for: Llama-3-70B at $0.88 per 1M.
    judge = RMCost(active_params=70.6e9, generates=True).per_candidate()
    api = RMCost(usd_per_call=0.88 * (512 + 256) / 1e6).per_candidate()
    assert judge == pytest.approx(api)


def test_rates_refuse_what_is_not_a_positive_number():
    with pytest.raises(InputError, match="tokens_per_pair must be a positive number"):
        CostRates(tokens_per_pair=0)
    with pytest.raises(InputError, match="flop_per_usd"):
        CostRates(flop_per_usd=-1.0)
    assert CostRates(judge_output_tokens=0).judge_output_tokens == 0


@pytest.mark.parametrize("cost, text", [
    (RMCost(active_params=8.03e9), "16.1 GFLOP/token"), (RMCost(active_params=134_515_008), "269 MFLOP/token"),
    (RMCost(active_params=70.6e9, generates=True), "141 GFLOP/token (generates)"),
    (RMCost(usd_per_call=0.0269), "$0.027/call"), (RMCost(usd_per_call=0.03), "$0.03/call"),
    (RMCost(cpu_seconds=0.0021), "2.1 ms CPU/pair"), (RMCost(cpu_seconds=0.137), "137 ms CPU/pair"),
    (RMCost(cpu_seconds=2.5), "2.5 s CPU/pair"), (RMCost(gflop=40), "40 GFLOP/pair"),
    (RMCost(active_params=1e12), "2,000 GFLOP/token"),
])
def test_describe_reads_without_exponents(cost, text):
    assert cost.describe() == text


def test_to_json_keeps_the_given_fields():
    assert RMCost(active_params=1e9, source="card").to_json() == {"active_params": 1e9, "source": "card"}
    assert RMCost(active_params=1e9, generates=True).to_json() == {"active_params": 1e9, "generates": True}
    assert RMCost(cpu_seconds=0.1).to_json() == {"cpu_seconds": 0.1}


# ---- from_mapping and cost files ----------------------------------------------------------------------------

def test_from_mapping_reads_each_form_and_its_source():
    rates = CostRates()
    got = RMCost.from_mapping({"params": 7e9, "params_source": "config", "model": "m", "note": "n", "kind": "prm"})
    assert got == RMCost(active_params=7e9, source="config")
    moe = RMCost.from_mapping({"params": 46.7e9, "active_params": 12.9e9, "generates": True})
    assert moe.active_params == 12.9e9 and moe.generates
    price = RMCost.from_mapping({"usd_per_1m_input": 10.0, "usd_per_1m_output": 30.0, "price_source": "page"})
    assert price.usd_per_call == pytest.approx((10 * 512 + 30 * 256) / 1e6) and price.source == "page"
    cheaper = RMCost.from_mapping({"usd_per_1m_input": 10.0, "usd_per_1m_output": 30.0},
                                  CostRates(tokens_per_pair=100, judge_output_tokens=0))
    assert cheaper.usd_per_call == pytest.approx(10 * 100 / 1e6)
    assert RMCost.from_mapping({"usd_per_call": 0.01, "price_source": "p"}).source == "p"
    assert RMCost.from_mapping({"cpu_seconds": 0.002, "source": "bench"}) == RMCost(cpu_seconds=0.002, source="bench")
    assert RMCost.from_mapping({"gflop": 3, "model_source": "x"}).per_candidate(rates) == 3.0


@pytest.mark.parametrize("table, message", [
    ({"params": 7e9, "size": 7}, "costs.x: unknown key size; a cost gives active_params"),
    ({"params": 7e9, "size": 7, "flops": 1}, "unknown keys size, flops"),
    ({"model": "m"}, "costs.x: no cost"),
    ({"params": 7e9, "usd_per_call": 0.1}, "give one cost, not params and usd_per_call"),
    ({"usd_per_1m_input": 1.0}, "usd_per_1m_output is missing"),
    ({"params": "7B"}, r"costs.x.active_params: expected a non-negative number, not '7B'"),
    ({"usd_per_1m_input": -1.0, "usd_per_1m_output": 1.0}, "costs.x.usd_per_1m_input: expected a non-negative"),
    ({"params": 7e9, "generates": "yes"}, "costs.x.generates: expected true or false"),
    ({"cpu_seconds": 0.1, "generates": True}, "generates=true needs active_params or params"),
    ({"gflop": 1.0, "source": 3}, "its source must be text"),
])
def test_from_mapping_errors_name_the_table_and_the_key(table, message):
    with pytest.raises(InputError, match=message):
        RMCost.from_mapping(table, where="costs.x")


def test_read_cost_file_reads_tables_and_skips_those_whose_note_says_why(tmp_path):
    path = _file(tmp_path, '[costs.a]\nparams = 1e9\nparams_source = "card"\n\n'
                           '[costs."b-c"]\nusd_per_call = 0.02\n\n'
                           '[costs.d]\nmodel = "an API model"\nnote = "size and price unknown"\n')
    assert read_cost_file(path) == {"a": RMCost(active_params=1e9, source="card"), "b-c": RMCost(usd_per_call=0.02)}
    entries = cost_file_entries(path)
    assert [(e.name, e.cost is None, e.model, e.note) for e in entries] == [
        ("a", False, "", ""), ("b-c", False, "", ""), ("d", True, "an API model", "size and price unknown")]
    other_spelling = _file(tmp_path, "[columns.a]\ngflop = 2\n", "columns.toml")  # one spelling: [costs.NAME]
    with pytest.raises(InputError, match=r"columns.toml: expected \[costs.NAME\] tables"):
        read_cost_file(other_spelling)


@pytest.mark.parametrize("text, message", [
    ("[costs.a]\nmodel = 'x'\n", "mine.toml: costs.a: no cost"),
    ("[costs.a]\nparams = 1e9\nwhat = 1\n", "mine.toml: costs.a: unknown key what"),
    ("[costs.a]\nnote = 'unknown'\nwhat = 1\n", "mine.toml: costs.a: unknown key what"),
    ("[costs.a]\nparams = -1\n", "mine.toml: costs.a.active_params: expected a non-negative number"),
    ("[costs]\na = 3\n", "mine.toml: costs.a: expected a table"),
    ("[other.a]\nparams = 1\n", r"mine.toml: expected \[costs.NAME\] tables"),
    ("[costs.a\n", "mine.toml: invalid TOML"),
    ("[costs.a]\nnote = 3\nparams = 1e9\n", "mine.toml: costs.a.note: expected text"),
])
def test_read_cost_file_errors_name_the_file_and_the_rm(tmp_path, text, message):
    path = _file(tmp_path, text)
    with pytest.raises(InputError, match=message) as info:
        read_cost_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_missing_cost_file_lists_the_packaged_ones(tmp_path):
    assert "rewardmath" in packaged_cost_files()
    with pytest.raises(InputError, match=r"--costs nope: no such file, and not a packaged cost file \(.*rewardmath"):
        read_cost_file("nope")
    with pytest.raises(InputError, match="no such file"):
        read_cost_file(tmp_path / "absent.toml")


# ---- cost_table -----------------------------------------------------------------------------------------------

def test_cost_table_precedence_is_given_then_files_then_card(tmp_path):
    first = _file(tmp_path, "[costs.minilm-probe]\ngflop = 1\n[costs.t]\ngflop = 2\n", "first.toml")
    second = _file(tmp_path, "[costs.t]\ngflop = 3\n[costs.u]\ngflop = 4\n", "second.toml")
    table = cost_table(["minilm-probe", "t", "u", "smollm2-orm"], files=[first, second],
                       given={"u": RMCost(gflop=5, source="given by the user")})
    assert table.per_candidate == {"minilm-probe": 1.0, "t": 3.0, "u": 5.0,
                                   "smollm2-orm": pytest.approx(2 * 134_515_008 * 512 / 1e9)}
    assert table.sources["u"] == "given by the user" and table.sources["t"] == "3 GFLOP/pair"
    assert "134,515,008 parameters" in table.sources["smollm2-orm"] and table.unit == COST_UNIT


def test_cost_table_names_every_rm_without_a_cost():
    with pytest.raises(InputError, match=r"^no cost for remote, my-table: give one with --cost NAME=VALUE .*"
                                         r"packaged: .*rewardmath") as info:
        cost_table(["minilm-probe", "remote", "my-table"])
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="cost unit 'watts': one of GFLOP, seconds"):
        cost_table(["minilm-probe"], unit="watts")


def test_per_candidate_numbers_of_known_cards():
    table = cost_table(["smollm2-judge", "minilm-probe", "math-consensus", "code-tests", "qwen2.5-math-rm-72b"])
    per = table.per_candidate
    assert per["smollm2-judge"] == pytest.approx(137.743368192)
    assert per["minilm-probe"] == pytest.approx(2 * 22_713_216 * 512 / 1e9)
    assert per["math-consensus"] == pytest.approx(2.9e-5 * 1e11 / 1e9)
    assert per["code-tests"] == pytest.approx(0.137 * 100)
    assert per["qwen2.5-math-rm-72b"] == pytest.approx(2 * 72.7e9 * 512 / 1e9)
    assert table.of(["minilm-probe", "code-tests"], candidates=4) == pytest.approx(
        4 * (per["minilm-probe"] + per["code-tests"]))
    assert CostTable.from_json(json.loads(json.dumps(table.to_json()))) == table
    with pytest.raises(InputError, match="no cost for nope"):
        table.vector(["minilm-probe", "nope"])


def test_a_cost_table_holds_finite_non_negative_costs_in_a_known_unit():
    for bad in (math.nan, -5.0, math.inf, True, "3"):
        with pytest.raises(InputError, match="cost of b: expected a non-negative number") as info:
            CostTable({"a": 1.0, "b": bad})
        assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="cost table unit 'hours': one of GFLOP, seconds"):
        CostTable({"a": 1.0}, unit="hours")
    assert CostTable({"a": 0, "b": 2.5}, unit="seconds").of(["a", "b"], 2) == 5.0
    for obj, message in (([1], "expected a table"),
                         ({"per_candidate": [1]}, "per_candidate: expected a table of RM -> number"),
                         ({"per_candidate": {"a": True}}, "per_candidate.a: expected a non-negative number, not True"),
                         ({"per_candidate": {"a": "x"}}, "per_candidate.a: expected a non-negative number, not 'x'"),
                         ({"per_candidate": {"a": 1}, "unit": "hours"}, "unit: one of GFLOP, seconds, not 'hours'"),
                         ({"per_candidate": {"a": 1}, "sources": {"a": 3}}, "sources: expected a table of RM -> text")):
        with pytest.raises(InputError, match=message) as info:
            CostTable.from_json(obj)
        assert "\n" not in str(info.value) and "object" not in str(info.value)


def test_every_registered_rm_has_a_cost_or_takes_one_from_the_user():
    for entry in REWARD_MODELS:
        cost = costs.cost_of_card(entry.spec)
        if entry.spec.options:  # the bare clients: their model, and so its cost, is the user's
            assert cost is None, entry.name
        else:
            assert cost is not None and cost.source and cost.per_candidate() > 0, entry.name
    for name in ("math-consensus", "code-tests"):
        card = REWARD_MODELS.get(name).spec
        assert card.cost.cpu_seconds and card.cost.source.startswith("measured by bench/rule_costs.py"), name
    judge = REWARD_MODELS.get("smollm2-judge").spec.cost
    assert "forward pass over the judge prompt" in judge.source and not judge.generates


def test_the_embedded_cards_count_the_packaged_weights():
    """The parameter counts on the cards are the tensors of the packaged checkpoints (MiniLM's position-id buffer
    is not a parameter)."""
    from safetensors import safe_open

    from morkit.reward_models.embedded.cards import MINILM_PARAMS, SMOLLM2_PARAMS
    from morkit.runtime import assets

    def count(path: Path, skip: tuple[str, ...] = ()) -> int:
        with safe_open(str(path), "np") as tensors:
            return sum(math.prod(tensors.get_slice(k).get_shape()) for k in tensors.keys() if k not in skip)

    minilm = assets.minilm_path() / "model.safetensors"
    assert count(minilm, ("embeddings.position_ids",)) == MINILM_PARAMS
    assert count(assets.smollm2_checkpoint() / "model.safetensors") == SMOLLM2_PARAMS
    assert REWARD_MODELS.get("minilm-probe").spec.cost.active_params == MINILM_PARAMS
    assert REWARD_MODELS.get("smollm2-orm").spec.cost.active_params == SMOLLM2_PARAMS


# ---- unit seconds ----------------------------------------------------------------------------------------------

def _meter(wall: float, cpu: float, pairs: int) -> Meter:
    meter = Meter()
    meter.add(wall, cpu, pairs)
    return meter


def test_cost_table_in_seconds_reads_the_measurements():
    record("minilm-probe", "transformers", "cpu", _meter(0.3, 0.6, 10))
    record("minilm-probe", "transformers", "cpu", _meter(0.1, 0.2, 10))  # a running mean: 0.4 s over 20 pairs
    record("minilm-probe", "vllm", "cuda (NVIDIA H200)", _meter(0.01, 0.01, 10))
    record("math-consensus", "python", "cpu", _meter(0.002, 0.002, 40))
    table = cost_table(["minilm-probe", "math-consensus"], unit="seconds")
    assert table.unit == "seconds"
    assert table.per_candidate == {"minilm-probe": pytest.approx(0.02), "math-consensus": pytest.approx(5e-5)}
    assert table.sources["minilm-probe"].startswith("measured: transformers on cpu: 20 ms/pair")
    on_gpu = cost_table(["minilm-probe", "math-consensus"], unit="seconds", placement="vllm", device="cuda")
    assert on_gpu.per_candidate["minilm-probe"] == pytest.approx(0.001)
    with pytest.raises(InputError, match=r"^no measured seconds per pair for smollm2-orm \(on transformers\), "
                                         r"code-tests \(on python\): run `morkit score` with it once") as info:
        cost_table(["minilm-probe", "smollm2-orm", "code-tests"], unit="seconds")
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match=r"minilm-probe \(on transformers cuda\)"):
        cost_table(["minilm-probe"], unit="seconds", device="cuda")
    with pytest.raises(InputError, match="cost unit seconds reads measured seconds"):
        cost_table(["minilm-probe"], unit="seconds", given={"minilm-probe": RMCost(gflop=1)})


# ---- the packaged RewardMATH file -------------------------------------------------------------------------------

def test_every_rewardmath_column_has_a_cost_with_a_source(data_dir):
    from morkit.data.datasets import rewardmath_rm_scores
    from morkit.reward_models.rules.table import table_names

    columns = table_names(rewardmath_rm_scores(data_dir))
    assert len(columns) == 22
    entries = {e.name: e for e in cost_file_entries("rewardmath")}
    assert sorted(entries) == sorted(columns)
    for name, entry in entries.items():
        assert entry.cost is not None and entry.cost.source.strip() and entry.model, name
        if entry.cost.active_params is None:  # an API judge: its size is unknown, and its note says so
            assert "not published" in entry.note, name
    table = cost_table(columns, files=["rewardmath"])
    assert all(v > 0 for v in table.per_candidate.values())
    assert table.per_candidate["llama3_70B"] == pytest.approx(2 * 70.6e9 * (512 + 256) / 1e9)
    assert table.per_candidate["prometheus_8x7B"] == pytest.approx(2 * 12.9e9 * (512 + 256) / 1e9)  # active


# ---- the docs page ----------------------------------------------------------------------------------------------

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reward-models.md"


def test_the_pages_rewardmath_table_is_what_morkit_rms_costs_prints(capsys):
    from test_pages import section, tables

    from morkit.cli.main import main
    from morkit.reward_models.cost import cost_file_rows

    expected = cost_file_rows(cost_file_entries("rewardmath"))
    shown, = tables(section(PAGE, "### The RewardMATH costs"))
    assert [[cell.strip("`") for cell in row] for row in shown] == expected
    assert main(["rms", "--costs", "rewardmath"]) == 0
    printed = [line.split("  ") for line in capsys.readouterr().out.splitlines()[1:23]]
    assert [[cell.strip() for cell in line if cell.strip()] for line in printed] == expected


def test_the_pages_cost_file_reads(tmp_path):
    text = PAGE.read_text(encoding="utf-8").split("## What each RM costs", 1)[1]
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    costs_read = read_cost_file(_file(tmp_path, block))
    assert costs_read == {"my-judge": RMCost(active_params=8.03e9, generates=True,
                                             source="config.json of my-org/judge-8b"),
                          "my-api-judge": RMCost(usd_per_call=(3 * 512 + 15 * 256) / 1e6,
                                                 source="the provider's price page")}
    assert "1.6e17 FLOP per US dollar" in text and f"{costs.FLOP_PER_USD:.2g}" == "1.6e+17"
