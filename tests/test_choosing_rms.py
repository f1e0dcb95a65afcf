"""docs/choosing-rms.md keeps to its sources: the memory table is what morkit computes from its parameter counts,
the paper's figures are those of the CTTS-MM text's tables, and the figures taken from other pages are there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from morkit.reward_models.ctts import CTTS_CARDS
from morkit.reward_models.weights import bf16_gib

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "choosing-rms.md"
# The paper's names of the RMs, as its tables spell them (Table G writes AceCodeRM as "AccCodeRM").
PAPER_NAMES = {"qwen2.5-math-rm-72b": "Qwen2.5-Math-RM-72B", "qwen2.5-math-prm-7b": "Qwen2.5-Math-PRM-7B",
               "skywork-reward-gemma-2-27b": "Skywork-Reward-Gemma-2-27B",
               "inf-orm-llama3.1-70b": "INF-ORM-Llama3.1-70B", "ldl-reward-gemma-2-27b": "LDL-Reward-Gemma-2-27B-v0.1",
               "acecoderm-32b": "AceCodeRM-32B", "qrm-gemma-2-27b": "QRM-Gemma-2-27B",
               "skywork-reward-v2-llama-3.1-8b": "Skywork-Reward-V2-Llama-3.1-8B-40M"}
# Figures the page takes from other pages: (the figure, its page, the line of that page that states it).
QUOTED = [("63.2%", "selection.md", r"\*\*morkit default: learned selector \(CV picks.*\| \*\*63\.2%\*\* \|"),
          ("37.3%", "selection.md", r"^\| best single RM \(.*\| 37\.3% \|"),
          ("58.1%", "selection.md", r"\*\*morkit default: learned selector\*\* \| \*\*58\.1%\*\*.*"),
          ("58.1%", "selection.md", r"^\| best single RM per domain, chosen on train .*\| 58\.1% \|"),
          ("+1.1", "selection.md", r"\*\*learned \(default\)\*\* \| \*\*49\.4%\*\* \| \*\*\+1\.1\*\*"),
          ("-0.8", "selection.md", r"\*\*learned \(default\)\*\* .* \| \*\*-0\.8\*\* \|"),
          ("8,192 tokens", "scoring.md", r"activation headroom is 8,192 tokens on transformers"),
          ("--tensor-parallel-size 2", "scoring.md",
           r"72B and 70B models need two GPUs \(`--tensor-parallel-size 2`\)")]


def tables() -> list[list[list[str]]]:
    """The page's Markdown tables, each a list of rows of cells (header first, separator dropped)."""
    out, current = [], []
    for line in PAGE.read_text(encoding="utf-8").splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                current.append(cells)
        elif current:
            out.append(current)
            current = []
    return out


def table_with(header: str) -> list[list[str]]:
    found = [t for t in tables() if t[0][0] == header or header in t[0]]
    assert len(found) == 1, f"one table with header {header!r} expected"
    return found[0]


def test_the_memory_table_is_what_morkit_computes():
    table = table_with("parameters")
    header = table[0]
    rows = {re.sub(r"`", "", r[0]): dict(zip(header, r)) for r in table[1:]}
    assert set(rows) == {m.name for m in CTTS_CARDS}
    for model in CTTS_CARDS:
        row = rows[model.name]
        assert row["parameters"] == f"{model.n_params / 1e9:.1f}B"
        assert row["bf16 weights"] == f"{bf16_gib(model.n_params):.1f} GiB"  # 2 bytes a parameter
        assert row["per GPU, 2 GPUs"] == f"{bf16_gib(model.n_params) / 2:.1f} GiB"


def test_the_weight_sums_the_guidance_states():
    gib = {m.name: round(bf16_gib(m.n_params), 1) for m in CTTS_CARDS}
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    small = gib["qwen2.5-math-prm-7b"] + gib["skywork-reward-v2-llama-3.1-8b"]
    assert f"{small:.1f} GiB" in text
    assert f"{gib['acecoderm-32b'] + gib['skywork-reward-v2-llama-3.1-8b']:.1f} GiB" in text
    gemmas = [gib[n] for n in ("skywork-reward-gemma-2-27b", "ldl-reward-gemma-2-27b", "qrm-gemma-2-27b")]
    smalls = [gib["qwen2.5-math-prm-7b"], gib["skywork-reward-v2-llama-3.1-8b"]]
    pairs = [g + s for g in gemmas for s in smalls]
    assert f"({min(pairs):.1f}-{max(pairs):.1f} GiB)" in text
    assert f"({min(gemmas):.1f}-{max(gemmas):.1f} GiB)" in text


def paper_rows(paper: Path, table: str) -> list[list[str]]:
    """The rows of one of the paper's tables in its text version (tab-separated cells, AceCodeRM's name as the
    other tables spell it), read from its caption to the next blank line."""
    text = paper.read_text(encoding="utf-8")
    rows: list[list[str]] = []
    for line in text[text.index(table):].splitlines()[1:]:
        if rows and not line.strip():
            break
        if "\t" in line:
            rows.append([c.strip().replace("AccCodeRM", "AceCodeRM") for c in line.split("\t")])
    return rows


def numbers(cells: list[str]) -> list[str]:
    return [c for c in cells if re.fullmatch(r"\d+(\.\d+)?", c)]


@pytest.fixture
def paper(papers_dir) -> Path:
    """The paper's text, whose tables the checks read: a missing file fails the check, never skips it."""
    path = papers_dir / "ctts-mm.txt"
    if not path.is_file():
        pytest.fail(f"paper text not found: {path}", pytrace=False)
    return path


def test_the_prr_table_is_the_papers_table_i(paper):
    published = {row[0]: numbers(row) for row in paper_rows(paper, "Table I: PRR accuracy of different reward models")}
    table = table_with("MBPP-Val")
    assert len(table) == 9
    for row in table[1:]:
        name = row[0].strip("`")
        assert [c.strip("*") for c in row[1:]] == published[PAPER_NAMES[name]], name


def test_the_best_of_n_table_is_the_papers_table_g(paper):
    rows = paper_rows(paper, "Table G: Comparison results of different TTS paradigms")
    multi = [row[row.index("Multi-agent*") + 1:] for row in rows if "Multi-agent*" in row]  # ten agents
    single = {row[0]: numbers(row) for row in multi if row[0] != "-"}
    table = table_with("RM picking the answer")
    for row in table[1:-1]:
        name = row[0].strip("`")
        assert [c.strip("*") for c in row[1:]] == single[PAPER_NAMES[name]], name
    mixture = [numbers(row) for row in multi if row[0] == "-"]  # the MA-MR row: CTTS-MM's mixture of RMs
    assert mixture == [[c.strip("*") for c in table[-1][1:]]]


@pytest.mark.parametrize("figure, source, line", QUOTED)
def test_figures_from_other_pages_are_on_those_pages(figure, source, line):
    assert figure in PAGE.read_text(encoding="utf-8")
    text = (ROOT / "docs" / source).read_text(encoding="utf-8")
    assert re.search(line, text, flags=re.MULTILINE), f"{source} no longer states {figure} where the page took it from"
