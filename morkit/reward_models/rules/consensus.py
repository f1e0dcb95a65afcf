"""The math-consensus rule (kind "rule"): a candidate's score is the share of its siblings whose final answer is
equivalent to its own. Unsupervised: it never looks at a reference answer, and needs no model."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar, Sequence

from morkit.core.grading import equivalence_classes, extract_answer
from morkit.core.types import Query, Score
from morkit.reward_models.base import EMPTY_ANSWER_SCORE, is_empty_answer


def consensus_scores(texts: Sequence[str | None]) -> list[float]:
    """Each text's share of all texts whose final answer is equivalent to its own (the denominator is len(texts)).
    Empty texts score EMPTY_ANSWER_SCORE, texts without an extractable answer 0."""
    n = len(texts)
    answers = [None if is_empty_answer(t) else extract_answer(t) for t in texts]
    cls = equivalence_classes(answers)
    sizes = Counter(c for c in cls if c is not None)
    scores = []
    for text, index in zip(texts, cls):
        if is_empty_answer(text):
            scores.append(EMPTY_ANSWER_SCORE)
        else:
            scores.append(0.0 if index is None else sizes[index] / n)
    return scores


@dataclass(frozen=True)
class MathConsensus:
    """Self-consistency verifier: a candidate's score is the share of its siblings agreeing with it."""

    name: str = "math-consensus"
    kind: ClassVar[str] = "rule"
    relative_scores: ClassVar[bool] = True  # a score depends on the siblings scored with it

    def score_query(self, query: Query) -> list[Score]:
        return [Score(v) for v in consensus_scores([c.text for c in query.candidates])]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        """Consensus within each group of pairs that share the identical question text.

        Unlike most RMs, a pair's score depends on the other pairs of its question in the batch."""
        groups: dict[str, list[int]] = {}
        for i, (question, _) in enumerate(pairs):
            groups.setdefault(question, []).append(i)
        values = [0.0] * len(pairs)
        for members in groups.values():
            for i, v in zip(members, consensus_scores([pairs[i][1] for i in members])):
                values[i] = v
        return [Score(v) for v in values]

    def cache_context(self, query: Query) -> str | None:
        return None  # depends on the sibling answers, never cache
