"""`--set KEY=VALUE`: any field of a loop's config dataclass, parsed by the field's type (morkit.loops.settings)."""

from __future__ import annotations

import pytest

from morkit.core.errors import InputError
from morkit.loops.registry import LoopOptions, LoopSetup, tmas
from morkit.loops.settings import configure, parse_setting, unescape
from morkit.loops.tmas.loop import TMASConfig


def test_values_are_parsed_by_the_field_type_and_laid_over_the_base():
    config = configure(TMASConfig, [parse_setting("stop-score=0.5"), ("stop_on_agreement", "no"), ("epsilon", "0.3")],
                       iterations=5, epsilon=0.1)
    assert (config.stop_score, config.stop_on_agreement, config.epsilon, config.iterations) == (0.5, False, 0.3, 5)
    assert configure(TMASConfig, [("stop_score", "none")]).stop_score is None


@pytest.mark.parametrize("setting, message", [
    (("bogus", "1"), "TMASConfig has no setting 'bogus'; settings: .*iterations"),
    (("iterations", "x"), "setting iterations: 'x' is not an integer"),
    (("stop_on_agreement", "maybe"), "not a boolean"),
    (("iterations", "0"), "iterations"),
    (("excerpt_chars", "x"), "excerpt_chars"),
])
def test_bad_settings_name_the_key(setting, message):
    with pytest.raises(InputError, match=message):
        configure(TMASConfig, [setting])


def test_parse_setting_needs_an_equals_sign():
    with pytest.raises(InputError, match="expected KEY=VALUE"):
        parse_setting("iterations")


class Pool:
    def llm(self, agent):
        return object()


def setup(options, agents=None, config=None):
    from morkit.llm.agents import AgentsConfig, AgentSpec
    from morkit.llm.base import SamplingParams

    agents = agents or AgentsConfig((AgentSpec("solver", params=SamplingParams(max_tokens=77)),), AgentSpec("orch"))
    return LoopSetup(agents, Pool(), None, options, config)


def test_loop_factory_applies_the_settings():
    loop = tmas(setup(LoopOptions(settings=(("iterations", "3"), ("iterations", "7")))))
    assert loop.config.iterations == 7
    loop = tmas(setup(LoopOptions(settings=(("iterations", "7"),)), config=TMASConfig(iterations=3)))
    assert loop.config.iterations == 7  # settings are laid over a given config


def test_a_given_config_is_used_as_written_under_the_shared_options():
    from morkit.loops.registry import atlas, streamma
    from morkit.loops.streamma.config import StreamMAConfig

    given = tmas(setup(LoopOptions(), config=TMASConfig(iterations=2, max_tokens=50))).config
    assert (given.iterations, given.max_tokens, given.solutions) == (2, 50, 8)  # not the agent's 77
    given = tmas(setup(LoopOptions(seed=3, gen_tokens=40), config=TMASConfig(iterations=2, seed=9))).config
    assert (given.iterations, given.seed, given.max_tokens) == (2, 3, 40)
    assert len(streamma(setup(LoopOptions(), config=StreamMAConfig(agents=2))).llms) == 2
    with pytest.raises(InputError, match="this loop's config is a ATLASConfig, not a TMASConfig"):
        atlas(setup(LoopOptions(), config=TMASConfig()))


def test_unset_knobs_keep_each_loops_paper_defaults():
    from morkit.loops.registry import atlas, streamma
    from morkit.loops.streamma.config import StreamMAConfig

    config = tmas(setup(LoopOptions())).config
    # N = 8 solutions and M = 8 verifications, as the paper; the solver's tokens come from agents.toml
    assert (config.solutions, config.verifications, config.epsilon) == (8, 8, 0.2) and config.max_tokens == 77
    assert config.iterations == 20 and config.seed == 0  # the paper's runs go up to 20 rounds
    chain = streamma(setup(LoopOptions()))
    assert chain.config.agents == StreamMAConfig().agents == len(chain.llms)
    assert chain.config.step_marker == StreamMAConfig().step_marker and chain.config.max_tokens == 77
    assert len(streamma(setup(LoopOptions(settings=(("agents", "6"),)))).llms) == 6  # --set agents sizes the chain
    solver = atlas(setup(LoopOptions())).solvers["solver"]
    assert solver.params.max_tokens == 77 and solver.params.seed is None  # the agent's own seed
    assert chain.config.seed is None and streamma(setup(LoopOptions(seed=4))).config.seed == 4
    assert atlas(setup(LoopOptions(seed=4))).solvers["solver"].params.seed == 4
    assert atlas(setup(LoopOptions(gen_tokens=33))).solvers["solver"].params.max_tokens == 33
    given = tmas(setup(LoopOptions(settings=(("solutions", "2"), ("verifications", "0")), gen_tokens=40))).config
    assert (given.solutions, given.verifications, given.max_tokens) == (2, 0, 40)


def test_step_marker_flag_reads_escapes():
    import argparse

    from morkit.cli.loop import flag_value
    from morkit.loops.streamma.config import StreamMAConfig

    def step_marker(text):  # --step-marker passes its text on as --set step_marker=TEXT
        return configure(StreamMAConfig, [("step_marker", flag_value(StreamMAConfig, "step_marker")(text))]).step_marker

    assert step_marker("\\n") == "\n" and step_marker("###") == "###" and step_marker("\u00e9\\n") == "\u00e9\n"
    assert unescape("\u4e2d\\t") == "\u4e2d\t" and unescape("plain") == "plain"
    with pytest.raises(argparse.ArgumentTypeError):
        step_marker("")
    with pytest.raises(argparse.ArgumentTypeError, match="malformed backslash escape"):
        step_marker("\\N")

    with pytest.raises(InputError, match="setting step_marker: .*malformed backslash escape"):
        configure(StreamMAConfig, [("step_marker", "C:\\Users")])


def test_atlas_solvers_carry_their_agents_cost():
    from morkit.llm.agents import AgentsConfig, AgentSpec
    from morkit.loops.registry import atlas

    agents = AgentsConfig((AgentSpec("cheap", cost=0.1), AgentSpec("dear", cost=3.0)), AgentSpec("orchestrator"))
    loop = atlas(setup(LoopOptions(), agents))
    assert {name: solver.cost for name, solver in loop.solvers.items()} == {"cheap": 0.1, "dear": 3.0}


def test_each_loop_takes_its_own_flags(capsys):
    from morkit.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["loop", "streamma", "in.jsonl", "-o", "o", "--iterations", "3"])
    assert exc.value.code == 2
    assert ("argument --iterations: a flag of tmas, not of streamma; streamma takes --chain, --protocol, "
            "--step-marker, --set KEY=VALUE") in capsys.readouterr().err
    from morkit.cli.main import build_parser

    args = build_parser().parse_args(["loop", "streamma", "in.jsonl", "-o", "o", "--chain", "3", "--step-marker",
                                      "\\n", "--set", "agents=5"])
    assert main(["loop", "atlas", "missing.jsonl", "-o", "o", "--set", "iterations=3"]) == 2  # before reading input
    assert "loop atlas: ATLASConfig has no setting 'iterations'" in capsys.readouterr().err
    assert (args.loop, args.loop_flag_agents, args.loop_flag_step_marker, args.set) == \
        ("streamma", "3", "\\n", [("agents", "5")])


def test_run_loop_checks_the_config_before_any_work():
    import morkit

    with pytest.raises(InputError, match="loop streamma: this loop's config is a StreamMAConfig, not a TMASConfig"):
        morkit.run_loop("streamma", [], config=TMASConfig())
    with pytest.raises(InputError, match="loop streamma: StreamMAConfig has no setting 'iterations'"):
        morkit.run_loop("streamma", [], options=LoopOptions(settings=(("iterations", "3"),)))
