"""The CLI's error matrix: every verb that reads queries, every class of bad input, bad output and cache
targets and non-finite flag values. Each row must exit 2 with exactly one stderr line, `morkit: error: ...`,
naming the file (and line and id where known) or the flag and path, with no traceback, and write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from morkit.cli import main

GOOD = {"id": "q1", "question": "2+2?",
        "candidates": [{"text": "4", "correct": True, "scores": {"r": 0.9}},
                       {"text": "5", "correct": False, "scores": {"r": 0.1}}]}
SECOND = {**GOOD, "id": "q2", "question": "3+3?"}


def _line(obj: dict) -> bytes:
    return json.dumps(obj).encode() + b"\n"


# name -> (file content, what the error line must name besides the file)
INPUTS = {
    "400-digit score": (_line(GOOD).replace(b"0.9", b"9" * 400), [":1:", "'q1'", "finite"]),
    "1e400 score": (_line(GOOD).replace(b"0.9", b"1e400"), [":1:", "'q1'", "finite"]),
    "NaN in a kept field": (_line({**GOOD, "note": float("nan")}), [":1:", "'q1'", "NaN"]),
    "5000-digit integer": (_line(GOOD).replace(b'"q1", ', b'"q1", "n": ' + b"7" * 5000 + b", "), [":1:", "digits"]),
    "invalid UTF-8": (_line(GOOD) + _line(SECOND).replace(b"3+3?", b"3\xff+3?"), [":2:", "UTF-8"]),
    "200000 nested [": (_line(GOOD) + b"[" * 200_000 + b"\n", [":2:", "nested"]),
    "lone surrogate": (_line(GOOD) + _line(SECOND).replace(b"3+3?", b"\\ud800"), [":2:", "'q2'", "surrogate"]),
}

# verb -> argv given (input, output, a folder for other paths)
VERBS = {
    "score": lambda i, o, d: ["score", i, "-o", o, "--rm", "r", "--no-cache", "-q"],
    "select": lambda i, o, d: ["select", i, "--pool", f"{d}/no-pool", "-o", o, "-q"],
    "rank": lambda i, o, d: ["rank", i, "--pool", f"{d}/no-pool", "-o", o, "--no-cache", "-q"],
    "search": lambda i, o, d: ["search", i, "--pool", f"{d}/no-pool", "-o", o, "--no-cache", "-q"],
    "loop": lambda i, o, d: ["loop", "tmas", i, "-o", o, "--no-cache", "-q"],
    "pool build": lambda i, o, d: ["pool", "build", i, "-o", o, "--no-cache", "-q"],
}

INPUT_ROWS = [(verb, name) for verb in VERBS for name in INPUTS]


@pytest.fixture
def work(tmp_path):
    d = tmp_path / "work"
    d.mkdir()
    (d / "ok.jsonl").write_bytes(_line(GOOD) + _line(SECOND))
    (d / "notes.txt").write_text("not a database\n")
    (d / "folder").mkdir()
    (d / "full").mkdir()
    (d / "full" / "keep.txt").write_text("mine\n")
    return d


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def run(argv: list[str], capsys) -> tuple[int, str]:
    """main() in process; argparse's own errors leave by SystemExit."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.err


def assert_one_error_line(code: int, err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("morkit: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, err)


@pytest.mark.parametrize("verb,name", INPUT_ROWS, ids=[f"{v}: {n}" for v, n in INPUT_ROWS])
def test_bad_input_files(verb, name, work, capsys):
    content, fragments = INPUTS[name]
    source = work / "in.jsonl"
    source.write_bytes(content)
    out = work / ("pool" if verb == "pool build" else "out.jsonl")
    before = _snapshot(work)
    code, err = run(VERBS[verb](source, out, work), capsys)
    assert_one_error_line(code, err, f"{source}:", *fragments)
    assert _snapshot(work) == before  # no output, no temporary file


# (argv given the work folder, what the line must name, the target that must stay as it was)
TARGETS = [
    ("score -o a directory", lambda d: VERBS["score"](d / "ok.jsonl", d / "folder", d), ["-o/--output", "folder"]),
    ("score -o inside a file", lambda d: VERBS["score"](d / "ok.jsonl", d / "notes.txt" / "o.jsonl", d),
     ["-o/--output", "notes.txt"]),
    ("select -o a directory", lambda d: VERBS["select"](d / "ok.jsonl", d / "folder", d), ["-o/--output", "folder"]),
    ("rank -o a directory", lambda d: VERBS["rank"](d / "ok.jsonl", d / "folder", d), ["-o/--output", "folder"]),
    ("search -o a directory", lambda d: VERBS["search"](d / "ok.jsonl", d / "folder", d), ["-o/--output", "folder"]),
    ("loop -o a directory", lambda d: VERBS["loop"](d / "ok.jsonl", d / "folder", d), ["-o/--output", "folder"]),
    ("pool build -o a file", lambda d: VERBS["pool build"](d / "ok.jsonl", d / "notes.txt", d),
     ["-o/--output", "notes.txt"]),
    ("pool build -o another directory", lambda d: VERBS["pool build"](d / "ok.jsonl", d / "full", d),
     ["-o/--output", "full"]),
    ("pool report -o a directory", lambda d: ["pool", "report", d / "no-pool", "-o", d / "folder"],
     ["-o/--output", "folder"]),
    ("train-head -o a directory", lambda d: ["train-head", "minilm-probe", "-o", d / "folder"],
     ["-o/--output", "folder"]),
    ("score --cache a text file", lambda d: [*VERBS["score"](d / "ok.jsonl", d / "o.jsonl", d)[:-2], "--cache",
                                             d / "notes.txt"], ["--cache", "notes.txt", "SQLite"]),
    ("score --cache a directory", lambda d: [*VERBS["score"](d / "ok.jsonl", d / "o.jsonl", d)[:-2], "--cache",
                                             d / "folder"], ["--cache", "folder"]),
    ("score --cache inside a file", lambda d: [*VERBS["score"](d / "ok.jsonl", d / "o.jsonl", d)[:-2], "--cache",
                                               d / "notes.txt" / "c.sqlite"], ["--cache", "notes.txt"]),
    ("rank --cache a text file", lambda d: ["rank", d / "ok.jsonl", "--pool", d / "no-pool", "-o", d / "o.jsonl",
                                            "--cache", d / "notes.txt"], ["--cache", "notes.txt"]),
    ("pool build --cache a text file", lambda d: ["pool", "build", d / "ok.jsonl", "-o", d / "pool", "--cache",
                                                  d / "notes.txt"], ["--cache", "notes.txt"]),
    ("pool add --cache a text file", lambda d: ["pool", "add", d / "no-pool", d / "ok.jsonl", "--cache",
                                                d / "notes.txt"], ["--cache", "notes.txt"]),
    ("loop --cache a directory", lambda d: ["loop", "tmas", d / "ok.jsonl", "-o", d / "o.jsonl", "--cache",
                                            d / "folder"], ["--cache", "folder"]),
]


@pytest.mark.parametrize("name,argv,fragments", TARGETS, ids=[t[0] for t in TARGETS])
def test_bad_output_and_cache_targets(name, argv, fragments, work, capsys):
    before = _snapshot(work)
    code, err = run(argv(work), capsys)
    assert_one_error_line(code, err, *fragments)
    assert _snapshot(work) == before


FLAGS = [
    (["pool", "build", "x.jsonl", "-o", "p", "--temperature", "nan"], "--temperature"),
    (["pool", "build", "x.jsonl", "-o", "p", "--temperature", "1e400"], "--temperature"),
    (["pool", "build", "x.jsonl", "-o", "p", "--temperature=-inf"], "--temperature"),
    (["score", "x.jsonl", "-o", "o", "--gpu-memory-utilization", "nan"], "--gpu-memory-utilization"),
    (["rank", "x.jsonl", "--pool", "p", "-o", "o", "--gpu-memory-utilization", "inf"], "--gpu-memory-utilization"),
    (["loop", "tmas", "x.jsonl", "-o", "o", "--epsilon", "nan"], "--epsilon"),
    (["loop", "tmas", "x.jsonl", "-o", "o", "--max-seconds", "inf"], "--max-seconds"),
    (["loop", "tmas", "x.jsonl", "-o", "o", "--max-seconds", "nan"], "--max-seconds"),
    (["train-head", "minilm-probe", "--test-fraction", "nan"], "--test-fraction"),
]


@pytest.mark.parametrize("argv,flag", FLAGS, ids=[" ".join(a[-2:]) for a, _ in FLAGS])
def test_non_finite_flag_values(argv, flag, work, capsys, monkeypatch):
    monkeypatch.chdir(work)
    before = _snapshot(work)
    code, err = run(argv, capsys)
    assert_one_error_line(code, err, flag)
    assert _snapshot(work) == before


def test_options_reject_numbers_no_float_can_hold():
    from morkit import ScoringOptions
    from morkit.loops.tmas import TMASConfig
    from morkit.core.errors import InputError
    from morkit.question_pool.pool import PoolConfig

    for make in (lambda: PoolConfig(temperature=10**400), lambda: TMASConfig(epsilon=float("nan")),
                 lambda: ScoringOptions.from_flags(placement="vllm", gpu_memory_utilization=float("inf"))):
        with pytest.raises(InputError):
            make()


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
    """A real pool (embedded MiniLM embedder) over table RMs rm-a and rm-b."""
    import numpy as np

    folder = tmp_path_factory.mktemp("pool")
    rng = np.random.default_rng(0)
    questions = ["Natalia sold clips to 48 friends in April and half as many in May. How many in total?",
                 "A train travels 60 km per hour for 3 hours. How far does it go?",
                 "Compute the sum of the first 100 positive integers.", "What is 17 times 3?"]
    rows = [{"id": f"v{i}", "question": q, "domain": "math",
             "candidates": [{"text": f"answer {j}", "correct": ok,
                             "scores": {"rm-a": float(rng.normal()), "rm-b": float(rng.normal())}}
                            for j, ok in enumerate([True, False, bool(i % 2), False])]}
            for i, q in enumerate(questions)]
    source = folder / "val.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["pool", "build", str(source), "-o", str(folder / "pool"), "--device", "cpu", "--no-cache", "-q"]) == 0
    return folder / "pool"


@pytest.mark.parametrize("method", ["stacker", "pres"])
def test_rank_never_writes_non_finite_scores(method, pool_dir, work, capsys):
    """Member scores at the edge of the float range overflow the pool's normaliser: an error naming the
    query, never `Infinity` or `NaN` in the output."""
    source = work / "edge.jsonl"
    source.write_text(json.dumps({"id": "t1", "question": "What is 2+2?", "candidates": [
        {"text": "4", "scores": {"rm-a": 1.79e308, "rm-b": 1.79e308}},
        {"text": "5", "scores": {"rm-a": -1.79e308, "rm-b": 1.0}}]}) + "\n")
    before = _snapshot(work)
    code, err = run(["rank", source, "--pool", pool_dir, "-o", work / "ranked.jsonl", "--method", method,
                     "--no-cache", "--device", "cpu", "-q"], capsys)
    assert_one_error_line(code, err, "'t1'", "non-finite")
    assert _snapshot(work) == before
