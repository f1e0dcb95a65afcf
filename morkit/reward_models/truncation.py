"""Fitting a (question, answer) pair into a model's window: which tokens a pair that is too long loses (`middle`,
the default, drops the middle of the answer; `right`, `left`, `error`). Cuts are made in the text and the pair
rendered again; a PRM loses whole steps. The rules are on the docs page Long answers.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Score

log = logging.getLogger(__name__)

TRUNCATION_POLICIES = ("middle", "right", "left", "error")
DEFAULT_POLICY = "middle"
POLICY_HELP = ("pair too long for the model: keep the start and end of the answer and drop its middle (middle, "
               "default), keep its start (right) or its end (left), or fail (error); a PRM loses whole steps")


@dataclass(frozen=True)
class Truncation:
    """How a pair is fitted to the model: `policy`, and a limit of `max_tokens` (given by the user), else the model's
    own `window` (filled in by the RM), never past a `ceiling` (a vLLM engine's max_model_len). A cut answer's Score
    is marked `truncated`."""

    max_tokens: int | None = None
    policy: str = DEFAULT_POLICY
    window: int | None = None
    ceiling: int | None = None

    def __post_init__(self) -> None:
        checks.one_of(self.policy, TRUNCATION_POLICIES, "truncation policy")
        for name, flag in (("max_tokens", "max_tokens (--max-tokens)"), ("ceiling", "max_model_len (--max-model-len)")):
            value = getattr(self, name)
            if value is not None and checks.positive_int(value, flag) < 8:
                raise InputError(f"{flag} must be at least 8, got {value}")
        checks.optional(checks.positive_int, self.window, "window")

    def within(self, window: int) -> "Truncation":
        """This truncation on a model whose own window is `window` tokens."""
        return replace(self, window=window)

    @property
    def limit(self) -> int | None:
        """The tokens a pair may have (None while the model's window is not known)."""
        base = self.max_tokens or self.window
        return min(base, self.ceiling) if base and self.ceiling else base

    @property
    def signature(self) -> str:
        """`policy@limit` as the user set it (`window` for the model's own), known without loading the model: how
        a score is cut. A score cache key holds it with the model's window resolved (identity.truncation_part)."""
        if self.max_tokens:
            bound = str(self.limit)
        else:
            bound = "window" + (f"<={self.ceiling}" if self.ceiling else "")
        return f"{self.policy}@{bound}"


@dataclass(frozen=True)
class Encoded:
    """A rendered pair's token ids, and what was cut to fit: the answer, the question, a PRM's steps."""

    ids: tuple[int, ...]
    truncated: bool = False
    question_cut: bool = False
    kept_steps: tuple[int, ...] | None = None  # a cut PRM answer: the indices of the steps it still shows


Renderer = Callable[[str, str], list[int]]
"""Turns (question, answer) into the exact token ids the model was trained on."""


# -- which units survive -------------------------------------------------------------------------

def _leading(weights: Sequence[int], budget: int) -> int:
    """How many of the first units fit in `budget`."""
    total = 0
    for count, weight in enumerate(weights):
        if total + weight > budget:
            return count
        total += weight
    return len(weights)


def kept_units(weights: Sequence[int], budget: int, policy: str) -> list[int]:
    """Indices (in order) of the units that survive in `budget` tokens, each unit costing its weight. `right` keeps a
    prefix, `left` a suffix; `middle` gives the end half the budget (or what the last unit needs) and the start the
    rest, so the dropped units are one block from the middle."""
    n = len(weights)
    if policy == "right":
        return list(range(_leading(weights, budget)))
    backwards = list(weights[::-1])
    if policy == "left":
        return list(range(n - _leading(backwards, budget), n))
    end_budget = budget - budget // 2
    if n and end_budget < weights[-1] <= budget:
        end_budget = weights[-1]
    tail = _leading(backwards, end_budget)
    used = sum(weights[n - tail:])
    head = _leading(weights[: n - tail], budget - used)
    used += sum(weights[:head])
    tail += _leading(backwards[tail: n - head], budget - used)
    return list(range(head)) + list(range(n - tail, n))


class _Tokens:
    """An answer as tokens, each costing one; `step`: this is PRM step `step`, cut, and must stay one step."""

    def __init__(self, tokenizer: Any, text: str, step: int | None = None):
        self.tokenizer = tokenizer
        self.ids = list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
        self.weights = [1] * len(self.ids)
        self.step = step

    def text(self, kept: Sequence[int]) -> str:
        text = self.tokenizer.decode([self.ids[i] for i in kept])
        if self.step is not None:  # the cut may join two newlines: a blank line would split the step
            text = re.sub(r"\n\s*\n", "\n", text)
        return text

    def kept_steps(self, kept: Sequence[int]) -> tuple[int, ...] | None:
        return None if self.step is None else (self.step,)


class _Steps:
    """A PRM's answer as whole steps, each costing its tokens and one step tag."""

    def __init__(self, tokenizer: Any, steps: Sequence[str]):
        self.steps = list(steps)
        self.weights = [len(tokenizer(s, add_special_tokens=False, verbose=False)["input_ids"]) + 1 for s in steps]

    def text(self, kept: Sequence[int]) -> str:
        return "\n\n".join(self.steps[i] for i in kept)

    def kept_steps(self, kept: Sequence[int]) -> tuple[int, ...]:
        return tuple(kept)


# -- fitting -------------------------------------------------------------------------------------

def encode_pair(render: Renderer, tokenizer: Any, question: str, answer: str, truncation: Truncation,
                steps: Callable[[str], list[str]] | None = None) -> Encoded:
    """Render one pair; if it is over the limit, cut it under the policy until it fits.

    `steps` (a PRM's step splitter) makes the answer lose whole steps, joined again by blank lines."""
    limit = truncation.limit
    if limit is None:
        raise ValueError("encode_pair needs a Truncation whose limit is known (Truncation.within(window))")
    ids = render(question, answer)
    if len(ids) <= limit:
        return Encoded(tuple(ids))
    if truncation.policy == "error":
        raise InputError(f"pair is {len(ids)} tokens, over the limit of {limit} (truncation policy 'error')")
    units: _Tokens | _Steps = _Steps(tokenizer, steps(answer)) if steps is not None else _Tokens(tokenizer, answer)
    room = limit - len(render("", ""))  # what the template leaves for the question and the answer
    question, question_cut = fit_question(render, tokenizer, question, limit, min(sum(units.weights), room // 2))
    budget = limit - len(render(question, ""))
    if budget <= 0:
        raise InputError(f"a pair cannot be cut to {limit} tokens: the model's prompt template takes "
                         f"{len(render('', ''))} of them and leaves no room for the answer")
    while True:
        if isinstance(units, _Steps) and units.steps:
            anchor = 0 if truncation.policy == "right" else len(units.steps) - 1  # the step the policy keeps first
            if units.weights[anchor] > budget:  # it cannot fit whole: it is shown alone, cut as tokens
                units = _Tokens(tokenizer, units.steps[anchor], step=anchor)
                budget -= 1  # its step tag
                continue
        kept = kept_units(units.weights, budget, truncation.policy)
        if not kept and isinstance(units, _Tokens) and units.step is not None:
            raise InputError(f"a pair cannot be cut to {limit} tokens: not one token of a step fits beside the "
                             "model's prompt template")
        ids = render(question, units.text(kept))
        if len(ids) <= limit:
            return Encoded(tuple(ids), True, question_cut, units.kept_steps(kept))
        if budget <= 0:
            raise InputError(f"a pair cannot be cut to {limit} tokens: its shortest cut renders {len(ids)}")
        budget = max(0, budget - (len(ids) - limit))  # text decoded and encoded again can take more tokens


def fit_question(render: Renderer, tokenizer: Any, question: str, limit: int, reserve: int) -> tuple[str, bool]:
    """The question, cut from its start as far as needed to leave the answer `reserve` tokens; whether it was cut."""
    over = len(render(question, "")) + reserve - limit
    if over <= 0:
        return question, False
    ids = list(tokenizer(question, add_special_tokens=False, verbose=False)["input_ids"])
    keep = len(ids) - over
    while keep > 0:
        text = tokenizer.decode(ids[-keep:])
        over = len(render(text, "")) + reserve - limit
        if over <= 0:
            return text, True
        keep -= over
    return "", True


def mark_cut(score: Score, encoded: Encoded) -> Score:
    """The score marked `truncated` where its pair was cut; `extra` says whether the question was cut too
    (`question_cut`) and which steps a cut PRM answer still shows (`kept_steps`)."""
    if not encoded.truncated:
        return score
    extra = dict(score.extra or {})
    if encoded.question_cut:
        extra["question_cut"] = True
    if encoded.kept_steps is not None:
        extra["kept_steps"] = encoded.kept_steps
    return replace(score, truncated=True, extra=extra or None)


def log_truncated(name: str, encoded: Sequence[Encoded], truncation: Truncation) -> int:
    """Count cut pairs in one call (debug log; the scoring run warns once with the totals)."""
    count = sum(e.truncated for e in encoded)
    if count:
        log.debug("%s: %d of %d pairs were cut to fit %d tokens (policy %r), %d of them in the question too",
                  name, count, len(encoded), truncation.limit, truncation.policy,
                  sum(e.question_cut for e in encoded))
    return count
