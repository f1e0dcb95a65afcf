"""StreamMA plumbing without threads or models: who sends to whom, messages, steps, the best available answer.

A `Topology` is a DAG whose only source is agent 0; `StepSplitter` cuts a stream into steps at the marker."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping, Sequence

from morkit.core.errors import InputError
from morkit.loops.streamma.config import PROTOCOLS, StreamMAConfig

__all__ = ["PROTOCOLS", "EndOfStream", "StepMessage", "StepSplitter", "StreamMAConfig", "Topology", "best_available",
           "split_steps"]


@dataclass(frozen=True)
class StepMessage:
    """Step `index` (0-based) of agent `sender`'s solution, sent to one downstream agent: `text` is what the
    receiver is shown (the sender's reply, or its step), `step` the sender's step itself (what it accepted,
    corrected or wrote: the step the receiver keeps when it only ACCEPTs)."""

    index: int
    text: str
    sender: int
    step: str = ""

    @property
    def own_step(self) -> str:
        return self.step or self.text


@dataclass(frozen=True)
class EndOfStream:
    """The sentinel that ends an edge: `sender` sends no more steps, for `reason`; `summary`: the sender's
    summary, the last part of its output, when it wrote one."""

    sender: int
    reason: str
    summary: str | None = None


@dataclass(frozen=True)
class Topology:
    """`downstream[i]`: the agents that receive agent i's steps. Agent 0 is the only agent without upstream."""

    downstream: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        n = len(self.downstream)
        if n < 1:
            raise InputError("a topology needs at least one agent")
        for i, targets in enumerate(self.downstream):
            bad = [t for t in targets if not 0 <= t < n or t == i]
            if bad or len(set(targets)) != len(targets):
                raise InputError(f"agent {i}: invalid or repeated downstream agents {list(targets)}")
        ups = self.upstream
        if ups[0]:
            raise InputError("agent 0 is the solver: it cannot have upstream agents")
        orphans = [i for i in range(1, n) if not ups[i]]
        if orphans:
            raise InputError(f"agents {orphans} receive no steps (no upstream agent)")
        if len(self.order) != n:
            raise InputError("the topology has a cycle")

    @classmethod
    def chain(cls, agents: int) -> Topology:
        """0 -> 1 -> ... -> agents-1."""
        return cls(tuple((i + 1,) if i + 1 < agents else () for i in range(agents)))

    @classmethod
    def from_mapping(cls, mapping: Mapping[int, Sequence[int]], agents: int | None = None) -> Topology:
        """From {agent: [downstream agents]}; agents missing from the mapping send to nobody."""
        edges = {int(k): tuple(int(t) for t in ts) for k, ts in mapping.items()}
        indices = list(edges) + [t for ts in edges.values() for t in ts]
        n = agents if agents is not None else max(indices, default=0) + 1
        if any(not 0 <= i < n for i in indices):
            raise InputError(f"topology names agents outside 0..{n - 1}: {dict(mapping)}")
        return cls(tuple(edges.get(i, ()) for i in range(n)))

    @property
    def agents(self) -> int:
        return len(self.downstream)

    @property
    def upstream(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(j for j, ts in enumerate(self.downstream) if i in ts) for i in range(self.agents))

    @property
    def order(self) -> tuple[int, ...]:
        """A topological order (Kahn's algorithm, lowest index first); shorter than `agents` on a cycle."""
        indegree = [len(u) for u in self.upstream]
        ready = sorted(i for i in range(self.agents) if indegree[i] == 0)
        out: list[int] = []
        while ready:
            i = ready.pop(0)
            out.append(i)
            for t in self.downstream[i]:
                indegree[t] -= 1
                if indegree[t] == 0:
                    ready.append(t)
                    ready.sort()
        return tuple(out)

    @property
    def sinks(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.agents) if not self.downstream[i])

    @property
    def final(self) -> int:
        """The agent whose steps form the answer: the highest-numbered sink (the chain's last agent)."""
        return max(self.sinks)

    def ancestors(self, agent: int) -> tuple[int, ...]:
        """Agents upstream of `agent`, nearest first (ties: higher index first)."""
        seen, out, frontier = {agent}, [], deque([agent])
        while frontier:
            for u in sorted(self.upstream[frontier.popleft()], reverse=True):
                if u not in seen:
                    seen.add(u)
                    out.append(u)
                    frontier.append(u)
        return tuple(out)

    def depth(self, agent: int) -> int:
        """The longest path from agent 0 to `agent` (the chain's index): its rank for rising authority."""
        depths = [0] * self.agents
        for i in self.order:
            for t in self.downstream[i]:
                depths[t] = max(depths[t], depths[i] + 1)
        return depths[agent]

    @property
    def levels(self) -> int:
        """Ranks in the pipeline: 1 + the deepest agent's depth (a chain of A agents has A)."""
        return 1 + max(self.depth(i) for i in range(self.agents))

    @property
    def kind(self) -> str:
        """The paper's name for the shape: chain (a path), tree (one upstream agent each) or graph."""
        if all(len(u) <= 1 for u in self.upstream):
            return "chain" if all(len(d) <= 1 for d in self.downstream) else "tree"
        return "graph"

    def as_mapping(self) -> dict[int, list[int]]:
        return {i: list(ts) for i, ts in enumerate(self.downstream)}

    def edges(self) -> tuple[tuple[int, int], ...]:
        return tuple((i, t) for i, ts in enumerate(self.downstream) for t in ts)


class StepSplitter:
    """Cuts streamed text into steps at `marker` as pieces arrive; steps are stripped, blank ones skipped.

    `line=True`: a step ends at a line that ends with the marker (the paper's 'END_STEP on its own line');
    `line=False`: wherever the marker appears."""

    def __init__(self, marker: str, line: bool = False):
        if not marker:
            raise InputError("the end-of-step marker must not be empty")
        self.marker, self.line = marker, line and bool(marker.strip()) and "\n" not in marker
        self.buffer = ""
        self._scanned = 0  # line mode: where the first line not yet looked at starts

    def feed(self, piece: str) -> list[str]:
        """The steps completed by this piece, in order."""
        self.buffer += piece
        if not self.line:
            *done, self.buffer = self.buffer.split(self.marker)
            return [s.strip() for s in done if s.strip()]
        done = []
        while (end := self.buffer.find("\n", self._scanned)) >= 0:
            step = self._ended(self.buffer[self._scanned: end])
            if step is None:
                self._scanned = end + 1
                continue
            done.append(self.buffer[: self._scanned] + step)
            self.buffer, self._scanned = self.buffer[end + 1:], 0
        return [s.strip() for s in done if s.strip()]

    def flush(self) -> str | None:
        """The unfinished last step once the stream has ended, if any."""
        rest = self.buffer
        if self.line:
            step = self._ended(rest[self._scanned:])
            rest = rest if step is None else rest[: self._scanned] + step
        self.buffer, self._scanned = "", 0
        return rest.strip() or None

    def _ended(self, line: str) -> str | None:
        """Line mode: the line without its marker when it ends with one, else None."""
        text = line.rstrip().rstrip("*`").rstrip()
        if not text.endswith(self.marker):
            return None
        head = text[: -len(self.marker)]
        if head and (head[-1].isalnum() or head[-1] == "_"):
            return None  # part of a longer word
        return head.rstrip().rstrip("*`").rstrip()


def split_steps(text: str, marker: str, line: bool = False) -> list[str]:
    """A whole text cut into steps, as StepSplitter cuts a stream."""
    splitter = StepSplitter(marker, line)
    return splitter.feed(text) + [t for t in [splitter.flush()] if t]


def best_available(solutions: Sequence[Sequence[str]], topology: Topology, agent: int
                   ) -> tuple[list[str], list[int]]:
    """`agent`'s steps, then the further steps of its nearest ancestors that got further; with each
    step's author. With every agent finished all solutions have the same length: just `agent`'s."""
    steps, authors = list(solutions[agent]), [agent] * len(solutions[agent])
    for u in topology.ancestors(agent):
        extra = list(solutions[u][len(steps):])
        steps += extra
        authors += [u] * len(extra)
    return steps, authors
