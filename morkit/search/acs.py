"""Agent Collaboration Search (CTTS-MM, Section 3.2 and Algorithm A): reward-guided greedy aggregation of answers.

The algorithm, its two greedy forms (`argmax`, `first`) and its fidelity to the paper: docs/search.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import LLMError
from morkit.llm.agents import AgentAnswer
from morkit.search.base import AnswerAggregator, Meter, SearchResult, TraceStep
from morkit.verify.base import Verifier, scores_are_absolute

ACS_STEPS = ("argmax", "first")
"""The greedy step: the best of every addition per step (Section 3.2), or passes of first improvements (Algorithm A)."""
ACS_ORDERS = ("answers", "scores")
"""The order a `first` pass tries answers in: the answers' own (Algorithm A iterates A_0 - S), or best-scored first."""
PAPER_MAX_STEPS = 8
"""Appendix D.2: "the number of aggregating is set to 8" (read as Algorithm A's T; see docs/search.md)."""


def ranked(scores: Sequence[float]) -> list[int]:
    """Indices by score, best first; equal scores keep answer order (agents are listed in config order)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])


@dataclass
class ACS:
    """Agent Collaboration Search over one query's answers: `ACS(verifier, aggregator).run(question, answers)`.

    `k` answers form the initial set; `step` is `argmax` (Section 3.2) or `first` (Algorithm A's passes, tried
    in `order`); at most `max_steps` steps (None: no limit); `residual` adds the final all-answers aggregation.

    Args:
        verifier: Scores answers and aggregates (e.g. the query's MoRVerifier).
        aggregator: Turns a set of answers into one (AGGREGATORS).
        k: Answers in the initial set (the best-scored; at least 1 is used).
        residual: End with an aggregation of every answer plus the current one, kept if it scores higher.
        max_steps: The most greedy steps: rounds (argmax) or passes (first); None is no limit.
        step: `argmax` (best addition per round) or `first` (passes of first improvements).
        order: The order a `first` pass tries answers in: `answers` or `scores` (best first).
        name: The method name results report.

    Raises:
        InputError: `step`, `order` or `max_steps` is invalid.
    """

    verifier: Verifier
    aggregator: AnswerAggregator
    k: int = 2
    residual: bool = True
    max_steps: int | None = PAPER_MAX_STEPS  # None: no limit
    step: str = "argmax"
    order: str = "answers"
    name: str = "acs"

    def __post_init__(self) -> None:
        checks.one_of(self.step, ACS_STEPS, "ACS step")
        checks.one_of(self.order, ACS_ORDERS, "ACS order")
        checks.optional(checks.positive_int, self.max_steps, "ACS max_steps")

    def run(self, question: str, answers: Sequence[AgentAnswer]) -> SearchResult:
        """Search one query's answers for the best aggregate.

        Args:
            question: The question.
            answers: The agents' answers.

        Returns:
            The final answer and its score, the trace of every step, and the LLM and RM calls spent; an
            aggregation that fails falls back to the best answer so far (the trace says so).
        """
        meter = Meter(self.verifier, self.aggregator)
        texts = [a.text for a in answers]
        trace: list[TraceStep] = []
        if not texts:
            trace.append(TraceStep("stop", note="no agent answered"))
            return meter.result(self.name, "", None, trace)
        scores = [v.score for v in self.verifier.verify(question, texts, context=texts)]
        trace.append(TraceStep("answers", tuple(range(len(texts))), score=max(scores),
                               tried=tuple(enumerate(scores)), **meter.mark()))
        members = ranked(scores)[: max(1, self.k)]
        best = members[0]
        current, current_score = texts[best], scores[best]
        try:
            aggregate = self.aggregator.aggregate(question, [texts[i] for i in members],
                                                  [scores[i] for i in members])
        except LLMError as exc:
            trace.append(TraceStep("error", tuple(members), note=f"initial aggregation failed: {exc}", **meter.mark()))
            return meter.result(self.name, current, current_score, trace, fallback="best agent answer")
        # The paper's initial answer is the aggregate of the top-k set, whatever it scores.
        current, current_score = aggregate, self._scores(question, [aggregate], texts)[0]
        trace.append(TraceStep("initial", tuple(members), aggregate, current_score, True, **meter.mark()))

        greedy = self._argmax_steps if self.step == "argmax" else self._passes
        members, current, current_score = greedy(question, texts, scores, members, current, current_score,
                                                 trace, meter)

        if self.residual:
            try:
                given = scores[texts.index(current)] if current in texts else current_score
                residual = self.aggregator.aggregate(question, texts + [current], scores + [given])
                (res_score,), current_score = self._compare(question, [residual], current, current_score, texts)
                keep = res_score > current_score
                note = "kept" if keep else f"discarded: the current answer scores {current_score:.3f}"
                trace.append(TraceStep("residual", tuple(range(len(texts))), residual, res_score, keep, note=note,
                                       **meter.mark()))
                if keep:
                    current, current_score = residual, res_score
            except LLMError as exc:
                trace.append(TraceStep("error", note=f"residual aggregation failed: {exc}", **meter.mark()))
        return meter.result(self.name, current, current_score, trace, members=list(members),
                            aggregator=getattr(self.aggregator, "name", "llm"))

    def _limit_reached(self, steps: int, members, trace, meter) -> bool:
        if self.max_steps is not None and steps >= self.max_steps:
            trace.append(TraceStep("stop", tuple(members), note=f"step limit ({self.max_steps}) reached",
                                   **meter.mark()))
            return True
        return False

    def _argmax_steps(self, question, texts, scores, members, current, current_score, trace, meter):
        """Section 3.2: per step, aggregate S plus each remaining answer in one batched call; keep the best
        if it improves."""
        steps = 0
        while True:
            remaining = [i for i in range(len(texts)) if i not in members]
            if not remaining:
                trace.append(TraceStep("stop", tuple(members), note="every answer is in the set", **meter.mark()))
                break
            if self._limit_reached(steps, members, trace, meter):
                break
            try:
                sets = [members + [j] for j in remaining]
                candidates = self.aggregator.aggregate_many(question, [[texts[i] for i in s] for s in sets],
                                                            [[scores[i] for i in s] for s in sets])
            except LLMError as exc:
                trace.append(TraceStep("error", tuple(members), note=f"greedy aggregation failed: {exc}",
                                       **meter.mark()))
                break
            cand_scores, current_score = self._compare(question, candidates, current, current_score, texts)
            pick = int(np.argmax(cand_scores))
            accepted = cand_scores[pick] > current_score
            tried = tuple(zip(remaining, cand_scores))
            if accepted:
                members = members + [remaining[pick]]
                current, current_score = candidates[pick], cand_scores[pick]
            note = "" if accepted else f"no addition beats the current answer ({current_score:.3f}): stop"
            trace.append(TraceStep("greedy", tuple(members), candidates[pick], cand_scores[pick], accepted, tried,
                                   note=note, **meter.mark()))
            steps += 1
            if not accepted:
                break
        return members, current, current_score

    def _passes(self, question, texts, scores, members, current, current_score, trace, meter):
        """Algorithm A: passes over the answers not in S (fixed at each pass's start); each answer whose
        aggregate with S beats the current answer joins S at once; stop after a pass that improves nothing."""
        order = range(len(texts)) if self.order == "answers" else ranked(scores)
        passes = 0
        while True:
            remaining = [i for i in order if i not in members]
            if not remaining:
                trace.append(TraceStep("stop", tuple(members), note="every answer is in the set", **meter.mark()))
                break
            if self._limit_reached(passes, members, trace, meter):
                break
            passes += 1
            improved = False
            for j in remaining:
                try:
                    candidate = self.aggregator.aggregate(question, [texts[i] for i in members + [j]],
                                                          [scores[i] for i in members + [j]])
                except LLMError as exc:
                    trace.append(TraceStep("error", tuple(members), note=f"greedy aggregation failed: {exc}",
                                           **meter.mark()))
                    return members, current, current_score
                (cand_score,), current_score = self._compare(question, [candidate], current, current_score, texts)
                accepted = cand_score > current_score
                if accepted:
                    members = members + [j]
                    current, current_score, improved = candidate, cand_score, True
                beaten = "" if accepted else f": does not beat the current answer ({current_score:.3f})"
                note = f"pass {passes}{beaten}"
                trace.append(TraceStep("greedy", tuple(members), candidate, cand_score, accepted, ((j, cand_score),),
                                       note=note, **meter.mark()))
            if not improved:
                trace.append(TraceStep("stop", tuple(members), note=f"pass {passes} improved nothing", **meter.mark()))
                break
        return members, current, current_score

    def _compare(self, question: str, candidates: list[str], current: str, current_score: float,
                 texts: list[str]) -> tuple[list[float], float]:
        """The candidates' scores and the current answer's, comparable: the stored score where the verifier's
        scores are absolute (the candidates alone are scored), else all of them rescored in one call."""
        if scores_are_absolute(self.verifier):
            return self._scores(question, candidates, texts), current_score
        *cand_scores, current_score = self._scores(question, candidates + [current], texts)
        return cand_scores, current_score

    def _scores(self, question: str, candidates: list[str], texts: list[str]) -> list[float]:
        """Scores of the candidates in one verify call; a text given twice is scored once, so duplicates
        (picking aggregators return agent answers) cannot tilt set-level members."""
        unique = list(dict.fromkeys(candidates))
        by_text = {t: v.score for t, v in zip(unique, self.verifier.verify(question, unique, context=texts))}
        return [by_text[c] for c in candidates]
