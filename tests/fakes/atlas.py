"""Recording fakes for the ATLAS tests: an orchestrator that follows a script, solvers, a scripted verifier.

Each records what it was sent, so a test asserts on what the orchestrator and the solvers actually received."""

from __future__ import annotations

from dataclasses import dataclass, field

from morkit.core.types import Verdict
from morkit.llm.base import Completion, SamplingParams
from morkit.loops.atlas.loop import ATLAS, ATLASConfig
from morkit.loops.atlas.prompts import INTEGRATOR_SYSTEM, SYNTHESIS_HEADING
from morkit.loops.base import Budget

PROBLEM = "Tom has 40 apples and buys 2 more. How many apples does he have?"
REFERENCE = "98765"  # never produced by any scripted LLM: if it shows up in a prompt, it leaked


@dataclass
class Recorder:
    """An LLM that records every (conversation, params) and answers with `reply(conversation, call_index)`;
    `tokens` (prompt, completion) are reported per call when given; `takes_reasoning_effort` plays a backend
    that sends SamplingParams.reasoning_effort."""

    reply: object
    name: str = "recorder"
    tokens: tuple[int, int] = (0, 0)
    seen: list = field(default_factory=list)
    takes_reasoning_effort: bool = False

    def chat(self, conversations, params=SamplingParams()):
        out = []
        for conversation in conversations:
            self.seen.append(([dict(m) for m in conversation], params))
            out.append(Completion((self.reply(conversation, len(self.seen) - 1),), ("stop",), *self.tokens))
        return out

    def stream(self, conversation, params=SamplingParams()):
        yield self.chat([conversation], params)[0].texts[0]

    @property
    def conversations(self):
        return [c for c, _ in self.seen]


def is_final_turn(conversation) -> bool:
    return conversation[0]["content"] == INTEGRATOR_SYSTEM or SYNTHESIS_HEADING in conversation[-1]["content"]


def orchestrator(decisions, synthesis="Both agree. The answer is 42."):
    """A recording orchestrator: decisions in order (then 'ACTION: stop'), and the final-answer reply.
    An exception instance is raised instead of replying."""
    pending = list(decisions)

    def reply(conversation, _):
        item = synthesis if is_final_turn(conversation) else (pending.pop(0) if pending else "ACTION: stop")
        if isinstance(item, Exception):
            raise item
        return item

    return Recorder(reply, name="orchestrator")


def solver(*texts, name="solver", tokens=(0, 0), reasoning=False):
    """A recording solver replying with texts in turn (cycling); an exception instance is raised. `reasoning`:
    its backend takes a reasoning-effort setting."""
    def reply(_, i):
        text = texts[i % len(texts)]
        if isinstance(text, Exception):
            raise text
        return text

    return Recorder(reply, name=name, tokens=tokens, takes_reasoning_effort=reasoning)


@dataclass
class ScriptedVerifier:
    """Score 0.9 for a final answer of 42, else 0.2, plus `shift` times the number of earlier calls (a verifier
    whose raw scores drift between calls); records what it was asked. Absolute (the same in every call) unless
    told otherwise."""

    name: str = "scripted-verifier"
    calls: list = field(default_factory=list)
    absolute_scores: bool = True
    shift: float = 0.0

    def verify(self, question, answers, context=()):
        offset = self.shift * len(self.calls)
        self.calls.append((question, list(answers), list(context)))
        return [Verdict((0.9 if "42" in a else 0.2) + offset, "looks right" if "42" in a else "check the sum")
                for a in answers]


def shifting_verifier(shift=1.0):
    """A verifier whose raw scores rise by `shift` per call, and that says they compare only within a call."""
    return ScriptedVerifier("shifting-verifier", absolute_scores=False, shift=shift)


def atlas(orch, solvers, verifier=None, budget=Budget(), **config):
    return ATLAS(orch, solvers, verifier, ATLASConfig(**config), budget)


def kinds(result):
    return [e["kind"] for e in result.trace]


def notes(result):
    return [e["note"] for e in result.trace if e["kind"] == "note"]


def text_of(conversation) -> str:
    return "\n".join(m["content"] for m in conversation)
