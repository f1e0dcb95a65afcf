"""The serving figures on the benchmarks page are their scripts' JSON: scoring throughput (batched against the plain
loop, bench/score_throughput.py) and remote scoring (1, 2 and 4 vLLM servers, bench/remote_scoring.py).

Each script renders its table block from its `--json` numbers (`table(result)`) and writes it onto the page with
`--page`; here each block is rendered again from the committed JSON and must be the page's, and the prose around it
may state no figure a check here does not read (as in tests/test_pages.py).
"""

from __future__ import annotations

import re
import shutil
import sys

import pytest
from test_pages import BENCHMARKS, ROOT, WORDS, check_claims, load, prose, script_defaults, section

BENCH = ROOT / "bench"


@pytest.fixture
def bench(monkeypatch):
    """The bench scripts importable as modules (they import their helpers from beside them)."""
    monkeypatch.syspath_prepend(str(BENCH))
    yield
    for name in ("score_throughput", "remote_scoring", "tables", "plotting", "compute"):
        sys.modules.pop(name, None)


def without_block(text: str, name: str) -> str:
    """The section's text with table block `name` (its markers and what is between) taken out."""
    start, end = f"<!-- table:{name} -->", f"<!-- /table:{name} -->"
    assert text.count(start) == text.count(end) == 1, f"table block {name!r} missing or repeated"
    return text.split(start)[0] + text.split(end)[1]


@pytest.mark.parametrize("script,numbers", [("score_throughput", "throughput"),
                                            ("remote_scoring", "remote_scoring")])
def test_each_serving_table_is_what_its_script_renders_from_the_committed_json(bench, script, numbers):
    import importlib

    from tables import block

    module = importlib.import_module(script)
    assert block(BENCHMARKS, module.TABLE) == module.table(load(numbers)), (
        f"docs/benchmarks.md's {module.TABLE} table is not what bench/{script}.py renders from "
        f"docs/figures/{numbers}.json: rerun the script with --page, or write the block from the JSON")


def test_a_script_writes_its_block_and_nothing_else(bench, tmp_path):
    import score_throughput
    from tables import block, write_block

    page = tmp_path / "benchmarks.md"
    shutil.copy(BENCHMARKS, page)
    before = page.read_text(encoding="utf-8")
    write_block(page, score_throughput.TABLE, "a new table")
    assert block(page, score_throughput.TABLE) == "a new table"
    assert without_block(page.read_text(encoding="utf-8"), "throughput") == without_block(before, "throughput")
    with pytest.raises(ValueError, match="no table 'absent'"):
        write_block(page, "absent", "x")


def test_throughput_prose_states_what_the_script_and_json_say(monkeypatch):
    from morkit.reward_models.backends.hf import Batching

    data = load("throughput")
    tokens = round(data["tokens_per_pair"])
    text = prose(without_block(section(BENCHMARKS, "## Scoring throughput against the machine's peak"),
                               "throughput"))
    defaults = script_defaults("score_throughput.py", monkeypatch)
    sizes = ", ".join(map(str, defaults.sweep[:-1])) + f" and {defaults.sweep[-1]}"
    check_claims("benchmarks.md, scoring throughput", text, [
        (r"rate torch reaches on the (\d+) cores", (data["threads"],)),
        ((r"with its defaults the script scores (\d+) pairs by every row, batches of ([\d, and]+) alone and the "
          r"default path with batches of (\d+), (\w+) passes each"),
         (defaults.pairs, sizes, defaults.batch_size, WORDS[defaults.repeats])),
        (r"a single (\d+)-token sequence already gives matrix products of (\d+) rows", (tokens, tokens)),
        (r"caps a batch's padding at (\d+)% of the tokens", (round(Batching().max_padding * 100),)),
    ], allowed={"100", "2"})  # 100% of the peak; a core of the 2


def test_the_throughput_figure_is_the_scripts_defaults(monkeypatch):
    """`make bench` and the figure's command measure the same thing: the command names no workload flag."""
    commands = re.findall(r"```sh\n(.*?)```", section(BENCHMARKS, "## Scoring throughput against the machine's peak"),
                          re.DOTALL)
    (command,) = [c.replace("\\\n", " ") for c in commands if "score_throughput.py" in c]
    assert command.split() == ["python", "bench/score_throughput.py", "--plot", "docs/figures/throughput.svg",
                               "--json", "docs/figures/throughput.json", "--page", "docs/benchmarks.md"]
    assert "$(BIN)/python bench/score_throughput.py\n" in (ROOT / "Makefile").read_text()


def test_remote_scoring_prose_states_what_the_json_says():
    data = load("remote_scoring")
    counts = sorted({row["servers"] for row in data["rows"]})
    text = prose(without_block(section(BENCHMARKS, "## Scoring through vLLM servers"), "remote_scoring"))
    check_claims("benchmarks.md, remote scoring", text, [
        (r"against (\d+), (\d+) and (\d+) local vLLM CPU servers", tuple(counts)),
        (r"on these (\d+) cores a count", (data["cpus"],)),
    ], allowed={"2", "4"})  # the split the script makes: one core each for 2 servers, two to a core for 4
