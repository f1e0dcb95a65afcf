"""Reading a StreamMA reviewer's reply: its verdicts, corrections, steps and summary, and what it hands on.

A reply is read by its labels (ACCEPT, ERROR:, CORRECTION:, STEP k:, SUMMARY:), one block per upstream
step. Under the paper's review (`review="correct"`) an agent's version of a step is 'the MOST ACCURATE
version (original if correct, your correction if not)': `version`. Under morkit's earlier protocol
(`review="rewrite"`) it is the step the agent wrote itself: `own_step`. `forwarded` builds what goes
downstream for a step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from morkit.loops.streamma.graph import split_steps

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


def version(block: Block | None, upstream: str) -> tuple[str, str]:
    """The paper's review: the agent's version of a step and how it came about: corrected (its CORRECTION),
    flagged (an ERROR with no correction: the upstream step stands), kept (an ACCEPT), unreviewed (no verdict:
    no error was stated, so the upstream step stands). A STEP the agent wrote anyway is not its version."""
    if block is not None and block.correction:
        return block.correction, "corrected"
    if block is not None and block.verdict == "error":
        return upstream, "flagged"
    if block is not None and block.verdict == "accept":
        return upstream, "kept"
    return upstream, "unreviewed"


def own_step(block: Block | None, preamble: str, upstream: str) -> tuple[str, str]:
    """morkit's earlier review: the agent's step and how it came about: written (its STEP), corrected (only a
    CORRECTION), kept (an ACCEPT with no step of its own: the upstream step), unlabelled (text without labels),
    fallback (nothing usable: the upstream step)."""
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
    """What an agent hands downstream for its step `index`: with forward="reply" its reply as written, then its
    version of the step as `STEP k:` unless the reply already ends with it (its own STEP, its unlabelled text,
    or a CORRECTION);
    with forward="step", or when the reply is unusable, the step alone."""
    reply = reply.strip()
    if forward != "reply" or not reply or source == "fallback":
        return step
    if source in ("written", "unlabelled") or (source == "corrected" and reply.endswith(step.strip())):
        return reply
    return f"{reply}\nSTEP {index + 1}: {step}"


def without_steps(reply: str) -> str:
    """A reply without the STEP sections a reviewer wrote anyway: under the paper's review its version of a
    step is the original or its correction, and downstream agents are shown that version, not a second step."""
    marks = list(_LABEL.finditer(reply))
    keep, start = [], 0
    for n, mark in enumerate(marks):
        if mark.group(1).upper().startswith("STEP"):
            keep.append(reply[start: mark.start()])
            start = marks[n + 1].start() if n + 1 < len(marks) else len(reply)
    keep.append(reply[start:])
    return "".join(keep).strip()


def without_marker(reply: str, marker: str, line: bool) -> str:
    """A stream reply without the end-of-step marker lines the paper asks reviewers to write (line mode only:
    a marker such as a blank line is part of the text)."""
    if not line or marker not in reply:
        return reply
    return "\n\n".join(split_steps(reply, marker, line=True))
