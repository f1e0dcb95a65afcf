"""AgentLog: what one StreamMA agent did in one run (its steps, what it handed on, its reviews and summary,
its calls and times), written by the agent's own thread and read once the run has ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AgentLog:
    """What one agent did in one run; written by its own thread only, read once it has ended."""

    agent: int
    steps: list[str] = field(default_factory=list)  # the agent's own steps
    payloads: list[str] = field(default_factory=list)  # what it hands downstream for each step (cfg.forward)
    reviews: list[dict[str, Any]] = field(default_factory=list)  # its verdict on each upstream step
    summary_text: str | None = None  # a final agent's SUMMARY and answer
    sent: int = 0  # steps already handed to every downstream agent
    calls: int = 0
    busy_s: float = 0.0  # wall time inside LLM calls (queueing inside the backend included)
    blocked_s: float = 0.0  # waiting for room in downstream queues (back-pressure)
    waiting_s: float = 0.0  # waiting for upstream steps
    changed: int = 0  # upstream steps this reviewer marked ERROR
    status: str = "idle"  # running, done, max_steps, failed, aborted
    error: str | None = None
    error_kind: str | None = None  # budget, timeout, llm, error
    first_step_s: float | None = None
    done_s: float | None = None
    queue_max: dict[int, int] = field(default_factory=dict)  # downstream agent -> most steps seen in its inbox

    def summary(self) -> dict[str, Any]:
        return {"agent": self.agent, "steps": len(self.steps), "calls": self.calls, "busy_s": round(self.busy_s, 4),
                "blocked_s": round(self.blocked_s, 4), "waiting_s": round(self.waiting_s, 4),
                "errors_flagged": self.changed, "summary": self.summary_text is not None, "status": self.status,
                "error": self.error, "error_kind": self.error_kind,
                "first_step_s": self.first_step_s, "done_s": self.done_s}
