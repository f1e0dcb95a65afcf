"""Text generation for agents, aggregators and judges: the `LLM` protocol (`chat` many conversations, `stream` one)
and its plain data types; `ScriptedLLM` replays a function, for tests. Backends: `openai_compat` and `local`.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

from morkit.core import checks
from morkit.core.errors import InputError

Message = Mapping[str, str]
Conversation = Sequence[Message]

MAX_SAMPLES = 1024
"""Samples per conversation (`n`) at most: more is a typo, and would overflow on its way to a server."""


def sample_count(value: object, what: str) -> int:
    """A number of samples per conversation: a whole number from 1 to MAX_SAMPLES."""
    return checks.positive_int(value, what, at_most=MAX_SAMPLES)


@dataclass(frozen=True)
class SamplingParams:
    """What to generate, and how long the call may take: `timeout_s` is the deadline of the whole call, retries
    included (None: the backend's own limits), so a loop's calls cannot outlast its budget. `reasoning_effort` is
    sent only by backends that declare `takes_reasoning_effort`, `presence_penalty` applied only by those that
    declare `takes_presence_penalty` (both built-in backends do).

    Args:
        n: Samples per conversation, 1 to MAX_SAMPLES.
        temperature: Sampling temperature (0 or more; 0 is greedy where the backend supports it).
        top_p: Nucleus sampling mass, in (0, 1].
        max_tokens: The most new tokens per sample.
        stop: Strings that end a sample (not included in its text).
        seed: A sampling seed (0 or more); None leaves sampling unseeded.
        timeout_s: The deadline of the whole call in seconds, retries included; None: the backend's own limits.
        reasoning_effort: A lower-case word such as `high`, for backends that take it.
        presence_penalty: Subtracted from the logit of every token already generated in the sample (OpenAI's
            and vLLM's definition: generated tokens only, once per token however often it occurs), -2 to 2;
            0 is none.

    Raises:
        InputError: A field is out of its range.
    """

    n: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    timeout_s: float | None = None
    reasoning_effort: str | None = None
    presence_penalty: float = 0.0

    def __post_init__(self) -> None:
        sample_count(self.n, "SamplingParams.n")
        checks.positive_int(self.max_tokens, "SamplingParams.max_tokens")
        checks.non_negative(self.temperature, "SamplingParams.temperature")
        if checks.positive(self.top_p, "SamplingParams.top_p") > 1:
            raise InputError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        checks.optional(checks.non_negative_int, self.seed, "SamplingParams.seed")
        checks.optional(checks.positive, self.timeout_s, "SamplingParams.timeout_s")
        penalty = checks.finite(self.presence_penalty, "SamplingParams.presence_penalty")
        if abs(penalty) > MAX_PRESENCE_PENALTY:
            raise InputError(f"SamplingParams.presence_penalty must be from -{MAX_PRESENCE_PENALTY:g} to "
                             f"{MAX_PRESENCE_PENALTY:g}, got {checks.shown(penalty)}")
        if self.reasoning_effort is not None and not (isinstance(self.reasoning_effort, str)
                                                      and _EFFORT.fullmatch(self.reasoning_effort)):
            raise InputError(f"SamplingParams.reasoning_effort must be a lower-case word such as 'high', "
                             f"got {checks.shown(self.reasoning_effort)}")


_EFFORT = re.compile(r"[a-z][a-z_-]*")
MAX_PRESENCE_PENALTY = 2.0
"""SamplingParams.presence_penalty's range is +-this, as OpenAI's API and vLLM take it."""


def takes_reasoning_effort(llm: object) -> bool:
    """Whether `llm` passes SamplingParams.reasoning_effort on to its model (its class says so)."""
    return bool(getattr(llm, "takes_reasoning_effort", False))


def takes_presence_penalty(llm: object) -> bool:
    """Whether `llm` applies SamplingParams.presence_penalty (its class says so); others ignore it."""
    return bool(getattr(llm, "takes_presence_penalty", False))


@dataclass(frozen=True)
class Completion:
    """The samples for one conversation, with token counts (0 where a backend does not report them)."""

    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0


@runtime_checkable
class LLM(Protocol):
    """A chat model: a batch of conversations in, one Completion each out, within the sampling parameters."""

    name: str

    def chat(self, conversations: Sequence[Conversation], params: SamplingParams = SamplingParams()) -> list[Completion]:
        """One Completion per conversation, in order; raises LLMError if any conversation failed.

        Args:
            conversations: Each a list of `{"role", "content"}` messages.
            params: What to generate and how long the call may take.

        Returns:
            One Completion (with `params.n` texts) per conversation, in order.

        Raises:
            LLMError: A conversation failed after the backend's retries.
        """
        ...

    def stream(self, conversation: Conversation, params: SamplingParams = SamplingParams()) -> Iterator[str]:
        """Text pieces of a single sample as they are generated (params.n is ignored).

        Args:
            conversation: A list of `{"role", "content"}` messages.
            params: What to generate; `n` is ignored.

        Yields:
            The sample's text, piece by piece.
        """
        ...


def message_text(value: object, *, role: str | None = None) -> str:
    """A prompt or completion as text: a string as it is; of a conversation, the last message with `role` (the
    last message of all when none has it), or every message's content joined when `role` is None."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(m, dict) for m in value):
        chosen = [m for m in value if role is None or m.get("role") == role] or list(value)
        if role is not None:
            chosen = chosen[-1:]
        return "\n".join(_content(m.get("content", "")) for m in chosen)
    raise InputError(f"expected a string or a list of {{'role', 'content'}} messages, got {type(value).__name__}")


def _content(content: object) -> str:
    if content is None:  # e.g. a tool-call message
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text up to the first stop string (excluded), and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class StopScanner:
    """Cuts streamed text at the first stop string, holding back any tail that might begin one.

    `feed(piece)` returns the text safe to emit now and whether a stop string was reached;
    `flush()` returns what was held back once the stream has ended without a stop."""

    def __init__(self, stop: Sequence[str]):
        self.stop = [s for s in stop if s]
        self.text = ""
        self.emitted = 0
        self.stopped = False

    def feed(self, piece: str) -> tuple[str, bool]:
        if self.stopped:
            return "", True
        self.text += piece
        pending = self.text[self.emitted:]  # no stop string can start before `emitted`
        cut, found = cut_at_stop(pending, self.stop)
        if found:
            self.stopped = True
            self.emitted = len(self.text)
            return cut, True
        held = max((k for s in self.stop for k in range(1, min(len(s), len(pending) + 1))
                    if pending.endswith(s[:k])), default=0)
        safe = pending[: len(pending) - held]
        self.emitted += len(safe)
        return safe, False

    def flush(self) -> str:
        rest = "" if self.stopped else self.text[self.emitted:]
        self.emitted = len(self.text)
        return rest


def cut_stream(pieces: Iterator[str], stop: Sequence[str]) -> Iterator[str]:
    """Re-yield streamed text up to the first stop string, never emitting part of one."""
    scanner = StopScanner(stop)
    for piece in pieces:
        out, stopped = scanner.feed(piece)
        if out:
            yield out
        if stopped:
            return
    rest = scanner.flush()
    if rest:
        yield rest


@dataclass
class ScriptedLLM:
    """An LLM whose replies come from `reply(conversation, sample_index) -> str`; counts its calls.

    For testing control flow only: it is not a model."""

    takes_presence_penalty = True  # no sampling setting changes a scripted reply: none is dropped either

    reply: Callable[[Conversation, int], str]
    name: str = "scripted"
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def chat(self, conversations: Sequence[Conversation], params: SamplingParams = SamplingParams()) -> list[Completion]:
        with self._lock:
            self.calls += len(conversations)
        out = []
        for conversation in conversations:
            texts = [cut_at_stop(self.reply(conversation, i), params.stop)[0] for i in range(params.n)]
            out.append(Completion(tuple(texts), ("stop",) * params.n))
        return out

    def stream(self, conversation: Conversation, params: SamplingParams = SamplingParams()) -> Iterator[str]:
        text = self.chat([conversation], replace(params, n=1))[0].texts[0]
        for piece in re.split(r"(?<= )", text):  # word by word, spaces kept
            if piece:
                yield piece
