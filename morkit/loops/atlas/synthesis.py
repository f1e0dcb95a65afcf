"""ATLAS's end: give up, or the final answer by the orchestrator (or the ablation's integrator), then fallbacks.

With a verifier, the final answer (or the fallback's pick) is scored in ONE call: see scoring.end_scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from morkit.core.errors import LLMError
from morkit.core.grading import extract_answer
from morkit.llm.base import SamplingParams
from morkit.loops.atlas import prompts, scoring
from morkit.loops.atlas.protocol import majority_index, parse_action
from morkit.loops.atlas.state import RunState

if TYPE_CHECKING:
    from morkit.loops.base import MeteredLLM


class Orchestrating(Protocol):
    """What the end of a run reads of the loop (the ATLAS loop itself): its settings and verifier, the status
    line the orchestrator is shown, and how a pending turn is closed."""

    config: Any
    verifier: Any

    def status(self, run: RunState) -> str: ...

    def take_pending(self, run: RunState, close: str) -> None: ...


@dataclass(frozen=True)
class Final:
    """The run's answer ("" when the orchestrator gave up), its score, where it came from, the synthesis text
    (None when there was none or it failed) and what the end-of-run verify call scored."""

    answer: str
    score: float | None
    source: str  # synthesis | give_up | fallback:best-verified | fallback:majority | none
    synthesis: str | None
    rescored: list[dict[str, Any]]


def final_answer(loop: Orchestrating, problem: str, orchestrator: MeteredLLM, run: RunState, end: str) -> Final:
    """Give up (an empty answer), or synthesise and fall back as needed."""
    if end == "give_up":
        run.trace.add("give_up", explores=len(run.evidence))
        return Final("", None, "give_up", None, [])
    text = _synthesise(loop, problem, orchestrator, run, _why(run, end))
    if text is not None:
        parsed = parse_action(text)
        if loop.config.give_up and parsed is not None and parsed.action == "give_up":
            run.trace.add("give_up", explores=len(run.evidence), at="final answer turn")
            return Final("", None, "give_up", text, [])
    return _choose(loop, text, run)


def _why(run: RunState, end: str) -> str:
    last = run.decisions[-1] if run.decisions else None
    if end == "stop" and last is not None and last["source"] != "parsed":
        return "Exploring has ended (your last reply had no usable ACTION line)."
    if end == "stop":
        return "You stopped exploring."
    return "No more explores are possible (the explore cap or the budget is reached)."


def _synthesise(loop: Orchestrating, problem: str, orchestrator: MeteredLLM, run: RunState, why: str) -> str | None:
    """The final-answer call; None (recorded) on failure. In the orchestrator's conversation unless the
    integrator is switched on."""
    config = loop.config
    params = SamplingParams(temperature=config.temperature, max_tokens=config.synthesis_max_tokens)
    in_context = config.synthesis == "orchestrator"
    if in_context:
        loop.take_pending(run, prompts.synthesis_turn(why, loop.status(run), config))
        conversation = list(run.conversation)
    else:
        conversation = [{"role": "system", "content": prompts.INTEGRATOR_SYSTEM},
                        {"role": "user", "content": prompts.integrator_prompt(problem, run.evidence, config,
                                                                              loop.status(run))}]
    try:
        text = orchestrator.chat([conversation], params)[0].texts[0]
    except LLMError as err:  # BudgetExhausted included
        run.trace.add("synthesis_failed", error=f"{type(err).__name__}: {err}", mode=config.synthesis)
        return None
    if in_context:
        run.conversation.append({"role": "assistant", "content": text})
    if not text.strip():
        run.trace.add("synthesis_failed", error="empty synthesis", mode=config.synthesis)
        return None
    run.trace.add("synthesis", text=text, final=extract_answer(text), mode=config.synthesis)
    return text


def _choose(loop: Orchestrating, synthesis: str | None, run: RunState) -> Final:
    """The synthesis when there is one, else the best-verified candidate, else the majority one."""
    answered = [e for e in run.evidence if e["text"]]
    scores, rescored = scoring.end_scores(loop.verifier, run, synthesis, answered)
    if synthesis:
        return Final(synthesis, scores.get(synthesis), "synthesis", synthesis, rescored)
    if not answered:
        run.trace.add("fallback", source="none", reason="no explore produced an answer")
        return Final("", None, "none", None, rescored)
    if scores:
        best = max(answered, key=lambda e: (scores.get(e["text"], float("-inf")), -e["index"]))
        source = "fallback:best-verified"
    else:
        best = next(e for e in answered if e["index"] == majority_index(answered))
        source = "fallback:majority"
    run.trace.add("fallback", source=source, index=best["index"], final=best["final"])
    return Final(best["text"], scores.get(best["text"]), source, None, rescored)
