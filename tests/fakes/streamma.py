"""Recording fakes for the StreamMA tests: scripted agents that take a fixed time per step and record every
turn they receive, so a test asserts on what each agent was actually sent."""

from __future__ import annotations

import re
import threading
import time

from morkit.core.errors import LLMError
from morkit.llm.base import Completion

STEPS = ("Tom has 3 apples.", "He buys 4 more apples.", "Now he has 3 + 4 = 7 apples.",
         "He eats 2 of them.", "7 - 2 = 5 apples are left.", "The answer is 5.")
PROBLEM = "Tom has 3 apples, buys 4 more and eats 2. How many apples are left?"
_SECTION = re.compile(r"^Upstream step (\d+)(?: \(from agent \d+\)|, in \d+ versions)?:\n(.*?)"
                      r"(?=\n\nUpstream step |\n\nReview |\n\nAgent \d+'s (?:complete|summary)|\Z)", re.S | re.M)
_VERSION = re.compile(r"^Version [A-Z] \(from agent \d+\):\n", re.M)


def sections(message: str) -> list[tuple[int, list[str]]]:
    """The 'Upstream step k' sections of a message: (k - 1, the upstream step of each version)."""
    out = []
    for number, body in _SECTION.findall(message):
        versions = [v.strip() for v in _VERSION.split(body) if v.strip()] if _VERSION.search(body) else [body]
        out.append((int(number) - 1, [step_in(v) for v in versions]))
    return out


def step_in(payload: str) -> str:
    """The step inside a forwarded reply (after 'STEP k:' or 'CORRECTION:'), else the payload itself."""
    found = re.search(r"^(?:STEP \d+|CORRECTION): (.*)$", payload, re.M)
    return found.group(1).strip() if found else payload.strip()


class PacedLLM:
    """A scripted agent: streams STEPS one per `step_s`, each followed by `marker` (the paper's END_STEP line);
    answers each upstream section in `review_s`: as the paper's reviewer-and-corrector, with a CORRECTION
    that tags the step ('ERROR: re-checked by aN'; `accept=True`: a bare ACCEPT), under morkit's earlier
    rewrite protocol with 'ACCEPT' and its own step tagged; writes a SUMMARY when asked.

    Records every review as (step index, versions seen, own steps already written in the conversation) and
    every conversation it is sent; raises LLMError on the review of step `fail_at`; `hold` (an Event) makes
    every review wait for it."""

    def __init__(self, tag: str, *, step_s: float = 0.0, review_s: float = 0.0, fail_at: int | None = None,
                 marker: str = "\nEND_STEP\n", steps: tuple[str, ...] = STEPS, hold: threading.Event | None = None,
                 accept: bool = False):
        self.name, self.tag, self.step_s, self.review_s = f"paced-{tag}", tag, step_s, review_s
        self.fail_at, self.marker, self.steps, self.hold, self.accept = fail_at, marker, steps, hold, accept
        self.reviews: list[tuple[int, list[str], int]] = []
        self.conversations: list[list[dict]] = []
        self.params: list = []

    def stream(self, conversation, params):
        self.conversations.append([dict(m) for m in conversation])
        self.params.append(params)
        for step in self.steps:
            time.sleep(self.step_s)
            for word in step.split(" "):
                yield word + " "
            yield from (self.marker[:1], self.marker[1:])  # the marker arrives in two pieces

    def chat(self, conversations, params):
        out = []
        for conversation in conversations:
            self.conversations.append([dict(m) for m in conversation])
            self.params.append(params)
            message = conversation[-1]["content"]
            written = sum(m["role"] == "assistant" for m in conversation)
            blocks = []
            for index, versions in sections(message):
                self.reviews.append((index, versions, written))
                if self.hold is not None:
                    self.hold.wait(10)
                if self.fail_at == index:
                    raise LLMError(f"{self.name}: server error")
                time.sleep(self.review_s)
                if "reviewer-and-corrector" not in conversation[0]["content"]:  # morkit's earlier rewrite
                    blocks.append(f"ACCEPT\nSTEP {index + 1}: {versions[0]} [{self.tag}]")
                elif self.accept:
                    blocks.append("ACCEPT")
                else:
                    blocks.append(f"ERROR: re-checked by {self.tag}\nCORRECTION: {versions[0]} [{self.tag}]")
            if "SUMMARY" in message:  # restate the answer its own steps reached
                own = [m["content"] for m in conversation if m["role"] == "assistant"] + blocks
                found = re.findall(r"The answer is (\d+)", " ".join(own))
                blocks.append(f"SUMMARY: checked by {self.tag}. The answer is {found[-1] if found else 5}.")
            out.append(Completion(("\n\n".join(blocks),)))
        return out

    def systems(self) -> set[str]:
        return {c[0]["content"] for c in self.conversations}


def agents(n: int, **kwargs) -> list[PacedLLM]:
    return [PacedLLM(f"a{i}", **kwargs) for i in range(n)]


def tagged(step: str, *tags: int) -> str:
    return step + "".join(f" [a{t}]" for t in tags)


def events(result, kind: str, agent: int | None = None) -> list[dict]:
    return [e for e in result.trace if e["kind"] == kind and (agent is None or e.get("agent") == agent)]


def no_agent_threads_left() -> bool:
    deadline = time.time() + 2
    while time.time() < deadline:
        if not [t for t in threading.enumerate() if t.name.startswith("streamma-agent")]:
            return True
        time.sleep(0.02)
    return False


def words(text: str) -> int:
    return len(text.split())
