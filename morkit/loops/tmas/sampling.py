"""How TMAS samples: a derived seed per sample, chat calls fanned out one per sample (so a seed-honouring server
returns distinct samples for identical prompts), and an LLM critic sampled per verification pass (MoR, with no
sampling knob, is deterministic); docs/loops/tmas.md, "Seeds"."""

from __future__ import annotations

import dataclasses
import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

from morkit.core.errors import LLMError
from morkit.llm.base import Completion, Conversation, SamplingParams
from morkit.loops.base import map_verifier

T = TypeVar("T")

CRITIC_DEFAULT_MAX_TOKENS = 192
"""What LLMVerifier generates per critique when it has no params of its own (morkit.verify.critic)."""


def derive_seed(base: int, *parts: Any) -> int:
    """A stable seed in [0, 2**31) for (base, role, iteration, index...): distinct parts, distinct seeds."""
    digest = hashlib.blake2b(repr((base, *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (2 ** 31)


def run_all(fn: Callable[[T], Any], items: Sequence[T], parallel: int) -> list[Any]:
    """`fn(item)` for each item, `parallel` at a time (1: in order, in this thread), results in item order;
    an item whose call raised gets the exception instead of a result."""

    def one(item: T) -> Any:
        try:
            return fn(item)
        except Exception as err:  # noqa: BLE001 - each item's failure is the caller's to record
            return err

    if parallel <= 1 or len(items) <= 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(min(parallel, len(items))) as pool:
        return list(pool.map(one, items))


def fan_out(llm: Any, conversations: Sequence[Conversation], params: Sequence[SamplingParams],
            parallel: int) -> list[Completion | BaseException]:
    """One `chat` call per conversation with its own params, `parallel` at a time. Each entry is the
    conversation's Completion or the exception its call raised."""
    return run_all(lambda job: llm.chat([job[0]], job[1])[0], list(zip(conversations, params)), parallel)


def batched(llm: Any, conversations: Sequence[Conversation], params: SamplingParams
            ) -> list[Completion | BaseException]:
    """One `chat` call for all conversations; a backend's partial results are kept, the rest are the error."""
    try:
        return list(llm.chat(conversations, params))
    except LLMError as err:
        partial = list(getattr(err, "results", None) or [])
        return [partial[i] if i < len(partial) and isinstance(partial[i], Completion) else
                (partial[i] if i < len(partial) and isinstance(partial[i], BaseException) else err)
                for i in range(len(conversations))]


def is_critic(node: Any) -> bool:
    """Whether a verifier node is an LLM critic: a dataclass holding `llm` and `params`."""
    return dataclasses.is_dataclass(node) and {"llm", "params"} <= {f.name for f in dataclasses.fields(node)}


def sampled_verifier(verifier: Any, temperature: float, seed: int | None, max_tokens: int | None = None) -> Any:
    """A copy of `verifier` whose LLM critic(s) (a node with `llm` and `params`) sample at `temperature` with
    `seed`; None when it holds none (a deterministic verifier)."""

    def resample(node: Any) -> dict[str, Any]:
        if not is_critic(node):
            return {}
        params = node.params if isinstance(node.params, SamplingParams) else SamplingParams(
            temperature=0.0, max_tokens=CRITIC_DEFAULT_MAX_TOKENS)
        return {"params": dataclasses.replace(params, temperature=temperature, seed=seed,
                                              max_tokens=max_tokens or params.max_tokens)}

    sampled = map_verifier(verifier, resample, into_edited=False)  # a critic's own verifiers keep their settings
    return None if sampled is verifier else sampled
