"""Agent Collaboration Search (CTTS-MM, Section 3.2 and Algorithm A): reward-guided greedy aggregation of answers.

1. Score every agent answer with the query's MoR verifier; the top-k (default 2) form the set S.
2. Aggregate S; that is the current answer. The aggregator is a role (morkit.search.aggregators): an LLM
   writes one refined answer (`llm`, the paper's), or one of S's answers is picked by the verifier's
   scores (`vote`, `best`; no LLM call).
3. Greedy, in one of two forms (`step`), for at most `max_steps` steps:
   - `argmax` (the paper's Section 3.2, the default): for every answer not in S, aggregate S plus it (all
     of one step in one batched call), score them together with the current answer, and keep the best
     if it scores strictly higher; stop when none does or nothing is left.
   - `first` (the paper's Algorithm A): take the answers not in S one at a time, best-scored first;
     aggregate S plus it, and keep it as soon as it scores strictly higher than the current answer;
     one pass over the answers, each try one step.
4. Residual: aggregate all answers plus the current one; keep it only if it scores higher.
Scores are compared only within one verify call, with every agent answer passed as context, so
set-level RMs see the same siblings each time; identical texts are scored once per call. The aggregator
gets each set's scores from the first call (all agent answers together); the current answer, when it is
no agent's (an LLM's aggregate), carries its latest score. Every step lands in the trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import LLMError
from morkit.llm.agents import AgentAnswer
from morkit.search.base import AnswerAggregator, Meter, SearchResult, TraceStep
from morkit.verify.base import Verifier

ACS_STEPS = ("argmax", "first")
"""The greedy step: the best of every addition per step (Section 3.2), or the first addition that improves (Algorithm A)."""


def ranked(scores: Sequence[float]) -> list[int]:
    """Indices by score, best first; equal scores keep answer order (agents are listed in config order)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])


@dataclass
class ACS:
    verifier: Verifier
    aggregator: AnswerAggregator
    k: int = 2
    residual: bool = True
    max_steps: int | None = None
    step: str = "argmax"
    name: str = "acs"

    def __post_init__(self) -> None:
        checks.one_of(self.step, ACS_STEPS, "ACS step")
        checks.optional(checks.positive_int, self.max_steps, "ACS max_steps")

    def run(self, question: str, answers: Sequence[AgentAnswer]) -> SearchResult:
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

        greedy = self._argmax_steps if self.step == "argmax" else self._first_improvement
        members, current, current_score = greedy(question, texts, scores, members, current, current_score,
                                                 trace, meter)

        if self.residual:
            try:
                given = scores[texts.index(current)] if current in texts else current_score
                residual = self.aggregator.aggregate(question, texts + [current], scores + [given])
                res_score, current_score = self._scores(question, [residual, current], texts)
                keep = res_score > current_score
                note = "kept" if keep else f"discarded: the current answer scores {current_score:.3f} in this call"
                trace.append(TraceStep("residual", tuple(range(len(texts))), residual, res_score, keep, note=note,
                                       **meter.mark()))
                if keep:
                    current, current_score = residual, res_score
            except LLMError as exc:
                trace.append(TraceStep("error", note=f"residual aggregation failed: {exc}", **meter.mark()))
        return meter.result(self.name, current, current_score, trace, members=list(members),
                            aggregator=getattr(self.aggregator, "name", "llm"))

    def _argmax_steps(self, question, texts, scores, members, current, current_score, trace, meter):
        """Section 3.2: per step, aggregate S plus each remaining answer in one batched call; keep the best if it improves."""
        steps = 0
        while self.max_steps is None or steps < self.max_steps:
            remaining = [i for i in range(len(texts)) if i not in members]
            if not remaining:
                trace.append(TraceStep("stop", tuple(members), note="every answer is in the set", **meter.mark()))
                break
            try:
                sets = [members + [j] for j in remaining]
                candidates = self.aggregator.aggregate_many(question, [[texts[i] for i in s] for s in sets],
                                                            [[scores[i] for i in s] for s in sets])
            except LLMError as exc:
                trace.append(TraceStep("error", tuple(members), note=f"greedy aggregation failed: {exc}",
                                       **meter.mark()))
                break
            *cand_scores, current_score = self._scores(question, candidates + [current], texts)
            pick = int(np.argmax(cand_scores))
            accepted = cand_scores[pick] > current_score
            tried = tuple(zip(remaining, cand_scores))
            if accepted:
                members = members + [remaining[pick]]
                current, current_score = candidates[pick], cand_scores[pick]
            note = "" if accepted else f"no addition beats the current answer ({current_score:.3f} in this call): stop"
            trace.append(TraceStep("greedy", tuple(members), candidates[pick], cand_scores[pick], accepted, tried,
                                   note=note, **meter.mark()))
            steps += 1
            if not accepted:
                break
        else:
            trace.append(TraceStep("stop", tuple(members), note=f"step limit ({self.max_steps}) reached", **meter.mark()))
        return members, current, current_score

    def _first_improvement(self, question, texts, scores, members, current, current_score, trace, meter):
        """Algorithm A: one pass over the remaining answers, best-scored first; each is kept as soon as
        aggregating it into S beats the current answer."""
        remaining = [i for i in ranked(scores) if i not in members]
        for steps, j in enumerate(remaining):
            if self.max_steps is not None and steps >= self.max_steps:
                trace.append(TraceStep("stop", tuple(members), note=f"step limit ({self.max_steps}) reached",
                                       **meter.mark()))
                break
            try:
                candidate = self.aggregator.aggregate(question, [texts[i] for i in members + [j]],
                                                      [scores[i] for i in members + [j]])
            except LLMError as exc:
                trace.append(TraceStep("error", tuple(members), note=f"greedy aggregation failed: {exc}",
                                       **meter.mark()))
                break
            cand_score, current_score = self._scores(question, [candidate, current], texts)
            accepted = cand_score > current_score
            if accepted:
                members = members + [j]
                current, current_score = candidate, cand_score
            note = "" if accepted else f"does not beat the current answer ({current_score:.3f} in this call)"
            trace.append(TraceStep("greedy", tuple(members), candidate, cand_score, accepted, ((j, cand_score),),
                                   note=note, **meter.mark()))
        else:
            trace.append(TraceStep("stop", tuple(members), note="every answer was tried", **meter.mark()))
        return members, current, current_score

    def _scores(self, question: str, candidates: list[str], texts: list[str]) -> list[float]:
        """Scores of the candidates in one verify call; a text given twice is scored once, so duplicates
        (picking aggregators return agent answers) cannot tilt set-level members."""
        unique = list(dict.fromkeys(candidates))
        by_text = {t: v.score for t, v in zip(unique, self.verifier.verify(question, unique, context=texts))}
        return [by_text[c] for c in candidates]
