"""ATLAS's data and protocol: configuration, solvers, the orchestrator's ACTION line parser, evidence views.

Kept apart from the loop (loop.py) so the protocol can be read and tested on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from morkit.core.errors import InputError
from morkit.core.grading import answers_equivalent, is_correct, reference_answer
from morkit.llm.base import LLM, SamplingParams

SOLVER_SYSTEM = ("You solve math problems. Reason briefly, step by step, and end with a line "
                 "'The answer is X.' where X is the final answer.")


@dataclass(frozen=True)
class Effort:
    """A reasoning effort: the solver's max_tokens and an instruction added to its system prompt."""

    max_tokens: int
    instruction: str = ""


DEFAULT_EFFORTS: Mapping[str, Effort] = {
    "low": Effort(128, "Answer briefly."),
    "medium": Effort(256, "Solve step by step."),
    "high": Effort(512, "Think step by step carefully and check every step before giving the answer."),
}
DEFAULT_PROMPTS: Mapping[str, str] = {
    "direct": "",
    "plan": "First write a short plan, then carry it out.",
    "check": "After solving, check the answer against the problem before stating it.",
}


@dataclass(frozen=True)
class ATLASConfig:
    """Loop limits, the effort and prompt-variant menus, and the orchestrator's sampling.

    `temperature`/`max_tokens` are for the orchestrator's decisions; `synthesis_max_tokens` for the
    final synthesis (same temperature). `excerpt_chars` clips each answer in the orchestrator's
    summary (its end, where the answer is); `synthesis_chars` clips each answer shown to synthesis."""

    max_explores: int = 4
    min_explores: int = 1
    efforts: Mapping[str, Effort] = field(default_factory=lambda: dict(DEFAULT_EFFORTS))
    prompts: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_PROMPTS))
    temperature: float = 0.2
    max_tokens: int = 64
    synthesis_max_tokens: int = 384
    excerpt_chars: int = 160
    synthesis_chars: int = 800

    def __post_init__(self) -> None:
        if self.max_explores < 1 or not 0 <= self.min_explores <= self.max_explores:
            raise InputError(f"ATLASConfig: need 1 <= max_explores and 0 <= min_explores <= max_explores, got "
                             f"max_explores={self.max_explores!r}, min_explores={self.min_explores!r}")
        for name in [*self.efforts, *self.prompts]:
            check_name(name)
        # the sampling parameters must be valid: fail here rather than at the first call
        SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens)
        SamplingParams(temperature=self.temperature, max_tokens=self.synthesis_max_tokens)
        for effort in self.efforts.values():
            SamplingParams(max_tokens=effort.max_tokens)


@dataclass(frozen=True)
class Solver:
    """One solver: an LLM with its own sampling parameters and system prompt."""

    llm: LLM
    params: SamplingParams = SamplingParams(temperature=0.7, max_tokens=256)
    system: str = SOLVER_SYSTEM


@dataclass(frozen=True)
class Decision:
    """One orchestrator decision: the action taken and why (`source`: parsed | default | error)."""

    action: str  # "explore" | "stop"
    solver: str | None = None
    effort: str | None = None
    prompt: str | None = None
    source: str = "parsed"
    notes: tuple[str, ...] = ()
    raw: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "solver": self.solver, "effort": self.effort, "prompt": self.prompt,
                "source": self.source, "notes": list(self.notes), "raw": self.raw}


_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_ACTION = re.compile(r"(?im)^[ \t]*ACTION[ \t]*:[ \t]*(explore|stop)\b([^\n]*)$")
_ARG = re.compile(r"([A-Za-z_]+)=(\S+)")


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise InputError(f"name {name!r} cannot be written in the ACTION protocol (letters, digits, _ . - only)")


def parse_action(text: str) -> tuple[str, dict[str, str]] | None:
    """The first `ACTION: explore|stop [key=value ...]` line of a reply as (action, args); None if absent.

    Keys are lower-cased; a repeated key keeps its first value; non key=value words are ignored."""
    match = _ACTION.search(text or "")
    if match is None:
        return None
    args: dict[str, str] = {}
    for key, value in _ARG.findall(match.group(2)):
        args.setdefault(key.lower(), value)
    return match.group(1).lower(), args


def as_solver(spec: Any) -> Solver:
    """A Solver from a Solver, an LLM, or a tuple (llm[, params[, system]])."""
    if isinstance(spec, Solver):
        return spec
    if isinstance(spec, tuple) and 1 <= len(spec) <= 3:
        return Solver(*spec)
    if isinstance(spec, LLM):
        return Solver(spec)
    raise InputError(f"not a solver spec (Solver, LLM or (llm, params, system)): {spec!r}")


SYNTHESIS_SYSTEM = ("You write the final answer to a problem from independent solvers' attempts and their "
                    "verifier scores. Weigh agreement and scores, fix mistakes you can see, and give one final "
                    "answer.")


def evidence_summary(evidence: Sequence[Mapping[str, Any]], excerpt_chars: int = 160) -> str:
    """The orchestrator's compact view: one line per explore, then a tally of the final answers."""
    if not evidence:
        return "(none yet)"
    lines = []
    for e in evidence:
        head = f"#{e['index']} solver={e['solver']} effort={e['effort'] or '-'} prompt={e['prompt'] or '-'}"
        if e["error"]:
            lines.append(f"{head} failed: {one_line(e['error'], 120)}")
            continue
        line = f"{head} answer={e['final'] if e['final'] is not None else '?'}"
        if e["score"] is not None:
            line += f" score={e['score']:.3f}"
        if e["feedback"]:
            line += f" | feedback: {one_line(e['feedback'], 120)}"
        tail = one_line(e["text"], 10**9)[-excerpt_chars:] if excerpt_chars > 0 else ""
        lines.append(f"{line} | ends: \"{tail}\"" if tail else line)
    tally = ", ".join(f"{final} (x{len(group)})" for final, group in _groups(evidence))
    lines.append(f"Final answers so far: {tally or 'none'}")
    return "\n".join(lines)


def _groups(evidence: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[int]]]:
    """Equivalent final answers grouped as (first spelling, [explore indices]); largest first, then earliest."""
    groups: list[tuple[str, list[int]]] = []
    for e in evidence:
        final = e.get("final")
        if final is None:
            continue
        for representative, members in groups:
            if answers_equivalent(representative, final):
                members.append(e["index"])
                break
        else:
            groups.append((final, [e["index"]]))
    return sorted(groups, key=lambda g: (-len(g[1]), g[1][0]))


def majority_index(answered: Sequence[Mapping[str, Any]]) -> int:
    """The earliest explore in the largest group of equivalent final answers (the first one if none has a final)."""
    groups = _groups(answered)
    return groups[0][1][0] if groups else answered[0]["index"]


def reference_check(answer: str, evidence: Sequence[Mapping[str, Any]], reference: str) -> dict[str, Any]:
    """Whether the final answer and each explore's final answer match the reference (after the loop only)."""
    ref = reference_answer(reference) or reference
    return {"reference": ref, "correct": is_correct(answer, reference),
            "explores_correct": [answers_equivalent(e["final"], ref) if e["final"] is not None else None
                                 for e in evidence]}


def one_line(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: max(limit - 3, 0)] + "..."


def clip(text: str, limit: int) -> str:
    """Text kept whole up to `limit` characters, else its head and tail around ' ... '."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]} ... {text[-half:]}"
