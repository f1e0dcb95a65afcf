"""The TMAS hybrid RL reward as TRL `reward_funcs`: each rollout gets one of the paper's three components by its
`rollout_type` (base: correctness; bank: plus beta * (1 - p_base) when right; explore: the novelty table), morkit's
reading of how they combine. Columns, p_base groups, metrics, readings: docs/loops/tmas.md, "Hybrid-reward RL"."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.grading import is_correct
from morkit.llm.base import message_text
from morkit.loops.tmas.novelty import (
    NOVEL,
    NOVELTY_CLASSES,
    SAME,
    UNDETERMINED,
    NoveltyJudge,
    answer_novelty,
    strategies_of,
)

RewardFn = Callable[..., list[float | None]]
BASE, BANK, EXPLORE = "base", "bank", "explore"
ROLLOUT_TYPES = (BASE, BANK, EXPLORE)
_ALIASES = {"exploit": BANK, "exploration": EXPLORE}
DEFAULT_BETA = 0.5


@dataclass(frozen=True)
class HybridRewardConfig:
    """The hybrid reward's constants and where it reads its inputs."""

    beta: float = DEFAULT_BETA
    """Bank bonus scale: a right bank rollout gets +beta * (1 - p_base)."""
    novelty: Literal["judge", "column", "answers"] = "judge"
    """Novelty class source: the LLM judge against `guideline_bank`; a `novelty_class` column (1/0/-1, or a
    bool `novel` column: True 1, False 0); or the answer-level alternative over `seen_answers` (1 a new
    final answer, 0 a seen one, -1 none)."""
    undetermined: Literal["not_novel", "novel"] = "not_novel"
    """What class -1 ("cannot determine the strategy") counts as; the paper's table has no row for it. Not
    novel: a solution too vague to show a strategy has shown no new one, and vagueness must not pay."""
    correct_novel: float = 1.0
    correct_not_novel: float = 0.2
    wrong_novel: float = -0.5
    wrong_not_novel: float = -1.0
    group_column: str = "problem_id"
    """Column whose equal values form a problem's group for p_base (the prompt when the column is absent)."""

    def __post_init__(self) -> None:
        checks.non_negative(self.beta, "HybridRewardConfig.beta")
        checks.one_of(self.novelty, ("judge", "column", "answers"), "HybridRewardConfig.novelty")
        checks.one_of(self.undetermined, ("not_novel", "novel"), "HybridRewardConfig.undetermined")
        for name in ("correct_novel", "correct_not_novel", "wrong_novel", "wrong_not_novel"):
            checks.finite(getattr(self, name), f"HybridRewardConfig.{name}")

    def is_novel(self, novelty: int) -> bool:
        """The table's binary novelty n_i of a class: 1 is novel, 0 is not, -1 as `undetermined` says."""
        if novelty not in NOVELTY_CLASSES:
            raise InputError(f"a novelty class must be 1, 0 or -1, got {novelty!r}")
        return novelty == NOVEL or (novelty == UNDETERMINED and self.undetermined == "novel")

    def novelty_value(self, correct: bool, novelty: int) -> float:
        """The paper's table entry for (correct, class)."""
        novel = self.is_novel(novelty)
        if correct:
            return self.correct_novel if novel else self.correct_not_novel
        return self.wrong_novel if novel else self.wrong_not_novel


@dataclass(frozen=True)
class RewardParts:
    """How one completion's hybrid reward was made (for logs and inspection)."""

    rollout_type: str
    group: str
    correct: bool
    reward: float
    p_base: float | None = None
    bonus: float = 0.0
    novelty: int | None = None
    novel: bool | None = None
    novelty_source: str = ""
    judge_reply: str = ""


def completion_text(completion: Any) -> str:
    """A completion's text: the string itself, or the last (assistant) message's content of a message list."""
    return message_text(completion, role="assistant") if completion else ""


def _prompt_text(prompt: Any) -> str:
    """A prompt's problem text: the string, or the last user message of a conversation."""
    return message_text(prompt, role="user") if prompt else ""


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


def _novelty_class(value: Any) -> int:
    """A novelty column value as a class: True 1, False 0, else an integer 1, 0 or -1 (a number or its text)."""
    if isinstance(value, bool):
        return NOVEL if value else SAME
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number not in NOVELTY_CLASSES:
        raise InputError(f"novelty_class values must be 1, 0 or -1, got {value!r}")
    return int(number)


def rollout_types(kwargs: Mapping[str, Any], size: int, *, required: bool = False) -> list[str] | None:
    """Each row's branch from `rollout_type` (aliases: exploit -> bank), else `used_bank`; None without both
    (an InputError instead when `required`)."""
    types = _column(kwargs, ("rollout_type",), size)
    if types is not None:
        if any(t is None or not str(t).strip() for t in types):
            raise InputError(f"column 'rollout_type' has an empty value; use {', '.join(ROLLOUT_TYPES)} on every row")
        out = [_ALIASES.get(str(t).strip().lower(), str(t).strip().lower()) for t in types]
        unknown = sorted(set(out) - set(ROLLOUT_TYPES))
        if unknown:
            raise InputError(f"unknown rollout_type {', '.join(map(repr, unknown))}; use {', '.join(ROLLOUT_TYPES)}")
        return out
    used = _column(kwargs, ("used_bank",), size)
    if used is not None:
        return [BANK if bool(u) else BASE for u in used]
    if required:
        raise InputError("the bank bonus needs a 'rollout_type' (base/bank/explore) or a 'used_bank' column")
    return None


def group_keys(prompts: Sequence[Any] | None, kwargs: Mapping[str, Any], size: int,
               column: str = "problem_id") -> list[str]:
    """Each row's problem group: the `column` value, else the prompt (text or messages as JSON), else one
    group for the whole call."""
    ids = _column(kwargs, (column,), size)
    if ids is not None:
        return [str(i) for i in ids]
    if prompts is None:
        return [""] * size
    if len(prompts) != size:
        raise InputError(f"{len(prompts)} prompts for {size} completions")
    return [p if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str) for p in prompts]


def bank_bonuses(keys: Sequence[str], types: Sequence[str], correct: Sequence[bool], beta: float,
                 p_base_column: Sequence[Any] | None = None
                 ) -> tuple[list[float | None], list[float | None], int]:
    """Per row: beta * (1 - p_base) for a right bank rollout, 0.0 for a wrong one, None for other rows;
    each row's problem p_base (None where its problem has none); and how many bank rows had no p_base."""
    base: dict[str, list[bool]] = {}
    for key, kind, ok in zip(keys, types, correct):
        if kind == BASE:
            base.setdefault(key, []).append(ok)
    bonuses: list[float | None] = []
    used: list[float | None] = []
    missing = 0
    for i, (key, kind, ok) in enumerate(zip(keys, types, correct)):
        given = p_base_column[i] if p_base_column is not None else None
        group = base.get(key)
        p_base = float(given) if given is not None else (sum(group) / len(group) if group else None)
        used.append(p_base)
        if kind != BANK:
            bonuses.append(None)
        elif p_base is None:
            missing += 1
            bonuses.append(0.0)
        else:
            bonuses.append(beta * (1.0 - p_base) if ok else 0.0)
    return bonuses, used, missing


def _log(kwargs: Mapping[str, Any], name: str, value: float) -> None:
    log = kwargs.get("log_metric")
    if callable(log):
        log(name, float(value))


def correctness_reward(prompts: Sequence[Any] | None, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """+1.0 for a completion whose final answer matches the reference, -1.0 otherwise; None for `explore`
    rows (their reward is the novelty table, which already counts correctness)."""
    types = rollout_types(kwargs, len(completions))
    rewards = [1.0 if ok else -1.0 for ok in _correct(completions, kwargs)]
    return rewards if types is None else [None if t == EXPLORE else r for r, t in zip(rewards, types)]


def bank_bonus_reward(beta: float = DEFAULT_BETA, group_column: str = "problem_id") -> RewardFn:
    """A reward function giving right `bank` rollouts beta * (1 - p_base) and wrong ones 0; None elsewhere."""
    checks.non_negative(beta, "beta")

    def bank_bonus_reward(prompts: Sequence[Any] | None, completions: Sequence[Any], **kwargs: Any
                          ) -> list[float | None]:
        n = len(completions)
        types = rollout_types(kwargs, n, required=True)
        keys = group_keys(prompts, kwargs, n, group_column)
        bonuses, _, missing = bank_bonuses(keys, types, _correct(completions, kwargs), beta,
                                           _column(kwargs, ("p_base",), n))
        _log(kwargs, "tmas/bank_without_base", missing)
        return bonuses

    return bank_bonus_reward


class HybridReward:
    """The TMAS hybrid reward as one TRL reward function (see the module docstring); `judge` is needed
    when `config.novelty == "judge"`. `last` holds the RewardParts of the latest call."""

    def __init__(self, config: HybridRewardConfig = HybridRewardConfig(), judge: NoveltyJudge | None = None,
                 name: str = "tmas_hybrid"):
        if config.novelty == "judge" and judge is None:
            raise InputError("novelty='judge' needs a NoveltyJudge (or set novelty='column' or 'answers')")
        self.config, self.judge = config, judge
        self.last: tuple[RewardParts, ...] = ()
        self.__name__ = name  # TRL logs each reward function under its __name__

    def novelty(self, prompts: Sequence[Any] | None, completions: Sequence[Any], rows: Sequence[int],
                kwargs: Mapping[str, Any]) -> list[tuple[int, str, str]]:
        """(class, source, judge reply) for the completions at `rows`, from `config.novelty`'s source."""
        source = {"judge": self._judged, "column": self._given, "answers": self._by_answers}[self.config.novelty]
        return source(prompts, [completion_text(completions[i]) for i in rows], rows, kwargs, len(completions))

    @staticmethod
    def _given(prompts: Any, texts: Sequence[str], rows: Sequence[int], kwargs: Mapping[str, Any], n: int
               ) -> list[tuple[int, str, str]]:
        """The `novelty_class` column (1/0/-1), or a bool `novel` column (True 1, False 0)."""
        given = _column(kwargs, ("novelty_class", "novel"), n)
        if given is None:
            raise InputError("novelty='column' needs a 'novelty_class' (1/0/-1) or a bool 'novel' column")
        return [(_novelty_class(given[i]), "column", "") for i in rows]

    @staticmethod
    def _by_answers(prompts: Any, texts: Sequence[str], rows: Sequence[int], kwargs: Mapping[str, Any], n: int
                    ) -> list[tuple[int, str, str]]:
        """The answer-level alternative over the `seen_answers` column."""
        seen = _column(kwargs, ("seen_answers",), n)
        if seen is None:
            raise InputError("novelty='answers' needs a 'seen_answers' column")
        return [(c, "answers", "") for c in answer_novelty(texts, [seen[i] for i in rows])]

    def _judged(self, prompts: Sequence[Any] | None, texts: Sequence[str], rows: Sequence[int],
                kwargs: Mapping[str, Any], n: int) -> list[tuple[int, str, str]]:
        """The LLM judge against each row's `guideline_bank`, reading the problem from `problem` or the prompt."""
        banks = _column(kwargs, ("guideline_bank",), n)
        if banks is None:
            raise InputError("the novelty judge needs a 'guideline_bank' column (the strategies shown to the row)")
        problems = _column(kwargs, ("problem",), n)
        if problems is None and prompts is None:
            raise InputError("the novelty judge needs a 'problem' column or the prompts")
        problem_texts = [str(problems[i]) if problems is not None else _prompt_text(prompts[i]) for i in rows]
        judgments = self.judge.judge(problem_texts, texts, [strategies_of(banks[i]) for i in rows])
        for source, metric in (("unparsed", "tmas/judge_unparsed"), ("judge_failed", "tmas/judge_failed")):
            _log(kwargs, metric, sum(j.source == source for j in judgments))
        return [(j.novelty, j.source, j.reply) for j in judgments]

    def __call__(self, prompts: Sequence[Any] | None, completions: Sequence[Any], completion_ids: Any = None,
                 **kwargs: Any) -> list[float]:
        n = len(completions)
        correct = _correct(completions, kwargs)
        types = rollout_types(kwargs, n) or [BASE] * n
        keys = group_keys(prompts, kwargs, n, self.config.group_column)
        bonuses, p_base, missing = bank_bonuses(keys, types, correct, self.config.beta,
                                                _column(kwargs, ("p_base",), n))
        explore = [i for i, t in enumerate(types) if t == EXPLORE]
        novelty = dict(zip(explore, self.novelty(prompts, completions, explore, kwargs))) if explore else {}
        parts = []
        for i in range(n):
            if types[i] == EXPLORE:
                cls, source, reply = novelty[i]
                parts.append(RewardParts(EXPLORE, keys[i], correct[i], self.config.novelty_value(correct[i], cls),
                                         novelty=cls, novel=self.config.is_novel(cls), novelty_source=source,
                                         judge_reply=reply))
            else:
                bonus = bonuses[i] or 0.0
                parts.append(RewardParts(types[i], keys[i], correct[i], (1.0 if correct[i] else -1.0) + bonus,
                                         p_base=p_base[i], bonus=bonus))
        self.last = tuple(parts)
        _log(kwargs, "tmas/bank_without_base", missing)
        if explore:
            _log(kwargs, "tmas/novel_fraction", sum(parts[i].novel for i in explore) / len(explore))
            _log(kwargs, "tmas/novelty_undetermined", sum(novelty[i][0] == UNDETERMINED for i in explore))
        return [p.reward for p in parts]


def hybrid_reward(beta: float = DEFAULT_BETA, judge: NoveltyJudge | None = None, **config: Any) -> HybridReward:
    """The hybrid reward function for `GRPOTrainer(reward_funcs=...)`; `config`: other HybridRewardConfig fields."""
    return HybridReward(HybridRewardConfig(beta=beta, **config), judge)


def novelty_reward(judge: NoveltyJudge | None = None, **config: Any) -> RewardFn:
    """A reward function giving `explore` rows (every row, without a rollout_type column) the novelty table
    value over (correct, class), and None to the other rows; `config`: HybridRewardConfig fields. Beside
    `correctness_reward`, give a rollout_type column: without one both apply to every row (use HybridReward)."""
    hybrid = HybridReward(HybridRewardConfig(**config), judge)

    def novelty_reward(prompts: Sequence[Any] | None, completions: Sequence[Any], **kwargs: Any
                       ) -> list[float | None]:
        n = len(completions)
        types = rollout_types(kwargs, n)
        rows = [i for i in range(n) if types is None or types[i] == EXPLORE]
        correct = _correct(completions, kwargs)
        out: list[float | None] = [None] * n
        for i, (cls, _, _) in zip(rows, hybrid.novelty(prompts, completions, rows, kwargs) if rows else ()):
            out[i] = hybrid.config.novelty_value(correct[i], cls)
        return out

    return novelty_reward
