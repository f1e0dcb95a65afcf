"""StreamMA plumbing without threads or models: settings, who sends to whom, messages, steps, prompts.

A `Topology` is a DAG over agents 0..n-1 in which agent 0 (the solver) is the only source; the chain
0 -> 1 -> ... -> n-1 is the main case. `StepSplitter` cuts a streamed solution into steps at an
end-of-step marker. `best_available` builds the final solution from whatever each agent finished:
the final agent's steps, extended by the further steps of its nearest ancestors, so nothing computed
is lost when an agent stops early. The prompts: the solver writes one step per marker-ended
paragraph; a reviewer sees the problem, its accepted steps and the new step, and answers with the step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Mapping, Sequence

from morkit.core import checks
from morkit.core.errors import InputError

PROTOCOLS = ("single", "serial", "stream")


@dataclass(frozen=True)
class StreamMAConfig:
    """One StreamMA run's settings; `max_tokens`/`temperature` are the solver's, `step_*` a reviewer's."""

    agents: int = 4
    protocol: str = "stream"  # single | serial | stream
    step_marker: str = "\n\n"
    max_steps: int = 12
    queue_size: int = 4  # steps an edge holds before its sender waits
    max_tokens: int = 512
    temperature: float = 0.7
    step_max_tokens: int = 192
    review_temperature: float = 0.0
    seed: int | None = None
    step_timeout_s: float | None = None  # longest wait for the next upstream step
    timeout_s: float | None = None  # whole run; past it every agent is told to stop

    def __post_init__(self) -> None:
        checks.one_of(self.protocol, PROTOCOLS, "StreamMAConfig.protocol")
        for name in ("agents", "max_steps", "queue_size", "max_tokens", "step_max_tokens"):
            checks.positive_int(getattr(self, name), f"StreamMAConfig.{name}")
        checks.non_negative(self.temperature, "StreamMAConfig.temperature")
        checks.non_negative(self.review_temperature, "StreamMAConfig.review_temperature")
        checks.optional(checks.positive, self.step_timeout_s, "StreamMAConfig.step_timeout_s")
        checks.optional(checks.positive, self.timeout_s, "StreamMAConfig.timeout_s")
        if not self.step_marker:
            raise InputError("StreamMAConfig.step_marker: the end-of-step marker must not be empty")


@dataclass(frozen=True)
class StepMessage:
    """Step `index` (0-based) of agent `sender`'s solution, sent to one downstream agent."""

    index: int
    text: str
    sender: int


@dataclass(frozen=True)
class EndOfStream:
    """The sentinel that ends an edge: `sender` sends no more steps, for `reason`."""

    sender: int
    reason: str


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

    def as_mapping(self) -> dict[int, list[int]]:
        return {i: list(ts) for i, ts in enumerate(self.downstream)}

    def edges(self) -> tuple[tuple[int, int], ...]:
        return tuple((i, t) for i, ts in enumerate(self.downstream) for t in ts)


class StepSplitter:
    """Cuts streamed text into steps at `marker` as pieces arrive; steps are stripped, blank ones skipped."""

    def __init__(self, marker: str):
        if not marker:
            raise InputError("the end-of-step marker must not be empty")
        self.marker = marker
        self.buffer = ""

    def feed(self, piece: str) -> list[str]:
        """The steps completed by this piece, in order."""
        self.buffer += piece
        *done, self.buffer = self.buffer.split(self.marker)
        return [s.strip() for s in done if s.strip()]

    def flush(self) -> str | None:
        """The unfinished last step once the stream has ended, if any."""
        rest, self.buffer = self.buffer.strip(), ""
        return rest or None


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


SOLVER_SYSTEM = ("Solve the problem step by step, one short step per paragraph, and finish with a line "
                 "'The answer is N'.")
REVIEWER_SYSTEM = ("You check a solution one step at a time. If the new step is correct, repeat it exactly; "
                   "if it has a mistake, write the corrected step. Reply with the step only.")


def solver_conversation(marker: str, problem: str) -> list[dict[str, str]]:
    """Agent 0's prompt: the problem, with steps to be ended by `marker`."""
    rule = "Leave a blank line after each step." if not marker.strip() else f"End each step with {marker}."
    return [{"role": "system", "content": f"{SOLVER_SYSTEM} {rule}"}, {"role": "user", "content": problem}]


def review_conversation(problem: str, accepted: Sequence[str], versions: Sequence[str], index: int
                        ) -> list[dict[str, str]]:
    """A reviewer's prompt for step `index` (0-based): one version per upstream agent that sent it."""
    done = "\n".join(f"Step {k + 1}: {s}" for k, s in enumerate(accepted)) or "(none yet)"
    if len(versions) == 1:
        new = f"New step {index + 1}:\n{versions[0]}"
    else:
        listed = "\n".join(f"Version {chr(65 + k)}: {v}" for k, v in enumerate(versions))
        new = f"New step {index + 1}, proposed in {len(versions)} versions:\n{listed}"
    ask = f"Reply with step {index + 1} only: unchanged if it is correct, corrected if it has a mistake."
    return [{"role": "system", "content": REVIEWER_SYSTEM},
            {"role": "user", "content": f"Problem:\n{problem}\n\nSteps accepted so far:\n{done}\n\n{new}\n\n{ask}"}]
