"""Baselines behind the same interface as ACS: best-of-N, majority vote, self-consistency, one MoA aggregation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from morkit.core.errors import LLMError
from morkit.llm.agents import AgentAnswer
from morkit.reward_models.rules.consensus import consensus_scores
from morkit.search.aggregate import Aggregator
from morkit.search.base import Meter, SearchResult, TraceStep
from morkit.selection.mor import pick_best
from morkit.verify.base import Verifier


def _empty(meter: Meter, name: str) -> SearchResult:
    return meter.result(name, "", None, [TraceStep("stop", note="no agent answered")])


def _question_key(question: str) -> str:
    import hashlib

    return hashlib.sha256(question.encode()).hexdigest()


@dataclass
class BestOfN:
    """The answer the verifier (any RM or ensemble) scores highest; ties broken by a seeded shuffle."""

    verifier: Verifier
    name: str = "best-of-n"

    def run(self, question: str, answers: Sequence[AgentAnswer]) -> SearchResult:
        meter = Meter(self.verifier)
        texts = [a.text for a in answers]
        if not texts:
            return _empty(meter, self.name)
        scores = [v.score for v in self.verifier.verify(question, texts, context=texts)]
        best = pick_best(_question_key(question), scores)
        step = TraceStep("pick", (best.best_index,), texts[best.best_index], scores[best.best_index], True,
                         tuple(enumerate(scores)), note=f"tied: {list(best.tied)}" if len(best.tied) > 1 else "",
                         **meter.mark())
        return meter.result(self.name, texts[best.best_index], scores[best.best_index], [step])


@dataclass
class MajorityVote:
    """The answer whose final value most answers agree on (math answer equivalence); no model call."""

    only_agent: str | None = None  # self-consistency: vote among one agent's samples only
    name: str = "majority"

    def run(self, question: str, answers: Sequence[AgentAnswer]) -> SearchResult:
        meter = Meter()
        pool = [a for a in answers if self.only_agent is None or a.agent == self.only_agent]
        texts = [a.text for a in pool]
        if not texts:
            return _empty(meter, self.name)
        shares = consensus_scores(texts)
        best = pick_best(_question_key(question), shares)
        step = TraceStep("pick", (best.best_index,), texts[best.best_index], shares[best.best_index], True,
                         tuple(enumerate(shares)), note=f"votes among {len(texts)} answers", **meter.mark())
        return meter.result(self.name, texts[best.best_index], shares[best.best_index], [step])


def self_consistency(agent: str) -> MajorityVote:
    return MajorityVote(only_agent=agent, name="self-consistency")


@dataclass
class SingleAggregation:
    """One MoA layer: the aggregator reads every answer and writes the final one (scored for the record)."""

    aggregator: Aggregator
    verifier: Verifier | None = None
    name: str = "moa"

    def run(self, question: str, answers: Sequence[AgentAnswer]) -> SearchResult:
        meter = Meter(self.verifier, self.aggregator)
        texts = [a.text for a in answers]
        if not texts:
            return _empty(meter, self.name)
        try:
            text = self.aggregator.aggregate(question, texts)
        except LLMError as exc:
            step = TraceStep("error", tuple(range(len(texts))), note=f"aggregation failed: {exc}", **meter.mark())
            return meter.result(self.name, "", None, [step])
        score = self.verifier.verify(question, [text], context=texts)[0].score if self.verifier else None
        step = TraceStep("initial", tuple(range(len(texts))), text, score, True, **meter.mark())
        return meter.result(self.name, text, score, [step])
