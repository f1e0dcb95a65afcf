"""StreamMA's agents at work: one thread per agent, bounded queues for edges, sentinels, budgets, timing.

`PipelineRun` runs a Topology once; every agent closes its edges however it ends, so none waits forever."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Iterator, Sequence

from morkit.core.errors import LLMError
from morkit.llm.base import LLM, SamplingParams
from morkit.loops.base import Budget, BudgetExhausted, MeteredLLM, Spend, Trace
from morkit.loops.streamma import prompts, replies
from morkit.loops.streamma.agentlog import AgentLog
from morkit.loops.streamma.config import StreamMAConfig
from morkit.loops.streamma.cost import Ledger
from morkit.loops.streamma.graph import EndOfStream, StepMessage, StepSplitter, Topology, split_steps

_POLL_S = 0.05  # how often a blocked agent looks at the run's abort flag
_GRACE_S = 2.0  # how long agents get to stop once the run's deadline has passed


class StepTimeout(LLMError):
    """No step came from an upstream agent within `step_timeout_s`."""


class _Aborted(Exception):
    """The run's deadline passed: agents stop at their next check."""


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
        self.upstream_summaries: list[list[tuple[int, str]]] = [[] for _ in range(topology.agents)]
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
        self.trace.add("agent_start", agent=i, role="solver" if i == 0 else "final" if self._final(i) else "reviewer")
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
                self._put(log, dst, EndOfStream(log.agent, log.status, log.summary_text))
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
        splitter = StepSplitter(cfg.step_marker, prompts.line_marker(cfg))
        system = (prompts.single_system(cfg) if cfg.protocol == "single" else
                  prompts.solver_system(cfg, self.topology.levels, cfg.protocol == "stream"))
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
        """A downstream agent's system message: the review protocol, its authority, its summary."""
        top, i = self.topology, log.agent
        seat = prompts.Seat(i, top.upstream[i], top.depth(i) + 1, top.levels, self._final(i), self._summarises(i))
        return {"role": "system", "content": prompts.reviewer_system(seat, self.cfg, top)}

    def _final(self, agent: int) -> bool:
        """A final agent: a sink of the topology (not the solver alone)."""
        return agent in self.topology.sinks and agent != 0

    def _summarises(self, agent: int) -> bool:
        """Whether the agent ends with a summary (every reviewer, only final agents, or none)."""
        summary = self.cfg.summary
        return agent != 0 and (summary == "every" or (summary == "final" and self._final(agent)))

    def _receive(self, log: AgentLog, u: int, into: list[StepMessage]) -> None:
        """The next message from upstream agent `u`: a step joins `into`; an end closes the edge, keeping the
        sender's summary."""
        msg = self._get(log, u)
        if isinstance(msg, EndOfStream):
            self.open[log.agent].remove(u)
            if msg.summary:
                self.upstream_summaries[log.agent].append((u, msg.summary))
            self.trace.add("stream_ended", agent=log.agent, sender=u, reason=msg.reason)
        else:
            self.trace.add("step_received", agent=log.agent, sender=u, index=msg.index)
            into.append(msg)

    def _review_stream(self, log: AgentLog) -> None:
        """Answer every incoming step in order (step k from every open upstream edge, merged), one turn each;
        then the summary turn."""
        cfg, i, open_ups = self.cfg, log.agent, self.open[log.agent]
        conversation = [self._role(log)]
        in_reply = cfg.summary == "final" and cfg.steps is not None and self._summarises(i)  # morkit's earlier way
        while open_ups and len(log.steps) < cfg.step_cap:
            versions: list[StepMessage] = []
            for u in list(open_ups):
                self._receive(log, u, versions)
            if not versions:
                continue
            index = len(log.steps)
            conversation.append(prompts.stream_turn(self.problem if index == 0 else None, index,
                                                    [(m.sender, m.text) for m in versions], review=cfg.review,
                                                    last=in_reply and index == cfg.steps - 1))
            reply = self._reply(log, conversation, "review", cfg.step_max_tokens)
            parsed = replies.parse_reply(reply)
            block = parsed.blocks[0] if parsed.blocks else None
            step, source = self._reviewed(log, index, block, parsed.preamble, versions)
            if parsed.summary and cfg.summary == "final" and self._summarises(i):
                log.summary_text = parsed.summary
            if self._output(log, step, source, self._forwarded(reply, step, source, index)):
                break
        if self._summarises(i) and log.summary_text is None and log.steps:
            dropped = 0
            while open_ups:  # the upstream summaries come with the ends of the upstream streams
                extra: list[StepMessage] = []
                self._receive(log, open_ups[0], extra)
                dropped += len(extra)
            if dropped:
                self.trace.add("steps_dropped", agent=i, count=dropped)
            conversation.append(prompts.finish_turn(self.upstream_summaries[i], final=self._final(i),
                                                    review=cfg.review))
            reply = self._reply(log, conversation, "finish", cfg.step_max_tokens)
            summary = replies.parse_reply(reply).summary
            log.summary_text = summary or (f"SUMMARY: {reply.strip()}" if reply.strip() else None)
            self.trace.add("summary", agent=i, text=log.summary_text)

    def _review_serial(self, log: AgentLog) -> None:
        """Wait for every upstream agent's complete response, then answer all of it in one call."""
        cfg, i = self.cfg, log.agent
        chains: dict[int, list[StepMessage]] = {u: [] for u in self.open[i]}
        while self.open[i]:
            for u in list(self.open[i]):
                self._receive(log, u, chains[u])
        if not any(chains.values()):
            return
        final, summarises = self._final(i), self._summarises(i)
        message = prompts.serial_message(self.problem, [(u, [m.text for m in ms]) for u, ms in chains.items() if ms],
                                         self.upstream_summaries[i], review=cfg.review, final=final,
                                         summarises=summarises)
        reply = self._turn(log, [self._role(log), message], "serial", cfg.max_tokens)
        parsed = replies.parse_reply(reply)
        if summarises and (parsed.summary or (final and reply.strip())):
            # as under stream, a final agent's reply without a SUMMARY label is its summary: its answer stays
            body = replies.without_steps(reply) if cfg.review == "correct" else reply.strip()
            log.summary_text = parsed.summary or f"SUMMARY: {body}"
            self.trace.add("summary", agent=i, text=log.summary_text)
        longest = max(map(len, chains.values()))
        if cfg.review == "correct":  # the verdict on upstream step k: the block that names it, else by position
            parts = [(b, "", b.text if b else "") for b in replies.matched_blocks(parsed, longest)]
            extra = [b.text for b in parsed.blocks if not any(b is p for p, _, _ in parts)]
            if parsed.preamble:  # text before any label goes downstream with the first step
                parts[0] = (parts[0][0], "", f"{parsed.preamble}\n\n{parts[0][2]}".strip())
            if extra:  # blocks beyond the upstream steps go downstream with the last one
                parts[-1] = (parts[-1][0], "", "\n\n".join([parts[-1][2], *extra]).strip())
        elif parsed.blocks:
            parts = [(b, parsed.preamble if k == 0 else "", b.text) for k, b in enumerate(parsed.blocks)]
            if not (parsed.summary and final and summarises):  # unreached steps keep the upstream step
                parts += [(None, "", "")] * (longest - len(parts))
        else:  # rewrite, no labels at all: its paragraphs are its steps
            parts = [(None, t, t) for t in split_steps(parsed.preamble, cfg.step_marker, prompts.line_marker(cfg))]
        for index, (block, preamble, text) in enumerate(parts[: cfg.step_cap]):
            versions = [ms[index] for ms in chains.values() if index < len(ms)]
            step, source = self._reviewed(log, index, block, preamble, versions)
            if self._output(log, step, source, self._forwarded(text, step, source, index)):
                return

    def _reviewed(self, log: AgentLog, index: int, block: replies.Block | None, preamble: str,
                  versions: Sequence[StepMessage]) -> tuple[str, str]:
        """The agent's step `index` from its reply, with its verdict on the upstream step recorded: under the
        paper's review its version of the upstream step, under morkit's earlier one the step it wrote."""
        upstream = versions[0].own_step if versions else ""
        if self.cfg.review == "correct":
            step, source = replies.version(block, upstream)
        else:
            step, source = replies.own_step(block, preamble, upstream)
        verdict = block.verdict if block is not None else "none"
        log.changed += verdict == "error"
        review = {"index": index, "verdict": verdict, "error": block.error if block else None,
                  "correction": block.correction if block else None, "source": source}
        log.reviews.append(review)
        self.trace.add("step_reviewed", agent=log.agent, index=index, before=upstream, after=step,
                       **{k: v for k, v in review.items() if k != "index"})
        return step, source

    def _forwarded(self, reply: str, step: str, source: str, index: int) -> str:
        """What goes downstream for step `index` (under the paper's review, without any STEP of the agent's own)."""
        text = replies.without_steps(reply) if self.cfg.review == "correct" else reply
        return replies.forwarded(text, step, source, index, self.cfg.forward)

    def _reply(self, log: AgentLog, conversation: list[dict[str, str]], kind: str, max_tokens: int) -> str:
        """A stream turn's reply, without the end-of-step lines the paper asks reviewers to write."""
        return replies.without_marker(self._turn(log, conversation, kind, max_tokens), self.cfg.step_marker,
                                      prompts.line_marker(self.cfg))

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
