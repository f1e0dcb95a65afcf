"""Which parts of a verifier write analysis, so that TMAS's memory agents are fed analysis and never bare scores.
`without_score_parts` gives a combined verifier whose score-only parts (MoR) return empty feedback, keeping
their own for the trace (docs/loops/tmas.md, "Verification with MoR or a critic")."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from morkit.core.types import Verdict
from morkit.loops.base import map_verifier
from morkit.loops.tmas.sampling import is_critic


def _parts(node: Any) -> list[Any]:
    """The verifiers a dataclass verifier holds in its fields."""
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return []
    return [getattr(node, f.name) for f in dataclasses.fields(node) if hasattr(getattr(node, f.name), "verify")]


def writes_analysis(verifier: Any) -> bool:
    """Whether `verifier`'s feedback holds analysis: its own `writes_analysis` when set, else whether it is
    or holds an LLM critic."""
    declared = getattr(verifier, "writes_analysis", None)
    if declared is not None:
        return bool(declared)
    return is_critic(verifier) or any(writes_analysis(part) for part in _parts(verifier))


class ScoreOnly:
    """A part that writes no analysis, inside a combined verifier: same scores, empty feedback; what it wrote
    is kept in `notes` (one list per verify call). Other attributes are the part's own."""

    def __init__(self, inner: Any):
        self.inner, self.notes = inner, []

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        verdicts = self.inner.verify(question, answers, context)
        self.notes.append([v.feedback for v in verdicts])
        return [Verdict(v.score, "") for v in verdicts]


def without_score_parts(verifier: Any) -> tuple[Any, list[ScoreOnly]]:
    """A copy of an analysis-writing `verifier` whose score-only parts write no feedback, and those parts (a
    fresh copy per call, so concurrent passes keep their notes apart); the verifier itself when it has none."""
    wrapped: list[ScoreOnly] = []

    def silence(node: Any) -> dict[str, Any]:
        changes = {}
        for f in dataclasses.fields(node):
            part = getattr(node, f.name)
            if hasattr(part, "verify") and not isinstance(part, ScoreOnly) and not writes_analysis(part):
                changes[f.name] = ScoreOnly(part)
                wrapped.append(changes[f.name])
        return changes

    if not writes_analysis(verifier):
        return verifier, []
    return map_verifier(verifier, silence), wrapped


def memory_input(verifications: int, analysis: bool, verifier: str) -> str:
    """What TMAS's memory agents are fed, in words, for the trace."""
    if verifications == 0:
        return "solutions only: no verification (verifications=0)"
    if not analysis:
        return (f"solutions only: {verifier} writes scores, not analysis, so there is nothing to summarise (the "
                "paper's mechanism needs an analysis-writing verifier: --verifier both or llm)")
    return "solutions with summaries of the verifications' analysis"


def no_summaries_reason(verifications: int) -> str:
    """Why a prompt's rollouts come without verification summaries (said in the prompt)."""
    return "this run has no verification" if verifications == 0 else "the verifier writes scores, not analysis"
