"""`morkit loop` and `morkit search` end to end over the OpenAI-compatible backend (a real HTTP server
on 127.0.0.1 with scripted role replies), with real pools, real FAISS and real rule RMs."""

from __future__ import annotations

import json
import time

import pytest
from fakes.http_server import FakeServer
from fakes.role_agents import role_reply

from morkit.cli import main

@pytest.mark.slow
@pytest.mark.parametrize("loop,extra", [("tmas", ["--iterations", "2", "--solutions", "2"]),
                                        ("streamma", ["--chain", "3"]), ("atlas", ["--max-explores", "2"])])
def test_loop_cli_offline_protocol(loop, extra, tmp_path, agents_toml, queries, chat):
    out = tmp_path / "out.jsonl"
    assert main(["loop", loop, str(queries), "-o", str(out), "--agents", str(agents_toml), "-q", *extra]) == 0
    record = json.loads(out.read_text())
    assert record["id"] == "ali" and record["loop"].startswith(loop) and "71" in record["answer"]
    assert record["calls"] > 0 and record["trace"][-1]["kind"] == "stop"
    if loop == "atlas":  # the orchestrator's replies were read by the protocol, not by its defaults
        assert record["stop_reason"] == "orchestrator stopped" and record["state"]["unparsed_actions"] == 0
    if loop == "streamma":  # every reviewer's reply was read as ACCEPT
        assert record["state"]["reviews"][1] and all(r["verdict"] == "accept" for r in record["state"]["reviews"][1])


def test_tmas_ablations_from_the_command_line(tmp_path, agents_toml, queries):
    out = tmp_path / "out.jsonl"
    assert main(["loop", "tmas", str(queries), "-o", str(out), "--agents", str(agents_toml), "-q", "--iterations", "2",
                 "--solutions", "2", "--verifications", "0", "--set", "guidelines=false", "--set",
                 "experience=false"]) == 0
    record = json.loads(out.read_text())
    kinds = {event["kind"] for event in record["trace"]}
    assert not kinds & {"verify", "summary", "guidelines", "experience"}, kinds
    assert record["state"]["guidelines"] is None and record["state"]["experience"] is None
    assert "71" in record["answer"]


def test_loop_budget_and_verifier_flags(tmp_path, agents_toml, queries, capsys):
    out = tmp_path / "out.jsonl"
    assert main(["loop", "tmas", str(queries), "-o", str(out), "--agents", str(agents_toml), "-q",
                 "--max-calls", "1", "--solutions", "2"]) == 0
    record = json.loads(out.read_text())
    assert record["stop_reason"].startswith("budget") or record["calls"] <= 2
    assert main(["loop", "tmas", str(queries), "-o", str(out), "--verifier", "mor"]) == 2
    assert "needs a pool" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["streamma", "tmas", "atlas"])
def test_loop_max_seconds_bounds_the_call_in_flight(loop, tmp_path):
    # Every chat reply takes 4 s, and a stream sends only keep-alives for 4 s: the budget must cut them.
    slow = FakeServer(role_reply, delay_s=4.0, keepalive_s=4.0)
    agents = tmp_path / "slow.toml"
    agents.write_text(f'[defaults]\nbackend = "openai"\nmodel = "tiny"\nbase_url = "{slow.v1}"\ntimeout = 30\n'
                      '[[agent]]\nname = "a"\n')
    question = tmp_path / "keepalive.jsonl"
    question.write_text(json.dumps({"id": "k", "question": "KEEPALIVE: what is 2 + 2?", "candidates": []}) + "\n")
    out = tmp_path / "out.jsonl"
    started = time.perf_counter()
    try:
        assert main(["loop", loop, str(question), "-o", str(out), "--agents", str(agents), "-q",
                     "--max-seconds", "1"]) == 0
    finally:
        slow.close()
    assert time.perf_counter() - started < 3.0
    record = json.loads(out.read_text())
    assert record["stop_reason"].startswith(("budget", "time budget spent")), record["stop_reason"]
    assert any("time budget spent" in json.dumps(e) for e in record["trace"])


def test_search_cli_compares_methods_on_the_same_answers(tmp_path, agents_toml, queries, data_dir, embedder):
    pool = tmp_path / "pool"
    assert main(["pool", "build", "--dataset", "gsm8k_model_solutions:30", "--data-dir", str(data_dir),
                 "--rm", "math-consensus", "-o", str(pool), "-q", "--device", "cpu"]) == 0
    out = tmp_path / "search.jsonl"
    args = ["search", "--pool", str(pool), str(queries), "-o", str(out), "--agents", str(agents_toml), "-q",
            "--device", "cpu", "--selection", "pres"]
    for method in ("acs", "best-of-n", "majority", "self-consistency", "moa"):
        args += ["--method", method]
    assert main(args) == 0
    record = json.loads(out.read_text())
    assert record["ensemble"]["members"] == ["math-consensus"] and len(record["answers"]) == 3
    for name, result in record["results"].items():
        assert result["correct"] is True, name
    acs = record["results"]["acs"]
    assert [s["step"] for s in acs["trace"]][:2] == ["answers", "initial"]
    assert not (tmp_path / "search.jsonl.partial").exists()
