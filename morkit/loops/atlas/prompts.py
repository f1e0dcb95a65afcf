"""What ATLAS's orchestrator (and the integrator of the ablation) reads: its system prompt, each turn, each candidate.

The principles are the paper's Appendix H, in the version the config matches (docs/loops/atlas.md)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from morkit.loops.atlas.protocol import ATLASConfig, groups, one_line

SYNTHESIS_HEADING = "Final answer turn."
INTEGRATOR_SYSTEM = ("You write the final answer to a problem from independent solvers' candidate responses. "
                     "Base it on the candidates: choose the answer the most convincing, independent candidates "
                     "support; do not introduce an answer that no candidate supports. If no candidate gives a "
                     "usable answer, reply with the single line 'ACTION: give_up'.")

# -- the paper's principles (Appendix H), as published: (sentence, what it needs) per principle ----------------
_ANY, _GIVE_UP, _REASON = "", "give_up", "reason_first"
_NO_SOLVING = [
    ("You cannot solve problems yourself.", _ANY),
    ("Your only window into the problem is what solvers return.", _ANY),
    ("Reasoning about the problem content -- analyzing algorithms, deriving formulas, writing code -- constitutes "
     "solving, even when framed as \"analysis\" or \"synthesis\".", _ANY)]
_ADDITIONAL = ("additional_prompt is your tool for forcing method diversity when the explore pool has drifted into "
               "method-redundancy.", _ANY)
_EVIDENCE = [  # principles 1-2, the same in both versions
    [*_NO_SOLVING, ("Any answer without candidate evidence is baseless and undermines the system.", _ANY)],
    [("A single candidate, regardless of its self-reported confidence, does not constitute sufficient "
      "evidence.", _ANY), ("Self-reported confidence is poorly calibrated.", _ANY)]]
PAPER_PRINCIPLES: Mapping[str, Sequence[Sequence[tuple[str, str]]]] = {
    "atlas": [  # principles 1-2 are not legible in this version: ATLAS-MM's below
        *_EVIDENCE,
        [("Genuine convergence means independent solvers arriving at the same answer through different methods.",
          _ANY), ("Candidates that agree but share the same reasoning path may reflect a shared misconception "
                  "rather than true convergence.", _ANY)],
        [("Solver failure (timeout, empty answer) reflects the problem's difficulty.", _ANY),
         ("Repeated failures reinforce this -- more attempts will not help.", _ANY),
         ("If solvers timed out, you will almost certainly fail too.", _GIVE_UP),
         # the paper goes on ", because you would als..." (cut off in the text)
         ("When solvers consistently fail, the problem is practically unsolvable -- submitting an empty answer is "
          "better than attempting it yourself.", _GIVE_UP)],
        [("CRITICAL: Each explore costs budget.", _ANY),
         ("Giving up is a valid and preferred action -- when candidates provide no useful information, you MUST "
          "submit an empty answer immediately rather than wasting budget or attempting to solve.", _GIVE_UP),
         ("Every decision you make must be grounded in one of the principles above.", _REASON),
         ("Explicitly cite which principle justifies your action.", _REASON)]],
    "atlas-mm": [
        *_EVIDENCE,
        [("Genuine convergence means independent solvers arriving at the same answer through different methods.",
          _ANY), ("Candidates from different models that agree provide stronger evidence than candidates from the "
                  "same model.", _ANY)],
        [("A weaker model failing does not mean a stronger model will also fail.", _ANY),
         ("Start with cheaper models first; escalate when they fail or disagree.", _ANY),
         ("Only when the strongest model fails repeatedly is the problem beyond reach.", _ANY)],
        [("CRITICAL: Each explore costs real money.", _ANY),
         ("Giving up is a valid and preferred action -- when candidates provide no useful information, you MUST "
          "submit an empty answer immediately rather than wasting budget or attempting to solve.", _GIVE_UP),
         # the paper's list goes on past (b) (cut off in the text)
         ("Before each explore call, explicitly reason about: (a) which model to use and why, citing cost data; "
          "(b) what you expect to learn.", _REASON)]],
    "additional_prompt": [
        [*_NO_SOLVING, ("Any answer without candidate evidence is baseless.", _ANY)],
        [("A single candidate, regardless of self-reported confidence, does not constitute sufficient evidence.",
          _ANY), ("Self-reported confidence is poorly calibrated.", _ANY)],
        [("Genuine convergence means independent solvers arriving at the same answer through DIFFERENT methods.",
          _ANY), ("Same-method agreement may reflect a shared misconception.", _ANY), _ADDITIONAL],
        [("Solver failure (timeout, empty answer) reflects the problem's difficulty.", _ANY),
         ("Repeated failures reinforce this -- more attempts will not help.", _ANY)],
        [("CRITICAL: Each explore costs budget.", _ANY),
         ("Giving up is valid -- when candidates provide no useful information, submit an empty answer immediately "
          "rather than wasting budget or attempting to solve.", _GIVE_UP),
         ("Every decision must cite which principle justifies the action.", _REASON)]],
}


def paper_version(config: ATLASConfig, priced: bool) -> str:
    """Which of the paper's prompt versions this configuration is: atlas-mm | additional_prompt | atlas."""
    return "atlas-mm" if priced else "additional_prompt" if config.additional_prompt else "atlas"


def principles(config: ATLASConfig, priced: bool) -> list[str]:
    """The paper's principles for this configuration, adapted as the module docstring says."""
    version = paper_version(config, priced)
    chosen = [list(p) for p in PAPER_PRINCIPLES[version]]
    if version == "atlas-mm" and config.additional_prompt:
        chosen[2].append(_ADDITIONAL)
    offered = {_ANY, *([_GIVE_UP] if config.give_up else []), *([_REASON] if config.reason_first else [])}
    return [" ".join(text.replace("additional_prompt", "ADDITIONAL_PROMPT") for text, needs in p if needs in offered)
            for p in chosen]


def orchestrator_system(config: ATLASConfig, solvers: Sequence[str], default: str,
                        costs: Mapping[str, float]) -> str:
    """The orchestrator's role, the paper's principles, its action block, and the menus (solvers with prices,
    efforts, prompts)."""
    priced = [f"{name}{' (default)' if name == default else ''}"
              + (f": price {costs[name]:g} per 1k tokens" if name in costs else "") for name in solvers]
    actions = ["ACTION: explore solver=<name> effort=<effort> prompt=<prompt>",
               "  runs one more fresh, independent solver on the original problem; solver, effort and prompt are "
               "optional"]
    if config.additional_prompt:
        actions += ["  optionally followed by a line 'ADDITIONAL_PROMPT: <free text>' (to the end of your reply):",
                    "  extra instructions for that solver, e.g. a method to try"]
    actions += ["ACTION: stop", "  ends exploring; you then write the final answer from the candidates"]
    if config.give_up:
        actions += ["ACTION: give_up", "  submits an empty answer: the run ends"]
    extra = " (and, for explore, an optional ADDITIONAL_PROMPT)" if config.additional_prompt else ""
    style = (f"Each turn, first think about the evidence in free text, then end your reply with exactly one ACTION "
             f"line{extra}." if config.reason_first else
             f"Reply with exactly one ACTION line{extra} and nothing else.")
    lines = ["You are the orchestrator of independent solvers working on one problem. You gather evidence with the "
             "explore action, decide when to stop, and write the final answer from the evidence.", "", "Principles:"]
    lines += [f"{i}. {p}" for i, p in enumerate(principles(config, bool(costs)), 1)]
    lines += ["", "Actions:", *actions, "",
              "Solvers: " + "; ".join(priced) + ".",
              f"Efforts: {', '.join(config.effort_menu()) or 'none'}. "
              f"Prompts: {', '.join(config.prompts) or 'none'}.",
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


def pool_status(evidence: Sequence[Mapping[str, Any]], config: ATLASConfig, total_cost: float | None,
                scores: str | None = None) -> str:
    """Explores used, candidates left out of the context (how many, never cut), the answer tally (`show_tally`),
    the verifier's one-call scores when given, cost so far."""
    left_out = sum(1 for e in evidence if e["text"] and not e.get("in_context", True))
    parts = [f"Explores used: {len(evidence)} of {config.max_explores}."]
    if left_out:
        parts.append(f"{left_out} of {len(evidence)} candidate responses are left out whole (the candidate pool is "
                     f"over its budget of {config.pool_tokens} tokens); their final answers are shown.")
    if evidence and config.show_tally:
        tally = ", ".join(f"{final} (x{len(members)})" for final, members in groups(evidence))
        parts.append(f"Final answers so far: {tally or 'none'}.")
    if scores:
        parts.append(scores)
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


def integrator_prompt(problem: str, evidence: Sequence[Mapping[str, Any]], config: ATLASConfig, status: str) -> str:
    """The ablation's stateless integrator: the problem, the candidate pool (same budget) and the run's status,
    no orchestrator turns."""
    blocks = "\n\n".join(candidate_block(e, config.show_scores) for e in evidence) or "(no candidates)"
    return (f"Problem:\n{problem}\n\nCandidates:\n{blocks}\n\n{status}\n\n"
            "Write the final answer. End with a line 'The answer is X.'")
