"""The Verifier protocol: what search and test-time-scaling loops ask to score a question's answers with.

Scores compare within one call unless `absolute_scores` says otherwise (docs/selection.md, "MoR as a verifier")."""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from morkit.core.types import Verdict


@runtime_checkable
class Verifier(Protocol):
    """Scores a question's answers (with optional context such as an answer's steps) as one Verdict each."""

    name: str

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        """One Verdict per answer; `context` answers are scored alongside but not returned.

        Args:
            question: The question the answers answer.
            answers: The answers to score.
            context: Other answers (e.g. all of a round's answers) a verifier may compare with; not scored.

        Returns:
            One Verdict per answer, in order.
        """
        ...


def scores_are_absolute(verifier: Any) -> bool:
    """Whether `verifier` declares that its scores mean the same in every call (`absolute_scores`; default no)."""
    return bool(getattr(verifier, "absolute_scores", False))
