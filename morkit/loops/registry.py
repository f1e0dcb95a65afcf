"""The test-time-scaling loops, in LOOPS: name -> factory(LoopSetup) -> Loop, and `critic=` metadata naming the
factory of the loop's LLM critic (`loop_critic`). A factory gets the agents (their LLMs built once), the verifier
and LoopOptions; `LOOPS.register("mine", "mypkg.loops:make_mine", "what it does")` adds one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from morkit.core import checks
from morkit.core.registry import Entry, Registry
from morkit.loops.base import Budget, Loop
from morkit.loops.settings import configure
from morkit.loops.streamma.graph import PROTOCOLS


@dataclass(frozen=True)
class LoopOptions:
    """The knobs of `morkit loop`; each loop reads its own (TMAS: iterations to epsilon; StreamMA: chain to
    step_marker; ATLAS: max_explores). Every loop gets the budget, the seed and the solvers' token limit.
    A knob left None takes the loop config's default, which follows the loop's paper where it says
    (TMASConfig, StreamMAConfig, ATLASConfig), so the command line and Python get the same algorithm.

    Args:
        budget: Caps on LLM calls, tokens and seconds per problem.
        seed: Base seed of the loop's sampling (0 or more); None keeps the config's and the agents'.
        gen_tokens: New tokens per solver generation; None is the agent's own max_tokens.
        iterations: TMAS rounds.
        solutions: TMAS candidate solutions per round.
        verifications: TMAS verification passes per solution (0: the no-verification ablation).
        epsilon: TMAS's probability that a solution explores instead of exploiting, in [0, 1].
        chain: StreamMA agents in the chain.
        protocol: StreamMA's protocol: `single`, `serial` or `stream`.
        step_marker: Where StreamMA cuts the solver's streamed text into steps.
        max_explores: ATLAS's cap on explores per problem.
        settings: `(field, value)` pairs laid over the loop's config dataclass (`--set field=value`), last.

    Raises:
        InputError: A knob is out of range, or `protocol` is not a known one.
    """

    budget: Budget = Budget()
    seed: int | None = None
    """Base seed of the loop's sampling; None keeps the config's (TMAS: 0; StreamMA: unseeded) and the agents'."""
    gen_tokens: int | None = None
    """New tokens per solver generation; None: the agent's own max_tokens (agents.toml)."""
    iterations: int | None = None
    solutions: int | None = None
    verifications: int | None = None
    epsilon: float | None = None
    chain: int | None = None
    protocol: str | None = None
    step_marker: str | None = None
    max_explores: int | None = None
    settings: tuple[tuple[str, str], ...] = ()
    """(field, value) pairs laid over the loop's config dataclass (`--set field=value`), after the knobs above."""

    def __post_init__(self) -> None:
        checks.optional(checks.non_negative_int, self.seed, "seed")
        for name in ("gen_tokens", "iterations", "solutions", "chain", "max_explores"):
            checks.optional(checks.positive_int, getattr(self, name), name)
        # verifications may be 0: TMAS's no-verification ablation
        checks.optional(checks.non_negative_int, self.verifications, "verifications")
        checks.optional(checks.probability, self.epsilon, "epsilon")
        if self.protocol is not None:
            checks.one_of(self.protocol, PROTOCOLS, "protocol")


def _given(**knobs: Any) -> dict[str, Any]:
    """The knobs that were set (None means: keep the config's default)."""
    return {name: value for name, value in knobs.items() if value is not None}


@dataclass(frozen=True)
class LoopSetup:
    """What a loop factory may use for one problem."""

    agents: Any  # morkit.llm.agents.AgentsConfig: agents[0] solves first; the aggregator orchestrates
    llms: Any  # morkit.llm.agents.LLMPool: one LLM per (backend, model, server)
    verifier: Any  # morkit.verify.base.Verifier
    options: LoopOptions = LoopOptions()


def aggregator_critic(agents: Any, llms: Any, options: LoopOptions) -> Any:
    """morkit's generic LLM critic (its own prompt, 'Score: N/10') on the `[aggregator]` model: the critic of a
    loop whose LOOPS entry names none (StreamMA, ATLAS)."""
    from morkit.verify.critic import LLMVerifier

    return LLMVerifier(llms.llm(agents.aggregator))


def loop_critic(loop: str, agents: Any, llms: Any, options: LoopOptions = LoopOptions()) -> Any:
    """The LLM critic a loop verifies with under the `llm` and `both` verifiers: the factory its LOOPS entry names
    in its `critic` metadata ("module:function" or the function), else `aggregator_critic`.

    Args:
        loop: A name in LOOPS.
        agents: The AgentsConfig.
        llms: The LLMPool that builds each agent's LLM once.
        options: The loop's options (a critic factory may read the loop's settings).

    Returns:
        The critic, a Verifier (an LLMVerifier for the built-in loops).
    """
    target = LOOPS.get(loop).meta.get("critic", aggregator_critic)
    return Entry("critic", target).load()(agents, llms, options)


def _tmas_config(o: LoopOptions, solver: Any) -> Any:
    from morkit.loops.tmas.loop import TMASConfig

    return configure(TMASConfig, o.settings, max_tokens=o.gen_tokens or solver.params.max_tokens,
                     **_given(seed=o.seed, iterations=o.iterations, solutions=o.solutions,
                              verifications=o.verifications, epsilon=o.epsilon))


def tmas(setup: LoopSetup) -> Loop:
    from morkit.loops.tmas.loop import TMAS

    solver = setup.agents.agents[0]
    return TMAS(setup.llms.llm(solver), setup.verifier, _tmas_config(setup.options, solver), setup.options.budget)


def tmas_critic(agents: Any, llms: Any, options: LoopOptions) -> Any:
    """TMAS's critic: the paper's verification agent on the solver's model, or under
    `verification_agent=critic` morkit's generic critic on the `[aggregator]` (`aggregator_critic`)."""
    from morkit.loops.tmas.loop import verification_agent

    config = _tmas_config(options, agents.agents[0])
    if config.verification_agent == "critic":
        return aggregator_critic(agents, llms, options)
    return verification_agent(llms.llm(agents.agents[0]), config.max_tokens)


def streamma(setup: LoopSetup) -> Loop:
    from morkit.loops.streamma.loop import StreamMA, StreamMAConfig

    o, agents = setup.options, setup.agents.agents
    config = configure(StreamMAConfig, o.settings, max_tokens=o.gen_tokens or agents[0].params.max_tokens,
                       **_given(seed=o.seed, agents=o.chain, protocol=o.protocol, step_marker=o.step_marker))
    chain = [setup.llms.llm(agents[i % len(agents)]) for i in range(config.agents)]
    return StreamMA(chain, setup.verifier, config, o.budget)


def atlas(setup: LoopSetup) -> Loop:
    from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Solver

    o = setup.options
    solvers = {a.name: Solver(setup.llms.llm(a),  # the agent's sampling (presence penalty included), one sample
                              replace(a.params, n=1, max_tokens=o.gen_tokens or a.params.max_tokens,
                                      seed=a.params.seed if o.seed is None else o.seed),
                              **({"system": a.system} if a.system else {}), cost=a.cost, user=a.user)
               for a in setup.agents.agents}
    return ATLAS(setup.llms.llm(setup.agents.aggregator), solvers, setup.verifier,
                 configure(ATLASConfig, o.settings, **_given(max_explores=o.max_explores)), o.budget)


_HERE = "morkit.loops.registry"
LOOPS = Registry("loop", [
    Entry("tmas", f"{_HERE}:tmas", "solve, verify, remember: rounds of solutions with experience and guideline banks",
          {"critic": f"{_HERE}:tmas_critic"}),
    Entry("streamma", f"{_HERE}:streamma", "a pipelined chain of agents reviewing each other's steps as they stream"),
    Entry("atlas", f"{_HERE}:atlas", "an orchestrator that explores with fresh solvers, then synthesises"),
])
"""Test-time-scaling loops by name (tmas, streamma, atlas); `run_loop(name, ...)` and `morkit loop NAME` run
them."""
