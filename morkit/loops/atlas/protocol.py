"""ATLAS's data and protocol: configuration, solvers, the orchestrator's ACTION parser, evidence helpers.

Kept apart from the loop (loop.py) and the prompts (prompts.py) so the protocol can be read and tested alone."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping, Sequence

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.grading import answers_equivalent, is_correct, majority_groups, reference_answer
from morkit.llm.base import LLM, SamplingParams
from morkit.llm.presets import user_template
from morkit.loops.settings import LoopFlag

SOLVER_SYSTEM = ("You solve math problems. Reason briefly, step by step, and end with a line "
                 "'The answer is X.' where X is the final answer.")


@dataclass(frozen=True)
class Effort:
    """An explore effort: the solver model's own reasoning-effort setting (`reasoning`, the paper's meaning), or,
    for a model without one, a token cap and an instruction (`max_tokens`, `instruction`). What is set applies."""

    max_tokens: int | None = None
    instruction: str = ""
    reasoning: str | None = None

    def __post_init__(self) -> None:
        if self.max_tokens is None and not self.instruction and self.reasoning is None:
            raise InputError("Effort: set reasoning, or max_tokens and/or instruction")
        # fail here rather than at the first call
        SamplingParams(max_tokens=1 if self.max_tokens is None else self.max_tokens, reasoning_effort=self.reasoning)


REASONING_EFFORTS: Mapping[str, Effort] = {name: Effort(reasoning=name) for name in ("low", "medium", "high")}
"""The default menu: each effort is the solver's reasoning-effort setting of that name; its answer is not capped."""
TOKEN_CAP_EFFORTS: Mapping[str, Effort] = {
    "low": Effort(128, "Answer briefly."),
    "medium": Effort(256, "Solve step by step."),
    "high": Effort(512, "Think step by step carefully and check every step before giving the answer."),
}
"""`effort_mode=token_cap`: for small local models without a reasoning-effort setting; each effort caps the
answer's tokens and adds an instruction, so a long answer is cut."""
DEFAULT_PROMPTS: Mapping[str, str] = {
    "direct": "",
    "plan": "First write a short plan, then carry it out.",
    "check": "After solving, check the answer against the problem before stating it.",
}


@dataclass(frozen=True)
class ATLASConfig:
    """Every knob of the ATLAS loop; where the paper is silent the choice is morkit's (see each comment)."""

    FLAGS: ClassVar[tuple[LoopFlag, ...]] = (
        LoopFlag("--max-explores", "max_explores", "cap on explores per problem (morkit's guard)"),
    )
    """The flags of `morkit loop atlas`, each a shorthand for `--set FIELD=VALUE`."""

    max_explores: int = 4
    """Cap on explores per problem. The paper's orchestrator decides when to stop; the cap is morkit's guard."""
    min_explores: int = 1
    """A stop / give-up / unparseable reply before this many explores explores with the default solver instead
    (morkit: an answer needs evidence; 0 lets the orchestrator answer or give up at once)."""
    efforts: Mapping[str, Effort] | None = None
    """Efforts an explore may name (`effort=`), Python only; None: the menu `effort_mode` names."""
    effort_mode: Literal["reasoning_effort", "token_cap"] = "reasoning_effort"
    """The default effort menu: low / medium / high as the solver's reasoning-effort setting (the paper's; sent
    where the backend can, else noted as not applied), or as token caps 128 / 256 / 512 with an instruction."""
    prompts: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_PROMPTS))
    """Named prompting variants an explore may name (`prompt=`), added to the solver's system prompt (Python only)."""
    additional_prompt: bool = True
    """Offer explore's free-text ADDITIONAL_PROMPT (the paper's per-explore prompting strategy), added to the
    solver's system prompt; the user message stays the original problem (in the solver's `user` template)."""
    give_up: bool = True
    """Offer the give-up action: the run ends with an EMPTY answer (paper: repeated failures mean give up)."""
    reason_first: bool = True
    """The orchestrator reasons in free text before its ACTION line each turn; false: one ACTION line only."""
    temperature: float = 0.2
    """Orchestrator sampling temperature (decisions and synthesis); the paper does not give one."""
    max_tokens: int = 1024
    """Token budget of one orchestrator turn: its reasoning plus the ACTION block (paper silent)."""
    synthesis_max_tokens: int = 1024
    """Token budget of the final-answer turn (or of the integrator call)."""
    pool_tokens: int = 32000
    """Budget for the solvers' full responses in the orchestrator's context, in estimated tokens (characters/4).
    A response is shown WHOLE if it fits what is left, else left out whole (its header and final answer stay)
    with a note of how many were left out; never cut mid-candidate. The paper keeps every response."""
    synthesis: Literal["orchestrator", "integrator"] = "orchestrator"
    """Who writes the final answer: the orchestrator in its own conversation, which holds the evidence (the
    paper's ATLAS), or a separate stateless integrator call on the candidate pool (the paper's ablation)."""
    solver_costs: tuple[str, ...] = ()
    """ATLAS-MM: 'name=price' per solver, price per 1,000 tokens (prompt + generated). Shown to the orchestrator
    beside each solver and summed per explore into the result's cost; overrides Solver.cost."""
    show_scores: bool = False
    """Show the verifier's scores to the orchestrator (morkit's addition). Off by default, as in the paper, whose
    orchestrator judges the evidence itself: then no explore is verified, and the verifier only scores the final
    answer (or picks the fallback answer) in one call. On: an absolute verifier scores each explore once, shown
    with it; any other re-scores every candidate so far in one call per turn, shown as that turn's table."""
    show_tally: bool = False
    """Show a morkit-counted tally of the final answers so far in every turn (not in the paper, which leaves the
    weighing to the orchestrator; a tally nudges it towards a majority vote)."""

    def __post_init__(self) -> None:
        if self.max_explores < 1 or not 0 <= self.min_explores <= self.max_explores:
            raise InputError(f"ATLASConfig: need 1 <= max_explores and 0 <= min_explores <= max_explores, got "
                             f"max_explores={self.max_explores!r}, min_explores={self.min_explores!r}")
        if self.effort_mode not in ("reasoning_effort", "token_cap"):
            raise InputError(f"ATLASConfig.effort_mode must be 'reasoning_effort' or 'token_cap', "
                             f"got {self.effort_mode!r}")
        for name in [*self.effort_menu(), *self.prompts]:
            check_name(name)
        if self.pool_tokens < 1:
            raise InputError(f"ATLASConfig.pool_tokens must be >= 1, got {self.pool_tokens!r}")
        if self.synthesis not in ("orchestrator", "integrator"):
            raise InputError(f"ATLASConfig.synthesis must be 'orchestrator' or 'integrator', got {self.synthesis!r}")
        parse_costs(self.solver_costs)
        # the sampling parameters must be valid: fail here rather than at the first call
        SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens)
        SamplingParams(temperature=self.temperature, max_tokens=self.synthesis_max_tokens)
        for name, effort in self.effort_menu().items():
            if not isinstance(effort, Effort):
                raise InputError(f"ATLASConfig.efforts[{name!r}] must be an Effort, got {type(effort).__name__}")

    def effort_menu(self) -> Mapping[str, Effort]:
        """The efforts an explore may name: `efforts` when given, else the menu of `effort_mode`."""
        if self.efforts is not None:
            return self.efforts
        return REASONING_EFFORTS if self.effort_mode == "reasoning_effort" else TOKEN_CAP_EFFORTS


@dataclass(frozen=True)
class Solver:
    """One solver: an LLM with its own sampling parameters, system prompt, (ATLAS-MM) price per 1k tokens and
    user template (`{question}` where the problem goes, as an agent's `user`; None: the problem as it is)."""

    llm: LLM
    params: SamplingParams = SamplingParams(temperature=0.7, max_tokens=256)
    system: str = SOLVER_SYSTEM
    cost: float | None = None
    user: str | None = None

    def __post_init__(self) -> None:
        checks.optional(user_template, self.user, "Solver.user")


@dataclass(frozen=True)
class Decision:
    """One orchestrator decision: the action, its arguments, the reasoning before it, and where it came from
    (`source`: parsed | default (no ACTION could be parsed) | override (min_explores) | error)."""

    action: str  # "explore" | "stop" | "give_up"
    solver: str | None = None
    effort: str | None = None
    prompt: str | None = None
    additional_prompt: str | None = None
    source: str = "parsed"
    notes: tuple[str, ...] = ()
    reasoning: str = ""
    raw: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "solver": self.solver, "effort": self.effort, "prompt": self.prompt,
                "additional_prompt": self.additional_prompt, "source": self.source, "notes": list(self.notes),
                "reasoning": self.reasoning, "raw": self.raw}


@dataclass(frozen=True)
class ParsedAction:
    """The ACTION block of a reply: action, key=value arguments, free-text additional prompt, reasoning before."""

    action: str
    args: Mapping[str, str]
    additional_prompt: str | None = None
    reasoning: str = ""


_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_ACTION = re.compile(r"(?im)^[ \t]*ACTION[ \t]*:[ \t]*(explore|stop|give[ _-]?up)\b([^\n]*)$")
_ARG = re.compile(r"([A-Za-z_]+)=(\S+)")
_ADDITIONAL = re.compile(r"(?im)^[ \t]*ADDITIONAL_PROMPT[ \t]*:[ \t]*")


def check_name(name: str) -> None:
    if not _NAME.match(name):
        raise InputError(f"name {name!r} cannot be written in the ACTION protocol (letters, digits, _ . - only)")


def parse_action(text: str) -> ParsedAction | None:
    """The LAST `ACTION: explore|stop|give_up [key=value ...]` line of a reply, None if there is none.

    The last counts: the reasoning before it may mention actions. For explore, text after an
    `ADDITIONAL_PROMPT:` marker below the ACTION line (to the end of the reply) is the additional prompt."""
    matches = list(_ACTION.finditer(text or ""))
    if not matches:
        return None
    match = matches[-1]
    action = re.sub(r"[ _-]", "", match.group(1).lower())
    action = "give_up" if action == "giveup" else action
    args: dict[str, str] = {}
    for key, value in _ARG.findall(match.group(2)):
        args.setdefault(key.lower(), value)
    additional = None
    if action == "explore":
        marker = _ADDITIONAL.search(text, match.end())
        if marker is not None:
            additional = text[marker.end():].strip() or None
    return ParsedAction(action, args, additional, text[: match.start()].strip())


def parse_costs(specs: Sequence[str]) -> dict[str, float]:
    """'name=price' strings as {name: price}; a malformed one or a negative price is an InputError."""
    costs: dict[str, float] = {}
    for spec in specs:
        name, sep, value = str(spec).partition("=")
        try:
            price = float(value)
        except ValueError:
            price = float("nan")
        if not sep or not name.strip() or not math.isfinite(price) or price < 0:
            raise InputError(f"ATLASConfig.solver_costs: expected 'name=price' with a price >= 0, got {spec!r}")
        costs[name.strip()] = price
    return costs


def as_solver(spec: Any) -> Solver:
    """A Solver from a Solver, an LLM, or a tuple (llm[, params[, system[, cost]]])."""
    if isinstance(spec, Solver):
        return spec
    if isinstance(spec, tuple) and 1 <= len(spec) <= 4:
        return Solver(*spec)
    if isinstance(spec, LLM):
        return Solver(spec)
    raise InputError(f"not a solver spec (Solver, LLM or (llm, params, system, cost)): {spec!r}")


def estimate_tokens(text: str) -> int:
    """A backend-free token estimate: characters / 4, rounded up (what the pool budget counts)."""
    return (len(text) + 3) // 4


def groups(evidence: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[int]]]:
    """Equivalent final answers grouped as (first spelling, [explore indices]); largest first, then earliest."""
    finals = [e.get("final") for e in evidence]
    return [(finals[g[0]], [evidence[i]["index"] for i in g]) for g in majority_groups(finals)]


def majority_index(answered: Sequence[Mapping[str, Any]]) -> int:
    """The earliest explore in the largest group of equivalent final answers (the first one if none has a final)."""
    found = groups(answered)
    return found[0][1][0] if found else answered[0]["index"]


def reference_check(answer: str, evidence: Sequence[Mapping[str, Any]], reference: str) -> dict[str, Any]:
    """Whether the final answer and each explore's final answer match the reference (after the loop only)."""
    ref = reference_answer(reference) or reference
    return {"reference": ref, "correct": bool(answer) and bool(is_correct(answer, reference)),
            "explores_correct": [answers_equivalent(e["final"], ref) if e["final"] is not None else None
                                 for e in evidence]}


def one_line(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: max(limit - 3, 0)] + "..."
