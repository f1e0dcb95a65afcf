"""Every figure a page states about a committed measurement is the number in that measurement's JSON.

The bench scripts write the numbers behind the pages' figures with `--json` (`docs/figures/*.json`). Each test here
reads one page's table or paragraph, compares every figure in it with the JSON (tables row by row, sentences by
their wording) and then fails on any number left in that part of the page that no check read, so a figure added to
a page comes with its check. The demo's figures are compared with what the demo prints in the one test that runs
it (`tests/reward_models/test_score_real.py`, through `check_demo_figures`).
"""

from __future__ import annotations

import argparse
import json
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
README, INDEX, CLI = ROOT / "README.md", ROOT / "docs" / "index.md", ROOT / "docs" / "cli.md"
BENCHMARKS, SELECTION, POOLS = (ROOT / "docs" / name for name in ("benchmarks.md", "selection.md", "pools.md"))
WORDS = {1: "one", 2: "two", 3: "three", 5: "five"}
# A number as pages write them (1,084; 0.039; 7.7e-06; 41.8x), not a digit inside a word (fp32, p50, MiniLM-L6).
NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?:e-\d+)?(?![A-Za-wyz\d])")
CODE = re.compile(r"`[^`]*`")


def load(name: str) -> dict:
    return json.loads((FIGURES / f"{name}.json").read_text(encoding="utf-8"))


def f1(value: float) -> str:
    return f"{value:.1f}"


def signed(value: float) -> str:
    return f"{value:+.1f}"


def thousands(value: float) -> str:
    return f"{value:,.0f}"


# ---- reading pages --------------------------------------------------------------------------------------------

def snippet(page: Path, name: str) -> str:
    """The text between a page's `--8<-- [start:name]` and `[end:name]` markers (the site includes it elsewhere)."""
    text = page.read_text(encoding="utf-8")
    start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
    assert start in text and end in text, f"{page.name}: section {name!r} not found"
    return text.split(start, 1)[1].split(end, 1)[0]


def section(page: Path, heading: str) -> str:
    """The text under `heading` (a whole heading line) up to the next heading of the same or a higher level."""
    lines = page.read_text(encoding="utf-8").splitlines()
    assert heading in lines, f"{page.relative_to(ROOT)}: heading {heading!r} not found"
    level = len(heading) - len(heading.lstrip("#"))
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if re.match(rf"#{{1,{level}}} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def paragraph(text: str, opening: str) -> str:
    """The paragraph of `text` that starts with `opening`."""
    found = [p for p in re.split(r"\n\s*\n", text) if p.lstrip().startswith(opening)]
    assert found, f"no paragraph starts with {opening!r}"
    return found[0]


def cells(line: str) -> list[str]:
    return [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]


def tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table of `text` as its body rows' cells (header and rule dropped; bold marks removed)."""
    found, rows = [], []
    for line in text.splitlines() + [""]:
        if line.lstrip().startswith("|"):
            rows.append(line)
        elif rows:
            found.append([cells(r) for r in rows[2:]])
            rows = []
    return found


def prose(text: str) -> str:
    """`text` without code blocks, tables and HTML comments, its whitespace runs one space (sentences may wrap)."""
    text = re.sub(r"^([ \t]*)(```|~~~).*?^\1\2[ \t]*$", " ", text, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|"))
    return " ".join(text.split())


def header(text: str, table: int = 0) -> list[str]:
    heads = [line for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("|")
             and (i == 0 or not text.splitlines()[i - 1].lstrip().startswith("|"))]
    return cells(heads[table])


def check_claims(where: str, text: str, claims: list[tuple[str, tuple]], allowed: set[str] = frozenset()) -> None:
    """Each claim is a pattern with groups and the strings they must read; every number of `text` outside the
    groups (and outside code spans) must then be in `allowed`, a figure of the page's own set-up, not a measurement.

    Args:
        where: The page and part, for the messages.
        text: The prose (see `prose`).
        claims: (regular expression, expected group strings) pairs; each pattern must match once at least.
        allowed: Numbers the page may state without a check here.
    """
    blank = list(text)
    for pattern, expected in claims:
        match = re.search(pattern, text)
        assert match, f"{where}: no sentence matches {pattern!r}; reword the check with the page"
        got = tuple(match.groups())
        assert got == tuple(str(e) for e in expected), f"{where}: {pattern!r} reads {got}, the JSON says {expected}"
        for g in range(1, len(got) + 1):
            blank[match.start(g):match.end(g)] = " " * (match.end(g) - match.start(g))
    rest = CODE.sub(" ", "".join(blank))
    unchecked = [n for n in NUMBER.findall(rest) if n not in allowed]
    assert not unchecked, f"{where}: numbers no check reads: {unchecked}; add them to tests/test_pages.py"


def check_table(where: str, got: list[list[str]], expected: list[list[str]]) -> None:
    for row in expected:
        assert row in got, f"{where}: expected the row {row}; the page has {got}"
    assert len(got) == len(expected), f"{where}: rows no check reads: {[r for r in got if r not in expected]}"


# ---- the selection benchmark: docs/figures/selection_results.json -------------------------------------------

BEST, ORACLE, RANDOM = "best single (chosen on train)", "per-query oracle (best single per question)", \
    "random pick (expected)"
DEFAULT = "morkit default (learned) [zscore]"
PRES_RAW, PRES_Z = "PRES (paper, with combinations) [raw]", "PRES (paper, with combinations) [zscore]"
LEARNED_ROWS = {  # the selection page's wording of each learned row -> its JSON label
    "the conditional logit on `scores` features": "learned: logit [scores] (CV penalty)",
    "the conditional logit on `full` features": "learned: logit [full] (CV penalty)",
    "bagged lambdarank on `full` features": "learned: lambdarank [full] (CV params)",
    "the conditional logit on `scores+local` features": "learned: logit [scores+local] (CV penalty)",
    "the conditional logit on `full+local` features": "learned: logit [full+local] (CV penalty)",
    "bagged lambdarank on `full+local` features": "learned: lambdarank [full+local]",
}
BLEND = "learned: blend of the six above (always)"


@pytest.fixture(scope="module")
def selection() -> dict:
    (rewardmath,) = [d for d in load("selection_results")["datasets"] if d["name"] == "rewardmath_rm_scores"]
    return rewardmath


def method(data: dict, label: str) -> dict:
    return data["methods"][label]


def candidates(data: dict) -> int:
    """Answers per problem: a random pick is right one time in that many (one correct answer each)."""
    return round(100 / method(data, RANDOM)["mean"])


def deals(data: dict) -> str:
    return WORDS[len(data["seeds"])]


def chosen_single(data: dict) -> str:
    picks = set(data["chosen_single"])
    assert len(picks) == 1, f"the best single RM differs between folds ({data['chosen_single']}): reword the pages"
    return picks.pop()


def learned_labels(data: dict) -> list[str]:
    return [DEFAULT, *LEARNED_ROWS.values(), BLEND]


def test_readme_headline_is_the_committed_selection_json(selection):
    text = snippet(README, "headline")
    def ms(label: str) -> dict:
        return method(selection, label)

    (table,) = tables(text)
    check_table("README headline table", table, [
        ["best single RM (chosen on the training folds)", f"{f1(ms(BEST)['mean'])}%", f1(ms(BEST)["sd_folds"])],
        ["PRES with RM combinations, the paper's raw scores", f"{f1(ms(PRES_RAW)['mean'])}%",
         f1(ms(PRES_RAW)["sd_folds"])],
        ["PRES with RM combinations, z-scored (morkit's PRES default)", f"{f1(ms(PRES_Z)['mean'])}%",
         f1(ms(PRES_Z)["sd_folds"])],
        ["morkit's learned selector (default)", f"{f1(ms(DEFAULT)['mean'])}%", f1(ms(DEFAULT)["sd_folds"])],
        ["per-query oracle (the best single RM for each problem)", f"{f1(ms(ORACLE)['mean'])}%",
         f1(ms(ORACLE)["sd_folds"])],
    ])
    plural = "s" * (len(selection["seeds"]) > 1)
    title = f"method ({selection['folds']}-fold CV by problem, {deals(selection)} fold deal{plural})"
    assert header(text)[:2] == [title, f"best-of-{candidates(selection)}"]
    check_claims("README headline", prose(text), [
        (r"On RewardMATH \((\d+) MATH problems, (\d+) answers each", (selection["questions"], candidates(selection))),
        (r"scored by (\d+) RMs and LLM judges", (len(selection["rms"]),)),
        (r"the best single RM is right ([\d.]+)% of the time", (f1(ms(BEST)["mean"]),)),
        (r"is right \*\*([\d.]+)%\*\* of the time", (f1(ms(DEFAULT)["mean"]),)),
    ])
    commands = CODE.findall(prose(text))
    assert f"`bench/selection.py --datasets rewardmath --no-speed --seeds " \
           f"{' '.join(map(str, selection['seeds']))} --json PATH`" in commands
    assert "`docs/figures/selection_results.json`" in commands


def test_home_page_ranges_are_the_committed_selection_json(selection):
    text = prose(paragraph(INDEX.read_text(encoding="utf-8"), "The figure draws every selection method"))
    gains = [method(selection, label)["mean"] for label in learned_labels(selection)]
    best, pres = method(selection, BEST)["mean"], method(selection, PRES_Z)["mean"]
    check_claims("docs/index.md", text, [
        ((r"the learned rows sit (\d+)-(\d+) points above the best single RM and (\d+)-(\d+) above PRES with "
          r"combinations, z-scored"), (round(min(gains) - best), round(max(gains) - best), round(min(gains) - pres),
                                     round(max(gains) - pres))),
    ])


def test_benchmarks_selection_and_reliability_are_the_committed_json(selection):
    def ms(label: str) -> dict:
        return method(selection, label)

    lowest = selection["reliability"]["held_out"]["bins"][0]
    assert lowest["accuracy"] > lowest["confidence"], "the page says the lowest bin is right more often: reword it"
    held, pooled = selection["reliability"]["held_out"], selection["reliability"]["pool_out_of_fold"]
    total = load("selection_results")["total_s"]
    check_claims("benchmarks.md, Selection results", prose(section(BENCHMARKS, "## Selection results")), [
        (r"Best-of-(\d+) accuracy", (candidates(selection),)),
        (r"RewardMATH's (\d+) problems \((\d+) RMs and judges\)", (selection["questions"], len(selection["rms"]))),
        (r"under (\d+)-fold cross-validation by problem \((\w+) fold deal, seed (\d+)\)",
         (selection["folds"], deals(selection), selection["seeds"][0])),
        (r"\((\S+) in every fold, ([\d.]+)%\)", (chosen_single(selection), f1(ms(BEST)["mean"]))),
        (r"The learned default reaches ([\d.]+)% \(([+-][\d.]+) points; better on (\d+) problems, worse on (\d+)\)",
         (f1(ms(DEFAULT)["mean"]), signed(ms(DEFAULT)["vs_best"]), ms(DEFAULT)["wins"], ms(DEFAULT)["losses"])),
        (r"PRES with combinations ([\d.]+)% z-scored and ([\d.]+)% on raw scores",
         (f1(ms(PRES_Z)["mean"]), f1(ms(PRES_RAW)["mean"]))),
        (r"Random pick \(([\d.]+)%\) and the per-query oracle \(([\d.]+)%\)",
         (f1(ms(RANDOM)["mean"]), f1(ms(ORACLE)["mean"]))),
        (r"The run took ([\d,]+) s \((\d+) minutes", (thousands(total), round(total / 60))),
    ])
    check_claims("benchmarks.md, Confidence reliability", prose(section(BENCHMARKS, "## Confidence reliability")), [
        (r"held-out questions \(([\d,]+) picks, one per problem\)", (thousands(held["picks"]),)),
        (r"\(ECE, the count-weighted gap between the two\) is (0\.\d+);", (f"{held['ece']:.3f}",)),
        (r"\(([\d,]+) picks over the (\d+) fits, ECE (0\.\d+)\)",
         (thousands(pooled["picks"]), pooled["fits"], f"{pooled['ece']:.3f}")),
        (r"\((0\.\d+) at (0\.\d+), (\d+) picks\)",
         (f"{lowest['accuracy']:.2f}", f"{lowest['confidence']:.2f}", lowest["count"])),
    ])


def test_selection_page_rewardmath_table_is_the_committed_json(selection):
    text = section(SELECTION, "### RewardMATH")
    def ms(label: str) -> dict:
        return method(selection, label)


    def row(name: str, label: str, versus: bool = True, sd: bool = True, record: bool = True) -> list[str]:
        m = ms(label)
        return [name, f"{f1(m['mean'])}%", f1(m["sd_folds"]) if sd else "", signed(m["vs_best"]) if versus else "",
                f"{m['wins']} / {m['losses']}" if record else ""]

    expected = [
        row("random pick", RANDOM, sd=False, record=False),
        row(f"best single RM ({chosen_single(selection)} in every fold; chosen on the training folds)", BEST,
            versus=False, record=False),
        row("PRES, single RMs only (paper)", "PRES singles [raw]"),
        row("PRES with 2-3 member combinations (paper, raw scores)", PRES_RAW),
        row("PRES with combinations, z-scored", PRES_Z),
        row("PRES on the top-1 criterion, z-scored", "PRES top-1 criterion [zscore]"),
        row("stacker (`--method stacker`)", "stacker (previous default) [zscore]"),
        *(row(f"learned, restricted to {name}", label) for name, label in LEARNED_ROWS.items()),
        row("learned, always the blend of the six", BLEND),
        row("morkit default: learned selector (CV picks among all of the above, PRES and every single RM)", DEFAULT),
        row("per-query oracle (best single RM per question)", ORACLE),
    ]
    (table,) = tables(text)
    check_table("selection.md, RewardMATH", table, expected)
    assert header(text)[1] == f"best-of-{candidates(selection)}"
    rows = list(LEARNED_ROWS.values())  # each learner without, then with, the neighbour (+local) features
    local = [ms(plain)["mean"] - ms(near)["mean"] for plain, near in zip(rows[:3], rows[3:])]
    total = load("selection_results")["total_s"]
    check_claims("selection.md, RewardMATH", prose(text), [
        (r"^(\d+) MATH problems, (\d+) answers each with exactly one correct, (\d+) RMs",
         (selection["questions"], candidates(selection), len(selection["rms"]))),
        (r"(\w+) fold deal \(seed (\d+)\)", (deals(selection).capitalize(), selection["seeds"][0])),
        (r"([\d,]+) s \((\d+) minutes\) on the (\d+)-core machine", (thousands(total), round(total / 60), 2)),
        (r"The default gains ([\d.]+) points over the best single RM \((\d+) problems won, (\d+) lost\)",
         (f1(ms(DEFAULT)["vs_best"]), ms(DEFAULT)["wins"], ms(DEFAULT)["losses"])),
        (r"on these (\d+) problems the restricted `\+local` rows score ([\d.]+)-([\d.]+) points",
         (selection["questions"], f1(min(local)), f1(max(local)))),
        (r"PRES itself gains only ([\d.]+) points over the best RM", (f1(ms(PRES_Z)["vs_best"]),)),
        (r"the blend that holds them is ([\d.]+) points above the default",
         (f1(ms(BLEND)["mean"] - ms(DEFAULT)["mean"]),)),
    ], allowed={"8"})  # "gains more than 8 points": what tests/selection/test_local_cv.py asserts (+ 0.08)


def test_the_local_claim_is_what_its_test_asserts():
    source = (ROOT / "tests" / "selection" / "test_local_cv.py").read_text(encoding="utf-8")
    assert "local.cv_best_of_n > plain.cv_best_of_n + 0.08" in source, "selection.md's 'more than 8 points'"


# ---- the learning curve: docs/figures/selection_curve.json ---------------------------------------------------

def curve_rows(dataset: dict) -> dict[str, dict]:
    return {row["size"]: row for row in dataset["rows"]}


def test_learning_curve_figures_are_the_committed_json():
    curve = load("selection_curve")
    rewardmath, gsm8k, mixed = curve["datasets"]
    sizes = [row["size"] for row in rewardmath["rows"]]
    expected = [[f"all ({' / '.join(str(round(curve_rows(d)['all']['pool_mean'])) for d in curve['datasets'])})"
                 if size == "all" else size]
                + [" / ".join(f1(curve_rows(d)[size][m]["mean"]) for m in ("default", "pres", "single"))
                   for d in curve["datasets"]] for size in sizes]
    text = section(SELECTION, "### How many labelled questions does a pool need?")
    (table,) = tables(text)
    check_table("selection.md, learning curve", table, expected)
    sds = [row[m]["sd"] for d in curve["datasets"] for row in d["rows"] for m in ("default", "pres", "single")]
    by_hand = [row[m]["mean"] - row["single"]["mean"] for d in (gsm8k, mixed) for row in d["rows"]
               if row["size"] in ("25", "50", "100") for m in ("default", "pres")]
    at_50 = curve_rows(rewardmath)["50"]
    numbered = [s for s in sizes if s != "all"]
    check_claims("selection.md, learning curve", prose(text), [
        (r"builds pools of ([\d, ]+) and all training questions", (", ".join(numbered),)),
        (r"; (\d+) seeded draws per fold and size\)", (rewardmath["repeats"],)),
        (r"mean over (\d+) folds x (\d+) draws \(the sd over those runs is (\d+)-(\d+) points;",
         (rewardmath["folds"], rewardmath["repeats"], round(min(sds)), round(max(sds)))),
        (r"already learn \(\+(\d+) points over the best single RM\)",
         (round(at_50["default"]["mean"] - at_50["single"]["mean"]),)),
        (r"by hand on (\d+)-(\d+) questions by (\d+)-(\d+) points", ("25", "100", round(min(by_hand)),
                                                                    round(max(by_hand)))),
        (r"\((\d+) minutes on the (\d+)-core", (round(curve["total_s"] / 60), 2)),
    ], allowed={"22", "25", "50", "100", "200", "20"})  # the set-up's pool sizes; MIN_MIXED (below)
    from morkit.selection.learned import MIN_MIXED

    assert "below 20 mixed questions per domain" in prose(text) and MIN_MIXED == 20
    learns = next(s for i, s in enumerate(sizes) if all(curve_rows(rewardmath)[t]["default"]["mean"]
                                                         > curve_rows(rewardmath)[t]["pres"]["mean"]
                                                         for t in sizes[i:]))
    for other in (gsm8k, mixed):  # "within about a point of PRES"
        assert max(abs(r["default"]["mean"] - r["pres"]["mean"]) for r in other["rows"]) < 1.5
    check_claims("benchmarks.md, learning curve", prose(section(BENCHMARKS, "## Selection learning curve")), [
        (r"pools of ([\d, ]+) and all training questions", (", ".join(numbered),)),
        (r"\((\d+) folds x (\d+) seeded draws per size", (rewardmath["folds"], rewardmath["repeats"])),
        (r"the default learns from (\d+) questions on", (learns,)),
        (r"The run took (\d+) minutes", (round(curve["total_s"] / 60),)),
    ])


# ---- bench scripts' defaults (scoring throughput: tests/test_pages_serving.py) --------------------------------

class _Parsed(Exception):
    pass


def script_defaults(script: str, monkeypatch) -> argparse.Namespace:
    """A bench script's flags as its parser defaults them, read by running its main() up to the parse."""
    got = {}
    parse = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        got["args"] = parse(self, [], namespace)
        raise _Parsed

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Parsed):
        runpy.run_path(str(ROOT / "bench" / script), run_name="__main__")
    return got["args"]


# ---- pools: docs/figures/pool_scaling.json and pool_large.json ----------------------------------------------

def test_pool_scaling_figures_are_the_committed_json():
    data = load("pool_scaling")
    rows = data["rows"]
    first, last = rows[0], rows[-1]
    under_ms = [r for r in rows if r["lookup_p50_ms"] < 1][-1]
    prr = data["prr"]
    text = prose(paragraph(section(BENCHMARKS, "## Pool scaling"), "Build time of a question pool"))
    check_claims("benchmarks.md, pool scaling", text, [
        (r"replicated to ([\d,]+)-([\d,]+) questions", (thousands(first["size"]), thousands(last["size"]))),
        (r"\), ([\d,]+) ensembles; beside it", (thousands(data["ensembles"]),)),
        (r"\(top (\d+), FAISS flat index\)", (data["k"],)),
        (r"at every size, ([\d.]+) s at ([\d,]+) and about ([\d,]+) s at ([\d,]+);",
         (f1(first["seconds"]["embed"]), thousands(first["size"]), thousands(round(last["seconds"]["embed"], -1)),
          thousands(last["size"]))),
        (r"above ([\d,]+) questions only ([\d,]+) texts were embedded",
         (thousands(first["size"]), thousands(rows[1]["embedded"]))),
        (r"to (\d+) s at ([\d,]+) questions \(PRR and best-of-n ([\d.]+) s, reading the cached scores ([\d.]+) s\)",
         (round(last["total_s"] - last["seconds"]["embed"]), thousands(last["size"]),
          f1(last["seconds"]["stats"]), f1(last["seconds"]["rows"]))),
        (r"under a millisecond to ([\d,]+) questions \(p50 ([\d.]+) ms\) and takes ([\d.]+) ms at ([\d,]+)\.",
         (thousands(under_ms["size"]), f"{under_ms['lookup_p50_ms']:.2f}", f1(last["lookup_p50_ms"]),
          thousands(last["size"]))),
        ((r"PRR alone over ([\d,]+) questions x ([\d,]+) ensembles took ([\d.]+) s vectorised against an estimated "
          r"(\d+) s for a plain per-cell `prr\(\)` loop \(([\d.]+)x, identical on a ([\d,]+)-cell sample\)"),
         (thousands(prr["size"]), thousands(prr["ensembles"]), f1(prr["vectorised_s"]),
          round(prr["loop_extrapolated_s"]), f1(prr["loop_extrapolated_s"] / prr["vectorised_s"]),
          thousands(prr["loop_sample_cells"]))),
        (r"load ([\d.]+) at the start and ([\d.]+) at the end", (f1(data["load_start"]), f1(data["load_end"]))),
    ], allowed={"383", "10", "22", "100,000"})  # the data set's shape; the HNSW run is pools.md's (bench/knn.py)


def large_pool() -> dict:
    data = load("pool_large")
    build, select = data["build"], data["select"]
    methods = select["methods"]
    return {
        "data": data, "build": build, "select": select,
        "anon": max(m["anon_rss_gib"] for m in methods.values()),
        "learned": methods["learned"], "pres": methods["pres"],
    }


def test_million_question_figures_are_the_committed_json():
    from morkit.question_pool.index import MMAP_ABOVE
    from morkit.selection.learned import CV_SAMPLE

    big = large_pool()
    data, build, select = big["data"], big["build"], big["select"]
    times, peaks = build["times"], build["phase_peak_rss_gib"]
    text = section(BENCHMARKS, "## Pool scaling")
    phases, selecting = tables(text)
    def gib(value: float) -> str:
        return f"{value:.2f} GiB"

    anon = build["phase_peak_anon_rss_gib"]
    def peaks_of(phase: str) -> list[str]:
        return [gib(peaks[phase]), gib(anon[phase])]

    check_table("benchmarks.md, a million questions (build)", phases, [
        ["tile the arrays into rows", f1(times["rows"]), *peaks_of("rows")],
        [f"normaliser, single-RM PRR, enumeration, means over {build['sample']:,} sampled questions",
         f1(times["statistics"]), *peaks_of("pool_from_rows")],
        [f"FAISS IVF index + recall@{data['k']} ({build['index']['recall@100']:.3f})", f1(times["index"]),
         *peaks_of("pool_from_rows")],
        [f"learned-selector fit ({build['sample']:,} sampled questions; its grid weighed on {CV_SAMPLE:,})",
         f1(times["learned"]), *peaks_of("learned")],
        [f"save (atomic directory swap; {data['on_disk_gb']:.1f} GB on disk)", f1(times["save"]), *peaks_of("save")],
        ["total", f1(data["build_total_s"]), gib(build["peak_rss_gib"]), gib(build["peak_anon_rss_gib"])],
    ])
    assert abs(times["statistics"] + times["index"] - times["pool_from_rows"]) < 0.1  # one peak for both phases
    check_table("benchmarks.md, a million questions (select)", selecting, [
        ["open", f"{select['open_s']:.2f} s"],
        ["RSS after opening", f"{gib(select['rss_after_open_gib'])} (the index's 8-bit codes read into memory)"],
        ["learned select (the default) p50 / p99",
         f"{big['learned']['p50_ms']:.2f} / {big['learned']['p99_ms']:.2f} ms"],
        ["PRES on the fly p50 / p99", f"{big['pres']['p50_ms']:.2f} / {big['pres']['p99_ms']:.2f} ms"],
        ["RSS after selecting (of it anonymous)", f"{gib(select['peak_rss_select_gib'])} ({gib(big['anon'])})"],
        ["with MiniLM loaded for the query embedding: RSS, embedding p50",
         f"{gib(select['peak_rss_with_embedder_gib'])}, {f1(select['embed_p50_ms'])} ms"],
    ])
    assert MMAP_ABOVE == 1 << 30
    start = text.index("**A million questions**")
    check_claims("benchmarks.md, a million questions", prose(text[start:]), [
        (r"tiled to ([\d,]+) questions, all ([\d,]+) ensembles", (thousands(data["large"]),
                                                                 thousands(build["ensembles"]))),
        (r"\(load ([\d.]+) at the end\)", (f1(data["load_end"]),)),
        (r"selects for ([\d,]+) new query vectors, one at a time, k = (\d+)", (thousands(data["queries"]), data["k"])),
        (r"\*\*PRES, ([\d.]+) ms\*\*", (f1(big["pres"]["p50_ms"]),)),
        (r"under ([\d,]+) ensembles in the compiled loop", (thousands(build["ensembles"]),)),
        (r"\*\*RSS after selecting, ([\d.]+) GiB\*\*: all but ([\d.]+) GiB",
         (f"{select['peak_rss_select_gib']:.2f}", f"{big['anon']:.2f}")),
        (r"\*\*Build peak, ([\d.]+) GiB\*\* \(([\d.]+) GiB anonymous\)",
         (f"{build['peak_rss_gib']:.2f}", f"{build['peak_anon_rss_gib']:.2f}")),
        (r"\*\*The index phase, ([\d.]+) s\*\*", (f1(times["index"]),)),
        (r"the peak is the learned fit's, whose memory is set by its ([\d,]+)-question sample",
         (f"{build['sample']:,}",)),
        (r"\*\*Opening, ([\d.]+) s\*\*: index files up to (1) GiB", (f"{select['open_s']:.2f}", 1)),
    ], allowed={"383", "900", "10", "22", "4", "3", "400", "4,000", "256,000", "8", "64"})
    # the data's shape (10 answers, 1 right: 9 pairs x k; 22 RMs) and the index's settings (4,000 lists trained on
    # 64 x 4,000 = 256,000 vectors, a shortlist of 4 x k = 400), which the index's tests read


def test_pools_page_format_3_table_is_the_committed_json():
    big = large_pool()
    data, build, select = big["data"], big["build"], big["select"]
    table = next(t for t in tables(section(POOLS, "### A million questions")) if t[0][0] == "open in a fresh process")
    index = build["index"]
    check_table("pools.md, format version 3", table, [
        ["open in a fresh process", (f"{select['open_s']:.2f} s (RSS {select['rss_before_open_gib']:.2f} -> "
                                     f"{select['rss_after_open_gib']:.2f} GiB: the index's 8-bit codes)")],
        [(f"recall@{data['k']} of the IVF index ({index['codes'].upper()} codes, shortlist of "
          f"{index['rerank'] * data['k']} re-ranked exactly)"), f"{index['recall@100']:.3f}"],
        ["on disk", f"{data['on_disk_gb']:.1f} GB"],
        [f"build, total (learned fit {f1(build['times']['learned'])} s of it)", f"{f1(data['build_total_s'])} s"],
        ["build peak RSS", f"{build['peak_rss_gib']:.2f} GiB ({build['peak_rss_gib'] * 2 ** 30 / 1e9:.2f} GB)"],
        ["learned select p50 / p99", f"{big['learned']['p50_ms']:.2f} / {big['learned']['p99_ms']:.2f} ms"],
        ["PRES on the fly p50 / p99", f"{big['pres']['p50_ms']:.2f} / {big['pres']['p99_ms']:.2f} ms"],
        ["RSS after selecting (anonymous memory of it)",
         f"{select['peak_rss_select_gib']:.2f} GiB ({big['anon']:.2f} GiB)"],
    ])


# ---- pages carry no targets, machine loans or re-measurement dates ------------------------------------------

PAGES = [README, ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
# What a page must not say: a target and whether it was met, which machine was lent, when a figure was re-measured.
FORBIDDEN = re.compile(r"\btargets? (?:was|were|of|met|not met|missed)\b|\(target\b|\btarget:|"
                       r"\bmisse[sd] (?:\w+ )?targets?\b|\blent\b|no GPU was|re-measured|\bissue #?\d+|"
                       r"the day a GPU|\b20\d\d-\d\d-\d\d\b", re.IGNORECASE)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_speak_of_measurements_not_of_targets_loans_or_dates(page):
    text = CODE.sub(" ", prose(page.read_text(encoding="utf-8")))
    found = FORBIDDEN.search(text)
    assert not found, f"{page.relative_to(ROOT)}: {text[max(0, found.start() - 60):found.end() + 60]!r}"


# ---- the demo: figures checked against its output in tests/reward_models/test_score_real.py --------------

DEMO_LINE = re.compile(r"Held-out best-of-10 accuracy over (\d+) problems \(ties shared\): best single RM (\S+) "
                       r"([\d.]+)%, morkit ([\d.]+)% \(([+-][\d.]+) points: better on (\d+) problems, "
                       r"worse on (\d+)\); a per-problem oracle over single RMs ([\d.]+)%")
DEMO_PAGE = re.compile(r"builds a pool from (\d+) RewardMATH problems and routes the (\d+) held out .*?: the best "
                       r"single RM \((\S+)\) picks the right answer on ([\d.]+)% of them, morkit on ([\d.]+)% "
                       r"\(([+-][\d.]+) points: better on (\d+) problems, worse on (\d+)\), and a per-problem oracle "
                       r"over single RMs on ([\d.]+)%\. This routing part took (\d+) s on (\d+) CPU cores")


def demo_claims() -> dict:
    """The demo figures the README's demo section states (the home and getting-started pages include it)."""
    text = prose(snippet(README, "demo"))
    found = DEMO_PAGE.search(text)
    assert found, "README demo section: its figures sentence changed; reword DEMO_PAGE in tests/test_pages.py"
    names = ("pool", "held", "single", "single_pct", "morkit_pct", "points", "better", "worse", "oracle_pct",
             "seconds", "cores")
    return dict(zip(names, found.groups()))


def test_demo_figures_are_stated_once_and_agree_with_the_demos_split():
    from morkit.data.contract import load_queries
    from morkit.demo import DemoOptions, sample_path

    claims = demo_claims()
    problems = len(load_queries(sample_path("rewardmath.jsonl.gz")))
    cut = int(problems * (1 - DemoOptions().held_out))
    assert (int(claims["pool"]), int(claims["held"])) == (cut, problems - cut)
    assert signed(float(claims["morkit_pct"]) - float(claims["single_pct"])) == claims["points"]
    check_claims("README demo section", prose(snippet(README, "demo")), [(DEMO_PAGE.pattern, tuple(claims.values()))])
    for page in PAGES:  # the other pages include the README's section rather than restate it
        if page == README:
            continue
        text = prose(page.read_text(encoding="utf-8"))
        assert not re.search(r"demo[^.]*\b\d+ s\b|held out[^.]*\d+(?:\.\d)?%.*?better on", text), (
            f"{page.relative_to(ROOT)} states demo figures: include README.md's demo section instead")


def check_demo_figures(routing_output: str) -> None:
    """The README's demo figures are what the demo's routing part printed (its time is a measurement of the
    machine, stated on the page and not asserted: tests hold no timing checks).

    Args:
        routing_output: What `morkit demo` printed before its live part.
    """
    printed = DEMO_LINE.search(routing_output)
    assert printed, "the demo's accuracy line changed: reword DEMO_LINE in tests/test_pages.py"
    held, single, single_pct, morkit_pct, points, better, worse, oracle_pct = printed.groups()
    pool = re.search(r"Pool: (\d+) problems", routing_output).group(1)
    claims = demo_claims()
    got = {"pool": pool, "held": held, "single": single, "single_pct": single_pct, "morkit_pct": morkit_pct,
           "points": points, "better": better, "worse": worse, "oracle_pct": oracle_pct}
    wrong = {k: (claims[k], v) for k, v in got.items() if claims[k] != v}
    assert not wrong, f"README demo section (page, demo): {wrong}: write the demo's figures into the README"


# ---- the accuracy-cost frontier: docs/figures/cost_frontier.json ------------------------------------------------

FRONTIER_DEFAULT = "morkit default (learned, every RM)"


def frontier_rows(result: dict) -> list[list[str]]:
    """The selection page's frontier table as bench/cost_frontier.py's JSON gives it: the routed methods by cost,
    then the most accurate single RM."""
    methods = result["methods"]

    def row(label: str, name: str | None = None) -> list[str]:
        m = methods[label]
        return [name or label, f"{f1(m['accuracy'])}%", f1(m["se"]), thousands(m["cost"]), f"{100 * m['share']:.1f}%",
                f"{m['escalated']:.0%}" if "escalated" in m else ""]

    singles = [k for k, v in methods.items() if v["kind"] == "single"]
    best = max(singles, key=lambda k: methods[k]["accuracy"])
    routed = sorted((k for k, v in methods.items() if v["kind"] != "single"), key=lambda k: methods[k]["cost"])
    return [row(k) for k in routed] + [row(best, f"best single RM ({best})")]


def test_selection_page_cost_frontier_is_the_committed_json():
    result = load("cost_frontier")
    text = section(SELECTION, "### Accuracy against cost")
    first, reach = tables(text)
    check_table("selection.md, accuracy against cost", first, frontier_rows(result))
    check_table("selection.md, accuracy within a cost", reach,
                [[f"{a['level']:.0%} of the default's", f"{f1(a['accuracy'])}%", a["method"]]
                 for a in result["at"].values()])
    assert header(text)[1] == f"best-of-{result['candidates']}"
    close = result["cheapest_within"]
    check_claims("selection.md, accuracy against cost", prose(text), [
        (r"The (\d+) RewardMATH problems \((\d+) answers each", (result["problems"], result["candidates"])),
        (r"under (\d+)-fold cross-validation by problem, (\w+) fold deal \(seed (\d+)\)",
         (result["folds"], WORDS[len(result["seeds"])], result["seeds"][0])),
        (r"over all (\d+) RMs, costs ([\d,]+) GFLOP-equivalents per query",
         (len(result["rms"]), thousands(result["default_cost"]))),
        (r"takes at (\d+)% of the full route's cost", (round(100 * result["cascade_share"]),)),
        (r"the open models, (\d+) to (\d+) of them", (min(map(len, result["cascade_cheap"])),
                                                     max(map(len, result["cascade_cheap"])))),
        (r"per-query oracle reaches ([\d.]+)% and a random pick ([\d.]+)%", (f1(result["oracle"]), f1(result["random"]))),
        (r"within (\w+) point of the default's best-of-n is (.+?) \(([\d.]+)% at ([\d.]+)% of its cost\)",
         (WORDS[int(result["within"])], close["method"], f1(close["accuracy"]), f"{100 * close['share']:.1f}")),
        (r"took ([\d,]+) s", (thousands(result["total_s"]),)),
    ])
