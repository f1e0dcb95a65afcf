"""The Verifier protocol: what search and test-time-scaling loops ask to score a question's answers.

A verifier returns one Verdict (score and feedback text) per answer. Scores are comparable within one
`verify` call; pass the query's other answers as `context` so that set-level members (answer
consensus, per-query normalisation) see the same siblings every time. Implementations: MoRVerifier
(a per-query RM ensemble), LLMVerifier (an LLM critic) and CombinedVerifier (their sum).
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from morkit.core.types import Verdict


@runtime_checkable
class Verifier(Protocol):
    name: str

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        """One Verdict per answer; `context` answers are scored alongside but not returned."""
        ...
