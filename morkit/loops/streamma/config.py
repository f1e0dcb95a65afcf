"""StreamMAConfig: every setting of a StreamMA run, each a documented field (the CLI's `--set field=value`).

Defaults follow the paper where it says; docs/loops/streamma.md lists each setting and its source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.loops.settings import LoopFlag

PROTOCOLS = ("single", "serial", "stream")
PYTHON_MAX_TOKENS = 512
"""New tokens of a whole response of a StreamMA built in Python whose config leaves `max_tokens` None."""


@dataclass(frozen=True)
class StreamMAConfig:
    """One StreamMA run's settings."""

    FLAGS: ClassVar[tuple[LoopFlag, ...]] = (
        LoopFlag("--chain", "agents", "agents in the chain A"),
        LoopFlag("--protocol", "protocol", "the protocol"),
        LoopFlag("--step-marker", "step_marker",
                 "end-of-step marker, on a line of its own (the paper's); backslash escapes read: '\\n\\n' splits "
                 "paragraphs; the packaged SmolLM2 agents write a step a line and no marker: use '\\n'"),
    )
    """The flags of `morkit loop streamma`, each a shorthand for `--set FIELD=VALUE`."""

    agents: int = 4
    """A: agents in the chain (or the topology). Agent 0 solves; the others review and correct. The paper's
    prompts show a chain of 4 (A->B->C->D)."""
    protocol: Literal["single", "serial", "stream"] = "stream"
    """stream: each step goes downstream as soon as it is written and every downstream agent answers it in
    a turn of its own conversation (the paper's protocol); serial: an agent finishes its whole response, then
    the next agent gets that complete upstream response in one message (the paper's generate-then-transfer
    baseline); single: agent 0 alone (the paper's single-agent baseline)."""
    steps: int | None = None
    """S: steps per agent. Set, the solver is asked for exactly S steps (its stream is cut after S) and every
    agent writes S steps. None (morkit's default; the paper states no default S): the solver splits as it
    likes, up to `max_steps`. The paper's step-level scaling law varies S; its worked example has S = 4."""
    max_steps: int = 12
    """Cap on an agent's steps when `steps` is None (a safety limit of morkit's; the paper has none)."""
    step_marker: str = "END_STEP"
    """Where the solver's streamed text is cut into steps: the paper's prompts say '[Stream only] After your
    response, output END_STEP on its own line.' Any text works; a blank line ('\\n\\n') splits paragraphs, and
    the packaged SmolLM2 agents, which write a step a line and no END_STEP, need '\\n'."""
    step_split: Literal["line", "text"] = "line"
    """line: a step ends at a line that holds only the marker (the paper's 'on its own line'; surrounding
    spaces and markdown emphasis allowed); text: the marker ends a step wherever it appears. A marker that
    contains a line break ('\\n', '\\n\\n') always splits as text."""
    serial_marker: bool = True
    """Whether the solver is asked for the marker under `serial` too. The paper's line is tagged '[Stream
    only]' in the reviewers' prompts; the solver's prompt is not legible. morkit asks for it under both, so
    serial hands on the same delimited steps, in one message, and its reviews are per step."""
    review: Literal["correct", "rewrite"] = "correct"
    """correct: each reviewer is the paper's reviewer-and-corrector: for every upstream step it states
    ERROR + CORRECTION or accepts, and passes forward 'the MOST ACCURATE version (original if correct, your
    correction if not)', writing no step of its own. rewrite: morkit's earlier protocol: after its verdict
    the reviewer writes its own STEP k, which becomes its version of the step."""
    authority: Literal["rising", "ranked", "equal"] = "rising"
    """rising: the paper's per-position wording: the first reviewer 'MUST CORRECT ERRORS', later ones 'CAN
    OVERRULE PREVIOUS AGENTS', the last has 'FINAL CORRECTION AUTHORITY'. ranked: morkit's earlier text (each
    agent told its level, that it outranks upstream and is outranked downstream). equal: every agent is told
    all have equal say (an ablation, not in the paper)."""
    summary: Literal["every", "final", "none"] = "every"
    """every: each reviewer ends with a detailed summary of the steps and its corrections (the paper: 'After
    all steps, provide DETAILED overall summary'), which goes downstream with its output; the final agent's
    holds the final answer. final: only the final agent (every sink) summarises (morkit's earlier protocol:
    with `steps` set, in its reply to the last step). none: nobody does. A summary comes in one more turn
    once the agent's upstream has ended."""
    forward: Literal["reply", "step"] = "reply"
    """What a reviewer hands downstream for each step: its whole reply as written (its verdict and any
    correction: downstream agents see, and may overrule, the corrections), followed by its version of the step
    (`STEP k:`) when the reply does not end with it; or only its version of the step. The paper's agents
    receive the upstream agent's output; 'step' is a morkit option."""
    votes: int = 1
    """N: independent replicas of the whole system whose final answers are majority-voted (the paper's
    Stream x N / Serial x N, N in {1, 4, 16}). The paper runs replicas in parallel; morkit runs them one after
    another (state.latency.parallel_answer_s: the slowest one), each with seed + r."""
    queue_size: int = 4
    """Steps an edge holds before its sender waits (back-pressure; an engineering bound, not in the paper)."""
    max_tokens: int | None = None
    """New tokens of a whole response: the solver's stream, and a serial agent's single reply; None: the first
    agent's max_tokens under `run_loop` and `morkit loop` (`--gen-tokens` sets it), `PYTHON_MAX_TOKENS` (512) in
    a StreamMA built in Python."""
    step_max_tokens: int = 192
    """New tokens of one stream turn of a downstream agent (its verdict on one step, or its summary)."""
    temperature: float = 0.7
    """Sampling temperature of the solver (and of every agent unless `review_temperature` is set). The paper's
    sampling settings are not in what could be read (it names models and effort levels, e.g. Claude Opus
    4.6-high); morkit's 0.7 makes Stream x N replicas differ."""
    review_temperature: float | None = None
    """Downstream agents' temperature; None: the same as `temperature` (all agents are the same model)."""
    seed: int | None = None
    """Sampling seed of every call (replica r of Stream x N uses seed + r)."""
    step_timeout_s: float | None = None
    """Longest wait for the next upstream step; past it the agent fails with StepTimeout (morkit's guard)."""
    timeout_s: float | None = None
    """Whole-run deadline; past it every agent is told to stop and the best available answer is returned."""
    price_input: float = 5.0
    """USD per million prompt tokens prefilled (the paper's cost example: Claude Opus 4.6, $5 / $25 / $0.5
    per million input / output / cache tokens, as its project page states)."""
    price_output: float = 25.0
    """USD per million generated tokens (Claude Opus 4.6, $25)."""
    price_cached: float = 0.5
    """USD per million prompt tokens read from the KV (prompt) cache (Claude Opus 4.6, $0.50)."""

    def __post_init__(self) -> None:
        checks.one_of(self.protocol, PROTOCOLS, "StreamMAConfig.protocol")
        checks.one_of(self.authority, ("rising", "ranked", "equal"), "StreamMAConfig.authority")
        checks.one_of(self.review, ("correct", "rewrite"), "StreamMAConfig.review")
        checks.one_of(self.summary, ("every", "final", "none"), "StreamMAConfig.summary")
        checks.one_of(self.step_split, ("line", "text"), "StreamMAConfig.step_split")
        checks.one_of(self.forward, ("reply", "step"), "StreamMAConfig.forward")
        for name in ("agents", "max_steps", "queue_size", "step_max_tokens", "votes"):
            checks.positive_int(getattr(self, name), f"StreamMAConfig.{name}")
        checks.optional(checks.positive_int, self.steps, "StreamMAConfig.steps")
        checks.optional(checks.positive_int, self.max_tokens, "StreamMAConfig.max_tokens")
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
