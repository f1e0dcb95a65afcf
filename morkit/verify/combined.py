"""CombinedVerifier: an MoR ensemble's score plus a weighted LLM critic's score."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from morkit.core.types import Verdict
from morkit.verify.base import scores_are_absolute


@dataclass
class CombinedVerifier:
    """MoR score plus `weight` x the LLM critic's score; the feedback is the critique, then the MoR line.

    Args:
        mor: The MoR verifier (e.g. a MoRVerifier).
        critic: The LLM critic (e.g. an LLMVerifier).
        weight: The critic score's weight in the sum.
        name: The verifier's name.
    """

    mor: Any
    critic: Any
    weight: float = 1.0
    name: str = "mor+llm"

    @property
    def absolute_scores(self) -> bool:
        return scores_are_absolute(self.mor) and scores_are_absolute(self.critic)

    @property
    def rm_calls(self) -> int:
        return getattr(self.mor, "rm_calls", 0)

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        """Verify with both and add the scores.

        Args:
            question: The question.
            answers: The answers to score.
            context: Other answers, passed to both verifiers.

        Returns:
            One Verdict per answer: MoR score + `weight` x critic score, the critique then the MoR feedback.
        """
        rewards = self.mor.verify(question, answers, context)
        critiques = self.critic.verify(question, answers, context)
        return [Verdict(r.score + self.weight * c.score, f"{c.feedback}\n{r.feedback}".strip())
                for r, c in zip(rewards, critiques)]
