"""`--set KEY=VALUE`: any field of a loop's config dataclass, parsed by the field's type (morkit.loops.settings)."""

from __future__ import annotations

import pytest

from morkit.core.errors import InputError
from morkit.loops.registry import LoopOptions, LoopSetup, tmas
from morkit.loops.settings import configure, parse_setting
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
])
def test_bad_settings_name_the_key(setting, message):
    with pytest.raises(InputError, match=message):
        configure(TMASConfig, [setting])


def test_parse_setting_needs_an_equals_sign():
    with pytest.raises(InputError, match="expected KEY=VALUE"):
        parse_setting("iterations")


def test_loop_factory_applies_the_settings():
    class Pool:
        def llm(self, agent):
            return object()

    class Agents:
        agents = [object()]

    loop = tmas(LoopSetup(Agents(), Pool(), None, LoopOptions(iterations=3, settings=(("iterations", "7"),))))
    assert loop.config.iterations == 7


def test_atlas_solvers_carry_their_agents_cost():
    from morkit.llm.agents import AgentsConfig, AgentSpec
    from morkit.loops.registry import atlas

    class Pool:
        def llm(self, agent):
            return object()

    agents = AgentsConfig((AgentSpec("cheap", cost=0.1), AgentSpec("dear", cost=3.0)), AgentSpec("orchestrator"))
    loop = atlas(LoopSetup(agents, Pool(), None, LoopOptions()))
    assert {name: solver.cost for name, solver in loop.solvers.items()} == {"cheap": 0.1, "dear": 3.0}
