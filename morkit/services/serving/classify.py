"""vLLM's /classify for verl's reward loop: chat-rendered texts split back into (question, answer) by the template
that rendered them, each scored alone under the pool's per-RM standardisation, answered in vLLM's reply shape.
"""

from __future__ import annotations

import math
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


class Standalone(tuple):
    """A job whose queries each hold one response scored on its own: its reward depends on (question, answer)
    and the pool only, never on the texts it shares a request or a micro-batch with."""


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
    """[INST] question [/INST] answer: the last closed user turn and what follows it, found with rfind (a lazy
    regex retries from every '[INST]': quadratic, minutes on a 200 kB text of them); a Llama 2 <<SYS>> is left out."""
    close = text.rfind("[/INST]")
    start = text.rfind("[INST]", 0, close) if close >= 0 else -1
    if start < 0:
        return []
    question, answer = text[start + 6:close], text[close + 7:]
    if question.lstrip().startswith("<<SYS>>") and "<</SYS>>" in question:
        question = question.split("<</SYS>>", 1)[1]
    turns: list[Turn] = [("user", question, start + 6)]
    if "[INST]" in answer:  # a user turn left open after the answer
        cut = answer.index("[INST]")
        return [*turns, ("assistant", answer[:cut], close + 7), ("user", answer[cut + 6:], close + 13 + cut)]
    return turns + ([("assistant", answer, close + 7)] if strip_trailing_special(answer).strip() else [])


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


def _families(text: str) -> list[str]:
    """The template families with an opener in `text`, the earliest first."""
    first = {name: min((i for i in (text.find(o) for o in openers) if i >= 0), default=-1)
             for name, openers in _OPENERS.items()}
    return sorted((name for name, at in first.items() if at >= 0), key=first.__getitem__)


def split_chat(text: str) -> tuple[str, str, str]:
    """(question, answer, template name) of a chat-rendered text: the last user turn followed by an assistant
    turn, and everything after that turn's header (turn tokens a policy wrote into its answer stay in it)."""
    for name in _families(text):
        turns = CHAT_TEMPLATES[name](text)
        if not turns:
            continue
        asked = [i for i in range(len(turns) - 1) if turns[i][0] == "user" and turns[i + 1][0] == "assistant"]
        at = asked[-1] if asked and strip_trailing_special(turns[-1][1]).strip() else None
        if at is None:  # no answer, or an empty turn left open at the end (a generation prompt)
            raise InputError(f"a {name} chat text must end with a user turn and the assistant's answer to it "
                             "(render the chat with the response appended, add_generation_prompt=False)")
        answer = turns[at + 1][1] if at + 2 == len(turns) else text[turns[at + 1][2]:]
        return turns[at][1].strip(), strip_trailing_special(answer).strip(), name
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
    """The parsed /classify request: one single-response query per text, the model name, the activation."""

    queries: Standalone
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
    queries = Standalone(Query(f"text-{i}", q, (Candidate(text=a),)) for i, (q, a) in enumerate(pairs))
    return ClassifyJob(queries, model or "morkit", _activation(body))


def standalone_reward(pool: Any, query: Query, choice: Any) -> float:
    """A one-response query's reward: its chosen members' raw scores through the pool's normaliser, weighted by
    the ensemble's weights (a learned ranker's pick: its members' importance shares). No sibling enters it."""
    from morkit.selection.mor import ensemble_scores, member_matrix

    members = choice.ensemble.members
    if not members:
        return 0.0  # no pool RM applies: as /get_reward, every response scores alike
    raw = member_matrix(query, members, pool.config.reduction)
    value = float(ensemble_scores(raw, choice.ensemble, "pool-zscore", pool.normalizer)[0])
    if not math.isfinite(value):
        raise InputError(f"query {query.id!r}: the ensemble {', '.join(members)} gives a non-finite reward; its "
                         "scores are missing or too large for the pool's normaliser")
    return value


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
