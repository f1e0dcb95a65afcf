"""Reading a StreamMA reviewer's reply: its verdicts, corrections, steps and summary, and what it hands on.

A reply is read by its labels (ACCEPT, ERROR:, CORRECTION:, STEP k:, SUMMARY:), one block per upstream step."""

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
    number: int | None = None  # the upstream step it answers, when the reply names it ("Step k" / "STEP k:")


@dataclass(frozen=True)
class Reply:
    """A reply read by the protocol: its blocks (one per step), the text before any label, the summary."""

    blocks: tuple[Block, ...]
    preamble: str
    summary: str | None  # from SUMMARY: to the end (the final answer line included)


_VERDICTS = ("accept", "error")


def _key(mark: re.Match) -> str:
    label = mark.group(1).upper()
    return ("accept" if label.startswith("ACCEPT") else "step" if label.startswith("STEP")
            else "summary" if label.startswith("SUMMARY") else label.lower())


def _scan(text: str) -> list[tuple[re.Match, str, str, int]]:
    """Each label of a reply as (mark, role, body, end). A STEP label is a `heading` (the step a verdict
    answers) when it has no text of its own, or when it comes before its block's verdict and a verdict follows
    it; `correction` when it is the text of a CORRECTION: left empty on its own line; else the agent's `step`."""
    marks = list(_LABEL.finditer(text))
    out: list[tuple[re.Match, str, str, int]] = []
    verdict, number = False, None  # the current block has a verdict; the step number it names
    for n, mark in enumerate(marks):
        end = marks[n + 1].start() if n + 1 < len(marks) else len(text)
        body, role = text[mark.end(): end].strip(), _key(mark)
        if role == "step":
            after = _key(marks[n + 1]) if n + 1 < len(marks) else None
            if out and out[-1][1] == "correction" and not out[-1][2]:
                role = "correction"  # "CORRECTION:\nStep k: ..." : the correction's text
            elif not body or (after in _VERDICTS and (not verdict or _renumbers(number, mark))):
                role = "heading"
        if role == "heading" or (role in _VERDICTS and verdict):
            verdict, number = False, None
        if role in _VERDICTS:
            verdict = True
        if role in ("heading", "step") and number is None:
            number = _number(mark)
        out.append((mark, role, body, end))
        if role == "summary":
            break
    return out


def _renumbers(number: int | None, mark: re.Match) -> bool:
    """A numbered STEP that names another step than the current block's: the next block's heading."""
    named = _number(mark)
    return number is not None and named is not None and named != number


def _number(mark: re.Match) -> int | None:
    digits = re.search(r"\d+", mark.group(1))
    return int(digits.group()) if digits else None


def parse_reply(text: str) -> Reply:
    """Read labelled sections. A block ends at its STEP (or at the next verdict after a step); a "Step k" heading
    before a verdict starts that verdict's block and names its step; SUMMARY runs to the end. Unlabelled text
    before the first label is the preamble (a step written without labels)."""
    marks = list(_LABEL.finditer(text))
    preamble = text[: marks[0].start()].strip() if marks else text.strip()
    blocks: list[Block] = []
    current: dict[str, str] = {}
    number: list[int | None] = [None]
    span = [0, 0]  # where the current block starts and ends in `text`
    summary = None

    def close() -> None:
        if current:
            verdict = "error" if "error" in current else "accept" if "accept" in current else "none"
            blocks.append(Block(verdict, current.get("error"), current.get("correction"), current.get("step"),
                                text[span[0]: span[1]].strip(), number[0]))
            current.clear()
            number[0] = None

    for mark, role, body, end in _scan(text):
        if role == "summary":
            close()
            summary = f"SUMMARY: {text[mark.end():].strip()}".strip()
            break
        if role == "correction" and "correction" in current and _key(mark) == "step":
            current["correction"] = body  # the text of an empty CORRECTION: on the next line
            span[1] = end
            continue
        if (role in _VERDICTS and current.keys() & {"step", "accept", "error"}) or (
                role == "step" and "step" in current) or (role == "heading" and current.keys() - {"heading"}):
            close()  # a new verdict, a second step, or a heading starts the next block
        if not current:
            span[0] = mark.start()
        if role in ("heading", "step") and number[0] is None:
            number[0] = _number(mark)
        current[role] = body
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
    """A reply without the STEP sections a reviewer wrote anyway (and its "Step k" headings): under the paper's
    review its version of a step is the original or its correction, and downstream agents are shown that
    version, not a second step. A "Step k:" line that is a correction's text stays."""
    keep, start = [], 0
    scanned = _scan(reply)
    for n, (mark, role, _, _) in enumerate(scanned):
        if role in ("step", "heading"):
            keep.append(reply[start: mark.start()])
            start = scanned[n + 1][0].start() if n + 1 < len(scanned) else len(reply)
    keep.append(reply[start:])
    return "".join(keep).strip()


def without_marker(reply: str, marker: str, line: bool) -> str:
    """A stream reply without the end-of-step marker lines the paper asks reviewers to write (line mode only:
    a marker such as a blank line is part of the text)."""
    if not line or marker not in reply:
        return reply
    return "\n\n".join(split_steps(reply, marker, line=True))


def matched_blocks(parsed: Reply, steps: int) -> list[Block | None]:
    """The block answering each of `steps` upstream steps (a serial review): the one that names the step by its
    number, else the next by position; None where no block answers a step (a block left over goes downstream
    with the last step)."""
    slots: list[Block | None] = [None] * steps
    nxt = 0
    for block in parsed.blocks:
        named = block.number - 1 if block.number is not None and 0 < block.number <= steps else None
        k = named if named is not None and slots[named] is None else nxt
        while named is None and k < steps and slots[k] is not None:
            k += 1
        if k < steps and slots[k] is None:
            slots[k] = block
        nxt = k + 1
    return slots
