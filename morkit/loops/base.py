"""What every test-time-scaling loop shares: budgets, a metered LLM, a trace of events, the result.
A loop's LLM calls are charged to its Budget and refused once it is spent, so the loop stops cleanly with
the best answer it has, and every event lands in the Trace (docs/loops/index.md, "Options and budgets")."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from morkit.core import checks
from morkit.core.errors import LLMError
from morkit.llm.base import LLM, Completion, Conversation, SamplingParams


class BudgetExhausted(LLMError):
    """A call was refused because the loop's budget is spent."""


@dataclass(frozen=True)
class Budget:
    """Limits for one loop run on one problem; None = unlimited.

    Args:
        max_calls: LLM calls at most (verifier LLM calls included).
        max_tokens: Tokens at most, prompt and generated.
        max_seconds: Wall-clock seconds at most.

    Raises:
        InputError: A limit is negative.
    """

    max_calls: int | None = None
    max_tokens: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        checks.optional(checks.non_negative_int, self.max_calls, "max_calls")
        checks.optional(checks.non_negative_int, self.max_tokens, "max_tokens")
        checks.optional(checks.non_negative, self.max_seconds, "max_seconds")


@dataclass
class Spend:
    """Calls, tokens and time used so far against a Budget; thread-safe."""

    budget: Budget = Budget()
    calls: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.started

    def seconds_left(self) -> float | None:
        """Time left in the budget (None: no time limit)."""
        limit = self.budget.max_seconds
        return None if limit is None else limit - self.seconds

    def exhausted(self) -> str | None:
        """Why the budget is spent, or None while it is not."""
        b = self.budget
        if b.max_calls is not None and self.calls >= b.max_calls:
            return f"call budget spent ({self.calls} of {b.max_calls})"
        if b.max_tokens is not None and self.tokens >= b.max_tokens:
            return f"token budget spent ({self.tokens} of {b.max_tokens})"
        return self.out_of_time()

    def out_of_time(self) -> str | None:
        """Why the time budget is spent, or None while it is not (or there is none)."""
        b = self.budget
        if b.max_seconds is not None and self.seconds >= b.max_seconds:
            return f"time budget spent ({self.seconds:.1f}s of {b.max_seconds}s)"
        return None

    def reserve(self, calls: int) -> None:
        """Take `calls` from the budget before making them (atomic, so concurrent agents cannot overshoot)."""
        with self._lock:
            reason = self.exhausted()
            if reason:
                raise BudgetExhausted(reason)
            self.calls += calls

    def charge(self, calls: int, tokens: int) -> None:
        with self._lock:
            self.calls += calls
            self.tokens += tokens


def _tokens(completion: Completion) -> int:
    if completion.prompt_tokens or completion.completion_tokens:
        return completion.prompt_tokens + completion.completion_tokens
    return sum(len(t.split()) for t in completion.texts)  # backends without counts: words as a proxy


@dataclass
class MeteredLLM:
    """An LLM whose calls are reserved against a Spend before they run and whose tokens are charged after."""

    llm: LLM
    spend: Spend

    @property
    def name(self) -> str:
        return self.llm.name

    def chat(self, conversations: Sequence[Conversation], params: SamplingParams = SamplingParams()) -> list[Completion]:
        self.spend.reserve(len(conversations))
        completions: Sequence[Any] = ()
        try:
            completions = self.llm.chat(conversations, self._with_deadline(params))
            return completions
        except LLMError as exc:  # a partial failure still used tokens for what came back
            completions = [r for r in getattr(exc, "results", ()) if isinstance(r, Completion)]
            self._raise_if_out_of_time(exc, lost=not completions)
            raise
        finally:
            self.spend.charge(0, sum(_tokens(c) for c in completions))

    def stream(self, conversation: Conversation, params: SamplingParams = SamplingParams()) -> Iterator[str]:
        """Reserves the call now (raising at once if the budget is spent); pieces are charged as tokens."""
        self.spend.reserve(1)
        return self._pieces(conversation, params)

    def _with_deadline(self, params: SamplingParams) -> SamplingParams:
        """`params` whose deadline is the time left in the budget, when that is sooner than its own."""
        left = self.spend.seconds_left()
        if left is None or (params.timeout_s is not None and params.timeout_s <= left):
            return params
        return dataclasses.replace(params, timeout_s=max(left, 0.001))  # > 0: reserve() has just passed

    def _raise_if_out_of_time(self, err: LLMError, lost: bool) -> None:
        """Raise BudgetExhausted for a call that failed once the time budget was spent (its deadline cut it),
        so the loop stops as for any spent budget. Not when the error still holds completions (`lost` is
        False): the loop keeps those, and its next call is refused anyway."""
        spent = self.spend.out_of_time()
        if spent and lost and not isinstance(err, BudgetExhausted):
            raise BudgetExhausted(spent) from err

    def _pieces(self, conversation: Conversation, params: SamplingParams) -> Iterator[str]:
        pieces = 0
        source = iter(self.llm.stream(conversation, self._with_deadline(params)))
        try:
            for piece in source:
                pieces += 1
                yield piece
        except LLMError as err:
            self._raise_if_out_of_time(err, lost=True)
            raise
        finally:
            close = getattr(source, "close", None)  # stop the backend's generation when the reader stops
            if close is not None:
                close()
            self.spend.charge(0, pieces)


def map_verifier(verifier: Any, edit: Callable[[Any], Mapping[str, Any]], *, into_edited: bool = True) -> Any:
    """A copy of a dataclass verifier with `edit(node)`'s field changes made at every node of its tree (nested
    verifiers included; with `into_edited=False` not below a node `edit` changed); the verifier itself when
    nothing changed (and anything that is not a dataclass)."""
    if verifier is None or not dataclasses.is_dataclass(verifier) or isinstance(verifier, type):
        return verifier
    changes = dict(edit(verifier))
    if changes and not into_edited:
        return dataclasses.replace(verifier, **changes)
    for f in dataclasses.fields(verifier):
        value = getattr(verifier, f.name)
        if f.name not in changes and dataclasses.is_dataclass(value) and hasattr(value, "verify"):
            mapped = map_verifier(value, edit, into_edited=into_edited)
            if mapped is not value:
                changes[f.name] = mapped
    return dataclasses.replace(verifier, **changes) if changes else verifier


def verifier_llm_calls(verifier: Any) -> int:
    """LLM calls one answer's verification spends: the LLMs a verifier holds, nested verifiers included (an LLM
    critic asks its LLM once per answer; an RM ensemble asks none)."""
    held = 0

    def count(node: Any) -> dict[str, Any]:
        nonlocal held
        held += sum(isinstance(getattr(node, f.name), LLM) for f in dataclasses.fields(node))
        return {}

    map_verifier(verifier, count)
    return held


def metered_verifier(verifier: Any, spend: Spend) -> Any:
    """The verifier with every LLM it holds charged to the loop's budget, so an LLM critic's calls
    count against the loop's limits and in its `calls`/`tokens` (nested verifiers included)."""

    def meter(node: Any) -> dict[str, Any]:
        return {f.name: MeteredLLM(getattr(node, f.name), spend) for f in dataclasses.fields(node)
                if isinstance(getattr(node, f.name), LLM) and not isinstance(getattr(node, f.name), MeteredLLM)}

    return map_verifier(verifier, meter)


@dataclass
class Trace:
    """Loop events in order, each with its kind, its time offset in seconds, and its data."""

    started: float = field(default_factory=time.perf_counter)
    events: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str, **data: Any) -> dict[str, Any]:
        event = {"kind": kind, "t": round(time.perf_counter() - self.started, 4), **data}
        with self._lock:
            self.events.append(event)
        return event

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind]


@dataclass(frozen=True)
class LoopResult:
    """A loop's final answer with everything needed to see how it got there."""

    loop: str
    answer: str
    score: float | None
    stop_reason: str
    calls: int
    tokens: int
    seconds: float
    trace: tuple[Mapping[str, Any], ...]
    state: Mapping[str, Any] = field(default_factory=dict)  # memory banks, evidence, per-protocol timings

    def to_json(self) -> dict[str, Any]:
        return {"loop": self.loop, "answer": self.answer, "score": self.score, "stop_reason": self.stop_reason,
                "calls": self.calls, "tokens": self.tokens, "seconds": round(self.seconds, 3),
                "state": dict(self.state), "trace": list(self.trace)}


@runtime_checkable
class Loop(Protocol):
    """A test-time-scaling loop: one problem in, the final answer and how it got there out."""

    def run(self, problem: str, reference: str | None = None) -> LoopResult:
        """Solve `problem`; `reference`, when given, only marks correctness in the trace.

        Args:
            problem: The problem text the agents are asked.
            reference: A reference answer; when given, the result's state records whether the answer matches it.
                It is never shown to an LLM.

        Returns:
            The LoopResult: final answer, score, stop reason, calls, tokens, seconds, trace and state.
        """
        ...


def finish(loop: str, answer: str, score: float | None, stop_reason: str, spend: Spend, trace: Trace,
           **state: Any) -> LoopResult:
    trace.add("stop", reason=stop_reason)
    return LoopResult(loop, answer, score, stop_reason, spend.calls, spend.tokens, spend.seconds,
                      tuple(trace.events), state)
