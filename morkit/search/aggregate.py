"""MoA-style aggregation, ACS's `llm` aggregator: an LLM reads several responses and writes one refined answer.

The prompts (`ctts-mm`: CTTS-MM's Figure J, the default; `moa`; `refine`) and the sampling: docs/search.md."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from morkit.core.registry import Entry, Registry
from morkit.llm.base import LLM, Conversation, SamplingParams
from morkit.llm.presets import CTTS_MM

# The Aggregate-and-Synthesize prompt of Wang et al., "Mixture-of-Agents Enhances Large Language Model
# Capabilities" (arXiv 2406.04692), Table 1, verbatim: a prompt is a fact of the method. As in the authors'
# reference code (togethercomputer/MoA), it is the system message, followed by the numbered responses, and
# the user's query stays the user message.
MOA_SYSTEM = (
    "You have been provided with a set of responses from various open-source models to the latest user query. "
    "Your task is to synthesize these responses into a single, high-quality response. It is crucial to critically "
    "evaluate the information provided in these responses, recognizing that some of it may be biased or incorrect. "
    "Your response should not simply replicate the given answers but should offer a refined, accurate, and "
    "comprehensive reply to the instruction. Ensure your response is well-structured, coherent, and adheres to "
    "the highest standards of accuracy and reliability.\n\nResponses from models:"
)

AGGREGATOR_SYSTEM = (
    "You combine several candidate responses to the same question into one better response. The candidates "
    "may contain mistakes: check each step, keep what is right, fix or drop what is wrong, and do not simply "
    "copy the majority. Write one complete, self-contained solution and end it with 'The answer is <answer>.'"
)


def moa_conversation(question: str, responses: Sequence[str], system: str = MOA_SYSTEM) -> Conversation:
    """MoA's layout: the prompt and the responses numbered 1., 2., ... as the system message; the question as the user's."""
    listed = "".join(f"\n{i}. {r.strip()}" for i, r in enumerate(responses, start=1))
    return [{"role": "system", "content": system + listed}, {"role": "user", "content": question.strip()}]


def ctts_conversation(question: str, responses: Sequence[str], system: str = MOA_SYSTEM) -> Conversation:
    """CTTS-MM's Figure J, as published: MoA's system message and numbered responses; the user's message is
    "Question: {question}." (as in the paper's agent prompts, Figure I). Every word is the paper's; the
    space after each number ("1. ", Figure J's text extraction shows "1.") follows MoA's reference code."""
    conversation = moa_conversation(question, responses, system)
    return [conversation[0], {"role": "user", "content": f"Question: {question.strip()}."}]


def aggregation_conversation(question: str, responses: Sequence[str], system: str = AGGREGATOR_SYSTEM) -> Conversation:
    """The `refine` layout: its instructions as the system message; the question and numbered responses as the user's."""
    listed = "\n\n".join(f"Response {i}:\n{r.strip()}" for i, r in enumerate(responses, start=1))
    user = f"Question:\n{question.strip()}\n\n{listed}\n\nWrite the single refined response."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


_HERE = "morkit.search.aggregate"
AGGREGATOR_PROMPTS = Registry("aggregator prompt", [
    Entry("ctts-mm", f"{_HERE}:ctts_conversation",
          "CTTS-MM's aggregator prompt (its Figure J), as published: MoA's, with 'Question: {question}.'"),
    Entry("moa", f"{_HERE}:moa_conversation", "Mixture-of-Agents' Aggregate-and-Synthesize prompt, as published"),
    Entry("refine", f"{_HERE}:aggregation_conversation",
          "morkit's earlier prompt: check each step, fix or drop mistakes, end with a final-answer line"),
])
"""name -> layout(question, responses[, system]) -> Conversation; an agents.toml `[aggregator] system`
replaces the layout's default prompt."""
DEFAULT_AGGREGATOR_PROMPT = "ctts-mm"


@dataclass
class Aggregator:
    """Synthesises one answer from many; `aggregate_many` sends all sets of one search step at once.

    The verifier's scores of the answers, which the AnswerAggregator protocol passes, are not shown to the LLM."""

    llm: LLM
    params: SamplingParams = SamplingParams(**CTTS_MM.sampling)  # the paper's: 0.7, 8,192 tokens, 1.05
    system: str | None = None  # None: the prompt's own (AGGREGATOR_PROMPTS[prompt])
    prompt: str = DEFAULT_AGGREGATOR_PROMPT
    shown_question: str | None = None  # what the aggregator is shown as the question (default: the question)
    calls: int = 0
    tokens: int = 0  # prompt and completion tokens of every call, as the backend reports them
    name: str = "llm"

    def __post_init__(self) -> None:
        AGGREGATOR_PROMPTS.get(self.prompt)  # an unknown name fails here, listing the known ones

    def aggregate_many(self, question: str, response_sets: Sequence[Sequence[str]],
                       scores: Sequence[Sequence[float]] | None = None) -> list[str]:
        if not response_sets:
            return []
        shown = self.shown_question or question
        layout = AGGREGATOR_PROMPTS.load(self.prompt)
        system = {"system": self.system} if self.system else {}
        conversations = [layout(shown, rs, **system) for rs in response_sets]
        completions = self.llm.chat(conversations, replace(self.params, n=1))
        self.calls += len(conversations)
        self.tokens += sum(c.prompt_tokens + c.completion_tokens for c in completions)
        return [c.texts[0].strip() if c.texts else "" for c in completions]

    def aggregate(self, question: str, responses: Sequence[str], scores: Sequence[float] | None = None) -> str:
        return self.aggregate_many(question, [responses])[0]
