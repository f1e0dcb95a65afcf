"""The test-time-scaling loops, in LOOPS: name -> factory(LoopSetup) -> Loop; `config` metadata names the loop's
config class (its `--set` keys and `FLAGS`), `critic` the factory of its LLM critic (`loop_critic`).
`LOOPS.register("mine", "mypkg.loops:make_mine", "what it does", config="mypkg.loops:MineConfig")` adds one."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.registry import Entry, Registry
from morkit.loops.base import Budget, Loop
from morkit.loops.settings import configure


@dataclass(frozen=True)
class LoopOptions:
    """What every loop of `morkit loop` shares: the budget, the seed, the solvers' token limit and `--set`
    settings. A loop's own knobs are fields of its config (TMASConfig, StreamMAConfig, ATLASConfig), given as that
    object (`run_loop(..., config=TMASConfig(iterations=3))`) or by name in `settings`; one left unset keeps the
    config's default, which follows the loop's paper where it says.

    Args:
        budget: Caps on LLM calls, tokens and seconds per problem.
        seed: Base seed of the loop's sampling (0 or more); None keeps the config's and the agents'.
        gen_tokens: New tokens per solver generation, over the config's `max_tokens`; None keeps the config's
            (whose None is the solver agent's max_tokens).
        settings: `(field, value)` pairs laid over the loop's config (`--set field=value` and the loop's flags),
            parsed by the field's type, last.

    Raises:
        InputError: The seed or the token limit is out of range.
    """

    budget: Budget = Budget()
    seed: int | None = None
    """Base seed of the loop's sampling; None keeps the config's (TMAS: 0; StreamMA: unseeded) and the agents'."""
    gen_tokens: int | None = None
    """New tokens per solver generation; None: the config's `max_tokens`, whose None is the solver agent's."""
    settings: tuple[tuple[str, str], ...] = ()
    """(field, value) pairs laid over the loop's config (`--set field=value`, the loop's flags), last."""

    def __post_init__(self) -> None:
        checks.optional(checks.non_negative_int, self.seed, "seed")
        checks.optional(checks.positive_int, self.gen_tokens, "gen_tokens")
        object.__setattr__(self, "settings", tuple((str(k), str(v)) for k, v in self.settings))


@dataclass(frozen=True)
class LoopSetup:
    """What a loop factory may use for one problem."""

    agents: Any  # morkit.llm.agents.AgentsConfig: agents[0] solves first; the aggregator orchestrates
    llms: Any  # morkit.llm.agents.LLMPool: one LLM per (backend, model, server)
    verifier: Any  # morkit.verify.base.Verifier
    options: LoopOptions = LoopOptions()
    config: Any = None
    """The loop's own config object (its LOOPS entry's `config` class); None: the class's defaults."""


def config_class(loop: str) -> type | None:
    """The config class a loop's LOOPS entry names (`config` metadata), or None for a loop that declares none."""
    target = LOOPS.get(loop).meta.get("config")
    return None if target is None else Entry("config", target).load()


def loop_config(cls: type, options: LoopOptions = LoopOptions(), config: Any = None, **shared: Any) -> Any:
    """A loop's config: `config` as written (None: `cls`'s defaults), then the `shared` options the loop maps to
    its fields where they are set (not None), then `options.settings`; built and checked once.

    Args:
        cls: The loop's config class.
        options: The shared options; their settings are laid over last.
        config: The caller's config object, a `cls`, or None.
        **shared: Shared options by the field they set (e.g. `seed=options.seed`), None when unset.

    Returns:
        The config, a `cls`.

    Raises:
        InputError: `config` is not a `cls`, or a setting is unknown or its value bad.
    """
    if config is None:
        values: dict[str, Any] = {}
    elif isinstance(config, cls):
        values = {f.name: getattr(config, f.name) for f in fields(cls) if f.init}
    else:
        raise InputError(f"this loop's config class is {cls.__name__}, not {type(config).__name__}")
    values.update({name: value for name, value in shared.items() if value is not None})
    return configure(cls, options.settings, **values)


def check_loop(loop: str, options: LoopOptions = LoopOptions(), config: Any = None) -> None:
    """Fails before any work when the loop is unknown, `config` is not its config class or a setting is bad.

    Raises:
        InputError: As above, naming the loop, the class or the setting.
    """
    cls = config_class(loop)
    if cls is None:
        return
    try:
        loop_config(cls, options, config)
    except InputError as err:
        raise InputError(f"loop {loop}: {err}") from None


def aggregator_critic(agents: Any, llms: Any, options: LoopOptions, config: Any = None) -> Any:
    """morkit's generic LLM critic (its own prompt, 'Score: N/10') on the `[aggregator]` model: the critic of a
    loop whose LOOPS entry names none (StreamMA, ATLAS)."""
    from morkit.verify.critic import LLMVerifier

    return LLMVerifier(llms.llm(agents.aggregator))


def loop_critic(loop: str, agents: Any, llms: Any, options: LoopOptions = LoopOptions(), config: Any = None) -> Any:
    """The LLM critic a loop verifies with under the `llm` and `both` verifiers: the factory its LOOPS entry names
    in its `critic` metadata ("module:function" or the function), else `aggregator_critic`.

    Args:
        loop: A name in LOOPS.
        agents: The AgentsConfig.
        llms: The LLMPool that builds each agent's LLM once.
        options: The shared options (a critic factory may read the loop's settings).
        config: The loop's own config object, or None for its defaults.

    Returns:
        The critic, a Verifier (an LLMVerifier for the built-in loops).
    """
    target = LOOPS.get(loop).meta.get("critic", aggregator_critic)
    return Entry("critic", target).load()(agents, llms, options, config)


def _solver_config(cls: type, options: LoopOptions, config: Any, solver: Any) -> Any:
    """TMAS's or StreamMA's config: `config` (or the defaults), the shared seed and token limit, the settings;
    a `max_tokens` still None is the solver agent's max_tokens."""
    config = loop_config(cls, options, config, seed=options.seed, max_tokens=options.gen_tokens)
    return config if config.max_tokens is not None else replace(config, max_tokens=solver.params.max_tokens)


def tmas(setup: LoopSetup) -> Loop:
    from morkit.loops.tmas.loop import TMAS, TMASConfig

    solver = setup.agents.agents[0]
    config = _solver_config(TMASConfig, setup.options, setup.config, solver)
    return TMAS(setup.llms.llm(solver), setup.verifier, config, setup.options.budget)


def tmas_critic(agents: Any, llms: Any, options: LoopOptions, config: Any = None) -> Any:
    """TMAS's critic: the paper's verification agent on the solver's model, or under
    `verification_agent=critic` morkit's generic critic on the `[aggregator]` (`aggregator_critic`)."""
    from morkit.loops.tmas.loop import TMASConfig, verification_agent

    config = _solver_config(TMASConfig, options, config, agents.agents[0])
    if config.verification_agent == "critic":
        return aggregator_critic(agents, llms, options)
    return verification_agent(llms.llm(agents.agents[0]), config.max_tokens)


def streamma(setup: LoopSetup) -> Loop:
    from morkit.loops.streamma.loop import StreamMA, StreamMAConfig

    agents = setup.agents.agents
    config = _solver_config(StreamMAConfig, setup.options, setup.config, agents[0])
    chain = [setup.llms.llm(agents[i % len(agents)]) for i in range(config.agents)]
    return StreamMA(chain, setup.verifier, config, setup.options.budget)


def atlas(setup: LoopSetup) -> Loop:
    from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Solver

    o = setup.options
    solvers = {a.name: Solver(setup.llms.llm(a),  # the agent's sampling (presence penalty included), one sample
                              replace(a.params, n=1, max_tokens=o.gen_tokens or a.params.max_tokens,
                                      seed=a.params.seed if o.seed is None else o.seed),
                              **({"system": a.system} if a.system else {}), cost=a.cost, user=a.user)
               for a in setup.agents.agents}
    return ATLAS(setup.llms.llm(setup.agents.aggregator), solvers, setup.verifier,
                 loop_config(ATLASConfig, o, setup.config), o.budget)


_HERE = "morkit.loops.registry"
LOOPS = Registry("loop", [
    Entry("tmas", f"{_HERE}:tmas", "solve, verify, remember: rounds of solutions with experience and guideline banks",
          {"config": "morkit.loops.tmas.config:TMASConfig", "critic": f"{_HERE}:tmas_critic"}),
    Entry("streamma", f"{_HERE}:streamma", "a pipelined chain of agents reviewing each other's steps as they stream",
          {"config": "morkit.loops.streamma.config:StreamMAConfig"}),
    Entry("atlas", f"{_HERE}:atlas", "an orchestrator that explores with fresh solvers, then synthesises",
          {"config": "morkit.loops.atlas.protocol:ATLASConfig"}),
])
"""Test-time-scaling loops by name (tmas, streamma, atlas); `run_loop(name, ...)` and `morkit loop NAME` run
them."""
