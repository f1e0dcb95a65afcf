"""StreamMA's prompts: what each agent is told, and what each of its turns sends it.

The paper's words are marked `# PAPER`, morkit's `# morkit`; docs/loops/streamma.md quotes the appendix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from morkit.loops.streamma.config import StreamMAConfig
from morkit.loops.streamma.graph import Topology

Message = dict[str, str]

ANSWER_LINE = "The answer is N"
ERROR_FORMAT = 'state "ERROR: [description]" then "CORRECTION: [corrected step]".'  # PAPER
AUTHORITY = {  # PAPER: the first reviewer's, a middle reviewer's and the last agent's wording
    "first": f"YOU MUST CORRECT ERRORS: When found, {ERROR_FORMAT}",
    "middle": f"YOU CAN OVERRULE PREVIOUS AGENTS: When you find errors, {ERROR_FORMAT}",
    "last": f"YOU HAVE FINAL CORRECTION AUTHORITY: This is the last chance to fix errors. S{ERROR_FORMAT[1:]}",
}
PASS_FORWARD = {  # PAPER
    "first": "Pass forward the MOST ACCURATE version (original if correct, your correction if not).",
    "middle": "Pass forward the MOST ACCURATE version.",
}
OVERALL_SUMMARY = "After all steps, provide DETAILED overall summary with thorough analysis and any corrections made."
FINAL_ROLE = ("You are responsible for final answer accuracy. FINAL ANSWER: Must directly address the original "
              "problem. Base on CORRECTED versions. After all steps, provide DETAILED final answer with thorough "
              "analysis.")  # PAPER
PROBLEM_HEAD = "The original problem is:"  # PAPER (a fragment of the appendix)


def marker_rule(marker: str, line: bool, each: str = "each step") -> str:
    """How an agent is told to end a step: the paper's 'output END_STEP on its own line' for a line marker."""
    if line:
        return f"After {each}, output {marker} on its own line."  # PAPER's form ("After your response, ...")
    return "Leave a blank line after each step." if not marker.strip() else f"End each step with {marker}."


def _steps_rule(steps: int | None) -> str:
    return f" in exactly {steps} steps" if steps is not None else ""


def single_system(cfg: StreamMAConfig) -> str:
    """Agent 0 alone (the `single` protocol)."""  # morkit
    return (f"Solve the problem step by step{_steps_rule(cfg.steps)}, one short step at a time, and end your last "
            f"step with '{ANSWER_LINE}'. {marker_rule(cfg.step_marker, line_marker(cfg))}")


def solver_system(cfg: StreamMAConfig, levels: int, streamed: bool) -> str:
    """Agent 0 at the head of a pipeline of `levels` levels."""  # morkit (the paper's box is not legible)
    how = "each step as soon as you finish it" if streamed else "your complete response once you finish it"
    rule = f" {marker_rule(cfg.step_marker, line_marker(cfg))}" if streamed or cfg.serial_marker else ""
    return (f"You are Agent 1, the solver at the head of a pipeline of {levels} agents; the next agent receives "
            f"{how}, to check it. Solve the problem step by step{_steps_rule(cfg.steps)}, one short step at a "
            f"time.{rule} End your last step with '{ANSWER_LINE}'.")


def line_marker(cfg: StreamMAConfig) -> bool:
    """Whether the marker is cut as a line of its own (see StepSplitter)."""
    return cfg.step_split == "line" and bool(cfg.step_marker.strip()) and "\n" not in cfg.step_marker


@dataclass(frozen=True)
class Seat:
    """Where a reviewer sits: its index, its upstream agents, its level (the solver is 1), the number of
    levels, whether it is a final agent (a sink) and whether it writes a summary."""

    agent: int
    upstream: tuple[int, ...]
    level: int
    levels: int
    final: bool
    summarises: bool

    @property
    def position(self) -> str:
        """first, middle or last: which of the paper's authority lines it gets."""
        return "last" if self.final else "first" if self.level == 2 else "middle"


def topology_line(topology: Topology) -> str:
    """The paper's '[Topology: Chain A→B→C→D]', agents by number; a tree or graph lists its edges."""
    if topology.kind == "chain":
        return f"[Topology: Chain {'→'.join(str(i + 1) for i in topology.order)}]"
    edges = ", ".join(f"{a + 1}→{b + 1}" for a, b in topology.edges())
    return f"[Topology: {topology.kind.capitalize()} {edges}]"


def _outputs(agents: Sequence[int]) -> str:
    """"Agent 2's output", or "Agent 2's and Agent 3's output"."""
    names = [f"Agent {u + 1}'s" for u in agents]
    return (names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]) + " output"


def authority_text(seat: Seat, rule: str) -> str:
    """What a reviewer is told about its authority, with the paper's ERROR/CORRECTION format."""
    if rule == "rising":
        return AUTHORITY[seat.position]
    if rule == "equal":  # morkit: an ablation
        return (f"When you find errors, {ERROR_FORMAT} Authority: every agent has equal say. Overrule an upstream "
                f"step or correction only when it is clearly wrong.")
    level, levels = seat.level, seat.levels  # morkit's earlier "ranked" text
    later = ("You are the last agent: your decision is final." if level == levels else
             f"Agents {level + 1}..{levels} after you rank above you and may overrule you.")
    return (f"When you find errors, {ERROR_FORMAT} Authority: level {level} of {levels}; it rises downstream. You "
            f"rank above agents 1..{level - 1}: when you are sure an upstream step, or an upstream CORRECTION, is "
            f"wrong, your judgement overrides it. {later}")


def reviewer_system(seat: Seat, cfg: StreamMAConfig, topology: Topology) -> str:
    """A downstream agent's system prompt (the paper's reviewer-and-corrector, or morkit's earlier rewrite)."""
    streamed = cfg.protocol == "stream"
    if cfg.review == "rewrite":
        return _rewrite_system(seat, cfg, streamed)
    how = "one at a time, each as soon as it is written" if streamed else "as one complete response"
    check = "final quality check briefly" if seat.final else "check it"  # PAPER's start, morkit's end
    parts = [
        f"{topology_line(topology)} You are Agent {seat.agent + 1}. You receive {_outputs(seat.upstream)}. "
        f"You are a reviewer-and-corrector.",  # PAPER
        f"You work in a pipeline of agents that solve a problem step by step; the steps come to you {how}.",  # morkit
        f"For each step: {check}; if it is correct, write ACCEPT.",  # PAPER up to the colon ("briefl...")
        authority_text(seat, cfg.authority),
    ]
    if seat.final:
        parts.append(FINAL_ROLE if seat.summarises else FINAL_ROLE.split(" After all steps")[0])
        if seat.summarises:  # morkit: the labels it reads
            parts.append(f"Begin that final answer with 'SUMMARY:' and end it with '{ANSWER_LINE}'.")
    else:
        parts.append(PASS_FORWARD[seat.position])
        if seat.summarises:
            parts.append(f"{OVERALL_SUMMARY} Begin it with 'SUMMARY:'.")  # PAPER, then morkit's label
    if streamed and line_marker(cfg):  # PAPER: a line the appendix tags "[Stream only]"
        parts.append(marker_rule(cfg.step_marker, True, "your response"))
    return "\n\n".join(parts)


def _rewrite_system(seat: Seat, cfg: StreamMAConfig, streamed: bool) -> str:
    """morkit's earlier reviewer: a verdict, then its own STEP k; the final agent's SUMMARY."""
    how = "one at a time, each as soon as it is written" if streamed else "as one complete response"
    parts = [
        f"You are agent {seat.level} of {seat.levels} in a pipeline of agents that solve a problem step by step. "
        f"The agent before you sends you its reasoning steps {how}.",
        "For each upstream step k, first review it:\n"
        "ACCEPT - if the step is correct; or\n"
        "ERROR: <what is wrong> and then CORRECTION: <the corrected step> - if it has a mistake.\n"
        f"Then write STEP k: <your own step k>, building on the steps you accepted or corrected"
        f"{'' if cfg.steps is None else f'; you write exactly {cfg.steps} steps'}.",
        authority_text(seat, cfg.authority),
    ]
    if seat.summarises:
        parts.append(f"You are the final agent: after your last step write SUMMARY: <a short summary of the "
                     f"solution> and end with '{ANSWER_LINE}'." if seat.final else
                     "After your last step write SUMMARY: <a short summary of the steps and your corrections>.")
    return "\n\n".join(parts)


def upstream_section(index: int, versions: Sequence[tuple[int, str]]) -> str:
    """Upstream step `index` (0-based) as sent: one (sender, text) per upstream agent that sent it."""
    if len(versions) == 1:
        sender, text = versions[0]
        return f"Upstream step {index + 1} (from agent {sender + 1}):\n{text}"
    listed = "\n".join(f"Version {chr(65 + k)} (from agent {s + 1}):\n{t}" for k, (s, t) in enumerate(versions))
    return f"Upstream step {index + 1}, in {len(versions)} versions:\n{listed}"


def _problem(problem: str) -> str:
    return f"{PROBLEM_HEAD}\n{problem}"


def stream_turn(problem: str | None, index: int, versions: Sequence[tuple[int, str]], *, review: str,
                last: bool) -> Message:
    """One stream turn: upstream step `index` (with the problem on the first turn). `last`: the final agent's
    reply to the last upstream step carries the summary and the answer (summary="final" with S set)."""
    if review == "rewrite":
        ask = f"Review upstream step {index + 1} and write your STEP {index + 1}."
    else:
        ask = f"Review upstream step {index + 1}: ACCEPT it, or state ERROR and CORRECTION."
    if last:
        ask += f" That was the last step: then write SUMMARY: <...> and end with '{ANSWER_LINE}'."
    head = f"{_problem(problem)}\n\n" if problem is not None else ""
    return {"role": "user", "content": f"{head}{upstream_section(index, versions)}\n\n{ask}"}


def summaries_block(summaries: Sequence[tuple[int, str]]) -> str:
    """Upstream agents' summaries, the last part of their output."""
    return "\n\n".join(f"Agent {sender + 1}'s summary:\n{text}" for sender, text in summaries)


def finish_turn(summaries: Sequence[tuple[int, str]], *, final: bool, review: str) -> Message:
    """The summary turn once upstream has ended: the upstream summaries, then the ask."""
    if review == "rewrite":
        ask = f"Write SUMMARY: <a short summary of the solution> and end with '{ANSWER_LINE}'." if final else \
            "Write SUMMARY: <a short summary of the steps and your corrections>."
    elif final:
        ask = (f"After all steps, provide DETAILED final answer with thorough analysis, based on the CORRECTED "
               f"versions: begin it with 'SUMMARY:' and end with '{ANSWER_LINE}'.")
    else:
        ask = f"{OVERALL_SUMMARY} Begin it with 'SUMMARY:'."
    head = f"{summaries_block(summaries)}\n\n" if summaries else ""
    return {"role": "user", "content": f"The upstream agent has finished.\n\n{head}{ask}"}


def serial_message(problem: str, chains: Sequence[tuple[int, Sequence[str]]],
                   summaries: Sequence[tuple[int, str]], *, review: str, final: bool, summarises: bool) -> Message:
    """The serial hand-off: each upstream agent's complete response, every step and its summary, in one message."""
    blocks = []
    for sender, steps in chains:
        sections = "\n\n".join(upstream_section(k, [(sender, s)]) for k, s in enumerate(steps))
        blocks.append(f"Agent {sender + 1}'s complete response:\n\n{sections}")
    if summaries:
        blocks.append(summaries_block(summaries))
    if review == "rewrite":
        ask = "Review each upstream step in order and write your own steps (ACCEPT or ERROR/CORRECTION, then STEP k)."
    else:
        ask = "Review each upstream step in order: ACCEPT it, or state ERROR and CORRECTION."
    if summarises:
        ask += (f" After your last step write SUMMARY: <...> and end with '{ANSWER_LINE}'." if final else
                " After all steps, write SUMMARY: your DETAILED overall summary and any corrections made.")
    return {"role": "user", "content": f"{_problem(problem)}\n\n" + "\n\n".join(blocks) + f"\n\n{ask}"}
