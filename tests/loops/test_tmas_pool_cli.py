"""`morkit loop tmas --pool` end to end (a real pool of the math-consensus rule RM, scripted agents on 127.0.0.1):
a set-level MoR ensemble refuses `stop_score`, is re-scored across rounds, and feeds no score strings to the
memory agents; `--verifier both` brings back the summaries from the critic's analysis."""

from __future__ import annotations

import json

import pytest

from morkit.cli.main import main


@pytest.mark.slow
def test_tmas_over_a_consensus_pool(tmp_path, agents_toml, queries, data_dir, embedder, capsys):
    pool = tmp_path / "pool"
    assert main(["pool", "build", "--dataset", "gsm8k_model_solutions:30", "--data-dir", str(data_dir),
                 "--rm", "math-consensus", "-o", str(pool), "-q", "--device", "cpu"]) == 0
    out = tmp_path / "out.jsonl"
    loop = ["loop", "tmas", str(queries), "-o", str(out), "--agents", str(agents_toml), "-q", "--pool", str(pool),
            "--device", "cpu", "--iterations", "3", "--solutions", "2", "--verifications", "2"]
    capsys.readouterr()
    assert main([*loop, "--set", "stop_score=0.5"]) == 2  # consensus reads the siblings: no fixed threshold
    assert "stop_score needs a verifier whose scores compare across calls; mor:math-consensus" in capsys.readouterr().err

    assert main(loop) == 0
    trace = json.loads(out.read_text())["trace"]
    start = next(e for e in trace if e["kind"] == "start")
    assert start["scores_absolute"] is False and start["verifier_writes_analysis"] is False
    assert [e["skipped"] for e in trace if e["kind"] == "summary"] == [start["memory_input"]] * 2
    assert "--verifier both" in start["memory_input"]
    assert [(e["iteration"], e["context_size"]) for e in trace if e["kind"] == "rescore"] == [(2, 2), (3, 3)]

    assert main([*loop, "--verifier", "both"]) == 0
    trace = json.loads(out.read_text())["trace"]
    summaries = [s["text"] for e in trace if e["kind"] == "summary" for s in e["summaries"]]
    assert summaries == ["All solutions reach 71."] * 4  # two rounds of two, from the critic's analysis
    lines = [line for e in trace if e["kind"] == "verify" for part in e["score_feedback"] for line in part]
    assert len(lines) == 3 * 2 * 2 and all(line.startswith("ensemble score") for line in lines)
