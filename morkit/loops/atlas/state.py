"""The mutable state of one ATLAS run, which the loop, its scoring and its synthesis all read and change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from morkit.loops.base import Spend, Trace


@dataclass
class RunState:
    """Mutable state of one run: meter, trace, evidence, decisions, the orchestrator's conversation, costs."""

    problem: str
    spend: Spend
    trace: Trace
    conversation: list[dict[str, str]]
    pending: list[str]  # user text not yet sent: it opens the orchestrator's next turn
    table: dict[str, Any] | None = None  # the latest one-call scores of every candidate (show_scores, not absolute)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    cost_by_solver: dict[str, float] = field(default_factory=dict)
    pool_used: int = 0
