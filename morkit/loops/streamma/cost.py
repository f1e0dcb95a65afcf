"""Token and KV-cache accounting of a StreamMA run: per call, per agent and in total, with the paper's prices.

How reuse is found and tokens are counted: docs/loops/streamma.md, "Tokens, KV reuse and cost"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from morkit.llm.base import Completion, Conversation


def _words(text: str) -> int:
    return len(text.split())


def _tokenizer(llm: Any) -> Any:
    """The tokenizer of a local model (unwrapping MeteredLLM), or None."""
    inner = getattr(llm, "llm", llm)
    loaded = getattr(inner, "loaded", None) if type(inner).__name__ == "LocalLLM" else None
    return getattr(loaded, "tokenizer", None)


@dataclass(frozen=True)
class Counter:
    """Counts a conversation's prompt tokens and a generated text's tokens, the same way for every call."""

    prompt: Callable[[Conversation], int]
    text: Callable[[str], int]
    how: str  # tokenizer | words

    @classmethod
    def for_llm(cls, llm: Any) -> Counter:
        tok = _tokenizer(llm)
        if tok is None:
            return cls(lambda conv: sum(_words(m["content"]) for m in conv), _words, "words")

        def prompt(conv: Conversation) -> int:  # as LocalLLM builds its prompt ids
            text = tok.apply_chat_template([dict(m) for m in conv], tokenize=False, add_generation_prompt=True)
            return len(tok(text, add_special_tokens=False)["input_ids"])

        return cls(prompt, lambda text: len(tok(text, add_special_tokens=False)["input_ids"]), "tokenizer")


@dataclass(frozen=True)
class CallTokens:
    """One LLM call's tokens."""

    agent: int
    kind: str  # solve | review | serial | finish
    prompt: int
    generated: int
    reused: int
    counted_by: str  # backend | tokenizer | words

    @property
    def prefilled(self) -> int:
        return self.prompt - self.reused


@dataclass
class AgentLedger:
    """One agent's calls; remembers its last conversation and reply to find the reusable prefix."""

    agent: int
    counter: Counter
    calls: list[CallTokens] = field(default_factory=list)
    _last: tuple[list[dict[str, str]], str, int, int] | None = None  # conversation, reply, prompt, generated

    def record(self, kind: str, conversation: Conversation, reply: str, completion: Completion | None = None
               ) -> CallTokens:
        """Count a finished call (`completion` when the backend reported counts) and its reusable prefix."""
        if completion is not None and (completion.prompt_tokens or completion.completion_tokens):
            prompt, generated, how = completion.prompt_tokens, completion.completion_tokens, "backend"
        else:
            prompt, generated, how = self.counter.prompt(conversation), self.counter.text(reply), self.counter.how
        reused = 0
        conv = [dict(m) for m in conversation]
        if self._last is not None:
            before, last_reply, last_prompt, last_generated = self._last
            extended = before + [{"role": "assistant", "content": last_reply}]
            if conv[: len(extended)] == extended and len(conv) > len(extended):
                reused = min(prompt, last_prompt + last_generated)
        self._last = (conv, reply, prompt, generated)
        call = CallTokens(self.agent, kind, prompt, generated, reused, how)
        self.calls.append(call)
        return call

    def summary(self) -> dict[str, Any]:
        return totals(self.calls, agent=self.agent)


def _summary(calls: int, prompt: int, reused: int, generated: int, **extra: Any) -> dict[str, Any]:
    """A token summary: the counts, with prefilled, total and the KV hit ratio derived from them."""
    return {**extra, "calls": calls, "prompt_tokens": prompt, "reused_tokens": reused,
            "prefilled_tokens": prompt - reused, "generated_tokens": generated, "total_tokens": prompt + generated,
            "kv_hit_ratio": round(reused / prompt, 4) if prompt else 0.0}


def totals(calls: Sequence[CallTokens], **extra: Any) -> dict[str, Any]:
    """Sums over calls: prompt, reused (KV cache), prefilled, generated, total, hit ratio."""
    return _summary(len(calls), sum(c.prompt for c in calls), sum(c.reused for c in calls),
                    sum(c.generated for c in calls), **extra)


def cost_usd(summary: Mapping[str, Any], price_input: float, price_output: float, price_cached: float
             ) -> dict[str, float]:
    """USD for a token summary: `no_cache` (every prompt token prefilled) and `kv_cache` (reused ones cached)."""
    per = 1e-6
    out = summary["generated_tokens"] * price_output * per
    return {"no_cache": round(summary["prompt_tokens"] * price_input * per + out, 8),
            "kv_cache": round(summary["prefilled_tokens"] * price_input * per
                              + summary["reused_tokens"] * price_cached * per + out, 8)}


class Ledger:
    """Every agent's ledger for one run; each agent's thread writes only its own."""

    def __init__(self, llms: Sequence[Any]):
        self.agents = [AgentLedger(i, Counter.for_llm(llm)) for i, llm in enumerate(llms)]

    def record(self, agent: int, kind: str, conversation: Conversation, reply: str,
               completion: Completion | None = None) -> CallTokens:
        return self.agents[agent].record(kind, conversation, reply, completion)

    def report(self, prices: tuple[float, float, float]) -> dict[str, Any]:
        """The run's token state: per agent, total, how counted, and the cost with and without a KV cache."""
        per_agent = [a.summary() for a in self.agents]
        calls = [c for a in self.agents for c in a.calls]
        total = totals(calls)
        return {"per_agent": per_agent, "total": total, "counted_by": sorted({c.counted_by for c in calls}),
                "cost_usd": cost_usd(total, *prices),
                "prices_usd_per_mtok": dict(zip(("input", "output", "cached"), prices))}


def merge_reports(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The token state of several runs (Stream x N replicas): per-agent and total sums."""
    def add(rows: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
        keys = ("calls", "prompt_tokens", "reused_tokens", "generated_tokens")
        return _summary(*(sum(r[k] for r in rows) for k in keys), **extra)

    agents = max(len(r["per_agent"]) for r in reports)
    per_agent = [add([r["per_agent"][i] for r in reports if i < len(r["per_agent"])], agent=i) for i in range(agents)]
    total = add([r["total"] for r in reports])
    prices = reports[0]["prices_usd_per_mtok"]
    return {"per_agent": per_agent, "total": total,
            "counted_by": sorted({h for r in reports for h in r["counted_by"]}),
            "cost_usd": cost_usd(total, prices["input"], prices["output"], prices["cached"]),
            "prices_usd_per_mtok": prices}
