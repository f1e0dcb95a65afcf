"""What ATLAS's orchestrator (and the integrator of the ablation) reads: its system prompt, each turn, each candidate.

The orchestrator's principles follow the paper (Qin, Cao, Xie, arXiv 2606.01667): explore dispatches a FRESH,
independent solver on the original problem, optionally choosing solver, reasoning effort and prompting strategy;
the orchestrator weighs the evidence, decides when to stop, and writes the final answer itself; repeated failures
mean give up (an empty answer) rather than a guess; the final answer rests on the evidence and is not a new
solution the synthesis invents. The wording below is morkit's, not the paper's appendix prompt (the README's
ATLAS fidelity table says what follows the paper and what is morkit's choice).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from morkit.loops.atlas.protocol import ATLASConfig, groups, one_line

SYNTHESIS_HEADING = "Final answer turn."
INTEGRATOR_SYSTEM = ("You write the final answer to a problem from independent solvers' candidate responses. "
                     "Base it on the candidates: choose the answer the most convincing, independent candidates "
                     "support; do not introduce an answer that no candidate supports. If no candidate gives a "
                     "usable answer, reply with the single line 'ACTION: give_up'.")

_PRINCIPLES = (
    "Each explore runs a fresh, independent solver on the original problem. It sees nothing of the other "
    "candidates, only the problem and the settings you give it.",
    "Read the candidates' reasoning, not only their final answers. Agreement is strong evidence when it comes "
    "from different solvers, efforts or methods; candidates that repeat the same method can share the same "
    "mistake.",
    "Explore while the evidence is thin or conflicting, and vary the explore (solver, effort, prompting "
    "strategy) to get evidence you do not have yet. Stop as soon as the evidence is enough: every explore costs.",
    "If attempts keep failing (errors, no usable answer, no candidates agreeing after several tries), more "
    "exploring will not help: give up, which ends the run with an empty answer, rather than guess.",
    "Your final answer must rest on the evidence: take the answer the strongest independent candidates "
    "support. Do not write a new solution that no candidate supports.",
)
_COST_PRINCIPLE = ("Solvers differ in strength and price: use a cheaper solver where it should suffice, and a "
                   "stronger, dearer one where the evidence is weak or conflicting.")


def orchestrator_system(config: ATLASConfig, solvers: Sequence[str], default: str,
                        costs: Mapping[str, float]) -> str:
    """The orchestrator's role, principles, its action block, and the menus (solvers with prices, efforts, prompts)."""
    principles = list(_PRINCIPLES if config.give_up else _PRINCIPLES[:3] + _PRINCIPLES[4:])
    if costs:
        principles.insert(3, _COST_PRINCIPLE)
    priced = [f"{name}{' (default)' if name == default else ''}"
              + (f": price {costs[name]:g} per 1k tokens" if name in costs else "") for name in solvers]
    actions = ["ACTION: explore solver=<name> effort=<effort> prompt=<prompt>",
               "  runs one more fresh solver on the original problem; solver, effort and prompt are optional"]
    if config.additional_prompt:
        actions += ["  optionally followed by a line 'ADDITIONAL_PROMPT: <free text>' (to the end of your reply):",
                    "  extra instructions for that solver, e.g. a method to try"]
    actions += ["ACTION: stop", "  ends exploring; you then write the final answer"]
    if config.give_up:
        actions += ["ACTION: give_up", "  ends the run with an empty answer"]
    extra = " (and, for explore, an optional ADDITIONAL_PROMPT)" if config.additional_prompt else ""
    style = (f"Each turn, first think about the evidence in free text, then end your reply with exactly one ACTION "
             f"line{extra}." if config.reason_first else
             f"Reply with exactly one ACTION line{extra} and nothing else.")
    lines = ["You are the orchestrator of independent solvers working on one problem. You gather evidence with the "
             "explore action, decide when to stop, and write the final answer yourself.", "", "Principles:"]
    lines += [f"{i}. {p}" for i, p in enumerate(principles, 1)]
    lines += ["", "Actions:", *actions, "",
              "Solvers: " + "; ".join(priced) + ".",
              f"Efforts: {', '.join(config.efforts) or 'none'}. Prompts: {', '.join(config.prompts) or 'none'}.",
              style]
    return "\n".join(lines)


def problem_turn(problem: str) -> str:
    return f"Problem:\n{problem}"


def decision_request(status: str, config: ATLASConfig) -> str:
    """The close of every orchestrator turn before a decision: where the run stands, what to reply."""
    if config.reason_first:
        return f"{status}\n\nThink about the evidence, then end your reply with your ACTION line."
    return f"{status}\n\nYour ACTION line:"


def candidate_block(item: Mapping[str, Any], show_scores: bool) -> str:
    """One candidate as the orchestrator (or integrator) reads it: a header, the WHOLE response or a note that
    it was left out whole, then its final answer and (when shown) the verifier's score and feedback."""
    settings = (f"solver={item['solver']} effort={item['effort'] or '-'} prompt={item['prompt'] or '-'}"
                + (" with an additional prompt" if item.get("additional_prompt") else ""))
    cost = f", cost {item['cost']:.4g}" if item.get("cost") is not None else ""
    head = f"Candidate #{item['index']} ({settings}{cost})"
    if item["error"]:
        return f"{head}: the solver failed: {one_line(item['error'], 200)}"
    if item.get("in_context", True):
        body = f"<response>\n{item['text']}\n</response>"
    else:
        body = (f"[response left out whole: about {item['est_tokens']} tokens, over what is left of the "
                f"candidate-pool budget]")
    tail = [f"Final answer: {item['final'] if item['final'] is not None else 'none found'}."]
    if show_scores and item.get("score") is not None:
        tail.append(f"Verifier score: {item['score']:.3f}.")
    if show_scores and item.get("feedback"):
        tail.append(f"Verifier feedback: {one_line(item['feedback'], 300)}")
    return f"{head}:\n{body}\n{' '.join(tail)}"


def pool_status(evidence: Sequence[Mapping[str, Any]], config: ATLASConfig, total_cost: float | None) -> str:
    """Explores used, candidates left out of the context (how many, never cut), the answer tally, cost so far."""
    left_out = sum(1 for e in evidence if e["text"] and not e.get("in_context", True))
    parts = [f"Explores used: {len(evidence)} of {config.max_explores}."]
    if left_out:
        parts.append(f"{left_out} of {len(evidence)} candidate responses are left out whole (the candidate pool is "
                     f"over its budget of {config.pool_tokens} tokens); their final answers are shown.")
    if evidence:
        tally = ", ".join(f"{final} (x{len(members)})" for final, members in groups(evidence))
        parts.append(f"Final answers so far: {tally or 'none'}.")
    if total_cost is not None:
        parts.append(f"Cost so far: {total_cost:.4g}.")
    return " ".join(parts)


def result_block(item: Mapping[str, Any], notes: Sequence[str], show_scores: bool) -> str:
    """An explore's result as it joins the orchestrator's conversation (with notes on how its action was read)."""
    text = "".join(f"Note: {n}\n" for n in notes)
    return f"{text}Result of explore #{item['index']}:\n{candidate_block(item, show_scores)}"


def synthesis_turn(why: str, status: str, config: ATLASConfig) -> str:
    """The request for the final answer, in the orchestrator's own conversation."""
    give_up = (" If the evidence supports no answer, reply with the single line 'ACTION: give_up' instead."
               if config.give_up else "")
    return (f"{status}\n\n{SYNTHESIS_HEADING} {why} Write the final answer now from the candidates in this "
            f"conversation, "
            f"following the principles: take the answer the evidence supports. End with a line 'The answer is X.'"
            f"{give_up}")


def integrator_prompt(problem: str, evidence: Sequence[Mapping[str, Any]], config: ATLASConfig,
                      total_cost: float | None) -> str:
    """The ablation's stateless integrator: the problem and the candidate pool (same budget), no orchestrator turns."""
    blocks = "\n\n".join(candidate_block(e, config.show_scores) for e in evidence) or "(no candidates)"
    return (f"Problem:\n{problem}\n\nCandidates:\n{blocks}\n\n{pool_status(evidence, config, total_cost)}\n\n"
            "Write the final answer. End with a line 'The answer is X.'")
