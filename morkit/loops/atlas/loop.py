"""ATLAS: an orchestrator LLM that explores a problem with fresh, independent solvers, then answers itself.

The loop: decide, explore, answer; the ACTION protocol, its defaults and fidelity: docs/loops/atlas.md."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from morkit.core.errors import InputError, LLMError
from morkit.core.grading import extract_answer
from morkit.llm.base import LLM, Completion, SamplingParams, takes_reasoning_effort
from morkit.llm.presets import fill
from morkit.loops.atlas import prompts, scoring
from morkit.loops.atlas.protocol import (
    ATLASConfig,
    Decision,
    Effort,
    Solver,
    as_solver,
    check_name,
    estimate_tokens,
    parse_action,
    parse_costs,
    reference_check,
)
from morkit.loops.atlas.state import RunState
from morkit.loops.atlas.synthesis import final_answer
from morkit.loops.base import (
    Budget,
    BudgetExhausted,
    LoopResult,
    MeteredLLM,
    Spend,
    Trace,
    finish,
    verifier_llm_calls,
)
from morkit.verify.base import scores_are_absolute

__all__ = ["ATLAS", "ATLASConfig", "Effort", "Solver", "parse_action"]


class ATLAS:
    """The ATLAS loop: `run(problem)` explores with solvers as the orchestrator directs, then answers.

    `solvers` maps names to Solvers (or LLMs, or (llm, params, system, cost) tuples); a single LLM or Solver
    becomes {"default": ...}. `default_solver` (else the first name) serves the protocol's defaults.

    Args:
        orchestrator: The LLM that decides, directs the solvers and answers.
        solvers: Solver name -> Solver, LLM or `(llm[, params[, system[, cost]]])` tuple; or one of these alone.
        verifier: When given, scores the candidates (shown to the orchestrator if `config.show_scores`) and
            the final answer; None leaves answers unscored.
        config: Explore limits, efforts, prompts, sampling, synthesis and pricing settings.
        budget: Caps on calls, tokens and seconds per problem.
        default_solver: The solver the protocol's defaults use; None is the first.

    Raises:
        InputError: No solver, a bad solver name or spec, an unknown `default_solver`, or `config.solver_costs`
            naming an unknown solver.
    """

    name = "atlas"

    def __init__(self, orchestrator: LLM, solvers: Any, verifier: Any = None, config: ATLASConfig = ATLASConfig(),
                 budget: Budget = Budget(), default_solver: str | None = None):
        if isinstance(solvers, (Solver, tuple)) or isinstance(solvers, LLM):
            solvers = {"default": solvers}
        self.solvers: dict[str, Solver] = {name: as_solver(spec) for name, spec in dict(solvers).items()}
        if not self.solvers:
            raise InputError("ATLAS needs at least one solver")
        for name in self.solvers:
            check_name(name)
        self.default_solver = default_solver or next(iter(self.solvers))
        if self.default_solver not in self.solvers:
            raise InputError(f"default solver {self.default_solver!r} is not among {sorted(self.solvers)}")
        configured = parse_costs(config.solver_costs)
        unknown = sorted(set(configured) - set(self.solvers))
        if unknown:
            raise InputError(f"ATLASConfig.solver_costs names unknown solvers {unknown}; "
                             f"solvers: {sorted(self.solvers)}")
        self.costs: dict[str, float] = {**{n: s.cost for n, s in self.solvers.items() if s.cost is not None},
                                        **configured}
        self.orchestrator = orchestrator
        self.verifier = verifier
        self.config = config
        self.budget = budget

    # -- the loop -------------------------------------------------------------------------------

    def run(self, problem: str, reference: str | None = None) -> LoopResult:
        """Explore until the orchestrator stops or gives up or a limit is hit, then answer; return the result.

        `reference` is only compared with the answers afterwards (state), never shown to an LLM.

        Args:
            problem: The problem text the agents are asked.
            reference: A reference answer; when given, the result's state records whether the answer matches it.
                It is never shown to an LLM.

        Returns:
            The LoopResult: final answer, score, stop reason, calls, tokens, seconds, trace and state.
        """
        system = prompts.orchestrator_system(self.config, list(self.solvers), self.default_solver, self.costs)
        run = RunState(problem, Spend(self.budget), Trace(), [{"role": "system", "content": system}],
                       [prompts.problem_turn(problem)])
        run.trace.add("start", loop=self.name, solvers=list(self.solvers), default_solver=self.default_solver,
                      max_explores=self.config.max_explores, min_explores=self.config.min_explores,
                      synthesis=self.config.synthesis, prices=dict(self.costs), show_scores=self.config.show_scores,
                      show_tally=self.config.show_tally, effort_mode=self.config.effort_mode)
        orchestrator = MeteredLLM(self.orchestrator, run.spend)
        stop_reason, end = self._explore_loop(problem, orchestrator, run)
        final = final_answer(self, problem, orchestrator, run, end)
        state = {"evidence": run.evidence, "explores": len(run.evidence), "solver_usage": dict(run.usage),
                 "decisions": run.decisions, "final_source": final.source,
                 "final_answer": extract_answer(final.answer) if final.answer else None,
                 "synthesis": final.synthesis, "synthesis_mode": self.config.synthesis,
                 "gave_up": final.source == "give_up", "rescored": final.rescored,
                 "unparsed_actions": sum(d["source"] == "default" for d in run.decisions),
                 "left_out": sum(1 for e in run.evidence if e["text"] and not e["in_context"]),
                 "cost": self._cost_state(run), "conversation": run.conversation}
        if final.source == "give_up":
            stop_reason = "orchestrator gave up"
        if reference is not None:
            state["reference_check"] = reference_check(final.answer, run.evidence, reference)
        return finish(self.name, final.answer, final.score, stop_reason, run.spend, run.trace, **state)

    def _explore_loop(self, problem: str, orchestrator: MeteredLLM, run: RunState) -> tuple[str, str]:
        """Decide / explore rounds; returns (why exploring ended, how: stop | give_up | limit)."""
        while True:
            reason = self._limit_reached(run)
            if reason:
                return reason, "limit"
            try:
                decision = self._decide(orchestrator, run)
                if decision.action == "stop":  # said so, or the protocol's default for an unreadable reply
                    return ("orchestrator stopped" if decision.source == "parsed"
                            else f"protocol default stop ({decision.source})"), "stop"
                if decision.action == "give_up":
                    return "orchestrator gave up", "give_up"
                self._explore(decision, run)
            except BudgetExhausted as err:
                run.trace.add("budget", error=str(err))
                return str(err), "limit"

    def _limit_reached(self, run: RunState) -> str | None:
        """Why no further round may start: explore cap, spent budget, or only the final-answer call left."""
        if len(run.evidence) >= self.config.max_explores:
            return f"explore budget spent ({len(run.evidence)} of {self.config.max_explores})"
        spent = run.spend.exhausted()
        if spent:
            return spent
        max_calls = run.spend.budget.max_calls
        if run.evidence and max_calls is not None and max_calls - run.spend.calls < self._round_calls(run):
            return f"call budget: last call kept for the final answer ({run.spend.calls} of {max_calls} used)"
        return None

    def _round_calls(self, run: RunState) -> int:
        """Calls one more round takes with the end kept for: a decision, an explore and the final answer, plus
        what the verifier's LLMs spend on them (the explore's score or the next table of every candidate, when
        scores are shown; the end's score of the synthesis, beside every candidate unless scores are absolute)."""
        per_answer = verifier_llm_calls(self.verifier) if self.verifier is not None else 0
        if not per_answer:
            return 3
        absolute = scores_are_absolute(self.verifier)
        candidates = len(run.evidence) + 1
        shown = (1 if absolute else candidates) if self.config.show_scores else 0
        end = 1 if absolute else candidates + 1
        return 3 + per_answer * (shown + end)

    def status(self, run: RunState) -> str:
        """Where the run stands, for the orchestrator's next turn (re-scoring the candidates first when due).

        Args:
            run: The run's state.

        Returns:
            One line of text: explores used, candidates left out of the context, and (where configured) the
            answer tally, the verifier's scores and the cost so far.
        """
        scoring.refresh_table(self.verifier, self.config.show_scores, run)
        return prompts.pool_status(run.evidence, self.config, self.total_cost(run), scoring.table_line(run))

    def take_pending(self, run: RunState, close: str) -> None:
        """Send the pending evidence and `close` as the orchestrator's next user turn.

        Args:
            run: The run's state; its pending evidence is cleared.
            close: The text that ends the turn.
        """
        run.conversation.append({"role": "user", "content": "\n\n".join([*run.pending, close])})
        run.pending.clear()

    # -- deciding -------------------------------------------------------------------------------

    def _decide(self, orchestrator: MeteredLLM, run: RunState) -> Decision:
        """One orchestrator turn in its conversation: it reasons, then acts; protocol defaults apply."""
        params = SamplingParams(temperature=self.config.temperature, max_tokens=self.config.max_tokens)
        pending = list(run.pending)
        self.take_pending(run, prompts.decision_request(self.status(run), self.config))
        try:
            raw = orchestrator.chat([list(run.conversation)], params)[0].texts[0]
        except LLMError as err:  # BudgetExhausted included: the turn was not taken
            run.conversation.pop()
            run.pending[:] = pending
            if isinstance(err, BudgetExhausted):
                raise
            decision = self._default(f"orchestrator call failed: {err}", "error", "", len(run.evidence))
        else:
            run.conversation.append({"role": "assistant", "content": raw})
            decision = self._resolve(raw, len(run.evidence))
        run.decisions.append(decision.to_json())
        run.trace.add("decide", round=len(run.decisions), **decision.to_json())
        for note in decision.notes:
            run.trace.add("note", round=len(run.decisions), note=note)
        return decision

    def _default(self, why: str, source: str, raw: str, explores: int, reasoning: str = "") -> Decision:
        if explores < self.config.min_explores:
            return Decision("explore", self.default_solver, source=source, raw=raw, reasoning=reasoning,
                            notes=(f"{why}: exploring with the default solver ({explores} < min_explores)",))
        return Decision("stop", source=source, raw=raw, reasoning=reasoning, notes=(f"{why}: stopping",))

    def _resolve(self, raw: str, explores: int) -> Decision:
        """A Decision from the orchestrator's reply: parse, then check every name against the menus."""
        parsed = parse_action(raw)
        if parsed is None:
            return self._default("your reply had no ACTION line", "default", raw, explores, raw.strip())
        action, args, reasoning = parsed.action, parsed.args, parsed.reasoning
        if action == "give_up" and not self.config.give_up:
            action, notes = "stop", ["give_up is not offered: stopping instead"]
        else:
            notes = []
        if action in ("stop", "give_up"):
            if explores >= self.config.min_explores:
                return Decision(action, raw=raw, reasoning=reasoning, notes=tuple(notes))
            return Decision("explore", self.default_solver, source="override", raw=raw, reasoning=reasoning,
                            notes=(*notes, f"{action} before min_explores ({explores} < {self.config.min_explores}): "
                                   "exploring with the default solver"))
        notes += [f"unknown argument {key}={value!r} ignored" for key, value in args.items()
                  if key not in ("solver", "effort", "prompt")]
        solver = args.get("solver", self.default_solver)
        if solver not in self.solvers:
            notes.append(f"unknown solver {solver!r}: using the default solver {self.default_solver!r}")
            solver = self.default_solver
        effort = self._menu_choice(args.get("effort"), self.config.effort_menu(), "effort", notes)
        prompt = self._menu_choice(args.get("prompt"), self.config.prompts, "prompt", notes)
        additional = parsed.additional_prompt
        if additional and not self.config.additional_prompt:
            notes.append("ADDITIONAL_PROMPT is not offered: ignored")
            additional = None
        return Decision("explore", solver, effort, prompt, additional, raw=raw, reasoning=reasoning,
                        notes=tuple(notes))

    @staticmethod
    def _menu_choice(name: str | None, menu: Mapping[str, Any], what: str, notes: list[str]) -> str | None:
        if name is None or name in menu:
            return name
        notes.append(f"unknown {what} {name!r}: using none")
        return None

    # -- exploring ------------------------------------------------------------------------------

    def _explore(self, decision: Decision, run: RunState) -> None:
        """Run the chosen solver on the original problem; its result (an error too) joins the evidence and the
        orchestrator's pending turn."""
        name = decision.solver or self.default_solver
        solver = self.solvers[name]
        index = len(run.evidence) + 1
        params, system, effort_notes = self._solver_setup(solver, decision, index)
        item: dict[str, Any] = {"index": index, "solver": name, "model": solver.llm.name, "effort": decision.effort,
                                "reasoning_effort": params.reasoning_effort, "prompt": decision.prompt,
                                "additional_prompt": decision.additional_prompt, "max_tokens": params.max_tokens,
                                "text": None, "final": None, "score": None, "feedback": None, "error": None,
                                "tokens": 0, "cost": None, "est_tokens": 0, "in_context": True}
        for note in effort_notes:
            run.trace.add("note", round=len(run.decisions), note=note)
        asked = run.problem if solver.user is None else fill(solver.user, run.problem)
        conversation = [{"role": "system", "content": system}, {"role": "user", "content": asked}]
        try:
            completion = MeteredLLM(solver.llm, run.spend).chat([conversation], params)[0]
        except BudgetExhausted:
            run.trace.add("explore_refused", index=index, solver=name)
            raise
        except LLMError as err:
            item["error"] = f"{type(err).__name__}: {err}"
        else:
            self._take_response(item, completion, run)
            scoring.score_explore(self.verifier, self.config.show_scores, item, run)
        run.evidence.append(item)
        run.usage[name] = run.usage.get(name, 0) + 1
        run.trace.add("explore", **item)
        run.pending.append(prompts.result_block(item, [*decision.notes, *effort_notes], self.config.show_scores))

    def _take_response(self, item: dict[str, Any], completion: Completion, run: RunState) -> None:
        """The response, its final answer, tokens and cost; whether it fits the pool budget WHOLE (decided once)."""
        text = completion.texts[0]
        item["text"], item["final"] = text, extract_answer(text)
        item["tokens"] = (completion.prompt_tokens + completion.completion_tokens
                          or sum(len(t.split()) for t in completion.texts))  # words where a backend gives no counts
        price = self.costs.get(item["solver"])
        if price is not None:
            item["cost"] = item["tokens"] * price / 1000
            run.cost_by_solver[item["solver"]] = run.cost_by_solver.get(item["solver"], 0.0) + item["cost"]
        item["est_tokens"] = estimate_tokens(text)
        item["in_context"] = item["est_tokens"] <= self.config.pool_tokens - run.pool_used
        if item["in_context"]:
            run.pool_used += item["est_tokens"]
        else:
            run.trace.add("left_out", index=item["index"], est_tokens=item["est_tokens"], pool_used=run.pool_used)

    def _solver_setup(self, solver: Solver, decision: Decision, index: int) -> tuple[SamplingParams, str, list[str]]:
        """The solver's params and system prompt (prompt variant, effort, additional prompt, a seed per explore),
        and notes on an effort the solver's backend cannot express (run without it, never cut instead)."""
        params, parts, notes = replace(solver.params, n=1), [solver.system], []
        if decision.prompt and self.config.prompts[decision.prompt]:
            parts.append(self.config.prompts[decision.prompt])
        if decision.effort:
            effort = self.config.effort_menu()[decision.effort]
            if effort.reasoning is not None and takes_reasoning_effort(solver.llm):
                params = replace(params, reasoning_effort=effort.reasoning)
            elif effort.reasoning is not None:
                notes.append(f"effort {decision.effort!r} was not applied: solver "
                             f"{decision.solver or self.default_solver!r} has no reasoning-effort setting")
            if effort.max_tokens is not None:
                params = replace(params, max_tokens=effort.max_tokens)
            if effort.instruction:
                parts.append(effort.instruction)
        if decision.additional_prompt:
            parts.append(decision.additional_prompt)
        if params.seed is not None:  # repeated explores of one solver must not replay the same sample
            params = replace(params, seed=params.seed + index)
        return params, " ".join(p for p in parts if p), notes

    # -- cost -----------------------------------------------------------------------------------

    def total_cost(self, run: RunState) -> float | None:
        """The run's cost so far, summed over solvers (ATLAS-MM pricing).

        Args:
            run: The run's state.

        Returns:
            The cost at each solver's price per 1,000 tokens; None when no solver is priced.
        """
        return sum(run.cost_by_solver.values()) if self.costs else None

    def _cost_state(self, run: RunState) -> dict[str, Any] | None:
        if not self.costs:
            return None
        unpriced = sorted({e["solver"] for e in run.evidence if e["solver"] not in self.costs})
        return {"total": self.total_cost(run), "by_solver": dict(run.cost_by_solver), "prices": dict(self.costs),
                "unit": "per 1k tokens (prompt + generated)", "unpriced_solvers": unpriced}
