"""StreamMA's agents at work: one thread per agent, bounded queues for edges, sentinels, budgets, timing.

`PipelineRun` runs a Topology once. Agent 0 streams its solution and emits each step when its marker
arrives; a reviewer takes step k from every open upstream edge, makes one LLM call for it and emits its
version. Under `stream` each emitted step goes downstream at once; under `serial` an agent hands on its
steps only when it has finished. Queues hold `queue_size` steps, so a slow reviewer makes its upstream
wait. Whatever happens to an agent (done, max_steps, failure, deadline) it ends its downstream edges
with an `EndOfStream` and drains its inboxes, so no agent waits forever and the others finish with what
they have. Per-agent counts and times go to an `AgentLog`, every event to the Trace.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from morkit.core.errors import LLMError
from morkit.llm.base import LLM, SamplingParams
from morkit.loops.base import Budget, BudgetExhausted, MeteredLLM, Spend, Trace
from morkit.loops.streamma.graph import (
    EndOfStream,
    StepMessage,
    StepSplitter,
    StreamMAConfig,
    Topology,
    review_conversation,
    solver_conversation,
)

_POLL_S = 0.05  # how often a blocked agent looks at the run's abort flag
_GRACE_S = 2.0  # how long agents get to stop once the run's deadline has passed


class StepTimeout(LLMError):
    """No step came from an upstream agent within `step_timeout_s`."""


class _Aborted(Exception):
    """The run's deadline passed: agents stop at their next check."""


@dataclass
class AgentLog:
    """What one agent did in one run; written by its own thread only, read once it has ended."""

    agent: int
    steps: list[str] = field(default_factory=list)
    sent: int = 0  # steps already handed to every downstream agent
    calls: int = 0
    busy_s: float = 0.0  # wall time inside LLM calls (queueing inside the backend included)
    blocked_s: float = 0.0  # waiting for room in downstream queues (back-pressure)
    waiting_s: float = 0.0  # waiting for upstream steps
    changed: int = 0  # steps this reviewer corrected
    status: str = "idle"  # running, done, max_steps, failed, aborted
    error: str | None = None
    error_kind: str | None = None  # budget, timeout, llm, error
    first_step_s: float | None = None
    done_s: float | None = None
    queue_max: dict[int, int] = field(default_factory=dict)  # downstream agent -> most steps seen in its inbox

    def summary(self) -> dict[str, Any]:
        return {"agent": self.agent, "steps": len(self.steps), "calls": self.calls, "busy_s": round(self.busy_s, 4),
                "blocked_s": round(self.blocked_s, 4), "waiting_s": round(self.waiting_s, 4),
                "changed": self.changed, "status": self.status, "error": self.error, "error_kind": self.error_kind,
                "first_step_s": self.first_step_s, "done_s": self.done_s}


class PipelineRun:
    """One run of the agents on a topology: threads, queues, spend, trace and per-agent logs."""

    def __init__(self, topology: Topology, llms: Sequence[LLM], config: StreamMAConfig, budget: Budget,
                 problem: str):
        self.cfg, self.problem, self.topology = config, problem, topology
        self.spend, self.trace = Spend(budget), Trace()
        self.llms = [MeteredLLM(llm, self.spend) for llm in llms]
        self.inbox: dict[tuple[int, int], queue.Queue] = {
            edge: queue.Queue(maxsize=config.queue_size) for edge in topology.edges()}
        self.open = [list(ups) for ups in topology.upstream]  # upstream edges not yet ended, per agent
        self.logs = [AgentLog(i) for i in range(topology.agents)]
        self.abort = threading.Event()

    def now(self) -> float:
        return round(time.perf_counter() - self.trace.started, 4)

    def execute(self) -> bool:
        """Run every agent to its end (or the deadline); True when all ended in time."""
        threads = [threading.Thread(target=self._agent, args=(i,), name=f"streamma-agent-{i}", daemon=True)
                   for i in self.topology.order]
        for thread in threads:
            thread.start()
        deadline = None if self.cfg.timeout_s is None else time.perf_counter() + self.cfg.timeout_s
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.perf_counter()))
        if not any(t.is_alive() for t in threads):
            return True
        self.abort.set()
        self.trace.add("run_timeout", seconds=self.cfg.timeout_s)
        for thread in threads:
            thread.join(_GRACE_S)
        return False

    # -- one agent ---------------------------------------------------------------------------

    def _agent(self, i: int) -> None:
        log = self.logs[i]
        log.status = "running"
        self.trace.add("agent_start", agent=i, role="reviewer" if i else "solver")
        try:
            self._solve(log) if i == 0 else self._review(log)
        except _Aborted:
            log.status = "aborted"
        except BudgetExhausted as err:
            self._failed(log, "budget", err)
        except StepTimeout as err:
            self._failed(log, "timeout", err)
        except LLMError as err:
            self._failed(log, "llm", err)
        except Exception as err:  # noqa: BLE001 - a backend bug must not leave the other agents waiting
            self._failed(log, "error", err)
        finally:
            self._close(log)

    def _failed(self, log: AgentLog, kind: str, err: BaseException) -> None:
        log.status, log.error_kind, log.error = "failed", kind, f"{type(err).__name__}: {err}"
        self.trace.add("agent_error", agent=log.agent, error_kind=kind, error=log.error, steps=len(log.steps))

    def _close(self, log: AgentLog) -> None:
        """Hand on what is left (serial), end every downstream edge, then drain the inboxes."""
        if log.status == "running":
            log.status = "done"
        dropped = 0
        try:
            self._flush(log)
            for dst in self.topology.downstream[log.agent]:
                self._put(log, dst, EndOfStream(log.agent, log.status))
            log.done_s = self.now()
            self.trace.add("agent_end", agent=log.agent, status=log.status, steps=len(log.steps))
            dropped = self._drain(log)
        except _Aborted:
            log.done_s = log.done_s if log.done_s is not None else self.now()
        if dropped:
            self.trace.add("steps_dropped", agent=log.agent, count=dropped)

    def _solve(self, log: AgentLog) -> None:
        """Stream agent 0's solution, emitting each step as soon as its marker arrives."""
        cfg = self.cfg
        params = SamplingParams(temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=cfg.seed)
        splitter = StepSplitter(cfg.step_marker)
        self._before_call(log, "stream")
        pieces = self.llms[0].stream(solver_conversation(cfg.step_marker, self.problem), params)
        try:
            for count, piece in enumerate(self._timed(log, pieces), 1):
                for step in splitter.feed(piece):
                    if self._output(log, step, "generated"):
                        return
                self._check_mid_stream(count)
            tail = splitter.flush()
            if tail:
                self._output(log, tail, "generated")
        except BaseException:
            if splitter.buffer.strip():
                self.trace.add("partial_step", agent=0, text=splitter.buffer.strip())
            raise
        finally:
            pieces.close()  # stops generation early when max_steps cut the stream

    def _review(self, log: AgentLog) -> None:
        """Review every incoming step in order (step k from every open upstream edge, merged)."""
        i, open_ups = log.agent, self.open[log.agent]
        while open_ups and len(log.steps) < self.cfg.max_steps:
            versions = []
            for u in list(open_ups):
                msg = self._get(log, u)
                if isinstance(msg, EndOfStream):
                    open_ups.remove(u)
                    self.trace.add("stream_ended", agent=i, sender=u, reason=msg.reason)
                else:
                    self.trace.add("step_received", agent=i, sender=u, index=msg.index)
                    versions.append(msg)
            if versions and self._output(log, *self._review_step(log, versions)):
                return

    def _review_step(self, log: AgentLog, versions: list[StepMessage]) -> tuple[str, str]:
        """The corrected step (or the step as it came) and how it came about: kept, corrected, fallback."""
        cfg, index = self.cfg, len(log.steps)
        texts = [v.text for v in versions]
        conversation = review_conversation(self.problem, log.steps, texts, index)
        params = SamplingParams(temperature=cfg.review_temperature, max_tokens=cfg.step_max_tokens,
                                stop=(cfg.step_marker,), seed=cfg.seed)
        self._before_call(log, "review")
        start = time.perf_counter()
        try:
            completion = self.llms[log.agent].chat([conversation], params)[0]
        finally:
            log.busy_s += time.perf_counter() - start
        reply = completion.texts[0] if completion.texts else ""
        text = next((s.strip() for s in reply.split(cfg.step_marker) if s.strip()), "")
        source = "fallback" if not text else "kept" if text in texts else "corrected"
        text = text or texts[0]  # an empty review keeps the step as it came
        log.changed += source == "corrected"
        self.trace.add("step_reviewed", agent=log.agent, index=index, source=source, before=texts[0], after=text,
                       seconds=round(time.perf_counter() - start, 4))
        return text, source

    def _output(self, log: AgentLog, text: str, source: str) -> bool:
        """Record the agent's next step and send it on (stream); True once max_steps is reached."""
        event = self.trace.add("step_emitted", agent=log.agent, index=len(log.steps), source=source, text=text)
        log.steps.append(text)
        if log.first_step_s is None:
            log.first_step_s = event["t"]
        if self.cfg.protocol != "serial":
            self._flush(log)
        if len(log.steps) >= self.cfg.max_steps:
            log.status = "max_steps"
            return True
        return False

    # -- edges, budget, timing -----------------------------------------------------------------

    def _flush(self, log: AgentLog) -> None:
        while log.sent < len(log.steps):
            k = log.sent
            for dst in self.topology.downstream[log.agent]:
                queued = self._put(log, dst, StepMessage(k, log.steps[k], log.agent))
                self.trace.add("step_sent", agent=log.agent, to=dst, index=k, queued=queued)
            log.sent += 1

    def _put(self, log: AgentLog, dst: int, message: StepMessage | EndOfStream) -> int:
        """Put a message on the edge to `dst`, waiting for room; the queue's occupancy right after."""
        inbox, start = self.inbox[(log.agent, dst)], time.perf_counter()
        while True:
            if self.abort.is_set():
                raise _Aborted
            try:
                inbox.put(message, timeout=_POLL_S)
                break
            except queue.Full:
                continue
        log.blocked_s += time.perf_counter() - start
        queued = inbox.qsize()
        log.queue_max[dst] = max(log.queue_max.get(dst, 0), queued)
        return queued

    def _get(self, log: AgentLog, src: int, timed: bool = True) -> StepMessage | EndOfStream:
        """The next message from `src`; raises StepTimeout past `step_timeout_s` when `timed`."""
        limit = self.cfg.step_timeout_s if timed else None
        inbox, start = self.inbox[(src, log.agent)], time.perf_counter()
        try:
            while True:
                if self.abort.is_set():
                    raise _Aborted
                try:
                    return inbox.get(timeout=_POLL_S)
                except queue.Empty:
                    if limit is not None and time.perf_counter() - start >= limit:
                        raise StepTimeout(f"agent {log.agent}: no step from agent {src} within {limit}s") from None
        finally:
            log.waiting_s += time.perf_counter() - start

    def _drain(self, log: AgentLog) -> int:
        """Consume what upstream agents still send after this one stopped, so none of them blocks."""
        dropped = 0
        for u in list(self.open[log.agent]):
            while not isinstance(self._get(log, u, timed=False), EndOfStream):
                dropped += 1
            self.open[log.agent].remove(u)
        return dropped

    def _before_call(self, log: AgentLog, kind: str) -> None:
        reason = self.spend.exhausted()
        if reason:
            raise BudgetExhausted(reason)
        log.calls += 1
        self.trace.add("llm_call", agent=log.agent, call=kind)

    def _check_mid_stream(self, pieces: int) -> None:
        """Stop the solver's stream once the deadline, the time budget or the token budget has passed."""
        if self.abort.is_set():
            raise _Aborted
        budget, spend = self.spend.budget, self.spend
        if budget.max_seconds is not None and spend.seconds >= budget.max_seconds:
            raise BudgetExhausted(f"time budget spent ({spend.seconds:.1f}s of {budget.max_seconds}s)")
        if budget.max_tokens is not None and spend.tokens + pieces >= budget.max_tokens:
            raise BudgetExhausted(f"token budget spent ({spend.tokens + pieces} of {budget.max_tokens})")

    @staticmethod
    def _timed(log: AgentLog, pieces: Iterator[str]) -> Iterator[str]:
        """The pieces, adding the time spent waiting for each to the agent's busy time."""
        while True:
            start = time.perf_counter()
            try:
                piece = next(pieces)
            except StopIteration:
                return
            finally:
                log.busy_s += time.perf_counter() - start
            yield piece
