"""StreamMA's prompts and the review protocol: what each agent is told, what it receives, how its reply is read.

Roles follow the paper's code (EnVision-Research/StreamMA: PROMPT_A / PROMPT_B / PROMPT_C, one system
prompt per agent): agent 0 solves in delimited steps; every downstream agent reviews each upstream step and
writes its own; the final agent (every sink) also ends with a summary and the final answer. The published
prompt texts (the paper's appendix) were not readable from here, so these are morkit's own wording of that
protocol, not the paper's text:

    ACCEPT                              the upstream step is correct, or
    ERROR: <what is wrong>              it has a mistake, and
    CORRECTION: <the corrected step>    the step as it should be;
    STEP k: <the agent's own step k>    then the agent's own step, building on what it accepted or corrected;
    SUMMARY: <...> The answer is N      the final agent only, after its last step.

Authority rises downstream (`authority="rising"`): agent k is told its rank and that it may overrule any
upstream step or correction, and that later agents may overrule it. Both protocols use the same system
prompts and the same 'Upstream step k (from agent j):' sections; they differ only in delivery: `stream` sends
one section per user turn as each step arrives (the conversation grows turn by turn, so a KV cache can keep
its prefix), `serial` sends the complete upstream response, every section, in one message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

Message = dict[str, str]

ANSWER_LINE = "The answer is N"


def _marker_rule(marker: str) -> str:
    return "Leave a blank line after each step." if not marker.strip() else f"End each step with {marker}."


def _steps_rule(steps: int | None) -> str:
    return f" in exactly {steps} steps" if steps is not None else ""


def single_system(marker: str, steps: int | None) -> str:
    """Agent 0 alone (the `single` protocol)."""
    return (f"Solve the problem step by step{_steps_rule(steps)}, one short step per paragraph, and end your "
            f"last step with '{ANSWER_LINE}'. {_marker_rule(marker)}")


def solver_system(marker: str, steps: int | None, agents: int, streamed: bool = True) -> str:
    """Agent 0 at the head of a pipeline of `agents` levels."""
    how = "each step as soon as you finish it" if streamed else "your complete response once you finish it"
    return (f"You are agent 1 of {agents}, the first solver of a pipeline of agents. Solve the problem step by "
            f"step{_steps_rule(steps)}, one short step per paragraph. {_marker_rule(marker)} The next agent "
            f"receives {how}, to check it. End your last step with '{ANSWER_LINE}'.")


def authority_text(level: int, levels: int, rule: str) -> str:
    """What agent `level` (1-based; the solver is 1) of `levels` is told about its authority."""
    if rule == "equal":
        return ("Authority: every agent has equal say. Overrule an upstream step or correction only when it is "
                "clearly wrong.")
    later = ("You are the last agent: your decision is final." if level == levels else
             f"Agents {level + 1}..{levels} after you rank above you and may overrule you.")
    return (f"Authority: level {level} of {levels}; it rises downstream. You rank above agents 1..{level - 1}: when "
            f"you are sure an upstream step, or an upstream CORRECTION, is wrong, your judgement overrides it. "
            f"{later}")


def reviewer_system(level: int, levels: int, *, authority: str, final: bool, streamed: bool, steps: int | None
                    ) -> str:
    """A downstream agent's system prompt: the review protocol, its authority, and the final role if a sink."""
    how = ("one at a time, each as soon as it is written" if streamed else "as one complete response")
    parts = [
        f"You are agent {level} of {levels} in a pipeline of agents that solve a problem step by step. The agent "
        f"before you sends you its reasoning steps {how}.",
        "For each upstream step k, first review it:\n"
        "ACCEPT - if the step is correct; or\n"
        "ERROR: <what is wrong> and then CORRECTION: <the corrected step> - if it has a mistake.\n"
        f"Then write STEP k: <your own step k>, building on the steps you accepted or corrected"
        f"{'' if steps is None else f'; you write exactly {steps} steps'}.",
        authority_text(level, levels, authority),
    ]
    if final:
        parts.append(f"You are the final agent: after your last step write SUMMARY: <a short summary of the "
                     f"solution> and end with '{ANSWER_LINE}'.")
    return "\n\n".join(parts)


def upstream_section(index: int, versions: Sequence[tuple[int, str]]) -> str:
    """Upstream step `index` (0-based) as sent: one (sender, text) per upstream agent that sent it."""
    if len(versions) == 1:
        sender, text = versions[0]
        return f"Upstream step {index + 1} (from agent {sender + 1}):\n{text}"
    listed = "\n".join(f"Version {chr(65 + k)} (from agent {s + 1}):\n{t}" for k, (s, t) in enumerate(versions))
    return f"Upstream step {index + 1}, in {len(versions)} versions:\n{listed}"


def _problem(problem: str) -> str:
    return f"Problem:\n{problem}"


def stream_turn(problem: str | None, index: int, versions: Sequence[tuple[int, str]], *, last: bool) -> Message:
    """One stream turn: upstream step `index` (with the problem on the first turn). `last`: the final agent's
    reply to the last upstream step carries the summary and the answer."""
    ask = f"Review upstream step {index + 1} and write your STEP {index + 1}."
    if last:
        ask += f" That was the last step: then write SUMMARY: <...> and end with '{ANSWER_LINE}'."
    head = f"{_problem(problem)}\n\n" if problem is not None else ""
    return {"role": "user", "content": f"{head}{upstream_section(index, versions)}\n\n{ask}"}


def finish_turn() -> Message:
    """The final agent's extra turn once upstream has ended without a known last step."""
    return {"role": "user", "content": f"The upstream agent has finished. Write SUMMARY: <a short summary of the "
                                       f"solution> and end with '{ANSWER_LINE}'."}


def serial_message(problem: str, chains: Sequence[tuple[int, Sequence[str]]], *, final: bool) -> Message:
    """The serial hand-off: each upstream agent's complete response, every step of it, in one message."""
    blocks = []
    for sender, steps in chains:
        sections = "\n\n".join(upstream_section(k, [(sender, s)]) for k, s in enumerate(steps))
        blocks.append(f"Agent {sender + 1}'s complete response:\n\n{sections}")
    ask = "Review each upstream step in order and write your own steps (ACCEPT or ERROR/CORRECTION, then STEP k)."
    if final:
        ask += f" After your last step write SUMMARY: <...> and end with '{ANSWER_LINE}'."
    return {"role": "user", "content": f"{_problem(problem)}\n\n" + "\n\n".join(blocks) + f"\n\n{ask}"}


# -- reading replies ------------------------------------------------------------------------------------

_LABEL = re.compile(r"(?im)^[ \t]*(?:[*#>-][ \t]*)*"  # a line that starts (after list or bold marks) with a label
                    r"(ACCEPT(?:ED)?\b|ERROR\b|CORRECTION\b|STEP(?:[ \t]*\d+)?\b|SUMMARY\b)"
                    r"[ \t]*\**[ \t]*[:.\-]?[ \t]*")


@dataclass(frozen=True)
class Block:
    """One step's part of a reply: the verdict on the upstream step, and the agent's own step."""

    verdict: str  # accept | error | none (no verdict written)
    error: str | None
    correction: str | None
    step: str | None  # the agent's own step as written (None: not written)
    text: str = ""  # the block as written, labels included


@dataclass(frozen=True)
class Reply:
    """A reply read by the protocol: its blocks (one per step), the text before any label, the summary."""

    blocks: tuple[Block, ...]
    preamble: str
    summary: str | None  # from SUMMARY: to the end (the final answer line included)


def parse_reply(text: str) -> Reply:
    """Read labelled sections. A block ends at its STEP (or at the next verdict after a step); SUMMARY runs to
    the end. Unlabelled text before the first label is the preamble (a step written without labels)."""
    marks = list(_LABEL.finditer(text))
    preamble = text[: marks[0].start()].strip() if marks else text.strip()
    blocks: list[Block] = []
    current: dict[str, str] = {}
    span = [0, 0]  # where the current block starts and ends in `text`
    summary = None

    def close() -> None:
        if current:
            verdict = "error" if "error" in current else "accept" if "accept" in current else "none"
            blocks.append(Block(verdict, current.get("error"), current.get("correction"), current.get("step"),
                                text[span[0]: span[1]].strip()))
            current.clear()

    for n, mark in enumerate(marks):
        label = mark.group(1).upper()
        end = marks[n + 1].start() if n + 1 < len(marks) else len(text)
        body = text[mark.end(): end].strip()
        if label.startswith("SUMMARY"):
            close()
            summary = f"SUMMARY: {text[mark.end():].strip()}".strip()
            break
        key = "accept" if label.startswith("ACCEPT") else "step" if label.startswith("STEP") else label.lower()
        if (key in ("accept", "error") and current.keys() & {"step", "accept", "error"}) or (
                key == "step" and "step" in current):
            close()  # a new verdict, or a second step, starts the next block
        if not current:
            span[0] = mark.start()
        current[key] = body
        span[1] = end
    close()
    return Reply(tuple(blocks), preamble, summary)


def own_step(block: Block | None, preamble: str, upstream: str) -> tuple[str, str]:
    """The agent's step and how it came about: written (its STEP), corrected (only a CORRECTION), kept (an
    ACCEPT with no step of its own: the upstream step), unlabelled (text without labels), fallback (nothing
    usable: the upstream step)."""
    if block is not None and block.step:
        return block.step, "written"
    if block is not None and block.correction:
        return block.correction, "corrected"
    if block is not None and block.verdict == "accept" and upstream:
        return upstream, "kept"
    if preamble:
        return preamble, "unlabelled"
    return upstream, "fallback"


def forwarded(reply: str, step: str, source: str, index: int, forward: str) -> str:
    """What an agent hands downstream for its step `index`: with forward="reply" its reply as written, plus its
    step when the reply holds none of its own (a bare ACCEPT keeps the upstream step: the receiver is shown
    it); with forward="step", or when the reply is unusable, the step alone."""
    reply = reply.strip()
    if forward != "reply" or not reply or source == "fallback":
        return step
    return f"{reply}\nSTEP {index + 1}: {step}" if source == "kept" else reply
