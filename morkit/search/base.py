"""What every answer-search method returns: the final answer, its score, costs, and a readable trace."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, Sequence

from morkit.llm.agents import AgentAnswer


@dataclass(frozen=True)
class TraceStep:
    """One step of a search: which answers went in (indices into the agents' answers), what came out."""

    step: str  # answers | initial | greedy | residual | pick | stop | error
    members: tuple[int, ...] = ()
    text: str = ""
    score: float | None = None
    accepted: bool = False
    tried: tuple[tuple[int, float], ...] = ()  # greedy: (added answer, score of its aggregate)
    llm_calls: int = 0
    rm_calls: int = 0
    seconds: float = 0.0
    note: str = ""
    llm_tokens: int = 0


@dataclass(frozen=True)
class SearchResult:
    method: str
    answer: str
    score: float | None
    trace: tuple[TraceStep, ...]
    llm_calls: int = 0
    rm_calls: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    llm_tokens: int = 0

    def to_json(self, with_trace: bool = True) -> dict[str, Any]:
        out = {"method": self.method, "answer": self.answer, "score": self.score, "llm_calls": self.llm_calls,
               "llm_tokens": self.llm_tokens, "rm_calls": self.rm_calls, "seconds": round(self.seconds, 3), **self.extra}
        if with_trace:
            out["trace"] = [asdict(s) for s in self.trace]
        return out


class SearchMethod(Protocol):
    name: str

    def run(self, question: str, answers: Sequence[AgentAnswer]) -> SearchResult: ...


class AnswerAggregator(Protocol):
    """Turns each set of answers into one answer (ACS's aggregation step; see morkit.search.aggregators).

    `scores[i][j]` is the verifier's score of set i's answer j, all from one verify call so they compare;
    an LLM aggregator may ignore them. `calls` and `tokens` count LLM work, which the Meter reads."""

    name: str
    calls: int
    tokens: int

    def aggregate_many(self, question: str, response_sets: Sequence[Sequence[str]],
                       scores: Sequence[Sequence[float]] | None = None) -> list[str]: ...

    def aggregate(self, question: str, responses: Sequence[str], scores: Sequence[float] | None = None) -> str: ...


class Meter:
    """Counts LLM calls and tokens, RM calls and wall time between marks, for trace steps."""

    def __init__(self, verifier: Any = None, aggregator: Any = None):
        self.verifier, self.aggregator = verifier, aggregator
        self.started = self._last_time = time.perf_counter()
        self._last = self._now()

    def _now(self) -> tuple[int, int, int]:
        return (getattr(self.aggregator, "calls", 0), getattr(self.verifier, "rm_calls", 0),
                getattr(self.aggregator, "tokens", 0))

    def mark(self) -> dict[str, Any]:
        """Calls, tokens and seconds since the previous mark."""
        now, t = self._now(), time.perf_counter()
        delta = {"llm_calls": now[0] - self._last[0], "rm_calls": now[1] - self._last[1],
                 "llm_tokens": now[2] - self._last[2], "seconds": round(t - self._last_time, 3)}
        self._last, self._last_time = now, t
        return delta

    def result(self, method: str, answer: str, score: float | None, trace: list[TraceStep], **extra: Any) -> SearchResult:
        llm = sum(s.llm_calls for s in trace)
        rm = sum(s.rm_calls for s in trace)
        tokens = sum(s.llm_tokens for s in trace)
        return SearchResult(method, answer, score, tuple(trace), llm, rm, time.perf_counter() - self.started, extra,
                            tokens)
