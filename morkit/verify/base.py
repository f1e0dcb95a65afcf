"""The Verifier protocol: what search and test-time-scaling loops ask to score a question's answers.

A verifier returns one Verdict (score and feedback text) per answer. Scores are comparable within one
`verify` call; pass the query's other answers as `context` so that set-level members (answer
consensus, per-query normalisation) see the same siblings every time. A verifier whose scores also
compare across calls says so with `absolute_scores = True`; loops that compare scores from different
calls (rounds, stop thresholds) check `scores_are_absolute` and otherwise re-score in one call.
Implementations: MoRVerifier (a per-query RM ensemble), LLMVerifier (an LLM critic) and
CombinedVerifier (their sum).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from morkit.core.types import Verdict


@runtime_checkable
class Verifier(Protocol):
    name: str

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        """One Verdict per answer; `context` answers are scored alongside but not returned."""
        ...


def scores_are_absolute(verifier: Any) -> bool:
    """Whether `verifier` declares that its scores mean the same in every call (`absolute_scores`; default no)."""
    return bool(getattr(verifier, "absolute_scores", False))
