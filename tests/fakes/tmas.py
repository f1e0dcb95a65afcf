"""Recording fakes for the TMAS tests: a scripted LLM whose roles are dispatched on the system prompt and which
records every conversation and SamplingParams it is sent, scripted verifiers, and `run` with small settings."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from morkit.core.errors import ScoreError
from morkit.core.grading import extract_answer
from morkit.core.types import Verdict
from morkit.llm.base import Completion, SamplingParams
from morkit.loops.base import Budget, LoopResult
from morkit.loops.tmas.loop import (
    EXPERIENCE_SYSTEM,
    GUIDELINE_SYSTEM,
    SOLVER_SYSTEM,
    SUMMARY_SYSTEM,
    TMAS,
    TMASConfig,
)
from morkit.verify.critic import LLM_VERIFIER_SYSTEM

PROBLEM = "Tom has 3 boxes with 4 apples each. How many apples does he have?"
ROLES = {SOLVER_SYSTEM: "solver", SUMMARY_SYSTEM: "summary", EXPERIENCE_SYSTEM: "experience",
         GUIDELINE_SYSTEM: "guidelines", LLM_VERIFIER_SYSTEM: "critic"}
EXPLOIT_MARK, EXPLORE_MARK = "## Previous Attempts", "## Strategies Already Attempted"


class Roles:
    """An LLM with scripted replies per agent role (chosen by the system prompt) that records every
    conversation, its SamplingParams and each chat call's size. A reply is a string, or a function of
    (conversation, call number within the role, params)."""

    name = "scripted-roles"

    def __init__(self, solver, summary="Most answers were 12; one slipped.", experience="", guidelines="",
                 critic="Checked. Score: 9/10"):
        self.replies = {"solver": solver, "summary": summary, "experience": experience, "guidelines": guidelines,
                        "critic": critic}
        self.seen: dict[str, list] = defaultdict(list)
        self.params: dict[str, list[SamplingParams]] = defaultdict(list)
        self.batches: dict[str, list[int]] = defaultdict(list)
        self.lock = threading.Lock()

    def chat(self, conversations, params=SamplingParams()):
        out = []
        for conversation in conversations:
            role = ROLES[conversation[0]["content"]]
            with self.lock:
                k = len(self.seen[role])
                self.seen[role].append(conversation)
                self.params[role].append(params)
            reply = self.replies[role]
            out.append(Completion(((reply(conversation, k, params) if callable(reply) else reply),), ("stop",)))
        with self.lock:
            self.batches[ROLES[conversations[0][0]["content"]]].append(len(conversations))
        return out

    def user(self, role: str, call: int) -> str:
        return self.seen[role][call][-1]["content"]


def answers(*values):
    """A solver that answers values[k % len] on its k-th call."""
    return lambda conversation, k, params: f"3 boxes times 4 apples. The answer is {values[k % len(values)]}."


def seeded(conversation, k, params):
    """A seed-honouring server: the reply is a function of the prompt and the seed only."""
    return f"The answer is {(hash(conversation[-1]['content']) + (params.seed or 0)) % 1000}."


@dataclass
class FakeVerifier:
    """A deterministic verifier (no sampling knob): scores by final answer (default 0.1), each answer alone (so
    its scores are absolute), with a line of analysis; raises on the listed 1-based call numbers. Copies made
    by the loop share `log`."""

    scores: dict = field(default_factory=lambda: {"12": 0.9, "7": 0.3})
    fail_on: tuple = ()
    name: str = "fake-verifier"
    log: list = field(default_factory=list)
    absolute_scores: bool = True
    writes_analysis: bool = True

    @property
    def calls(self) -> int:
        return len(self.log)

    def verify(self, question, answers, context=()):
        self.log.append((list(answers), list(context), getattr(self, "params", None)))
        if self.calls in self.fail_on:
            raise ScoreError("verifier backend down")
        return [Verdict(self.scores.get(extract_answer(a), 0.1), f"checked answer {extract_answer(a)}")
                for a in answers]


@dataclass
class SampledVerifier(FakeVerifier):
    """A verifier with an LLM critic's sampling knob (`llm`, `params`): the loop samples each pass."""

    llm: Any = None
    params: Any = None


def run(roles, verifier=None, budget=Budget(), reference=None, **config) -> LoopResult:
    defaults = dict(iterations=2, solutions=4, verifications=2, stop_on_agreement=False, parallel_calls=1)
    tmas = TMAS(roles, verifier or FakeVerifier(), TMASConfig(**{**defaults, **config}), budget)
    return tmas.run(PROBLEM, reference)


def events(result, kind):
    return [e for e in result.trace if e["kind"] == kind]
