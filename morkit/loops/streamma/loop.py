"""StreamMA: agents in a chain (or tree/DAG) that solve and review a problem step by step, pipelined.

The loop, its result and the protocol comparison; the algorithm and its fidelity: docs/loops/streamma.md."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from morkit.core.errors import InputError
from morkit.llm.base import LLM
from morkit.loops.base import Budget, LoopResult, Spend, Trace, finish, metered_verifier
from morkit.loops.streamma.config import PROTOCOLS, PYTHON_MAX_TOKENS, StreamMAConfig
from morkit.loops.streamma.cost import merge_reports
from morkit.loops.streamma.graph import Topology, best_available
from morkit.loops.streamma.run import AgentLog, PipelineRun, StepTimeout
from morkit.loops.streamma.vote import majority

__all__ = ["PROTOCOLS", "AgentLog", "ProtocolComparison", "StepTimeout", "StreamMA", "StreamMAConfig", "Topology",
           "compare_protocols"]


@dataclass(frozen=True)
class _Outcome:
    """One replica's answer, score, stop reason and state."""

    answer: str
    score: float | None
    stop_reason: str
    state: dict[str, Any]


@dataclass(frozen=True)
class StreamMA:
    """Solve `problem` with a chain (or `topology`) of agents; `llms`: one LLM for all or one per agent.

    Args:
        llms: One LLM for every agent, or a sequence of exactly `config.agents` LLMs.
        verifier: When given, scores the solutions of the topology's last agents and picks the best; None leaves
            the answer unscored.
        config: Agents, protocol, step marking, review and sampling settings (`max_tokens` None: 512).
        budget: Caps on calls, tokens and seconds per problem.
        topology: The agents' graph (a Topology, or agent -> downstream agents); None is a chain.

    Raises:
        InputError: The topology's or the LLMs' count differs from `config.agents`, or the topology is invalid.
    """

    llms: Sequence[LLM] | LLM
    verifier: Any = None  # a morkit.verify.base.Verifier, or None
    config: StreamMAConfig = StreamMAConfig()
    budget: Budget = Budget()
    topology: Topology | Mapping[int, Sequence[int]] | None = None

    def __post_init__(self) -> None:
        if self.config.max_tokens is None:
            object.__setattr__(self, "config", replace(self.config, max_tokens=PYTHON_MAX_TOKENS))
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
        """Stream the agents' steps through the topology (with `config.votes` > 1, that many replicas and a vote).

        Args:
            problem: The problem text the agents are asked.
            reference: A reference answer; when given, the result's state records whether the answer matches it.
                It is never shown to an LLM.

        Returns:
            The LoopResult: final answer, score, stop reason, calls, tokens, seconds, trace and state.
        """
        cfg = self.config
        spend, trace = Spend(self.budget), Trace()
        if cfg.votes == 1:
            out = self._replica(problem, spend, trace, cfg.seed)
            state = out.state
        else:
            out, state = self._vote(problem, spend, trace)
        if reference is not None:
            state.update(_check_reference(out.answer, reference))
        return finish(f"streamma:{cfg.protocol}" + (f"x{cfg.votes}" if cfg.votes > 1 else ""), out.answer,
                      out.score, out.stop_reason, spend, trace, **state)

    def _vote(self, problem: str, spend: Spend, trace: Trace) -> tuple[_Outcome, dict[str, Any]]:
        """Stream x N: N replicas one after another (one budget), then a majority vote of their answers."""
        cfg, outcomes = self.config, []
        for r in range(cfg.votes):
            if outcomes and spend.exhausted():
                trace.add("replicas_stopped", done=r, reason=spend.exhausted())
                break
            trace.add("replica_start", replica=r)
            outcomes.append(self._replica(problem, spend, trace, None if cfg.seed is None else cfg.seed + r))
        winner, tally = majority([o.answer for o in outcomes])
        trace.add("vote", tally=tally, winner=winner)
        won = outcomes[winner]
        budget = next((o.stop_reason for o in outcomes if o.stop_reason.startswith("budget")), None)
        answer_s = [o.state["latency"]["answer_s"] for o in outcomes]
        state = {**won.state, "votes": cfg.votes, "winner": winner, "tally": tally,
                 "replicas": [{"replica": r, "answer": o.answer, "stop_reason": o.stop_reason, "score": o.score,
                               "latency": o.state["latency"], "tokens": o.state["tokens"]["total"]}
                              for r, o in enumerate(outcomes)],
                 "tokens": merge_reports([o.state["tokens"] for o in outcomes]),
                 "latency": {**won.state["latency"], "answer_s": round(sum(answer_s), 4),
                             "replica_answer_s": answer_s, "parallel_answer_s": max(answer_s),
                             "calls": spend.calls}}
        return _Outcome(won.answer, won.score, budget or won.stop_reason, state), state

    def _replica(self, problem: str, spend: Spend, trace: Trace, seed: int | None) -> _Outcome:
        """One run of the whole system (the only one unless `votes` > 1)."""
        cfg = self.config
        topology = Topology.chain(1) if cfg.protocol == "single" else self.graph
        llms = list(self.llms) if isinstance(self.llms, Sequence) else [self.llms] * cfg.agents
        run = PipelineRun(topology, llms[: topology.agents], cfg, self.budget, problem, spend=spend, trace=trace,
                          seed=seed)
        started = run.now()
        run.trace.add("run_start", protocol=cfg.protocol, agents=topology.agents, topology=topology.as_mapping(),
                      final=topology.final, steps_per_agent=cfg.steps, seed=seed)
        finished = run.execute()
        answer_s = round(run.now() - started, 4)
        solutions = [list(log.steps) for log in run.logs]
        final = topology.final
        steps, authors = best_available(solutions, topology, final)
        score = None
        if self.verifier is not None and steps:
            final, steps, authors, score = self._verify(run, problem, solutions, topology, final)
        summary = run.logs[final].summary_text if authors and authors[-1] == final else None
        answer = "\n\n".join(steps + ([summary] if summary else []))
        state: dict[str, Any] = {
            "protocol": cfg.protocol, "agents": topology.agents, "topology": topology.as_mapping(),
            "steps_per_agent": cfg.steps, "authority": cfg.authority, "review": cfg.review,
            "final_agent": final, "finished": finished,
            "latency": _latency(run, final, answer_s), "per_agent": [log.summary() for log in run.logs],
            "queue_size": cfg.queue_size,
            "queue_max": {f"{log.agent}->{b}": n for log in run.logs for b, n in log.queue_max.items()},
            "solutions": solutions, "steps": steps, "authors": authors, "summary": summary,
            "summaries": [log.summary_text for log in run.logs],
            "reviews": [list(log.reviews) for log in run.logs],
            "forwarded": [list(log.payloads) for log in run.logs],
            "tokens": run.ledger.report((cfg.price_input, cfg.price_output, cfg.price_cached))}
        return _Outcome(answer, score, _stop_reason(run.logs, finished, steps), state)

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
    """Time to the first step at the final agent and to the final answer, busy time, calls. `busy_over_wall`
    is the paper's logger's 'speedup': the agents' summed time in calls over the wall time."""
    busy = [round(log.busy_s, 4) for log in run.logs]
    first = run.logs[final].first_step_s
    start = run.trace.of_kind("run_start")[-1]["t"]
    return {"first_step_s": None if first is None else round(first - start, 4), "answer_s": answer_s,
            "calls": sum(log.calls for log in run.logs), "calls_per_agent": [log.calls for log in run.logs],
            "busy_s": busy, "busy_total_s": round(sum(busy), 4),
            "busy_over_wall": round(sum(busy) / answer_s, 4) if answer_s > 0 else None}


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

    @property
    def tokens(self) -> dict[str, dict[str, Any]]:
        """Per protocol: total prompt, reused (KV cache), prefilled and generated tokens, and the cost in USD."""
        return {p: {**r.state["tokens"]["total"], "cost_usd": dict(r.state["tokens"]["cost_usd"])}
                for p, r in self.results.items()}

    def cost_ratio(self, a: str = "stream", b: str = "serial", cache: str = "kv_cache") -> float | None:
        """Cost of protocol `a` over protocol `b` at the config's prices (the paper's Theorem 3 compares
        Stream with Serial this way), with the KV cache (`kv_cache`) or without (`no_cache`)."""
        cost_b = self.tokens[b]["cost_usd"][cache]
        return None if not cost_b else round(self.tokens[a]["cost_usd"][cache] / cost_b, 4)

    def table(self) -> str:
        rows = [f"{'protocol':<8} {'first step s':>12} {'answer s':>9} {'calls':>6} {'busy s':>8} {'prompt':>8} "
                f"{'reused':>8} {'generated':>9} {'$ no cache':>11} {'$ KV cache':>11}  stop"]
        for p, r in self.results.items():
            lat, tok = r.state["latency"], self.tokens[p]
            first = "-" if lat["first_step_s"] is None else f"{lat['first_step_s']:.3f}"
            rows.append(f"{p:<8} {first:>12} {lat['answer_s']:>9.3f} {lat['calls']:>6} "
                        f"{lat['busy_total_s']:>8.3f} {tok['prompt_tokens']:>8} {tok['reused_tokens']:>8} "
                        f"{tok['generated_tokens']:>9} {tok['cost_usd']['no_cache']:>11.6f} "
                        f"{tok['cost_usd']['kv_cache']:>11.6f}  {r.stop_reason}")
        return "\n".join(rows)


def compare_protocols(llms: Sequence[LLM] | LLM, problem: str, config: StreamMAConfig = StreamMAConfig(), *,
                      verifier: Any = None, budget: Budget = Budget(),
                      topology: Topology | Mapping[int, Sequence[int]] | None = None, reference: str | None = None,
                      protocols: Sequence[str] = PROTOCOLS) -> ProtocolComparison:
    """Run `problem` under each protocol, one after another, with the same agents and settings."""
    results = {p: StreamMA(llms, verifier, replace(config, protocol=p), budget, topology).run(problem, reference)
               for p in protocols}
    return ProtocolComparison(results)
