"""`morkit generate`: agents behind a real OpenAI-compatible server on 127.0.0.1, and the local agents."""

from __future__ import annotations

import json

import pytest
from fake_server import FakeServer

from morkit.cli.main import main
from morkit.data.contract import load_queries


@pytest.fixture(scope="module")
def server():
    s = FakeServer()
    yield s
    s.close()


def _agents(tmp_path, server, names=("alpha", "beta")):
    path = tmp_path / "agents.toml"
    path.write_text("".join(f'[[agent]]\nname = "{n}"\nbackend = "openai"\nmodel = "m-{n}"\nbase_url = "{server.v1}"\n'
                            f'api_key_env = ""\ntimeout = 2\nretries = 0\ntemperature = 0.5\nmax_tokens = 32\n\n'
                            for n in names))
    return path


def _inputs(tmp_path, questions):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "candidates": []}) + "\n"
                            for i, q in enumerate(questions)))
    return path


def test_every_agent_answers_every_question_and_a_failure_stays_on_its_candidates(tmp_path, server, capsys):
    inp = _inputs(tmp_path, ["What is 2+2?", "BAD400 this one fails", "Name a prime."])
    out = tmp_path / "out.jsonl"
    assert main(["generate", str(inp), "-o", str(out), "--agents", str(_agents(tmp_path, server)), "--n", "2",
                 "-q"]) == 0
    queries = {q.id: q for q in load_queries(out)}
    assert [c.agent for c in queries["q0"].candidates] == ["alpha", "alpha", "beta", "beta"]
    first = queries["q0"].candidates[0]
    assert first.text.startswith("reply to What is 2+2? #0")
    generation = first.extra["generation"]
    assert generation["finish_reason"] in ("stop", "length") and generation["prompt_tokens"] > 0
    assert generation["sampling"]["temperature"] == 0.5 and generation["sampling"]["n"] == 2
    failed = queries["q1"].candidates
    assert len(failed) == 4 and all(c.text == "" and "400" in c.extra["error"] for c in failed)
    assert all("error" not in c.extra for c in queries["q2"].candidates)
    err = capsys.readouterr().err
    assert "3 questions x 2 agents: 12 candidates, 4 failed" in err
    assert not (tmp_path / "out.jsonl.partial").exists()


def test_a_rerun_asks_only_for_what_the_resume_log_lacks(tmp_path, server):
    inp = _inputs(tmp_path, ["first question", "second question"])
    out = tmp_path / "out.jsonl"
    log = tmp_path / "out.jsonl.partial"
    kept = {"text": "from an earlier run", "agent": "alpha", "generation": {"finish_reason": "stop"}}
    log.write_text(json.dumps({"id": "q0", "agent": "alpha", "candidates": [kept]}) + "\n"
                   + '{"id": "q1", "agent": "al')  # the torn line of a killed run
    before = server.requests
    assert main(["generate", str(inp), "-o", str(out), "--agents", str(_agents(tmp_path, server)), "-q",
                 "--chunk", "1"]) == 0
    assert server.requests - before == 3  # (q1, alpha), (q0, beta), (q1, beta)
    queries = {q.id: q for q in load_queries(out)}
    assert queries["q0"].candidates[0].text == "from an earlier run"
    assert [c.agent for c in queries["q1"].candidates] == ["alpha", "beta"] and not log.exists()


def test_agents_are_asked_a_querys_prompt_when_it_has_one(tmp_path, server):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "p", "question": "bare question", "prompt": "templated ask",
                               "candidates": []}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["generate", str(inp), "-o", str(out), "--agents", str(_agents(tmp_path, server, ("one",))),
                 "-q"]) == 0
    (query,) = load_queries(out)
    assert query.candidates[0].text.startswith("reply to templated ask") and query.extra["prompt"] == "templated ask"


def test_a_folder_as_output_is_one_line_and_nothing_runs(tmp_path, server, capsys):
    inp = _inputs(tmp_path, ["q"])
    before = server.requests
    assert main(["generate", str(inp), "-o", str(tmp_path), "--agents", str(_agents(tmp_path, server))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("morkit: error:") and str(tmp_path) in err[0]
    assert server.requests == before


def test_a_reply_with_a_lone_surrogate_is_kept_as_valid_unicode(tmp_path):
    odd = FakeServer(chat=lambda messages: "half a pair \ud800 here")
    try:
        out = tmp_path / "out.jsonl"
        assert main(["generate", str(_inputs(tmp_path, ["q"])), "-o", str(out), "--agents",
                     str(_agents(tmp_path, odd, names=("solo",))), "-q"]) == 0
    finally:
        odd.close()
    (query,) = load_queries(out)
    assert query.candidates[0].text.startswith("half a pair \ufffd")


@pytest.mark.slow
def test_local_agents_answer_a_shared_benchmark(tmp_path):
    agents = tmp_path / "agents.toml"
    agents.write_text('[defaults]\nbackend = "local"\nmax_tokens = 16\n\n[[agent]]\nname = "a"\ntemperature = 0\n\n'
                      '[[agent]]\nname = "b"\ntemperature = 0.8\nseed = 1\n')
    out = tmp_path / "out.jsonl"
    assert main(["generate", "--dataset", "gsm8k_test:2", "-o", str(out), "--agents", str(agents), "-q"]) == 0
    queries = load_queries(out)
    new = [c for q in queries for c in q.candidates if "generation" in c.extra]
    assert len(new) == 4 and all(c.text and c.extra["generation"]["completion_tokens"] <= 16 for c in new)
