"""`morkit generate`: agents behind a real OpenAI-compatible server on 127.0.0.1, and the local agents."""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import replace

import pytest
from fakes.http_server import FakeServer

from morkit.cli.main import main
from morkit.data.contract import load_queries
from morkit.llm.agents import load_agents
from morkit.services.generating import answer_key


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


def test_a_rerun_asks_only_for_what_the_resume_log_lacks_or_asked_another_way(tmp_path, server):
    inp = _inputs(tmp_path, ["first question", "second question"])
    out = tmp_path / "out.jsonl"
    log = tmp_path / "out.jsonl.partial"
    agents = _agents(tmp_path, server)
    alpha, beta = load_agents(agents).agents
    q0, q1 = load_queries(inp)

    def logged(query, spec, text, key):
        candidate = {"text": text, "agent": spec.name, "generation": {"finish_reason": "stop", **key}}
        return json.dumps({"id": query.id, "agent": spec.name, "candidates": [candidate]}) + "\n"

    log.write_text(logged(q0, alpha, "from an earlier run", {"key": answer_key(alpha, alpha.params, q0)})
                   + logged(q0, beta, "made before answers had keys", {})
                   + logged(q1, beta, "an answer to an older text",
                            {"key": answer_key(beta, beta.params, replace(q1, question="older text"))})
                   + '{"id": "q1", "agent": "al')  # the torn line of a killed run
    before = server.requests
    assert main(["generate", str(inp), "-o", str(out), "--agents", str(agents), "-q", "--chunk", "1"]) == 0
    assert server.requests - before == 3  # (q1, alpha), (q0, beta), (q1, beta)
    queries = {q.id: q for q in load_queries(out)}  # the keyless and the stale answer are asked again
    assert [(c.agent, c.text.split(" #")[0]) for c in queries["q0"].candidates] == [
        ("alpha", "from an earlier run"), ("beta", "reply to first question")]
    assert [(c.agent, c.text.split(" #")[0]) for c in queries["q1"].candidates] == [
        ("alpha", "reply to second question"), ("beta", "reply to second question")]
    assert not log.exists()


def test_agents_are_asked_a_querys_prompt_when_it_has_one(tmp_path, server):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "p", "question": "bare question", "prompt": "templated ask",
                               "candidates": []}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["generate", str(inp), "-o", str(out), "--agents", str(_agents(tmp_path, server, ("one",))),
                 "-q"]) == 0
    (query,) = load_queries(out)
    assert query.candidates[0].text.startswith("reply to templated ask") and query.extra["prompt"] == "templated ask"


def test_bare_questions_are_answered_into_a_new_folder_and_still_refused_where_candidates_are_needed(
        tmp_path, server, capsys):
    inp = tmp_path / "bare.jsonl"
    inp.write_text(json.dumps({"id": "b", "question": "What is 2+2?"}) + "\n")
    out = tmp_path / "new" / "deeper" / "out.jsonl"
    assert main(["generate", str(inp), "-o", str(out), "--agents", str(_agents(tmp_path, server)), "-q"]) == 0
    (query,) = load_queries(out)
    assert [c.agent for c in query.candidates] == ["alpha", "beta"] and query.candidates[0].text.startswith("reply")
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.jsonl"]
    capsys.readouterr()
    assert main(["score", str(inp), "-o", str(tmp_path / "scored.jsonl"), "--rm", "math-consensus"]) == 2
    assert "'candidates' must be a list" in capsys.readouterr().err  # scoring still needs candidates


@pytest.mark.parametrize("agent_line, flags, message", [
    ('base_url = "ftp://x"', [], "agent 'beta': base_url must be an http:// or https:// URL with a host, got "
                                 "'ftp://x'"),
    ('base_url = "http:///v1"', [], "agent 'beta': base_url must be an http:// or https:// URL with a host"),
    ('base_url = "localhost:8000"', [], "agent 'beta': base_url must be an http:// or https:// URL with a host"),
    ("n = 99999999999999999999", [], "agent 'beta': SamplingParams.n must be a whole number from 1 to 1,024"),
    ("", ["--n", "99999999999999999999"], "--n: must be a whole number from 1 to 1,024"),
])
def test_a_bad_agent_or_sample_count_is_one_line_before_any_call(tmp_path, server, capsys, agent_line, flags,
                                                                  message):
    agents = _agents(tmp_path, server)
    text = agents.read_text()
    at = text.index('[[agent]]\nname = "beta"')
    agents.write_text(text[:at] + text[at:].replace(f'base_url = "{server.v1}"\n', "") + agent_line + "\n")
    out = tmp_path / "out.jsonl"
    before = server.requests
    with pytest.raises(SystemExit) if flags else nullcontext() as flag_error:  # a bad flag stops argparse
        assert main(["generate", str(_inputs(tmp_path, ["q"])), "-o", str(out), "--agents", str(agents), *flags]) == 2
    assert flag_error is None or flag_error.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and err.startswith("morkit: error:")
    assert flags or err.startswith(f"morkit: error: {agents}: ")
    assert server.requests == before and not out.exists() and not (tmp_path / "out.jsonl.partial").exists()


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


def test_a_sampling_field_added_later_keeps_older_answer_keys_until_it_is_set():
    """The key below was written by morkit before SamplingParams had `reasoning_effort`: answers generated then
    still resume; setting the new field is a different request, so a different key."""
    from morkit.core.types import Query
    from morkit.llm.agents import AgentSpec
    from morkit.llm.base import SamplingParams

    params = SamplingParams(temperature=0.5, max_tokens=64, seed=3)
    spec, query = AgentSpec("alpha", params=params), Query("q0", "What is 2+2?", ())
    assert answer_key(spec, params, query) == "cf9bf59b72697be5"
    assert answer_key(spec, replace(params, reasoning_effort="high"), query) != "cf9bf59b72697be5"
    assert answer_key(spec, replace(params, presence_penalty=0.0), query) == "cf9bf59b72697be5"
    assert answer_key(spec, replace(params, presence_penalty=1.05), query) != "cf9bf59b72697be5"
    templated = replace(spec, user="Question: {question}.")
    assert answer_key(replace(spec, user=None), params, query) == "cf9bf59b72697be5"
    assert answer_key(templated, params, query) != "cf9bf59b72697be5"
