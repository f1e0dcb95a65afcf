"""`morkit pool` end to end with the real MiniLM embedder and real FAISS, plus label filling."""

from __future__ import annotations

import json

import numpy as np
import pytest

from morkit.cli import main
from morkit.core.errors import InputError, UnavailableError
from morkit.core.types import Candidate, Query
from morkit.question_pool.labels import fill_labels
from morkit.question_pool.pool import load_pool


def test_real_embedder_gives_unit_vectors_and_sensible_neighbours(embedder):
    v = embedder.encode(["How many apples does Tom have left after eating two of five?",
                         "Tom had five apples and ate two. How many remain?",
                         "Write a Python function that reverses a linked list."])
    assert v.shape == (3, embedder.dim) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_unknown_embedder_is_a_clear_error(tmp_path):
    from morkit.question_pool.embed import load_embedder

    with pytest.raises(InputError, match="cannot load embedder 'no-such/embedder-xyz'.*MORKIT_ALLOW_DOWNLOADS=1"):
        load_embedder("no-such/embedder-xyz", "cpu")
    with pytest.raises(UnavailableError, match="cannot load embedder .* from this path"):
        load_embedder(str(tmp_path), "cpu")  # a local folder that holds no model


def test_fill_labels_by_reference_and_by_sandboxed_tests():
    math_q = Query("m", "2+2?", (Candidate("so \\boxed{4}"), Candidate("The answer is 5"),
                                 Candidate("given", correct=False)), reference="4")
    code_q = Query("c", "def f(x):", (Candidate("def f(x):\n    return x + 1"), Candidate("def f(x):\n    return x")),
                   tests="assert f(1) == 2")
    none_q = Query("n", "?", (Candidate("a"), Candidate("b")))
    out, report = fill_labels([math_q, code_q, none_q])
    assert [c.correct for c in out[0].candidates] == [True, False, False]  # the given label is kept
    assert [c.correct for c in out[1].candidates] == [True, False]
    assert (report.by_reference, report.by_tests, report.no_source) == (2, 2, 2)


def _line(qid, question, scores, labels, domain="math"):
    return {"id": qid, "question": question, "domain": domain,
            "candidates": [{"text": f"answer {i}", "correct": ok, "scores": {k: v[i] for k, v in scores.items()}}
                           for i, ok in enumerate(labels)]}


QUESTIONS = [
    ("Natalia sold clips to 48 friends in April and half as many in May. How many in total?", "math"),
    ("A train travels 60 km per hour for 3 hours. How far does it go?", "math"),
    ("Write a function that returns the n-th Fibonacci number.", "code"),
    ("Compute the sum of the first 100 positive integers.", "math"),
    ("Implement binary search over a sorted list.", "code"),
]


@pytest.fixture
def pool_input(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "val.jsonl"
    with open(path, "w") as out:
        for i, (question, domain) in enumerate(QUESTIONS):
            labels = [True, False, bool(i % 2), False]
            scores = {"rm-a": rng.normal(size=4).round(3).tolist(), "prm-b": [[0.9, x] for x in rng.random(4).round(3)]}
            out.write(json.dumps(_line(f"v{i}", question, scores, labels, domain)) + "\n")
    return path


def test_pool_build_info_add_report(tmp_path, pool_input, embedder, capsys):
    out = tmp_path / "pool"
    assert main(["pool", "build", str(pool_input), "-o", str(out), "--device", "cpu", "-q"]) == 0
    pool = load_pool(out)
    assert len(pool) == 5 and pool.rm_names == ("rm-a", "prm-b") and len(pool.ensembles) == 2 + 3
    assert pool.meta["embedder"] == {"name": "all-MiniLM-L6-v2", "dim": 384}
    assert pool.meta["history"][0]["provenance"]["inputs"][0]["queries"] == 5
    # PRM steps were reduced by min: the 0.9 first step never wins
    assert pool.scores[0, 0, 1] == min(0.9, json.loads(pool_input.read_text().splitlines()[0])["candidates"][0]["scores"]["prm-b"][1])

    assert main(["pool", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "5 questions (math 3, code 2)" in text and "rm-a" in text and "revision 1" in text
    assert "agreement" in text and "acc alone" in text and "warning:" not in text
    assert main(["pool", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["questions"] == 5 and set(info["rms"]) == {"rm-a", "prm-b"}
    assert info["warnings"] == [] and {"agreement", "accuracy_alone"} <= set(info["rms"]["rm-a"])

    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps(_line("w0", "How many legs do three spiders have?", {"rm-a": [1, 0], "prm-b": [0.2, 0.1]},
                                     [True, False])) + "\n")
    assert main(["pool", "add", str(out), str(more), "--device", "cpu", "-q"]) == 0
    grown = load_pool(out)
    assert len(grown) == 6 and grown.meta["revision"] == 2 and grown.index.ntotal == 6
    assert main(["pool", "add", str(out), str(more), "--device", "cpu", "-q"]) == 2  # ids already there
    assert "already in the pool" in capsys.readouterr().err

    report = tmp_path / "report.html"
    assert main(["pool", "report", str(out), "-o", str(report)]) == 0
    assert report.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_pool_build_runs_registered_rms_and_labels_from_reference(tmp_path, data_dir, embedder):
    out = tmp_path / "pool"
    assert main(["pool", "build", "--dataset", "qwen25_math_rm8:12", "--data-dir", str(data_dir),
                 "--rm", "qwen2.5-math-rm-72b", "--rm", "math-consensus", "-o", str(out), "--device", "cpu", "-q"]) == 0
    pool = load_pool(out)
    assert pool.rm_names == ("qwen2.5-math-rm-72b", "math-consensus")
    assert 0 < len(pool) <= 12 and pool.meta["skipped"]["unlabelled"] == 0


def test_pool_build_bad_inputs_exit_2_and_write_nothing(tmp_path, pool_input, capsys):
    out = tmp_path / "pool"
    assert main(["pool", "build", str(pool_input), str(pool_input), "-o", str(out)]) == 2
    assert "duplicate id 'v0'" in capsys.readouterr().err
    assert main(["pool", "build", str(pool_input), "--rm", "nope", "-o", str(out), "--device", "cpu"]) == 2
    assert "unknown reward model 'nope'" in capsys.readouterr().err
    assert main(["pool", "build", "-o", str(out)]) == 2
    assert "no input" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_line("x", "q?", {"rm-a": [float("nan"), 1.0]}, [True, False])) + "\n")
    assert main(["pool", "build", str(bad), "-o", str(out), "--device", "cpu"]) == 2
    assert "finite" in capsys.readouterr().err
    assert main(["pool", "build", str(pool_input), "--embedder", "no-such/model-abc", "-o", str(out)]) == 2
    assert "cannot load embedder" in capsys.readouterr().err
    assert main(["pool", "info", str(tmp_path)]) == 2
    assert not out.exists()


@pytest.mark.slow
def test_two_pool_adds_at_once_keep_both_sides_questions(tmp_path, pool_input, embedder):
    """Two `morkit pool add` processes on one pool: the pool's lock serialises their saves, and the second
    appends to the first's revision, so both succeed and both sides' questions are in the pool."""
    import subprocess
    import sys

    out = tmp_path / "pool"
    assert main(["pool", "build", str(pool_input), "-o", str(out), "--device", "cpu", "-q"]) == 0
    inputs = {}
    for side in ("left", "right"):
        inputs[side] = tmp_path / f"{side}.jsonl"
        inputs[side].write_text("".join(json.dumps(_line(f"{side}{i}", f"{side} question number {i}?",
                                                         {"rm-a": [1, 0], "prm-b": [0.2, 0.1]}, [True, False]))
                                        + "\n" for i in range(3)))
    children = {side: subprocess.Popen([sys.executable, "-m", "morkit.cli", "pool", "add", str(out), str(path),
                                        "--device", "cpu", "-q"], stderr=subprocess.PIPE, text=True)
                for side, path in inputs.items()}
    results = {side: (child.wait(timeout=300), child.stderr.read()) for side, child in children.items()}
    ids = {q.id for q in load_pool(out).questions}
    assert all(code == 0 for code, _ in results.values()), results
    assert {f"{side}{i}" for side in inputs for i in range(3)} <= ids
