"""`morkit pipeline`: the CTTS-MM flow end to end, agents behind a real OpenAI-compatible server on 127.0.0.1.

The agents are scripted (one always right, one always wrong, one right on every other question), so
the report's figures can be checked exactly; the embedder, the pool, the sandbox and the graders are real.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import fields, replace

import pytest
from fakes.http_server import FakeServer

from morkit.cli.main import main
from morkit.data.contract import load_queries
from morkit.llm.agents import AgentSpec
from morkit.llm.base import SamplingParams
from morkit.reward_models.options import FLAGS, ScoringOptions
from morkit.search.aggregate import MOA_SYSTEM
from morkit.services.generating import ANSWER_NEUTRAL, answer_key
from morkit.reward_models.options import SCORE_NEUTRAL
from morkit.services.pipeline.keys import scoring_key

BENCHMARKS = ('[[benchmark]]\nname = "gsm8k"\ndata = "gsm8k_test:40"\nvalidation = 4\ntest = 3\n'
              '[[benchmark]]\nname = "humaneval"\ndata = "humaneval:40"\nvalidation = 3\ntest = 2\n')


def _answers(data_dir):
    """Question (or code prompt) -> a right and a wrong answer, from the benchmarks' own solutions."""
    answers = {}
    for line in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()[:40]:
        row = json.loads(line)
        ref = row["answer"].split("####")[-1].strip().replace(",", "")
        answers[row["question"]] = (f"Step by step. The answer is \\boxed{{{ref}}}.",
                                    f"I think it is this. The answer is \\boxed{{{int(ref) + 1}}}.")
    with gzip.open(data_dir / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        for line in list(f)[:40]:
            row = json.loads(line)
            answers[row["prompt"]] = (f"```python\n{row['prompt']}{row['canonical_solution']}```",
                                      f"```python\n{row['prompt']}    return None\n```")
    return answers


def _reply(answers):
    def reply(messages):
        system = messages[0]["content"] if messages[0]["role"] == "system" else ""
        ask = messages[-1]["content"]
        if system.startswith(MOA_SYSTEM):  # the aggregator repeats the first response it is shown
            return system[len(MOA_SYSTEM):].split("\n1. ", 1)[1].split("\n2. ", 1)[0]
        right, wrong = next(v for k, v in answers.items() if k in ask)
        if system == "right":
            return right
        if system == "wrong":
            return wrong
        return right if hashlib.sha256(ask.encode()).digest()[0] % 2 else wrong
    return reply


@pytest.fixture(scope="module")
def server(data_dir):
    s = FakeServer(chat=_reply(_answers(data_dir)))
    yield s
    s.close()


def _config(tmp_path, server, *, rms='["math-consensus", "minilm-probe"]', search='["acs"]', extra="",
            benchmarks=BENCHMARKS):
    agents = tmp_path / "agents.toml"
    agents.write_text("[defaults]\nbackend = \"openai\"\nmodel = \"m\"\nbase_url = \"" + server.v1
                      + "\"\napi_key_env = \"\"\ntimeout = 5\nmax_tokens = 64\n"
                      + "".join(f'[[agent]]\nname = "{n}"\nsystem = "{n}"\n' for n in ("right", "wrong", "coin"))
                      + "[aggregator]\nname = \"agg\"\n")
    config = tmp_path / "pipeline.toml"
    config.write_text(f'workdir = "run"\nagents = "agents.toml"\nrms = {rms}\nsearch = {search}\n{extra}\n'
                      + benchmarks)
    return config


@pytest.mark.slow
def test_the_flow_from_bare_questions_to_a_report(tmp_path, server, capsys):
    config = _config(tmp_path, server)
    assert main(["pipeline", str(config), "-q"]) == 0
    run = tmp_path / "run"
    report = json.loads((run / "report.json").read_text())
    by_name = {b["benchmark"]: {m["method"]: m for m in b["methods"]} for b in report["benchmarks"]}
    for bench, n_test in (("gsm8k", 3), ("humaneval", 2)):
        methods = by_name[bench]
        assert set(methods) == {"oracle (pass@N)", "best single agent", "majority vote", "best-of-N, best single RM",
                                "MoR rank", "ACS"}
        assert methods["oracle (pass@N)"]["accuracy"] == 1.0  # the "right" agent is always right
        assert methods["best single agent"]["detail"] == "right" and methods["best single agent"]["accuracy"] == 1.0
        assert all(m["questions"] == n_test for m in methods.values())
        agent = methods["best single agent"]
        assert agent["llm_calls"] == n_test and agent["tokens"] == n_test * (7 + 5)  # the server's usage
        assert methods["majority vote"]["llm_calls"] == 3 * n_test
        assert methods["ACS"]["llm_calls"] > 3 * n_test and methods["ACS"]["tokens"] > methods["majority vote"]["tokens"]
    test = {q.id: q for q in load_queries(run / "test.scored.jsonl")}
    for bench in ("gsm8k", "humaneval"):  # right + wrong + coin: the majority is right exactly when coin is
        coin = [c.correct for q in test.values() if q.extra["benchmark"] == bench for c in q.candidates
                if c.agent == "coin"]
        assert by_name[bench]["majority vote"]["accuracy"] == pytest.approx(sum(coin) / len(coin))
    page = (run / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "MoR rank" in page
    stages = json.loads((run / "run.json").read_text())["stages"]
    assert list(stages) == ["split", "validation.generate", "validation.label", "validation.score",
                            "test.generate", "test.label", "test.score", "pool", "rank", "search"]
    assert stages["validation.label"]["labels"]["by_tests"] == 3 * 3
    out = capsys.readouterr().out
    assert "gsm8k (3 test questions): oracle (pass@N) 1.00" in out


@pytest.mark.slow
def test_a_rerun_keeps_every_finished_stage_and_redoes_only_what_a_change_touches(tmp_path, server, capsys):
    config = _config(tmp_path, server, rms='["math-consensus"]', search="[]")
    assert main(["pipeline", str(config)]) == 0
    asked = server.requests
    capsys.readouterr()
    assert main(["pipeline", str(config)]) == 0
    assert server.requests == asked  # nothing generated again
    err = capsys.readouterr().err
    assert err.count("done before") == 8 and "running" not in err  # all but split (always redone) and search
    config.write_text(config.read_text().replace('rms = ["math-consensus"]', 'rms = ["math-consensus", "minilm-probe"]'))
    assert main(["pipeline", str(config)]) == 0
    assert server.requests == asked  # a new RM scores again and rebuilds the pool, but asks the agents nothing
    err = capsys.readouterr().err
    assert "validation.generate: done before" in err and "validation.score: running" in err and "pool: running" in err
    asked = server.requests
    config.write_text(config.read_text().replace("validation = 3\ntest = 2", "validation = 3\ntest = 3"))
    assert main(["pipeline", str(config), "-q"]) == 0
    assert server.requests - asked == 3  # one more HumanEval test question, each of the 3 agents asked once


@pytest.mark.slow
def test_an_unreachable_agent_fails_its_candidates_and_the_run_goes_on(tmp_path, server, capsys):
    config = _config(tmp_path, server, rms='["math-consensus"]', search="[]")
    agents = tmp_path / "agents.toml"
    agents.write_text(agents.read_text().replace(
        "[aggregator]", '[[agent]]\nname = "gone"\nbase_url = "http://127.0.0.1:9/v1"\ntimeout = 2\nretries = 0\n'
        "[aggregator]"))
    config.write_text(config.read_text().replace('name = "gsm8k"', 'name = "<b>gsm8k"'))
    assert main(["pipeline", str(config), "-q"]) == 0
    run = tmp_path / "run"
    stages = json.loads((run / "run.json").read_text())["stages"]
    assert stages["validation.label"]["failed_generations"] == 4 + 3 and stages["validation.generate"]["failed"] == 7
    generated = [c for q in load_queries(run / "validation.generated.jsonl") for c in q.candidates if c.agent == "gone"]
    assert len(generated) == 7 and all(c.text == "" and c.extra["error"] for c in generated)
    assert all(c.agent != "gone" for q in load_queries(run / "validation.labelled.jsonl") for c in q.candidates)
    assert "7 failed generations" in capsys.readouterr().err
    page = (run / "report.html").read_text()
    assert "&lt;b&gt;gsm8k" in page and "<b>gsm8k" not in page
    asked = server.requests
    capsys.readouterr()
    assert main(["pipeline", str(config)]) == 0  # a rerun asks only the failed requests again (port 9 never answers)
    err = capsys.readouterr().err
    assert server.requests == asked and "validation.generate: running" in err and "test.generate: running" in err
    regenerated = load_queries(run / "validation.generated.jsonl")
    assert sum(c.agent == "gone" for q in regenerated for c in q.candidates) == 7


def _bare_questions(path, rows):
    """A JSONL file of bare questions (no `candidates`, no `prompt`): the agents are asked the question itself."""
    path.write_text("".join(json.dumps({"id": f"g{i}", "question": q.question, "domain": "math",
                                        "reference": q.reference}) + "\n" for i, q in enumerate(rows)))


def test_an_edited_question_is_asked_again_and_relabelled_never_answered_by_its_old_answers(tmp_path, server,
                                                                                            capsys):
    from morkit.data.datasets import load_spec

    gsm8k = load_spec("gsm8k_test:40")
    data = tmp_path / "questions.jsonl"
    _bare_questions(data, gsm8k[:6])
    config = _config(tmp_path, server, rms='["math-consensus"]', search="[]",
                     benchmarks='[[benchmark]]\nname = "mine"\ndata = "questions.jsonl"\nvalidation = 4\ntest = 2\n')
    assert main(["pipeline", str(config), "-q"]) == 0
    run = tmp_path / "run"
    edited = load_queries(run / "validation.questions.jsonl")[0].id
    index = int(edited[1:])
    _bare_questions(data, [gsm8k[20] if i == index else q for i, q in enumerate(gsm8k[:6])])  # same id, new text
    asked = server.requests
    capsys.readouterr()
    assert main(["pipeline", str(config)]) == 0
    err = capsys.readouterr().err
    assert server.requests - asked == 3  # the edited question, once per agent; every other answer reused
    assert "validation.label: running" in err and "pool: running" in err and "test.generate: done before" in err
    (query,) = [q for q in load_queries(run / "validation.labelled.jsonl") if q.id == edited]
    assert query.question == gsm8k[20].question and query.reference == gsm8k[20].reference
    by_agent = {c.agent: c for c in query.candidates}
    assert f"\\boxed{{{gsm8k[20].reference}}}" in by_agent["right"].text  # answers to the new text, ...
    assert by_agent["right"].correct is True and by_agent["wrong"].correct is False  # ... graded on its reference
    generated = {q.id: q for q in load_queries(run / "validation.generated.jsonl")}
    assert all(c.extra["generation"]["key"] for q in generated.values() for c in q.candidates)


@pytest.mark.slow
def test_a_changed_scoring_option_rescores_and_rebuilds_the_pool_but_asks_nothing(tmp_path, server, capsys):
    config = _config(tmp_path, server, rms='["math-consensus"]', search="[]",
                     benchmarks='[[benchmark]]\nname = "gsm8k"\ndata = "gsm8k_test:40"\nvalidation = 4\ntest = 2\n')
    assert main(["pipeline", str(config), "-q"]) == 0
    asked = server.requests
    config.write_text(config.read_text().replace("[[benchmark]]", "[scoring]\nmax_tokens = 512\n[[benchmark]]", 1))
    capsys.readouterr()
    assert main(["pipeline", str(config)]) == 0
    err = capsys.readouterr().err
    assert server.requests == asked
    for stage in ("validation.generate", "validation.label", "test.generate", "test.label"):
        assert f"{stage}: done before" in err
    for stage in ("validation.score", "test.score", "pool", "rank"):
        assert f"{stage}: running" in err


@pytest.mark.slow
def test_a_new_version_of_an_rm_rescores_and_of_code_tests_relabels(tmp_path, server, capsys, monkeypatch):
    from dataclasses import replace

    from morkit.reward_models.catalog import REWARD_MODELS, identity_of
    from morkit.reward_models.rules.code_tests import CodeTests
    from morkit.services.pipeline.keys import rm_versions

    assert rm_versions(["code-tests", "math-consensus", "given"]) == {
        "code-tests": identity_of(CodeTests()), "math-consensus": "math-consensus", "given": "given"}
    config = _config(tmp_path, server, rms='["math-consensus"]', search="[]",
                     benchmarks='[[benchmark]]\nname = "gsm8k"\ndata = "gsm8k_test:40"\nvalidation = 4\ntest = 2\n')
    assert main(["pipeline", str(config), "-q"]) == 0
    entry = REWARD_MODELS.get("code-tests")
    monkeypatch.setitem(REWARD_MODELS._entries, "code-tests", replace(entry, spec=replace(entry.spec, version="999")))
    assert rm_versions(["code-tests"]) == {"code-tests": "code-tests@999"}
    capsys.readouterr()
    assert main(["pipeline", str(config)]) == 0
    err = capsys.readouterr().err
    assert "validation.generate: done before" in err
    for stage in ("validation.label", "validation.score", "test.label", "test.score", "pool", "rank"):
        assert f"{stage}: running" in err


# A value per scoring flag (reward_models.options.FLAGS) that can change a score, away from its default; SCORE_NEUTRAL
# holds the rest.
SCORING_CHANGES = {"device": "cpu", "max_tokens": 512, "truncation": "right", "reduction": "last", "placement": "vllm",
                   "urls": ("http://127.0.0.1:1",), "dtype": "bf16", "tensor_parallel_size": 2, "device_map": "auto",
                   "max_model_len": 512, "gpu_memory_utilization": 0.5, "prefix_reuse": False, "ray": "auto"}
ENGINE_FLAGS = ("tensor_parallel_size", "max_model_len", "gpu_memory_utilization")
NEUTRAL_CHANGES = {"progress": True, "cache": "elsewhere.sqlite", "chunk": 8, "batch_size": 4, "ray_workers": 2,
                   "check_fit": False}


def test_the_scoring_key_covers_every_scoring_option_but_the_documented_neutral_ones():
    names = set(FLAGS)
    assert set(NEUTRAL_CHANGES) == set(SCORE_NEUTRAL)
    assert set(SCORING_CHANGES) == names - set(SCORE_NEUTRAL), (
        "a new scoring flag: add it to SCORING_CHANGES (it changes a score, so the score stages rerun), "
        "or to reward_models.options.SCORE_NEUTRAL, saying why it cannot")
    base = ScoringOptions.from_flags(ray="auto")  # so that ray_workers may be set
    on_engine = base.with_flags(placement="vllm")  # the offline vLLM engine's own flags apply only there
    for name, value in SCORING_CHANGES.items():
        start = ScoringOptions() if name in ("urls", "ray") else on_engine if name in ENGINE_FLAGS else base
        assert scoring_key(start.with_flags(**{name: value})) != scoring_key(start), name
    for name, value in NEUTRAL_CHANGES.items():
        assert scoring_key(base.with_flags(**{name: value})) == scoring_key(base), name


def test_an_answers_key_covers_the_question_asked_and_every_agent_setting_but_the_neutral_ones():
    from morkit.core.types import Query

    changes = {"backend": "openai", "model": "other", "params": SamplingParams(temperature=0.1),
               "system": "be brief", "base_url": "http://127.0.0.1:1/v1", "user": "Q: {question}"}
    names = {f.name for f in fields(AgentSpec)}
    assert set(changes) == names - set(ANSWER_NEUTRAL), "a new AgentSpec field: add it here or to ANSWER_NEUTRAL"
    spec, query = AgentSpec("a"), Query("q", "What is 2+2?", ())
    key = answer_key(spec, spec.params, query)
    for name, value in changes.items():
        changed = replace(spec, **{name: value})
        assert answer_key(changed, changed.params, query) != key, name
    for value in (replace(query, question="What is 3+3?"), replace(query, extra={"prompt": "templated"})):
        assert answer_key(spec, spec.params, value) != key
    assert answer_key(spec, replace(spec.params, n=2), query) != key
    assert answer_key(spec, replace(spec.params, timeout_s=5.0), query) == key  # a deadline changes no answer
    neutral = replace(spec, name="b", api_key_env=None, timeout=1.0, retries=0, concurrency=1, cost=0.5)
    assert answer_key(neutral, neutral.params, query) == key


@pytest.mark.parametrize("rms, extra, agents_line, message", [
    ('["math-consensus", "no-such-rm"]', "", "", "rms: unknown reward model 'no-such-rm'"),
    ('["math-consensus"]', "[scoring]\ndevice = 5", "", "[scoring] device must be text, got 5"),
    ('["math-consensus"]', '[scoring]\ndevice = "tpu"', "", "[scoring] device: unknown device 'tpu'"),
    ('["math-consensus"]', "n = 99999999999999999999", "",
     "n must be a whole number from 1 to 1,024, got 99999999999999999999"),
    ('["math-consensus"]', "", 'base_url = "ftp://x"',
     "agent 'right': base_url must be an http:// or https:// URL with a host"),
    ('["math-consensus"]', "", "n = 99999999999999999999",
     "agent 'right': SamplingParams.n must be a whole number from 1 to 1,024"),
    ('["math-consensus"]', '[pool]\nembedder = "/no/such/embedder"', "",
     "[pool] embedder: cannot load embedder '/no/such/embedder': not a local path and not in the local Hugging Face"),
    ('["math-consensus"]', '[pool]\nembedder = "no-such-org/no-such-embedder"', "",
     "[pool] embedder: cannot load embedder 'no-such-org/no-such-embedder': not a local path"),
])
def test_a_config_that_would_fail_fails_before_anything_is_asked_or_written(tmp_path, server, capsys, rms, extra,
                                                                            agents_line, message):
    config = _config(tmp_path, server, rms=rms, search="[]", extra=extra)
    agents = tmp_path / "agents.toml"
    agents.write_text(agents.read_text().replace('system = "right"\n', f'system = "right"\n{agents_line}\n'))
    asked = server.requests
    assert main(["pipeline", str(config), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    named = agents if agents_line else config
    assert err.startswith(f"morkit: error: {named}: ") and message in err and "\n" not in err
    assert server.requests == asked and not (tmp_path / "run").exists()


@pytest.mark.parametrize("files, message", [
    ({}, "it holds no modules.json or config.json"),
    ({"config.json": "{}"}, "it holds no weights file"),
    ({"modules.json": '{"path": ""}', "model.safetensors": ""}, "its modules.json is not a list of modules"),
])
def test_an_embedder_folder_without_a_model_fails_before_anything_is_asked(tmp_path, server, capsys, files, message):
    model = tmp_path / "my-embedder"
    model.mkdir()
    for name, text in files.items():
        (model / name).write_text(text)
    config = _config(tmp_path, server, rms='["math-consensus"]', search="[]",
                     extra=f'[pool]\nembedder = "{model}"')
    asked = server.requests
    assert main(["pipeline", str(config), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"morkit: error: {config}: [pool] embedder: cannot load embedder '{model}' from this path: ")
    assert message in err and "\n" not in err
    assert server.requests == asked and not (tmp_path / "run").exists()


def test_the_pool_key_holds_a_local_embedders_files_and_a_hub_embedders_name(tmp_path):
    from morkit.services.pipeline.keys import embedder_version

    assert embedder_version(None) is None and embedder_version("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"old weights")
    first = embedder_version(str(model))
    assert first.startswith(f"{model}@") and embedder_version(str(model)) == first
    (model / "model.safetensors").write_bytes(b"new weights, changed in place")
    assert embedder_version(str(model)) != first


@pytest.mark.slow
def test_a_local_embedder_changed_in_place_rebuilds_the_pool_and_asks_nothing(tmp_path, server, capsys):
    from morkit.runtime import assets

    model = tmp_path / "embedder"
    model.mkdir()
    for file in assets.minilm_path().rglob("*"):  # the packaged MiniLM as a local folder, its big files linked
        if file.is_file():
            (model / file.relative_to(assets.minilm_path())).parent.mkdir(parents=True, exist_ok=True)
            (model / file.relative_to(assets.minilm_path())).symlink_to(file)
    config = _config(tmp_path, server, rms='["math-consensus"]', search="[]", extra=f'[pool]\nembedder = "{model}"')
    assert main(["pipeline", str(config), "-q"]) == 0
    asked = server.requests
    capsys.readouterr()
    assert main(["pipeline", str(config)]) == 0
    assert "pool: done before" in capsys.readouterr().err
    (model / "README.md").unlink()
    (model / "README.md").write_text("retrained in place\n")  # a file of the model changed where it lies
    assert main(["pipeline", str(config)]) == 0
    err = capsys.readouterr().err
    assert "validation.score: done before" in err and "pool: running" in err and "rank: running" in err
    assert server.requests == asked


@pytest.mark.parametrize("text, message", [
    ('[[benchmark]]\nname = "x"\n', "give `data`, or both `validation_data` and `test_data`"),
    ('colour = 1\n[[benchmark]]\nname = "x"\ndata = "gsm8k_test"\n', "unknown keys ['colour']"),
    ('search = ["nope"]\n[[benchmark]]\nname = "x"\ndata = "gsm8k_test"\n', "unknown method 'nope'"),
    ('[[benchmark]]\nname = "x"\ndata = "gsm8k_test"\nvalidation = 0\n', "validation must be a whole number >= 1"),
    ('[[benchmark]]\nname = "x"\ndata = "gsm8k_test:3"\nvalidation = 2\ntest = 2\n', "but gsm8k_test:3 has 3"),
    ('[scoring]\nplacement = "tpu"\n[[benchmark]]\nname = "x"\ndata = "gsm8k_test"\n', "placement"),
    ("workdir = [\n", "invalid TOML"),
])
def test_a_bad_config_is_one_line_naming_the_file(tmp_path, capsys, text, message):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    assert main(["pipeline", str(config), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"morkit: error: {config}") and message in err and "\n" not in err


SHARED_BENCHMARKS = ("gsm8k_test", "math500", "aime24", "amc23", "humaneval", "mbpp", "ifeval")


@pytest.mark.slow
def test_local_agents_run_the_whole_flow_on_every_shared_benchmark(tmp_path):
    """The real flow offline: SmolLM2 agents answer, the graders (sandbox, IFEval checkers) label, SmolLM2's RM
    scores, MiniLM embeds, MoR ranks and ACS searches. At 135M parameters the accuracy means nothing."""
    (tmp_path / "agents.toml").write_text(
        '[defaults]\nbackend = "local"\nmodel = "smollm2"\nmax_tokens = 24\n'
        '[[agent]]\nname = "cool"\ntemperature = 0.2\n[[agent]]\nname = "warm"\ntemperature = 0.9\n'
        "[aggregator]\nmax_tokens = 24\n")
    config = tmp_path / "pipeline.toml"
    config.write_text('workdir = "run"\nagents = "agents.toml"\nrms = ["smollm2-orm", "math-consensus"]\n'
                      + "".join(f'[[benchmark]]\nname = "{b}"\ndata = "{b}"\nvalidation = 1\ntest = 1\n'
                                for b in SHARED_BENCHMARKS))
    assert main(["pipeline", str(config), "-q"]) == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert [b["benchmark"] for b in report["benchmarks"]] == list(SHARED_BENCHMARKS)
    for bench in report["benchmarks"]:
        methods = {m["method"]: m for m in bench["methods"]}
        assert {"MoR rank", "ACS", "majority vote"} <= set(methods) and methods["ACS"]["questions"] == 1
        assert methods["majority vote"]["tokens"] > 0 and methods["ACS"]["llm_calls"] > 2
    stages = json.loads((tmp_path / "run" / "run.json").read_text())["stages"]
    labels = stages["validation.label"]["labels"]
    assert labels["by_tests"] == 2 * 2 and labels["by_reference"] == 5 * 2 and labels["no_source"] == 0
