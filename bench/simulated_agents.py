"""A SIMULATED model server for StreamMA's depth benchmark (bench/loops.py, part 2): latency without a model.

Each agent gets its own server, with no lock, so agents overlap as they would on separate machines. The
solver streams fixed steps word by word; a reviewer answers the review protocol (morkit.loops.streamma.prompts)
by a fixed rule. It is a script, not a model: it shows how serial and stream hand agents different contexts
and how the pipeline's time scales with depth, not that either protocol is more accurate.
"""

from __future__ import annotations

import re
import time
from typing import Iterator

_SECTION = re.compile(r"^Upstream step (\d+)(?: \(from agent \d+\)|, in \d+ versions)?:\n(.*?)"
                      r"(?=\n\nUpstream step |\n\nReview |\n\nAgent \d+'s complete|\Z)", re.S | re.M)


def _step_in(payload: str) -> str:
    """The step inside a forwarded reply (after 'STEP k:'; a merged DAG step: its first version)."""
    payload = re.split(r"\nVersion [B-Z] \(from agent", payload)[0]
    payload = re.sub(r"^Version A \(from agent \d+\):\n", "", payload)
    found = re.search(r"^STEP \d+: (.*)$", payload, re.M)
    return (found.group(1) if found else payload).strip()


class SimulatedServer:
    """A SIMULATED model server for one agent (no model): latency only, no lock, so agents overlap.

    `stream` (the solver) waits `call_s`, then yields `steps` steps of `step_tokens` words, one word per
    `token_s`, each step followed by `marker`; its last step states a wrong answer (41: the error-prone
    tail). `chat` (a downstream agent) answers each 'Upstream step k' section of its newest message with
    ACCEPT and the step, except a stated answer: one seen before the agent wrote any step of its own
    (serial: the whole chain at once) is adopted; otherwise the agent checks it against its own result
    (42) and writes ERROR + CORRECTION. A final agent adds a SUMMARY with its answer. A reply takes
    `call_s + token_s * (its words)` and reports words as its token counts. Waits run to deadlines, so a
    late wake-up does not add up."""

    def __init__(self, name: str, *, steps: int, step_tokens: int, token_s: float, call_s: float, marker: str):
        self.name, self.steps, self.step_tokens = name, steps, step_tokens
        self.token_s, self.call_s, self.marker = token_s, call_s, marker
        self.calls = 0

    def _step(self, k: int) -> str:
        """Step k: `step_tokens` words (the last one ends 'The answer is 41.', which is wrong)."""
        words = [f"s{k + 1}w{j + 1}" for j in range(self.step_tokens)]
        if k == self.steps - 1:
            words = words[: max(self.step_tokens - 4, 0)] + ["The", "answer", "is", "41."]
        return " ".join(words)

    def stream(self, conversation, params) -> Iterator[str]:
        self.calls += 1
        due = time.perf_counter() + self.call_s
        generated = 0
        for k in range(self.steps):
            for word in self._step(k).split(" "):
                if generated >= params.max_tokens:
                    return
                due += self.token_s
                _sleep_until(due)
                generated += 1
                yield word + " "
            yield self.marker

    def chat(self, conversations, params):
        from morkit.llm.base import Completion

        out = []
        for conversation in conversations:
            self.calls += 1
            start = time.perf_counter()
            message = conversation[-1]["content"]
            wrote = any(m["role"] == "assistant" for m in conversation)
            stated = re.findall(r"The answer is (\d+)", message)
            anchor = stated[-1] if stated and not wrote else None
            blocks = []
            for number, body in _SECTION.findall(message):
                step = _step_in(body)
                claim = re.search(r"The answer is (\d+)", step)
                if claim and anchor is None and claim.group(1) != "42":
                    fixed = step.replace(f"The answer is {claim.group(1)}", "The answer is 42")
                    blocks.append(f"ERROR: the total is 42, not {claim.group(1)}\nCORRECTION: {fixed}\n"
                                  f"STEP {number}: {fixed}")
                else:
                    blocks.append(f"ACCEPT\nSTEP {number}: {step}")
            if "SUMMARY" in message:
                said = re.findall(r"The answer is (\d+)", " ".join(
                    [m["content"] for m in conversation if m["role"] == "assistant"] + blocks))
                blocks.append(f"SUMMARY: simulated. The answer is {said[-1] if said else 42}.")
            text = "\n\n".join(blocks)
            words = min(len(text.split()), params.max_tokens)
            _sleep_until(start + self.call_s + self.token_s * words)
            prompt = sum(len(m["content"].split()) for m in conversation)
            out.append(Completion((text,), ("stop",), prompt, words))
        return out


def _sleep_until(deadline: float) -> None:
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)
