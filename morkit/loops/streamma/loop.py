"""StreamMA: agents in a chain (or tree/DAG) that solve and correct a problem step by step, pipelined.

Agent 0 streams its solution; each time a step ends (the end-of-step marker) that step goes at once to
every downstream agent, which reviews it (one LLM call per step: the problem, the steps it has accepted,
the new step -> the corrected step, or the same step) and forwards its own version as soon as it is
ready, so adjacent agents work at the same time on different steps. The final agent's steps are the
answer, optionally scored by a Verifier. Protocols, for comparison on the same agents and inputs:
`single` (agent 0 alone), `serial` (each agent finishes its whole solution before passing it on) and
`stream` (pipelined).

One thread per agent; edges are bounded queues, so a slow reviewer makes its upstream wait
(back-pressure), and an `EndOfStream` sentinel closes every edge, also after a failure: a failed agent
records its error, ends its downstream edges and drains its inboxes, so the others finish with what they
have and the answer is the best available (see `best_available`). Latencies go to `LoopResult.state`,
every step's emission, receipt and review to the trace with its time.

A backend that serialises its calls (LocalLLM holds one lock per model for a whole `stream`) leaves
nothing to overlap: pipelining pays off with one that serves concurrent requests (a vLLM server) or
with one model per agent.

Modules: `graph` (settings, topology, messages, step cutting, prompts), `run` (the threads and queues
of one run), this one (the loop, its result and the protocol comparison).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from morkit.core.errors import InputError
from morkit.llm.base import LLM
from morkit.loops.base import Budget, LoopResult, finish, metered_verifier
from morkit.loops.streamma.graph import (
    PROTOCOLS,
    StreamMAConfig,
    Topology,
    best_available,
)
from morkit.loops.streamma.run import AgentLog, PipelineRun, StepTimeout

__all__ = ["PROTOCOLS", "AgentLog", "ProtocolComparison", "StepTimeout", "StreamMA", "StreamMAConfig", "Topology",
           "compare_protocols"]


@dataclass(frozen=True)
class StreamMA:
    """Solve `problem` with a chain (or `topology`) of agents; `llms`: one LLM for all or one per agent."""

    llms: Sequence[LLM] | LLM
    verifier: Any = None  # a morkit.verify.base.Verifier, or None
    config: StreamMAConfig = StreamMAConfig()
    budget: Budget = Budget()
    topology: Topology | Mapping[int, Sequence[int]] | None = None

    def __post_init__(self) -> None:
        graph = self.graph  # validates
        if graph.agents != self.config.agents:
            raise InputError(f"topology has {graph.agents} agents, config.agents is {self.config.agents}")
        if isinstance(self.llms, Sequence) and len(self.llms) != self.config.agents:
            raise InputError(f"{len(self.llms)} LLMs for {self.config.agents} agents")

    @property
    def graph(self) -> Topology:
        """The agents' topology (the `single` protocol runs agent 0 of it alone)."""
        if self.topology is None:
            return Topology.chain(self.config.agents)
        if isinstance(self.topology, Topology):
            return self.topology
        return Topology.from_mapping(self.topology, self.config.agents)

    def run(self, problem: str, reference: str | None = None) -> LoopResult:
        cfg = self.config
        topology = Topology.chain(1) if cfg.protocol == "single" else self.graph
        llms = list(self.llms) if isinstance(self.llms, Sequence) else [self.llms] * cfg.agents
        run = PipelineRun(topology, llms[: topology.agents], cfg, self.budget, problem)
        run.trace.add("run_start", protocol=cfg.protocol, agents=topology.agents, topology=topology.as_mapping(),
                      final=topology.final)
        finished = run.execute()
        answer_s = run.now()
        solutions = [list(log.steps) for log in run.logs]
        final = topology.final
        steps, authors = best_available(solutions, topology, final)
        score = None
        if self.verifier is not None and steps:
            final, steps, authors, score = self._verify(run, problem, solutions, topology, final)
        answer = "\n\n".join(steps)
        state: dict[str, Any] = {
            "protocol": cfg.protocol, "agents": topology.agents, "topology": topology.as_mapping(),
            "final_agent": final, "finished": finished,
            "latency": _latency(run, final, answer_s), "per_agent": [log.summary() for log in run.logs],
            "queue_size": cfg.queue_size,
            "queue_max": {f"{log.agent}->{b}": n for log in run.logs for b, n in log.queue_max.items()},
            "solutions": solutions, "steps": steps, "authors": authors}
        if reference is not None:
            state.update(_check_reference(answer, reference))
        return finish(f"streamma:{cfg.protocol}", answer, score, _stop_reason(run.logs, finished, steps),
                      run.spend, run.trace, **state)

    def _verify(self, run: PipelineRun, problem: str, solutions: list[list[str]], topology: Topology, final: int
                ) -> tuple[int, list[str], list[int], float | None]:
        """Score every sink's solution (the final agent's first); the best one becomes the answer."""
        sinks = [final] + [s for s in topology.sinks if s != final]
        options = [best_available(solutions, topology, s) for s in sinks]
        try:
            verifier = metered_verifier(self.verifier, run.spend)
            verdicts = verifier.verify(problem, ["\n\n".join(steps) for steps, _ in options])
        except Exception as err:  # noqa: BLE001 - a failed verification leaves the answer unscored
            run.trace.add("verify_error", error=f"{type(err).__name__}: {err}")
            return final, *options[0], None
        best = max(range(len(sinks)), key=lambda k: (verdicts[k].score, -k))
        run.trace.add("verify", verifier=getattr(self.verifier, "name", "verifier"), agents=sinks,
                      scores=[v.score for v in verdicts], chosen=sinks[best], feedback=verdicts[best].feedback)
        return sinks[best], *options[best], float(verdicts[best].score)


def _latency(run: PipelineRun, final: int, answer_s: float) -> dict[str, Any]:
    """Time to the first step at the final agent and to the final answer, busy time, calls."""
    busy = [round(log.busy_s, 4) for log in run.logs]
    return {"first_step_s": run.logs[final].first_step_s, "answer_s": answer_s, "calls": run.spend.calls,
            "calls_per_agent": [log.calls for log in run.logs], "busy_s": busy,
            "busy_total_s": round(sum(busy), 4)}


def _stop_reason(logs: Sequence[AgentLog], finished: bool, steps: Sequence[str]) -> str:
    failed = sorted((log for log in logs if log.status == "failed"), key=lambda log: log.done_s or 0.0)
    budget = [log for log in failed if log.error_kind == "budget"]
    if budget:
        return f"budget exhausted: {(budget[0].error or '').removeprefix('BudgetExhausted: ')}"
    if failed:
        return f"agent {failed[0].agent} failed: {failed[0].error}"
    if not finished or any(log.status == "aborted" for log in logs):
        return "timeout"
    if not steps:
        return "no steps"
    return "max_steps" if logs[0].status == "max_steps" else "completed"


def _check_reference(answer: str, reference: str) -> dict[str, Any]:
    from morkit.core.grading import extract_answer, is_correct, reference_answer

    return {"extracted": extract_answer(answer), "reference": reference_answer(reference),
            "correct": is_correct(answer, reference)}


@dataclass(frozen=True)
class ProtocolComparison:
    """The same problem under several protocols: each run's LoopResult and its latencies."""

    results: Mapping[str, LoopResult]

    @property
    def latencies(self) -> dict[str, dict[str, Any]]:
        return {p: dict(r.state["latency"]) for p, r in self.results.items()}

    def table(self) -> str:
        rows = [f"{'protocol':<8} {'first step s':>12} {'answer s':>9} {'calls':>6} {'busy s':>8}  stop"]
        for p, r in self.results.items():
            lat = r.state["latency"]
            first = "-" if lat["first_step_s"] is None else f"{lat['first_step_s']:.3f}"
            rows.append(f"{p:<8} {first:>12} {lat['answer_s']:>9.3f} {lat['calls']:>6} "
                        f"{lat['busy_total_s']:>8.3f}  {r.stop_reason}")
        return "\n".join(rows)


def compare_protocols(llms: Sequence[LLM] | LLM, problem: str, config: StreamMAConfig = StreamMAConfig(), *,
                      verifier: Any = None, budget: Budget = Budget(),
                      topology: Topology | Mapping[int, Sequence[int]] | None = None, reference: str | None = None,
                      protocols: Sequence[str] = PROTOCOLS) -> ProtocolComparison:
    """Run `problem` under each protocol, one after another, with the same agents and settings."""
    results = {p: StreamMA(llms, verifier, replace(config, protocol=p), budget, topology).run(problem, reference)
               for p in protocols}
    return ProtocolComparison(results)
