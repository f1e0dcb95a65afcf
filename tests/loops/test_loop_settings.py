"""`--set KEY=VALUE`: any field of a loop's config dataclass, parsed by the field's type (morkit.loops.settings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from morkit.core.errors import InputError
from morkit.loops.registry import LoopOptions, LoopSetup, tmas
from morkit.loops.settings import LoopFlag, configure, parse_setting, unescape
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
    with pytest.raises(InputError, match="this loop's config class is ATLASConfig, not TMASConfig"):
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

    with pytest.raises(InputError, match="loop streamma: this loop's config class is StreamMAConfig, not TMASConfig"):
        morkit.run_loop("streamma", [], config=TMASConfig())
    with pytest.raises(InputError, match="loop streamma: StreamMAConfig has no setting 'iterations'"):
        morkit.run_loop("streamma", [], options=LoopOptions(settings=(("iterations", "3"),)))


def test_a_given_config_keeps_the_agents_token_limit_unless_it_sets_one():
    from morkit.loops.registry import loop_critic, streamma
    from morkit.loops.streamma.config import StreamMAConfig

    # max_tokens None is "the solver agent's" (77), whether or not a config is given; --gen-tokens overrides it
    assert tmas(setup(LoopOptions(), config=TMASConfig(iterations=3))).config.max_tokens == 77
    assert streamma(setup(LoopOptions(), config=StreamMAConfig(agents=2))).config.max_tokens == 77
    assert tmas(setup(LoopOptions(gen_tokens=40), config=TMASConfig(iterations=3))).config.max_tokens == 40
    assert streamma(setup(LoopOptions(gen_tokens=40), config=StreamMAConfig(agents=2))).config.max_tokens == 40
    assert tmas(setup(LoopOptions(), config=TMASConfig(max_tokens=50))).config.max_tokens == 50
    agents = setup(LoopOptions()).agents
    critic = loop_critic("tmas", agents, Pool(), LoopOptions(), TMASConfig(iterations=3))
    assert critic.params.max_tokens == 77  # the verification agent writes as many tokens as a solution


def test_a_loop_built_in_python_without_a_token_limit_takes_512():
    from morkit.loops.streamma.config import StreamMAConfig
    from morkit.loops.streamma.loop import StreamMA
    from morkit.loops.tmas.loop import TMAS

    assert TMASConfig().max_tokens is None and StreamMAConfig().max_tokens is None
    assert TMAS(object(), object(), TMASConfig()).config.max_tokens == 512
    assert TMAS(object(), object(), TMASConfig(max_tokens=9)).config.max_tokens == 9
    assert StreamMA(object(), config=StreamMAConfig(agents=2)).config.max_tokens == 512
    with pytest.raises(InputError, match="max_tokens"):
        TMASConfig(max_tokens=0)
    with pytest.raises(InputError, match="max_tokens"):
        StreamMAConfig(max_tokens=0)


@dataclass(frozen=True)
class Flagless:
    """A loop config with no FLAGS and a field without a default."""

    rounds: int


@dataclass(frozen=True)
class Required:
    """A loop config whose flag sets a field without a default."""

    FLAGS: ClassVar[tuple[LoopFlag, ...]] = (LoopFlag("--rounds", "rounds", "rounds to run"),)
    rounds: int


def test_a_loop_config_without_flags_or_with_a_required_field_keeps_the_cli_whole(capsys):
    from morkit.cli import main
    from morkit.cli.main import build_parser
    from morkit.loops.registry import LOOPS

    LOOPS.register("flagless", lambda setup: None, "a config without flags", config=Flagless)
    LOOPS.register("required", lambda setup: None, "a flag on a required field", config=Required)
    try:
        build_parser()
        with pytest.raises(SystemExit) as exc:
            main(["--help"])
        assert exc.value.code == 0
        for loop in ("flagless", "required"):
            with pytest.raises(SystemExit) as exc:
                main(["loop", loop, "--help"])
            assert exc.value.code == 0
        out = capsys.readouterr().out
        assert "any field of Flagless" in out and "--rounds N" in out and "(default required)" in out
        args = build_parser().parse_args(["loop", "flagless", "in.jsonl", "-o", "o", "--set", "rounds=2"])
        assert (args.loop, args.set) == ("flagless", [("rounds", "2")])
    finally:
        LOOPS.unregister("flagless")
        LOOPS.unregister("required")


def test_a_loop_flag_before_the_loop_name_says_where_it_goes(capsys):
    from morkit.cli import main

    for argv, message in ((["--iterations", "3", "tmas"], "morkit loop tmas ... --iterations 3"),
                          (["--set", "iterations=3", "tmas"], "morkit loop NAME ... --set iterations=3")):
        with pytest.raises(SystemExit) as exc:
            main(["loop", *argv, "in.jsonl", "-o", "o"])
        assert exc.value.code == 2
        assert f"a loop's flags come after its name: {message}" in capsys.readouterr().err
