"""Every code block in README.md and docs/ runs or is checked, so a changed API breaks the build, not the reader.

How each fence is checked (docs/contributing.md says the same for writers):
- python: run in order, in one namespace per page, in a folder holding the files the examples name
  (`queries.jsonl` without labels, `validation.jsonl` with them: the packaged GSM8K sample).
- sh: every `morkit ...`, `python bench/...` and `make ...` command is parsed by its real argument parser
  (or found in the Makefile); nothing is run, so GPU and cluster commands are checked here too.
- toml: parsed; a block whose first line names `pipeline*.toml` or `agents*.toml` is read by morkit's loader.
- json: parsed; an object with `candidates` is read by the JSONL contract's parser.
- text: what a command prints, shown to the reader; not run.
"""

from __future__ import annotations

import argparse
import json
import re
import runpy
import shlex
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").rglob("*.md"))]
# A fence at any indent (in a list, an admonition or a tab), opened and closed by ``` or ~~~.
FENCE = re.compile(r"^([ \t]*)(```|~~~)(\w*)[^\n]*\n(.*?)^\1\2[ \t]*$", flags=re.S | re.M)
LANGUAGES = {"python", "sh", "toml", "json", "text"}


def blocks(page: Path, language: str | None = None) -> list[tuple[int, str, str]]:
    """(line, language, body) of each fenced block of `page`, in order."""
    text = page.read_text(encoding="utf-8")
    found = [(text.count("\n", 0, m.start()) + 1, m.group(3), textwrap.dedent(m.group(4))) for m in FENCE.finditer(text)]
    return [b for b in found if language is None or b[1] == language]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def where(page: Path, line: int) -> str:
    return f"{page_id(page)}:{line}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_names_a_checked_language(page):
    for line, language, _ in blocks(page):
        assert language in LANGUAGES, f"{where(page, line)}: a ``` block needs one of {sorted(LANGUAGES)}, not {language!r}"


CODE_COLUMNS = 100
"""The longest code line a page shows without a scroll bar: a 1400-px window fits 102 characters of a block
(measured in Chromium on the built site), less a little for blocks indented in a list."""


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_code_lines_fit_the_page(page):
    long = [f"{where(page, line + i)}: {len(text)} characters" for line, _, body in blocks(page)
            for i, text in enumerate(body.splitlines(), start=1) if len(text) > CODE_COLUMNS]
    assert not long, f"wrap or shorten (at most {CODE_COLUMNS} characters):\n" + "\n".join(long)


# ---- sh: parse every command with its own parser ----------------------------------------------------------


class _Parsed(Exception):
    """Raised in place of running a script once its arguments parsed."""


# `VAR=value` (a `$(...)` value included) before a command, and redirections with their target.
ASSIGNMENT = re.compile(r"(?:^|(?<=[;&|]))(?:\s*[A-Za-z_]\w*=(?:\$\([^)]*\)|\"[^\"]*\"|\S*))+")
REDIRECTION = re.compile(r"\s\d*(?:>>?|<)(?:&\d+|\s*\S+)")


def commands(body: str) -> list[list[str]]:
    """The commands of a shell block: continuations joined, comments dropped, split on ; && || and |."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        line = REDIRECTION.sub(" ", ASSIGNMENT.sub(" ", line))
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split, lexer.commenters = True, "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set(";&|"):
                if words:
                    out.append(words)
                words = []
            else:
                words.append(token)
    return out


def check_morkit(argv: list[str], *, registered: bool = True) -> None:
    """Parse with the real CLI parser; every `--rm NAME` must be a registered RM, every `--dataset` a data set
    (`registered=False`: a user's wrapper script that registers its own RMs first)."""
    from morkit.cli.main import build_parser
    from morkit.data.datasets import DATASETS
    from morkit.reward_models.catalog import REWARD_MODELS

    args = build_parser().parse_args(argv)
    if not registered:
        return
    for flag, registry in (("rm", REWARD_MODELS), ("dataset", DATASETS)):
        named = getattr(args, flag, None) or []
        named = [named] if isinstance(named, str) else named
        unknown = [name for name in (n.split(":")[0] for n in named) if name not in registry]
        assert not unknown, f"--{flag} {unknown}: not a registered {registry.what}"


def check_script(path: Path, argv: list[str], monkeypatch) -> None:
    """Parse `argv` with the script's own ArgumentParser, stopping before its work starts."""
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse(self, args, namespace)
        raise _Parsed

    with monkeypatch.context() as patch:  # undone before the block's next command
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        patch.setattr(sys, "argv", [str(path), *argv])
        patch.syspath_prepend(str(path.parent))
        try:
            runpy.run_path(str(path), run_name="__main__")
        except _Parsed:
            return
    raise AssertionError(f"{path.name} never parsed its arguments")


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))


# Other programs the docs may show; they are not checked. Anything else fails, so a new one is a decision.
UNCHECKED = {"pip", "curl", "vllm", "export", "head", "source"}
# Scripts the docs ask a reader to write around morkit's CLI (register your RMs, then call morkit.cli.main.main).
WRAPPERS = {"my_morkit.py"}


def check_command(words: list[str], monkeypatch) -> None:
    program, *argv = words
    if program.endswith("python3"):  # a bare machine's python (the GPU check's): checked as python
        program = program[:-1]
    if program == "morkit" or program.endswith("/morkit"):
        check_morkit(argv)
    elif program.endswith("python") and argv[:2] == ["-m", "morkit"]:
        check_morkit(argv[2:])
    elif program.endswith("python") and argv and argv[0].startswith("bench/"):
        check_script(ROOT / argv[0], argv[1:], monkeypatch)
    elif program.endswith("python") and argv and argv[0] in WRAPPERS:
        check_morkit(argv[1:], registered=False)
    elif program.endswith("python") and argv[:2] == ["-m", "pytest"]:
        missing = [a for a in argv[2:] if not a.startswith("-") and not (ROOT / a.split("::")[0]).exists()]
        assert not missing, f"no test file {missing}"
    elif program == "make":
        unknown = set(argv) - make_targets()
        assert not unknown, f"no make target {sorted(unknown)}"
    else:
        assert program in UNCHECKED, (f"`{program}` is neither a morkit, bench or make command nor one of "
                                      f"{sorted(UNCHECKED)}: write it so tests/test_docs.py can check it")


SH_BLOCKS = [(page, line, body) for page in PAGES for line, _, body in blocks(page, "sh")]


@pytest.mark.parametrize("page,line,body", SH_BLOCKS, ids=[where(p, n) for p, n, _ in SH_BLOCKS])
def test_every_shell_command_parses(page, line, body, monkeypatch, capsys):
    for words in commands(body):
        try:
            check_command(words, monkeypatch)
        except SystemExit as exc:  # argparse rejected it: show its one-line reason
            if exc.code not in (0, None):
                pytest.fail(f"{where(page, line)}: `{shlex.join(words)}` does not parse: {capsys.readouterr().err.strip()}")
        except AssertionError as exc:
            pytest.fail(f"{where(page, line)}: `{shlex.join(words)}`: {exc}")


# ---- toml and json: parse, and read with morkit's own loaders where they name a file kind ------------------


TOML_BLOCKS = [(page, line, body) for page in PAGES for line, _, body in blocks(page, "toml")]


@pytest.mark.parametrize("page,line,body", TOML_BLOCKS, ids=[where(p, n) for p, n, _ in TOML_BLOCKS])
def test_every_toml_block_loads(page, line, body, tmp_path, monkeypatch):
    try:
        tomllib.loads(body)
    except tomllib.TOMLDecodeError as exc:
        pytest.fail(f"{where(page, line)}: not TOML: {exc}")
    name = re.match(r"#\s*([\w.-]+\.toml)", body)
    if name is None:
        return
    path = tmp_path / name.group(1)
    path.write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    if path.name.startswith("pipeline"):
        import morkit

        if "agents.toml" in body:  # the page's agents file: the packaged one stands in for it
            from morkit.llm.agents import default_agents_path

            (tmp_path / "agents.toml").write_text(default_agents_path().read_text(encoding="utf-8"))
        morkit.load_pipeline_config(path)
    elif path.name.startswith("agents"):
        import morkit

        morkit.load_agents(path)


JSON_BLOCKS = [(page, line, body) for page in PAGES for line, _, body in blocks(page, "json")]


@pytest.mark.parametrize("page,line,body", JSON_BLOCKS, ids=[where(p, n) for p, n, _ in JSON_BLOCKS])
def test_every_json_block_parses(page, line, body, tmp_path):
    try:
        value = json.loads(body)
    except json.JSONDecodeError:  # one JSON value per line (JSONL)
        try:
            values = [json.loads(row) for row in body.splitlines() if row.strip()]
        except json.JSONDecodeError as exc:
            pytest.fail(f"{where(page, line)}: neither JSON nor JSONL: {exc}")
    else:
        values = [value]
    queries = [v for v in values if isinstance(v, dict) and "candidates" in v]
    if queries:
        import morkit

        path = tmp_path / "block.jsonl"
        path.write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
        morkit.load_queries(path)


# ---- python: run every example of a page, in order, as a reader would paste them ---------------------------


PYTHON_PAGES = [page for page in PAGES if blocks(page, "python")]


@pytest.fixture
def example_files(tmp_path, monkeypatch):
    """A folder with the two files the examples name, as the working directory."""
    from morkit.demo import sample_path

    rows = [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines() if line.strip()]
    math = [r for r in rows if r.get("domain") == "math"]
    (tmp_path / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in math))
    plain = [{**r, "candidates": [{k: v for k, v in c.items() if k != "correct"} for c in r["candidates"]]}
             for r in math]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def registries():
    """Every registry of the package (the public ones and the inner ones: graders, learners, backends, prompts)."""
    import morkit
    from morkit.question_pool.graders import GRADERS
    from morkit.reward_models.placement import PLACEMENTS
    from morkit.search.aggregate import AGGREGATOR_PROMPTS
    from morkit.selection.learners import LEARNERS

    return [morkit.REWARD_MODELS, morkit.SELECTION_METHODS, morkit.SEARCH_METHODS, morkit.LOOPS,
            morkit.LLM_BACKENDS, morkit.VERIFIERS, morkit.AGGREGATORS, morkit.DATASETS,
            GRADERS, LEARNERS, PLACEMENTS, AGGREGATOR_PROMPTS]


def quickstart_prints() -> list[str]:
    """What the README's quickstart says its examples print: the method that chose in each run, and the demo's
    accuracies (run 1 routes the demo's split)."""
    from test_pages import demo_claims

    demo = demo_claims()
    gain = float(demo["morkit_pct"]) - float(demo["single_pct"])
    return ["['learned']", f"best single RM ({demo['single']}) {demo['single_pct']}%, morkit {demo['morkit_pct']}% "
            f"({gain:+.1f} points)", "'pres (learned needs 20 mixed pool questions)'"]


PRINTS = {ROOT / "README.md": quickstart_prints}
"""Pages whose prose quotes what their examples print, and those quotes: checked against the real output."""


@pytest.mark.slow
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=page_id)
def test_every_python_example_runs(page, example_files, capsys):
    before = [(registry, registry.entries()) for registry in registries()]
    namespace: dict = {"__name__": "docs"}
    try:
        for line, _, body in blocks(page, "python"):
            try:
                exec(compile(body, where(page, line), "exec"), namespace)
            except Exception as exc:  # noqa: BLE001 - name the block that failed
                pytest.fail(f"{where(page, line)}: {type(exc).__name__}: {exc}\n{body}")
        printed = capsys.readouterr().out
        for quote in PRINTS.get(page, list)():
            assert quote in printed, f"{page_id(page)} says its examples print {quote!r}; they printed:\n{printed}"
    finally:  # an example may register, replace or remove an entry; leave every registry as found
        for registry, kept in before:
            for name in set(registry.names()) - {entry.name for entry in kept}:
                registry.unregister(name)
            for entry in kept:
                if entry.name not in registry or registry.get(entry.name) is not entry:
                    registry.add(entry, replace=True)


def test_the_front_page_shows_the_three_things_users_do():
    python = [body for _, _, body in blocks(ROOT / "README.md", "python")]
    assert any("morkit.score(" in b for b in python) and any("build_pool(" in b for b in python)
    assert any(".rank(" in b for b in python)
