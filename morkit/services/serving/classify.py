"""vLLM's /classify for verl's reward loop: chat-rendered texts split back into (question, answer) by the template
that rendered them, each routed and ranked as a one-answer query, answered in vLLM's reply shape.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.services.serving.limits import ServeLimits
from morkit.services.serving.protocol import _list, check_size, strip_trailing_special


Turn = tuple[str, str, int]
"""(role, content, offset of the content in the text)."""


def _turns(pattern: str, roles: dict[str, str]) -> Callable[[str], list[Turn]]:
    """A parser of one template family: its turns in order, roles mapped to user/assistant/system (a generation
    prompt left open at the end is an empty last turn)."""
    compiled = re.compile(pattern, re.S)

    def parse(text: str) -> list[Turn]:
        return [(roles.get(m.group("role"), m.group("role")), m.group("content"), m.start("content"))
                for m in compiled.finditer(text)]

    return parse


def _mistral(text: str) -> list[Turn]:
    """[INST] question [/INST] answer: the first closed user turn and everything after it, found with find/rfind
    (a lazy regex retries from every '[INST]': quadratic, minutes on a 200 kB text of them); a Llama 2 <<SYS>> is
    left out. Later [INST] markers are the answer's own text (split_chat)."""
    close = text.find("[/INST]")
    start = text.rfind("[INST]", 0, close) if close >= 0 else -1
    if start < 0:
        return []
    question = text[start + 6:close]
    if question.lstrip().startswith("<<SYS>>") and "<</SYS>>" in question:
        question = question.split("<</SYS>>", 1)[1]
    return [("user", question, start + 6), ("assistant", text[close + 7:], close + 7)]


CHAT_TEMPLATES: dict[str, Callable[[str], list[Turn]]] = {
    # Qwen2.5 / Qwen3 / InternLM2 / SmolLM2 RMs: <|im_start|>role\n...<|im_end|>
    "chatml": _turns(r"<\|im_start\|>(?P<role>[a-z_]+)\n(?P<content>.*?)(?:<\|im_end\|>|\Z)", {}),
    # Llama 3 / 3.1 RMs (Skywork-Reward-(V2-)Llama-3.1, INF-ORM): <|start_header_id|>role<|end_header_id|>\n\n...
    "llama3": _turns(r"<\|start_header_id\|>(?P<role>[a-z_]+)<\|end_header_id\|>\n\n(?P<content>.*?)"
                     r"(?:<\|eot_id\|>|\Z)", {}),
    # Gemma 2 RMs (Skywork-Reward-Gemma-2, QRM-Gemma-2, LDL-Reward-Gemma-2): <start_of_turn>user|model\n...
    "gemma": _turns(r"<start_of_turn>(?P<role>[a-z_]+)\n(?P<content>.*?)(?:<end_of_turn>|\Z)", {"model": "assistant"}),
    # Phi-3: <|user|>\n...<|end|>
    "phi3": _turns(r"<\|(?P<role>user|assistant|system)\|>\n(?P<content>.*?)(?:<\|end\|>|\Z)", {}),
    # Mistral / Llama 2: [INST] question [/INST] answer</s>
    "mistral": _mistral,
}
"""The chat templates /classify reads, by name: each gives a text's (role, content) turns in order."""

_OPENERS = {"chatml": ("<|im_start|>",), "llama3": ("<|start_header_id|>",), "gemma": ("<start_of_turn>",),
            "phi3": ("<|user|>", "<|system|>", "<|assistant|>"), "mistral": ("[INST]",)}
"""Each template's turn openers: the family whose opener comes first in the text rendered it (an answer that
quotes another family's tokens does not switch the family)."""


_CLOSERS = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "gemma": "<end_of_turn>", "phi3": "<|end|>",
            "mistral": "</s>"}
"""Each template's end of turn, which closes the answer the template rendered."""


def _closed(answer: str, family: str) -> str:
    """An answer less the end of turn and the special tokens (EOS, padding) the template put after it."""
    answer = strip_trailing_special(answer).rstrip()
    return strip_trailing_special(answer.removesuffix(_CLOSERS[family])).strip()


def _families(text: str) -> list[str]:
    """The template families with an opener in `text`, the earliest first."""
    first = {name: min((i for i in (text.find(o) for o in openers) if i >= 0), default=-1)
             for name, openers in _OPENERS.items()}
    return sorted((name for name, at in first.items() if at >= 0), key=first.__getitem__)


def split_chat(text: str) -> tuple[str, str, str]:
    """(question, answer, template name) of a chat-rendered text, read as one exchange: the answer is everything
    after the header of the first assistant turn, the question the last user turn before it. Turn markers after
    that header are the policy's own text, never turns: written into an answer, they cannot forge the question or
    move the answer (a history with earlier assistant turns is the same text as such a forgery: send `messages`)."""
    for name in _families(text):
        turns = CHAT_TEMPLATES[name](text)
        if not turns:
            continue
        first = next((i for i, turn in enumerate(turns) if turn[0] == "assistant"), len(turns))
        asked = [turn for turn in turns[:first] if turn[0] == "user"]
        answer = _closed(text[turns[first][2]:], name) if first < len(turns) else ""
        if not asked or not answer:  # no answer, or only a generation prompt left open at the end
            raise InputError(f"a {name} chat text must hold a user turn and the assistant's answer to it "
                             "(render the chat with the response appended, add_generation_prompt=False)")
        return asked[-1][1].strip(), answer, name
    raise InputError("no chat template recognised: morkit splits each text into the question and the answer by "
                     f"its chat template ({', '.join(CHAT_TEMPLATES)}); send 'messages' instead for any other")


def _messages_pair(messages: Any) -> tuple[str, str]:
    if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                                  for m in messages):
        raise InputError("request body: 'messages' must be a list of {\"role\", \"content\"} objects")
    roles = [m.get("role") for m in messages]
    if len(messages) < 2 or roles[-1] != "assistant" or roles[-2] != "user":
        raise InputError("request body: 'messages' must end with a user message and the assistant's answer")
    return messages[-2]["content"], messages[-1]["content"]


@dataclass(frozen=True)
class ClassifyJob:
    """The parsed /classify request: one single-response query per text (routed and ranked as `/v1/rank` ranks
    it, so its reward depends on its question, its answer and the pool alone), the model name, the activation."""

    queries: tuple[Query, ...]
    model: str
    activation: bool


def _activation(body: dict[str, Any]) -> bool:
    """vLLM's `use_activation` (older vLLM and verl: `activation`); None means on, as vLLM's classifiers do."""
    given = {k: body[k] for k in ("use_activation", "activation") if body.get(k) is not None}
    for key, value in given.items():
        if not isinstance(value, bool):
            raise InputError(f"request body: {key!r} must be true, false or null")
    if len(set(given.values())) > 1:
        raise InputError("request body: 'activation' and 'use_activation' disagree; send one")
    return next(iter(given.values()), True)


def classify_job(body: dict[str, Any], limits: ServeLimits = ServeLimits()) -> ClassifyJob:
    """The ClassifyJob of a vLLM /classify body: `input` (a chat-rendered string or a list of them) or
    `messages` (one chat ending with the answer); a text no template splits names its index."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InputError("request body: 'model' must be a string")
    if "messages" in body:
        check_size(body, 1, limits)
        pairs = [_messages_pair(body["messages"])]
    else:
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        elif isinstance(texts, list):
            texts = _list(body, "input", limits.max_items)
        else:
            raise InputError("request body: 'input' must be a string or a list of strings (or send 'messages')")
        if not texts:
            raise InputError("request body: 'input' is empty")
        check_size(body, len(texts), limits)
        pairs = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(f"input[{i}]: must be a string (token ids are not read: send the rendered text)")
            try:
                question, answer, _ = split_chat(text)
            except InputError as exc:
                raise InputError(f"input[{i}]: {exc}") from None
            pairs.append((question, answer))
    queries = tuple(Query(f"text-{i}", q, (Candidate(text=a),)) for i, (q, a) in enumerate(pairs))
    return ClassifyJob(queries, model or "morkit", _activation(body))


def classify_reply(job: ClassifyJob, rewards: Sequence[float]) -> dict[str, Any]:
    """vLLM's ClassificationResponse: one class per text whose one prob is the reward (activation on: its
    sigmoid). Usage counts no tokens: morkit does not tokenize for the route; each RM reads its own tokens."""
    values = np.asarray(rewards, dtype=np.float64)
    if job.activation:
        values = 1.0 / (1.0 + np.exp(-values))
    return {"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": job.model,
            "data": [{"index": i, "label": None, "probs": [float(v)], "num_classes": 1} for i, v in enumerate(values)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0, "completion_tokens": 0, "prompt_tokens_details": None,
                      "completion_tokens_details": None}}
