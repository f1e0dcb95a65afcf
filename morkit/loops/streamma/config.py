"""StreamMAConfig: every setting of a StreamMA run, each a documented field (the CLI's `--set field=value`).

Defaults follow the paper (Yang et al., "Streaming Communication in Multi-Agent Reasoning", arXiv 2606.05158,
and its code, EnVision-Research/StreamMA) where it says; where it is silent the choice is named in the
field's comment. The paper's symbols: A agents (`agents`), S steps per agent (`steps`), N replicas of the
whole system whose final answers are majority-voted (`votes`, "Stream x N").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from morkit.core import checks
from morkit.core.errors import InputError

PROTOCOLS = ("single", "serial", "stream")


@dataclass(frozen=True)
class StreamMAConfig:
    """One StreamMA run's settings."""

    agents: int = 4
    """A: agents in the chain (or the topology). Agent 0 solves; the others review and solve on."""
    protocol: Literal["single", "serial", "stream"] = "stream"
    """stream: each step goes downstream as soon as it is written and every downstream agent answers it in
    a turn of its own conversation (the paper's protocol); serial: an agent finishes its whole response, then
    the next agent gets that complete upstream response in one message (the paper's generate-then-transfer
    baseline); single: agent 0 alone (the paper's single-agent baseline)."""
    steps: int | None = None
    """S: steps per agent. Set, the solver is asked for exactly S steps (its stream is cut after S) and every
    agent writes S steps. None is the paper's 'S=auto' baseline: the solver splits as it likes, up to
    `max_steps`. The paper scales S as its step-level scaling law (A=64, S=64)."""
    max_steps: int = 12
    """Cap on an agent's steps when `steps` is None (a safety limit of morkit's; the paper has none)."""
    step_marker: str = "\n\n"
    """Where the solver's streamed text is cut into steps. The paper's prompts ask for delimited steps; the
    delimiter itself is not published in what we could read, so morkit uses a blank line (SmolLM2: '\\n')."""
    authority: Literal["rising", "equal"] = "rising"
    """rising: each agent is told its rank, and that it outranks every agent upstream (it may overrule their
    steps and their corrections) while agents after it may overrule it (the paper's rising authority along
    the pipeline). equal: every agent is told all agents have equal say (an ablation, not in the paper)."""
    final_summary: bool = True
    """The final agent (every sink of the topology) ends with a SUMMARY and the final answer, as the paper's
    last agent does. With `steps` set this comes in its reply to the last upstream step; otherwise (or when
    upstream stopped early) in one more turn once the upstream stream has ended."""
    forward: Literal["reply", "step"] = "reply"
    """What a reviewer hands downstream for each step: its whole reply (its ACCEPT or ERROR/CORRECTION
    verdict and its step: downstream agents see, and may overrule, the corrections) or only its own step.
    The paper forwards an agent's output as written; 'step' is a morkit option."""
    votes: int = 1
    """N: independent replicas of the whole system whose final answers are majority-voted (the paper's
    Stream x N / Serial x N, N in {1, 4, 16}). Replicas run one after another; each gets seed + r."""
    queue_size: int = 4
    """Steps an edge holds before its sender waits (back-pressure; an engineering bound, not in the paper)."""
    max_tokens: int = 512
    """New tokens of a whole response: the solver's stream, and a serial agent's single reply."""
    step_max_tokens: int = 192
    """New tokens of one stream turn of a downstream agent (its verdict and step, plus the summary at the end)."""
    temperature: float = 0.7
    """Sampling temperature of the solver (and of every agent unless `review_temperature` is set). The paper
    uses each API's default; morkit's default is 0.7 so that Stream x N replicas differ."""
    review_temperature: float | None = None
    """Downstream agents' temperature; None: the same as `temperature` (all agents are the same model)."""
    seed: int | None = None
    """Sampling seed of every call (replica r of Stream x N uses seed + r)."""
    step_timeout_s: float | None = None
    """Longest wait for the next upstream step; past it the agent fails with StepTimeout (morkit's guard)."""
    timeout_s: float | None = None
    """Whole-run deadline; past it every agent is told to stop and the best available answer is returned."""
    price_input: float = 5.0
    """USD per million prompt tokens prefilled (the paper's cost analysis: Claude Opus 4.6, $5)."""
    price_output: float = 25.0
    """USD per million generated tokens (Claude Opus 4.6, $25)."""
    price_cached: float = 0.5
    """USD per million prompt tokens read from the KV (prompt) cache (Claude Opus 4.6, $0.50)."""

    def __post_init__(self) -> None:
        checks.one_of(self.protocol, PROTOCOLS, "StreamMAConfig.protocol")
        checks.one_of(self.authority, ("rising", "equal"), "StreamMAConfig.authority")
        checks.one_of(self.forward, ("reply", "step"), "StreamMAConfig.forward")
        for name in ("agents", "max_steps", "queue_size", "max_tokens", "step_max_tokens", "votes"):
            checks.positive_int(getattr(self, name), f"StreamMAConfig.{name}")
        checks.optional(checks.positive_int, self.steps, "StreamMAConfig.steps")
        checks.non_negative(self.temperature, "StreamMAConfig.temperature")
        checks.optional(checks.non_negative, self.review_temperature, "StreamMAConfig.review_temperature")
        checks.optional(checks.positive, self.step_timeout_s, "StreamMAConfig.step_timeout_s")
        checks.optional(checks.positive, self.timeout_s, "StreamMAConfig.timeout_s")
        for name in ("price_input", "price_output", "price_cached"):
            checks.non_negative(getattr(self, name), f"StreamMAConfig.{name}")
        if not self.step_marker:
            raise InputError("StreamMAConfig.step_marker: the end-of-step marker must not be empty")

    @property
    def step_cap(self) -> int:
        """The most steps one agent writes: S when set, else `max_steps`."""
        return self.steps if self.steps is not None else self.max_steps

    @property
    def reviewer_temperature(self) -> float:
        return self.temperature if self.review_temperature is None else self.review_temperature
