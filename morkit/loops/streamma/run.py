"""StreamMA's agents at work: one thread per agent, bounded queues for edges, sentinels, budgets, timing.

`PipelineRun` runs a Topology once. Agent 0 streams its solution and emits each step when its marker
arrives. Under `stream` each step goes downstream at once, and a downstream agent answers step k from every
open upstream edge in one more turn of its own conversation (the review protocol of `prompts`: a verdict on
the upstream step, then its own step) and sends its reply on as soon as it has it. Under `serial` an agent
hands on its steps only when it has finished, and a downstream agent waits for the complete upstream
response, then answers it in one call. Queues hold `queue_size` steps, so a slow reviewer makes its upstream
wait. Whatever happens to an agent (done, max_steps, failure, deadline) it ends its downstream edges with an
`EndOfStream` and drains its inboxes, so no agent waits forever and the others finish with what they have.
Per-agent counts and times go to an `AgentLog`, every call's tokens to the `Ledger`, every event to the Trace.
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
from morkit.loops.streamma import prompts
from morkit.loops.streamma.config import StreamMAConfig
from morkit.loops.streamma.cost import Ledger
from morkit.loops.streamma.graph import EndOfStream, StepMessage, StepSplitter, Topology

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


class PipelineRun:
    """One run of the agents on a topology: threads, queues, spend, trace and per-agent logs."""

    def __init__(self, topology: Topology, llms: Sequence[LLM], config: StreamMAConfig, budget: Budget,
                 problem: str, *, spend: Spend | None = None, trace: Trace | None = None, seed: int | None = None):
        self.cfg, self.problem, self.topology = config, problem, topology
        self.spend = spend if spend is not None else Spend(budget)
        self.trace = trace if trace is not None else Trace()
        self.seed = config.seed if seed is None else seed
        self.llms = [MeteredLLM(llm, self.spend) for llm in llms]
        self.ledger = Ledger(llms)
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
        self.trace.add("agent_start", agent=i, role="solver" if i == 0 else "final" if self._final(log) else "reviewer")
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
        params = SamplingParams(temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=self.seed)
        splitter = StepSplitter(cfg.step_marker)
        system = (prompts.single_system(cfg.step_marker, cfg.steps) if cfg.protocol == "single" else
                  prompts.solver_system(cfg.step_marker, cfg.steps, self.topology.levels, cfg.protocol == "stream"))
        conversation = [{"role": "system", "content": system}, {"role": "user", "content": self.problem}]
        self._before_call(log, "stream")
        pieces = self.llms[0].stream(conversation, params)
        text: list[str] = []
        try:
            for count, piece in enumerate(self._timed(log, pieces), 1):
                text.append(piece)
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
            pieces.close()  # stops generation early when the step cap cut the stream
            self._count(log, "solve", conversation, "".join(text))

    def _review(self, log: AgentLog) -> None:
        self._review_serial(log) if self.cfg.protocol == "serial" else self._review_stream(log)

    def _role(self, log: AgentLog) -> dict[str, str]:
        """A downstream agent's system message: the review protocol, its authority, the final role if a sink."""
        cfg, top = self.cfg, self.topology
        content = prompts.reviewer_system(top.depth(log.agent) + 1, top.levels, authority=cfg.authority,
                                          final=self._final(log), streamed=cfg.protocol == "stream", steps=cfg.steps)
        return {"role": "system", "content": content}

    def _final(self, log: AgentLog) -> bool:
        return self.cfg.final_summary and log.agent in self.topology.sinks and log.agent != 0

    def _review_stream(self, log: AgentLog) -> None:
        """Answer every incoming step in order (step k from every open upstream edge, merged), one turn each."""
        cfg, i, open_ups = self.cfg, log.agent, self.open[log.agent]
        conversation = [self._role(log)]
        while open_ups and len(log.steps) < cfg.step_cap:
            versions = []
            for u in list(open_ups):
                msg = self._get(log, u)
                if isinstance(msg, EndOfStream):
                    open_ups.remove(u)
                    self.trace.add("stream_ended", agent=i, sender=u, reason=msg.reason)
                else:
                    self.trace.add("step_received", agent=i, sender=u, index=msg.index)
                    versions.append(msg)
            if not versions:
                continue
            index = len(log.steps)
            last = self._final(log) and cfg.steps is not None and index == cfg.steps - 1
            conversation.append(prompts.stream_turn(self.problem if index == 0 else None, index,
                                                    [(m.sender, m.text) for m in versions], last=last))
            reply = self._turn(log, conversation, "review", cfg.step_max_tokens)
            parsed = prompts.parse_reply(reply)
            block = parsed.blocks[0] if parsed.blocks else None
            step, source = self._reviewed(log, index, block, parsed.preamble, versions)
            if parsed.summary and self._final(log):
                log.summary_text = parsed.summary
            if self._output(log, step, source, prompts.forwarded(reply, step, source, index, cfg.forward)):
                break
        if self._final(log) and log.summary_text is None and log.steps:
            conversation.append(prompts.finish_turn())
            reply = self._turn(log, conversation, "finish", cfg.step_max_tokens)
            summary = prompts.parse_reply(reply).summary
            log.summary_text = summary or (f"SUMMARY: {reply.strip()}" if reply.strip() else None)
            self.trace.add("summary", agent=i, text=log.summary_text)

    def _review_serial(self, log: AgentLog) -> None:
        """Wait for every upstream agent's complete response, then answer all of it in one call."""
        cfg, i = self.cfg, log.agent
        chains: dict[int, list[StepMessage]] = {u: [] for u in self.open[i]}
        while self.open[i]:
            for u in list(self.open[i]):
                msg = self._get(log, u)
                if isinstance(msg, EndOfStream):
                    self.open[i].remove(u)
                    self.trace.add("stream_ended", agent=i, sender=u, reason=msg.reason)
                else:
                    self.trace.add("step_received", agent=i, sender=u, index=msg.index)
                    chains[u].append(msg)
        if not any(chains.values()):
            return
        message = prompts.serial_message(self.problem, [(u, [m.text for m in ms]) for u, ms in chains.items() if ms],
                                         final=self._final(log))
        reply = self._turn(log, [self._role(log), message], "serial", cfg.max_tokens)
        parsed = prompts.parse_reply(reply)
        if parsed.summary and self._final(log):
            log.summary_text = parsed.summary
        if parsed.blocks:
            parts = [(b, parsed.preamble if k == 0 else "", b.text) for k, b in enumerate(parsed.blocks)]
            if not (parsed.summary and self._final(log)):  # unreached steps keep the upstream step, as in stream
                parts += [(None, "", "")] * (max(map(len, chains.values())) - len(parts))
        else:  # no labels at all: its paragraphs are its steps
            splitter = StepSplitter(cfg.step_marker)
            texts = splitter.feed(parsed.preamble) + [t for t in [splitter.flush()] if t]
            parts = [(None, t, t) for t in texts]
        for index, (block, preamble, text) in enumerate(parts[: cfg.step_cap]):
            versions = [ms[index] for ms in chains.values() if index < len(ms)]
            step, source = self._reviewed(log, index, block, preamble, versions)
            if self._output(log, step, source, prompts.forwarded(text, step, source, index, cfg.forward)):
                return

    def _reviewed(self, log: AgentLog, index: int, block: prompts.Block | None, preamble: str,
                  versions: Sequence[StepMessage]) -> tuple[str, str]:
        """The agent's step `index` from its reply, with its verdict on the upstream step recorded."""
        upstream = versions[0].own_step if versions else ""
        step, source = prompts.own_step(block, preamble, upstream)
        verdict = block.verdict if block is not None else "none"
        log.changed += verdict == "error"
        review = {"index": index, "verdict": verdict, "error": block.error if block else None,
                  "correction": block.correction if block else None}
        log.reviews.append(review)
        self.trace.add("step_reviewed", agent=log.agent, index=index, source=source, before=upstream, after=step,
                       **{k: v for k, v in review.items() if k != "index"})
        return step, source

    def _turn(self, log: AgentLog, conversation: list[dict[str, str]], kind: str, max_tokens: int) -> str:
        """One chat call of a downstream agent; its reply joins the conversation (stream turns build on it)."""
        cfg = self.cfg
        params = SamplingParams(temperature=cfg.reviewer_temperature, max_tokens=max_tokens,
                                stop=("\nUpstream step",), seed=self.seed)
        self._before_call(log, kind)
        start = time.perf_counter()
        try:
            completion = self.llms[log.agent].chat([list(conversation)], params)[0]
        finally:
            log.busy_s += time.perf_counter() - start
        reply = completion.texts[0] if completion.texts else ""
        self._count(log, kind, conversation, reply, completion)
        conversation.append({"role": "assistant", "content": reply})
        return reply

    def _count(self, log: AgentLog, kind: str, conversation: Sequence[dict[str, str]], reply: str,
               completion: Any = None) -> None:
        call = self.ledger.record(log.agent, kind, conversation, reply, completion)
        self.trace.add("llm_tokens", agent=log.agent, call=kind, prompt=call.prompt, generated=call.generated,
                       reused=call.reused, counted_by=call.counted_by)

    def _output(self, log: AgentLog, text: str, source: str, payload: str | None = None) -> bool:
        """Record the agent's next step and send it on (stream); True once it has written its last step
        (S of S, or `max_steps` with S unset: then its status says the stream was cut)."""
        event = self.trace.add("step_emitted", agent=log.agent, index=len(log.steps), source=source, text=text)
        log.steps.append(text)
        log.payloads.append(payload if payload is not None else text)
        if log.first_step_s is None:
            log.first_step_s = event["t"]
        if self.cfg.protocol != "serial":
            self._flush(log)
        if len(log.steps) >= self.cfg.step_cap:
            if self.cfg.steps is None:
                log.status = "max_steps"
            return True
        return False

    # -- edges, budget, timing -----------------------------------------------------------------

    def _flush(self, log: AgentLog) -> None:
        while log.sent < len(log.steps):
            k = log.sent
            for dst in self.topology.downstream[log.agent]:
                queued = self._put(log, dst, StepMessage(k, log.payloads[k], log.agent, log.steps[k]))
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
