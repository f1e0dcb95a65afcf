"""ATLAS: an orchestrator LLM that explores a problem with fresh, independent solvers, then synthesises.

The orchestrator owns the loop. Each round it sees the problem and a compact summary of the
evidence so far (never the reference) and answers with one line of a small protocol:

    ACTION: explore [solver=<name>] [effort=<name>] [prompt=<name>]
    ACTION: stop

`explore` runs one solver on the ORIGINAL problem (no evidence: every attempt is independent),
optionally choosing which solver model (the multi-model variant), a reasoning effort (max_tokens
plus an instruction such as "think step by step carefully") and a prompt variant. Its answer,
extracted final answer and verifier score + feedback are appended to the evidence. When the
orchestrator stops, or `max_explores` or the Budget runs out, one more orchestrator call
synthesises the final answer from the evidence.

Parsing is strict and regex-only, never eval: the first line of the reply that starts (after
whitespace) with `ACTION:` counts; keywords are case-insensitive; arguments are `key=value`
tokens. Defaults, each recorded in the trace:
- a reply with no ACTION line (or an orchestrator call that fails): explore with the default
  solver while fewer than `min_explores` explores ran, else stop;
- `stop` before `min_explores` explores: explore with the default solver instead;
- an unknown solver / effort / prompt name: the default solver / no effort / no prompt variant;
  an unknown argument key is ignored.
With a call budget (`Budget.max_calls`), exploring stops while one call is still left, so the
synthesis can run. If the synthesis fails (LLMError, BudgetExhausted, empty text), the final
answer falls back to the best-verified explore answer, or without a verifier to the most common
final answer (earliest attempt of the largest group of equivalent answers).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from morkit.core.errors import InputError, LLMError
from morkit.core.grading import extract_answer
from morkit.llm.base import LLM, SamplingParams
from morkit.loops.atlas.protocol import (
    SYNTHESIS_SYSTEM,
    ATLASConfig,
    Decision,
    Effort,
    Solver,
    as_solver,
    check_name,
    clip,
    evidence_summary,
    majority_index,
    one_line,
    parse_action,
    reference_check,
)
from morkit.loops.base import (
    Budget,
    BudgetExhausted,
    LoopResult,
    MeteredLLM,
    Spend,
    Trace,
    finish,
    metered_verifier,
)

__all__ = ["ATLAS", "ATLASConfig", "Effort", "Solver", "SYNTHESIS_SYSTEM", "evidence_summary", "parse_action"]


@dataclass
class _Run:
    """Mutable state of one run: budget meter, trace, evidence, decisions, per-solver usage."""

    spend: Spend
    trace: Trace
    evidence: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)


class ATLAS:
    """The ATLAS loop: `run(problem)` explores with solvers as the orchestrator directs, then synthesises.

    `solvers` maps names to Solvers (or LLMs, or (llm, params, system) tuples); a single LLM or
    Solver becomes {"default": ...}. `default_solver` (else the first name) serves defaults.
    `verifier` (optional) scores each explore answer and, at the end, all answers in one call."""

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
        self.orchestrator = orchestrator
        self.verifier = verifier
        self.config = config
        self.budget = budget

    # -- the loop -------------------------------------------------------------------------------

    def run(self, problem: str, reference: str | None = None) -> LoopResult:
        """Explore until the orchestrator stops or a limit is hit, synthesise, return the result.

        `reference` is only compared with the answers afterwards (state), never shown to an LLM."""
        run = _Run(Spend(self.budget), Trace())
        run.trace.add("start", loop=self.name, solvers=sorted(self.solvers), default_solver=self.default_solver,
                      max_explores=self.config.max_explores, min_explores=self.config.min_explores)
        orchestrator = MeteredLLM(self.orchestrator, run.spend)
        stop_reason = self._explore_loop(problem, orchestrator, run)
        synthesis = self._synthesise(problem, orchestrator, run)
        answer, score, source, rescored = self._final(problem, synthesis, run)
        state = {"evidence": run.evidence, "explores": len(run.evidence), "solver_usage": dict(run.usage),
                 "decisions": run.decisions, "final_source": source, "final_answer": extract_answer(answer),
                 "synthesis": synthesis, "rescored": rescored}
        if reference is not None:
            state["reference_check"] = reference_check(answer, run.evidence, reference)
        return finish(self.name, answer, score, stop_reason, run.spend, run.trace, **state)

    def _explore_loop(self, problem: str, orchestrator: MeteredLLM, run: _Run) -> str:
        """Decide / explore rounds; returns why exploring ended."""
        while True:
            reason = self._limit_reached(run)
            if reason:
                return reason
            try:
                decision = self._decide(problem, orchestrator, run)
                if decision.action == "stop":
                    return "orchestrator stopped"
                self._explore(problem, decision, run)
            except BudgetExhausted as err:
                run.trace.add("budget", error=str(err))
                return str(err)

    def _limit_reached(self, run: _Run) -> str | None:
        """Why no further round may start: explore cap, spent budget, or only the synthesis call left."""
        if len(run.evidence) >= self.config.max_explores:
            return f"explore budget spent ({len(run.evidence)} of {self.config.max_explores})"
        spent = run.spend.exhausted()
        if spent:
            return spent
        max_calls = run.spend.budget.max_calls
        if run.evidence and max_calls is not None and max_calls - run.spend.calls < 3:
            return f"call budget: last call kept for synthesis ({run.spend.calls} of {max_calls} used)"
        return None

    # -- deciding -------------------------------------------------------------------------------

    def _decide(self, problem: str, orchestrator: MeteredLLM, run: _Run) -> Decision:
        """Ask the orchestrator for the next action; protocol defaults apply (see module docstring)."""
        params = SamplingParams(temperature=self.config.temperature, max_tokens=self.config.max_tokens)
        conversation = [{"role": "system", "content": self._orchestrator_system()},
                        {"role": "user", "content": self._orchestrator_prompt(problem, run.evidence)}]
        try:
            raw = orchestrator.chat([conversation], params)[0].texts[0]
        except BudgetExhausted:
            raise
        except LLMError as err:
            decision = self._default(f"orchestrator call failed: {err}", "error", "", len(run.evidence))
        else:
            decision = self._resolve(raw, len(run.evidence))
        run.decisions.append(decision.to_json())
        run.trace.add("decide", round=len(run.decisions), **decision.to_json())
        for note in decision.notes:
            run.trace.add("note", round=len(run.decisions), note=note)
        return decision

    def _default(self, why: str, source: str, raw: str, explores: int) -> Decision:
        if explores < self.config.min_explores:
            return Decision("explore", self.default_solver, source=source, raw=raw,
                            notes=(f"{why}: exploring with the default solver ({explores} < min_explores)",))
        return Decision("stop", source=source, raw=raw, notes=(f"{why}: stopping",))

    def _resolve(self, raw: str, explores: int) -> Decision:
        """A Decision from the orchestrator's reply text: parse, then check every name against the menus."""
        parsed = parse_action(raw)
        if parsed is None:
            return self._default("reply follows no ACTION protocol", "default", raw, explores)
        action, args = parsed
        if action == "stop":
            if explores >= self.config.min_explores:
                return Decision("stop", raw=raw)
            return Decision("explore", self.default_solver, source="default", raw=raw,
                            notes=(f"stop before min_explores ({explores} < {self.config.min_explores}): "
                                   "exploring with the default solver",))
        notes = [f"unknown argument {key}={value!r} ignored" for key, value in args.items()
                 if key not in ("solver", "effort", "prompt")]
        solver = args.get("solver", self.default_solver)
        if solver not in self.solvers:
            notes.append(f"unknown solver {solver!r}: using the default solver {self.default_solver!r}")
            solver = self.default_solver
        effort = self._menu_choice(args.get("effort"), self.config.efforts, "effort", notes)
        prompt = self._menu_choice(args.get("prompt"), self.config.prompts, "prompt", notes)
        return Decision("explore", solver, effort, prompt, raw=raw, notes=tuple(notes))

    @staticmethod
    def _menu_choice(name: str | None, menu: Mapping[str, Any], what: str, notes: list[str]) -> str | None:
        if name is None or name in menu:
            return name
        notes.append(f"unknown {what} {name!r}: using none")
        return None

    def _orchestrator_system(self) -> str:
        solvers = ", ".join(f"{n} (default)" if n == self.default_solver else n for n in self.solvers)
        return (
            "You direct independent solvers working on one problem. Each round you choose one action:\n"
            "ACTION: explore solver=<name> effort=<effort> prompt=<prompt>\n"
            "  runs one more fresh solver on the original problem; solver, effort and prompt are optional\n"
            "ACTION: stop\n"
            "  ends exploring; the final answer is then written from the evidence\n"
            f"Solvers: {solvers}. Efforts: {', '.join(self.config.efforts) or 'none'}. "
            f"Prompts: {', '.join(self.config.prompts) or 'none'}.\n"
            "Explore again when answers disagree, scores are low or attempts failed; "
            "stop when several answers agree with good scores.\n"
            "Reply with exactly one ACTION line and nothing else."
        )

    def _orchestrator_prompt(self, problem: str, evidence: Sequence[Mapping[str, Any]]) -> str:
        return (f"Problem:\n{problem}\n\nEvidence ({len(evidence)} of at most {self.config.max_explores} "
                f"explores):\n{evidence_summary(evidence, self.config.excerpt_chars)}\n\nYour action:")

    # -- exploring ------------------------------------------------------------------------------

    def _explore(self, problem: str, decision: Decision, run: _Run) -> None:
        """Run the chosen solver on the original problem; append its evidence (an error is evidence too)."""
        name = decision.solver or self.default_solver
        solver = self.solvers[name]
        index = len(run.evidence) + 1
        params, system = self._solver_setup(solver, decision, index)
        item: dict[str, Any] = {"index": index, "solver": name, "model": solver.llm.name, "effort": decision.effort,
                                "prompt": decision.prompt, "max_tokens": params.max_tokens, "text": None,
                                "final": None, "score": None, "feedback": None, "error": None}
        conversation = [{"role": "system", "content": system}, {"role": "user", "content": problem}]
        try:
            text = MeteredLLM(solver.llm, run.spend).chat([conversation], params)[0].texts[0]
        except BudgetExhausted:
            run.trace.add("explore_refused", index=index, solver=name)
            raise
        except LLMError as err:
            item["error"] = f"{type(err).__name__}: {err}"
        else:
            item["text"], item["final"] = text, extract_answer(text)
            self._verify_item(problem, item, run)
        run.evidence.append(item)
        run.usage[name] = run.usage.get(name, 0) + 1
        run.trace.add("explore", **item)

    def _solver_setup(self, solver: Solver, decision: Decision, index: int) -> tuple[SamplingParams, str]:
        """The solver's params and system prompt for this explore: effort, prompt variant, seed per explore."""
        params, parts = replace(solver.params, n=1), [solver.system]
        if decision.prompt and self.config.prompts[decision.prompt]:
            parts.append(self.config.prompts[decision.prompt])
        if decision.effort:
            effort = self.config.efforts[decision.effort]
            params = replace(params, max_tokens=effort.max_tokens)
            if effort.instruction:
                parts.append(effort.instruction)
        if params.seed is not None:  # repeated explores of one solver must not replay the same sample
            params = replace(params, seed=params.seed + index)
        return params, " ".join(p for p in parts if p)

    def _verify_item(self, problem: str, item: dict[str, Any], run: _Run) -> None:
        if self.verifier is None:
            return
        context = [e["text"] for e in run.evidence if e["text"]]
        verdicts = self._verify(problem, [item["text"]], context, run)
        if verdicts:
            item["score"], item["feedback"] = float(verdicts[0].score), verdicts[0].feedback

    def _verify(self, problem: str, answers: list[str], context: Sequence[str], run: _Run) -> list[Any] | None:
        """The verifier's verdicts, or None (recorded) when it fails: a failed verifier loses scores, not the run."""
        try:
            return list(metered_verifier(self.verifier, run.spend).verify(problem, answers, context))
        except Exception as err:  # noqa: BLE001 - any verifier backend; recorded, the loop goes on
            run.trace.add("verify_error", error=f"{type(err).__name__}: {err}", answers=len(answers))
            return None

    # -- synthesis and the final answer ---------------------------------------------------------

    def _synthesise(self, problem: str, orchestrator: MeteredLLM, run: _Run) -> str | None:
        """One orchestrator call that writes the final answer from the evidence; None (recorded) on failure."""
        params = SamplingParams(temperature=self.config.temperature, max_tokens=self.config.synthesis_max_tokens)
        conversation = [{"role": "system", "content": SYNTHESIS_SYSTEM},
                        {"role": "user", "content": self._synthesis_prompt(problem, run.evidence)}]
        try:
            text = orchestrator.chat([conversation], params)[0].texts[0]
        except LLMError as err:  # BudgetExhausted included
            run.trace.add("synthesis_failed", error=f"{type(err).__name__}: {err}")
            return None
        if not text.strip():
            run.trace.add("synthesis_failed", error="empty synthesis")
            return None
        run.trace.add("synthesis", text=text, final=extract_answer(text))
        return text

    def _synthesis_prompt(self, problem: str, evidence: Sequence[Mapping[str, Any]]) -> str:
        blocks = []
        for e in evidence:
            head = f"Attempt {e['index']} (solver {e['solver']}"
            head += f", verifier score {e['score']:.3f})" if e["score"] is not None else ")"
            body = f"failed: {e['error']}" if e["error"] else clip(e["text"], self.config.synthesis_chars)
            feedback = f"\nVerifier feedback: {one_line(e['feedback'], 200)}" if e["feedback"] else ""
            blocks.append(f"{head}:\n{body}{feedback}")
        attempts = "\n\n".join(blocks) or "(no attempts)"
        return (f"Problem:\n{problem}\n\nIndependent attempts:\n{attempts}\n\n"
                "Write the final solution. End with a line 'The answer is X.'")

    def _final(self, problem: str, synthesis: str | None, run: _Run
               ) -> tuple[str, float | None, str, list[dict[str, Any]]]:
        """(answer, score, source, rescored): all candidates scored in one verify call, then the choice."""
        answered = [e for e in run.evidence if e["text"]]
        candidates = ([("synthesis", synthesis)] if synthesis else []) + [(e["index"], e["text"]) for e in answered]
        scores = self._rescore(problem, candidates, run)
        rescored = [{"of": of, "score": scores.get(text)} for of, text in candidates] if scores else []
        if synthesis:
            return synthesis, scores.get(synthesis), "synthesis", rescored
        if not answered:
            run.trace.add("fallback", source="none", reason="no explore produced an answer")
            return "", None, "none", rescored
        if scores:
            best = max(answered, key=lambda e: (scores.get(e["text"], float("-inf")), -e["index"]))
            source = "fallback:best-verified"
        else:
            best = next(e for e in answered if e["index"] == majority_index(answered))
            source = "fallback:majority"
        run.trace.add("fallback", source=source, index=best["index"], final=best["final"])
        return best["text"], scores.get(best["text"]), source, rescored

    def _rescore(self, problem: str, candidates: list[tuple[Any, str]], run: _Run) -> dict[str, float]:
        """Score every distinct candidate text in ONE verify call (scores compare only within a call)."""
        if self.verifier is None or not candidates:
            return {}
        texts = list(dict.fromkeys(text for _, text in candidates))
        verdicts = self._verify(problem, texts, (), run)
        if verdicts is None:
            return {}
        scores = {t: float(v.score) for t, v in zip(texts, verdicts)}
        run.trace.add("rescore", scores=[{"of": of, "score": scores.get(t)} for of, t in candidates])
        return scores
