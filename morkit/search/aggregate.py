"""MoA-style aggregation: an LLM reads several responses to a question and writes one refined answer.

This is the `llm` entry of AGGREGATORS (morkit.search.aggregators); `vote` and `best` pick among the
answers instead (morkit.search.voting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from morkit.llm.base import LLM, Conversation, SamplingParams

AGGREGATOR_SYSTEM = (
    "You combine several candidate responses to the same question into one better response. The candidates "
    "may contain mistakes: check each step, keep what is right, fix or drop what is wrong, and do not simply "
    "copy the majority. Write one complete, self-contained solution and end it with 'The answer is <answer>.'"
)


def aggregation_conversation(question: str, responses: Sequence[str], system: str = AGGREGATOR_SYSTEM) -> Conversation:
    """The chat the aggregator sees: its instructions, the question, the numbered responses."""
    listed = "\n\n".join(f"Response {i}:\n{r.strip()}" for i, r in enumerate(responses, start=1))
    user = f"Question:\n{question.strip()}\n\n{listed}\n\nWrite the single refined response."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclass
class Aggregator:
    """Synthesises one answer from many; `aggregate_many` sends all sets of one search step at once.

    The verifier's scores of the answers, which the AnswerAggregator protocol passes, are not shown to the LLM."""

    llm: LLM
    params: SamplingParams = SamplingParams(temperature=0.3, max_tokens=256)
    system: str = AGGREGATOR_SYSTEM
    shown_question: str | None = None  # what the aggregator is shown as the question (default: the question)
    calls: int = 0
    tokens: int = 0  # prompt and completion tokens of every call, as the backend reports them
    name: str = "llm"

    def aggregate_many(self, question: str, response_sets: Sequence[Sequence[str]],
                       scores: Sequence[Sequence[float]] | None = None) -> list[str]:
        if not response_sets:
            return []
        shown = self.shown_question or question
        conversations = [aggregation_conversation(shown, rs, self.system) for rs in response_sets]
        params = SamplingParams(1, self.params.temperature, self.params.top_p, self.params.max_tokens,
                                self.params.stop, self.params.seed)
        completions = self.llm.chat(conversations, params)
        self.calls += len(conversations)
        self.tokens += sum(c.prompt_tokens + c.completion_tokens for c in completions)
        return [c.texts[0].strip() if c.texts else "" for c in completions]

    def aggregate(self, question: str, responses: Sequence[str], scores: Sequence[float] | None = None) -> str:
        return self.aggregate_many(question, [responses])[0]
