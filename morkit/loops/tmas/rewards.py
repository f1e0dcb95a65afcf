"""The TMAS hybrid RL reward as plain functions TRL's `GRPOTrainer` accepts as `reward_funcs`.

TRL calls each reward function as `fn(prompts=..., completions=..., completion_ids=..., **columns)`:
`completions` are strings (standard datasets) or lists of message dicts (conversational ones: the last
message's content is read), and every extra dataset column arrives as a keyword list aligned with
the completions. Each function returns one float per completion. This module only computes rewards.

- `correctness_reward`: +1 if the completion's final answer equals the reference (`answer` or
  `reference` column, math equivalence), else -1.
- `bank_bonus_reward(beta)`: a correct rollout that used the memory bank (`used_bank` column) gets
  beta * (1 - p_base), p_base = accuracy of the rollouts of the same prompt that did not use it.
- `novelty_reward`: the paper's table over (correct, novel) - see NOVELTY_TABLE; `novel` column, or
  novelty computed against a `seen_answers` column (previously seen final answers per rollout).
- `hybrid_reward(beta)`: the sum of the three.

Grouping for p_base: TRL repeats each prompt `num_generations` times in a batch and normalises
advantages within those groups, so rollouts are grouped by their prompt (text, or the messages as
JSON). A prompt sampled twice in one batch pools its groups: same question, one baseline. Without
`prompts` the whole batch is one group.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

from morkit.core.errors import InputError
from morkit.core.grading import answers_equivalent, extract_answer, is_correct

RewardFn = Callable[..., list[float]]

DEFAULT_BETA = 0.5
NOVELTY_TABLE: Mapping[tuple[bool, bool], float] = {
    (True, True): 1.0,     # correct and novel
    (True, False): 0.2,    # correct, an answer seen before
    (False, True): -0.5,   # wrong but novel (exploration)
    (False, False): -1.0,  # wrong and seen before
}
"""Reward by (correct, novel)."""


def completion_text(completion: Any) -> str:
    """A completion's text: the string itself, or the last message's content for a message list."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence) and completion:
        return completion_text(completion[-1])
    return ""


def _column(kwargs: Mapping[str, Any], names: Sequence[str], size: int) -> list[Any] | None:
    """The first column present under `names`, as a list of `size` (a scalar is broadcast)."""
    for name in names:
        if kwargs.get(name) is not None:
            value = kwargs[name]
            values = [value] * size if isinstance(value, (str, bool, int, float)) else list(value)
            if len(values) != size:
                raise InputError(f"column {name!r} has {len(values)} values for {size} completions")
            return values
    return None


def _correct(completions: Sequence[Any], kwargs: Mapping[str, Any]) -> list[bool]:
    references = _column(kwargs, ("answer", "reference"), len(completions))
    if references is None:
        raise InputError("correctness needs an 'answer' or 'reference' column")
    return [bool(is_correct(completion_text(c), r)) for c, r in zip(completions, references)]


def _group_key(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


def correctness_reward(prompts: Sequence[Any] | None, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """+1.0 for a completion whose final answer matches the reference, -1.0 otherwise."""
    return [1.0 if ok else -1.0 for ok in _correct(completions, kwargs)]


def _bank_bonus(prompts: Sequence[Any] | None, correct: list[bool], used: list[bool], beta: float) -> list[float]:
    keys = [_group_key(p) for p in prompts] if prompts is not None else [""] * len(correct)
    if len(keys) != len(correct):
        raise InputError(f"{len(keys)} prompts for {len(correct)} completions")
    base: dict[str, list[bool]] = {}
    for key, ok, u in zip(keys, correct, used):
        if not u:
            base.setdefault(key, []).append(ok)
    rewards = []
    for key, ok, u in zip(keys, correct, used):
        baseline = base.get(key)
        if ok and u and baseline:  # no bank-free rollout of this prompt: nothing to measure the bank against
            rewards.append(beta * (1.0 - sum(baseline) / len(baseline)))
        else:
            rewards.append(0.0)
    return rewards


def bank_bonus_reward(beta: float = DEFAULT_BETA) -> RewardFn:
    """A reward function giving correct rollouts that used the bank beta * (1 - p_base); 0 otherwise,
    and 0 for every rollout of a prompt none of whose rollouts went without the bank."""

    def bank_bonus_reward(prompts: Sequence[Any] | None, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        used = _column(kwargs, ("used_bank",), len(completions))
        if used is None:
            raise InputError("the bank bonus needs a 'used_bank' column")
        return _bank_bonus(prompts, _correct(completions, kwargs), [bool(u) for u in used], beta)

    return bank_bonus_reward


def _novel(completions: Sequence[Any], kwargs: Mapping[str, Any]) -> list[bool]:
    """The `novel` column, else: the final answer is not equivalent to any of that row's `seen_answers`
    (a completion without a final answer counts as not novel: it brings nothing new)."""
    novel = _column(kwargs, ("novel",), len(completions))
    if novel is not None:
        return [bool(n) for n in novel]
    seen = kwargs.get("seen_answers")
    if seen is None:
        raise InputError("novelty needs a 'novel' or a 'seen_answers' column")
    if len(seen) != len(completions):
        raise InputError(f"column 'seen_answers' has {len(seen)} rows for {len(completions)} completions")
    out = []
    for completion, previous in zip(completions, seen):
        answer = extract_answer(completion_text(completion))
        out.append(answer is not None and not any(answers_equivalent(answer, s) for s in previous or ()))
    return out


def novelty_reward(prompts: Sequence[Any] | None, completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """NOVELTY_TABLE[(correct, novel)] per completion."""
    return [NOVELTY_TABLE[(ok, new)] for ok, new in zip(_correct(completions, kwargs), _novel(completions, kwargs))]


def hybrid_reward(beta: float = DEFAULT_BETA) -> RewardFn:
    """A reward function summing correctness, the bank bonus (with `beta`) and novelty per completion."""

    def hybrid_reward(prompts: Sequence[Any] | None, completions: Sequence[Any], **kwargs: Any) -> list[float]:
        correct = _correct(completions, kwargs)
        used = _column(kwargs, ("used_bank",), len(completions))
        if used is None:
            raise InputError("the bank bonus needs a 'used_bank' column")
        bonus = _bank_bonus(prompts, correct, [bool(u) for u in used], beta)
        novel = _novel(completions, kwargs)
        return [(1.0 if ok else -1.0) + b + NOVELTY_TABLE[(ok, new)] for ok, b, new in zip(correct, bonus, novel)]

    return hybrid_reward
