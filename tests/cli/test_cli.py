"""The `morkit` CLI without models: rms, score with table RMs, errors and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from morkit.cli import main
from morkit.reward_models.catalog import REWARD_MODELS

ROOT = Path(__file__).resolve().parents[2]

QUERIES = [
    {"id": "q1", "question": "2+2?", "note": "kept",
     "candidates": [{"text": "4", "scores": {"my-rm": 0.9, "my-prm": [0.8, 0.6]}, "tag": 1},
                    {"text": "5", "scores": {"my-rm": 0.1, "my-prm": [0.3, 0.9]}}]},
    {"id": "q2", "question": "3+3?",
     "candidates": [{"scores": {"my-rm": 0.4, "my-prm": [0.5]}}]},
]


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def work(tmp_path):
    d = tmp_path / "work"
    d.mkdir()
    return d


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "morkit.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=60)


def test_rms_lists_every_registered_name(capsys):
    assert main(["rms"]) == 0
    out = capsys.readouterr().out
    names = REWARD_MODELS.names()
    assert names  # the built-ins are registered
    for name in names:
        assert name in out
    assert "table" in out


def test_rms_table_fits_120_columns_and_details_one_rm(capsys):
    assert main(["rms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "AVAILABLE", "GPU", "COST", "APPLIES", "TO"]
    assert max(len(line) for line in lines) <= 120
    assert main(["rms", "remote"]) == 0
    details = capsys.readouterr().out
    assert "required_options  name, urls, model" in details and "RemoteRewardModel" in details
    assert "runs              remote" in details and "cost              given by the user: --cost remote=" in details
    assert main(["rms", "smollm2-orm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "smollm2-orm"
    assert main(["rms", "nope"]) == 2 and "unknown reward model 'nope'" in capsys.readouterr().err


def test_rms_shows_each_cost_and_lists_a_cost_file(capsys):
    assert main(["rms"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "269 MFLOP/token" in rows["smollm2-orm"] and "45.4 MFLOP/token" in rows["minilm-probe"]
    assert "ms CPU/pair" in rows["math-consensus"] and "ms CPU/pair" in rows["code-tests"]
    assert "145 GFLOP/token" in rows["qwen2.5-math-rm-72b"] and "given by the user" in rows["vllm"]
    assert main(["rms", "code-tests"]) == 0
    details = capsys.readouterr().out
    assert "cost_source       measured by bench/rule_costs.py" in details
    assert main(["rms", "--costs", "rewardmath"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["NAME", "MODEL", "COST", "GFLOP/CANDIDATE"]
    assert any(line.split()[:3] == ["gpt4", "gpt-4-0125-preview", "$0.013/call"] for line in listed)
    assert main(["rms", "--costs", "rewardmath", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert len(entries) == 22 and all(e["cost"]["source"] for e in entries)
    assert main(["rms", "--costs", "nope"]) == 2 and "not a packaged cost file" in capsys.readouterr().err


def test_score_table_rms_without_models(work, capsys):
    src = write(work / "in.jsonl", QUERIES)
    out = work / "out" / "scored.jsonl"
    rc = main(["score", str(src), "-o", str(out), "--rm", "my-rm", "--rm", "my-prm", "--no-cache", "-q"])
    assert rc == 0
    assert "my-rm" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2"]
    assert rows[0]["note"] == "kept" and rows[0]["candidates"][0]["tag"] == 1
    assert rows[0]["candidates"][0]["scores"] == {"my-rm": 0.9, "my-prm": [0.8, 0.6]}
    assert rows[0]["candidates"][1]["scores"] == {"my-rm": 0.1, "my-prm": [0.3, 0.9]}
    assert rows[1]["candidates"][0] == {"scores": {"my-rm": 0.4, "my-prm": [0.5]}}
    assert sorted(os.listdir(out.parent)) == ["scored.jsonl"]


def test_score_table_rms_with_explicit_cache_and_reduction(work):
    src = write(work / "in.jsonl", QUERIES)
    out = work / "scored.jsonl"
    cache = work / "c.sqlite"
    assert main(["score", str(src), "-o", str(out), "--rm", "my-rm", "--rm", "my-prm", "--cache", str(cache),
                 "-q", "--reduction", "last"]) == 0
    first = json.loads(out.read_text().splitlines()[0])["candidates"][0]["scores"]
    # ORM values are kept as they are; a PRM's step list is written back whole (the contract form).
    assert first == {"my-rm": 0.9, "my-prm": [0.8, 0.6]}


def test_score_malformed_line_exit_2(work, capsys):
    src = work / "in.jsonl"
    src.write_text(json.dumps(QUERIES[0]) + "\n" + json.dumps(QUERIES[1]) + "\n{oops\n")
    out = work / "out.jsonl"
    assert main(["score", str(src), "-o", str(out), "--rm", "my-rm", "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{src}:3:" in err and "malformed JSON" in err
    assert not out.exists()
    assert sorted(os.listdir(work)) == ["in.jsonl"]


def test_score_unknown_rm_exit_2(work, capsys):
    src = write(work / "in.jsonl", QUERIES)
    out = work / "out.jsonl"
    assert main(["score", str(src), "-o", str(out), "--rm", "nope", "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err
    for name in REWARD_MODELS.names() + ["my-rm", "my-prm"]:
        assert name in err
    assert not out.exists()


def test_score_table_rm_missing_for_a_candidate_exit_2(work, capsys):
    rows = [QUERIES[0], {"id": "gap", "question": "?", "candidates": [{"text": "a", "scores": {"other": 1}}]}]
    src = write(work / "in.jsonl", rows)
    out = work / "out.jsonl"
    assert main(["score", str(src), "-o", str(out), "--rm", "my-rm", "--no-cache", "-q"]) == 2
    assert "'gap'" in capsys.readouterr().err
    assert not out.exists()


def test_score_missing_input_exit_2(work, capsys):
    assert main(["score", str(work / "absent.jsonl"), "-o", str(work / "o.jsonl"), "--no-cache"]) == 2
    assert "absent.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["rms", "score", "train-head", "demo"])
def test_verb_help_exits_0(verb, capsys):
    with pytest.raises(SystemExit) as exc:
        main([verb, "--help"])
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_top_level_help_and_missing_verb(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_subprocess_exit_codes(work):
    env = {**os.environ, "MORKIT_CACHE_DIR": str(work / "cache")}
    src = write(work / "in.jsonl", QUERIES)
    out = work / "out.jsonl"

    ok = run_cli("score", src, "-o", out, "--rm", "my-prm", "--no-cache", "-q", env=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text().splitlines()[1])["candidates"][0]["scores"] == {"my-rm": 0.4, "my-prm": [0.5]}

    bad = work / "bad.jsonl"
    bad.write_text(json.dumps(QUERIES[0]) + "\n\n[]\n")
    bad_out = work / "bad-out.jsonl"
    res = run_cli("score", bad, "-o", bad_out, "--rm", "my-rm", "--no-cache", env=env)
    assert res.returncode == 2
    assert f"{bad}:3:" in res.stderr and res.stderr.startswith("morkit: error:")
    assert not bad_out.exists()

    res = run_cli("score", src, "-o", bad_out, "--rm", "nope", "--no-cache", env=env)
    assert res.returncode == 2 and "known:" in res.stderr and "my-rm" in res.stderr

    res = run_cli("rms", env=env)
    assert res.returncode == 0
    for name in REWARD_MODELS.names():
        assert name in res.stdout

    res = run_cli("score", "--help", env=env)
    assert res.returncode == 0 and "--rm" in res.stdout
