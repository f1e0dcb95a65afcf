"""What the vLLM backends share: pooling kinds (classify, token_classify, step, embed), default prompt rendering,
and reading pooled outputs with activation applied here, never by a vLLM default. Pure Python, so the engine and
the HTTP client read a model's output the same way; the kinds are tabled on the docs page Scoring and backends.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence, Union

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Score
from morkit.reward_models.base import reduce_steps

KIND_TASK = {"classify": "classify", "token_classify": "token_classify", "step": "token_classify", "embed": "embed"}
KINDS = tuple(KIND_TASK)

Render = Callable[[str, str], Union[str, "list[int]"]]
"""(question, answer) -> the prompt as text or token ids, already chat-templated."""


class MalformedOutput(ValueError):
    """A pooled output that does not have the shape the model kind promises."""


def check_kind(kind: str) -> str:
    if kind not in KIND_TASK:
        raise InputError(f"pooling kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def chat_render(tokenizer: Any) -> Callable[[str, str], list[int]]:
    """The default prompt: the tokenizer's chat template with a user and an assistant turn, no
    generation prompt, as token ids (so the server does not add special tokens a second time)."""

    def render(question: str, answer: str) -> list[int]:
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=False)
        if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    return render


def expected_rows(prompt: str | list[int], kind: str, step_token_id: int | None) -> int | None:
    """How many output rows a token-ids prompt must produce (None when it cannot be known)."""
    if isinstance(prompt, str):
        return None
    if kind == "token_classify":
        return len(prompt)
    if kind == "step" and step_token_id is not None:
        return sum(1 for t in prompt if t == step_token_id)
    return None


def _number(x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise MalformedOutput(f"expected a number, got {type(x).__name__}: {str(x)[:60]}")
    try:
        return float(x)
    except OverflowError:  # a JSON integer too large for a float
        raise MalformedOutput(f"expected a number a float can hold, got {checks.shown(x)}") from None


def row_of(x: Any, width: int | None) -> list[float]:
    """One output row as floats (a bare number counts as a row of one); MalformedOutput otherwise."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        row = [_number(x)]  # a one-label token output may come squeezed
    elif isinstance(x, (list, tuple)):
        row = [_number(v) for v in x]
    else:
        raise MalformedOutput(f"expected a row of numbers, got {type(x).__name__}")
    if width is not None and len(row) != width:
        raise MalformedOutput(f"expected {width} values per row, got {len(row)}")
    return row


def _softmax(row: Sequence[float]) -> list[float]:
    top = max(row)
    exps = [math.exp(v - top) for v in row]
    total = sum(exps)
    return [e / total for e in exps]


def to_score(kind: str, data: Any, *, label: int = 0, num_labels: int | None = 1,
             expected_rows: int | None = None, reduction: str = "min") -> Score:
    """Turn one prompt's pooled output (nested lists of floats) into a Score; raise MalformedOutput."""
    if kind == "classify":
        if isinstance(data, (list, tuple)) and len(data) == 1 and isinstance(data[0], (list, tuple)):
            data = data[0]  # [[logit, ...]]
        row = row_of(data, num_labels)
        if not 0 <= label < len(row):
            raise MalformedOutput(f"label {label} out of range for {len(row)} outputs")
        return Score(row[label])
    if not isinstance(data, (list, tuple)) or not data:
        raise MalformedOutput(f"expected a non-empty list of rows for {kind}, got {str(data)[:60]}")
    if expected_rows is not None and len(data) != expected_rows:
        raise MalformedOutput(f"expected {expected_rows} rows for {kind}, got {len(data)}")
    if kind == "token_classify":
        row = row_of(data[-1], num_labels)
        if not 0 <= label < len(row):
            raise MalformedOutput(f"label {label} out of range for {len(row)} outputs")
        return Score(row[label])
    if kind == "step":
        rows = [row_of(r, num_labels) for r in data]
        if any(not 0 <= label < len(r) for r in rows):
            raise MalformedOutput(f"label {label} out of range for step rows")
        steps = tuple(_softmax(r)[label] for r in rows)
        return Score(reduce_steps(steps, reduction), steps=steps)
    raise InputError(f"unknown pooling kind {kind!r}")


def finite(score: Score) -> bool:
    return all(math.isfinite(v) for v in (score.value, *(score.steps or ())))
