"""Strategy novelty for the TMAS exploration reward: an LLM judge compares a rollout with the guideline bank.

The guideline bank holds the high-level strategies already tried on a problem; an exploring rollout is asked
for a different one. The judge reads the problem, the bank's strategies and the rollout, and answers one
class: 1 (a strategy not in the bank), 0 (a variant of a bank strategy: partly new) or -1 (a bank strategy
repeated). With an empty bank there is nothing to repeat: the class is `empty_bank_class` and no call is made.
A reply without a class (small judges ramble) or a failed judge call gets `fallback`, and is counted.

`answer_novelty` is the older, answer-level proxy kept as a named fallback: 1 when the final answer is not
equivalent to any previously seen answer, else -1. It does not look at strategies at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from morkit.core.errors import InputError, MorkitError
from morkit.core.grading import answers_equivalent, extract_answer
from morkit.llm.base import LLM, SamplingParams

NOVEL, VARIANT, REPEAT = 1, 0, -1
NOVELTY_CLASSES = (NOVEL, VARIANT, REPEAT)

# Written for morkit, not the paper's judge prompt (which was not available when this was written).
JUDGE_SYSTEM = (
    "You compare the high-level strategy of a solution to a math problem with strategies that were already "
    "tried. Ignore wording, numbers and whether the answer is right; judge only the approach. Reply with one "
    "line:\nNOVELTY: 1 if the solution's strategy is not among the listed ones,\nNOVELTY: 0 if it is a variant "
    "of a listed strategy (partly new),\nNOVELTY: -1 if it repeats a listed strategy.")
JUDGE_USER = "Problem:\n{problem}\n\nStrategies already tried:\n{strategies}\n\nSolution:\n{solution}"

_CLASS = re.compile(r"NOVELTY\s*[:=]?\s*\(?\s*([+\-\u2212]?\s*[01])\b", re.IGNORECASE)
_BARE = re.compile(r"^\s*([+\-\u2212]?\s*[01])\s*[.)]?\s*$")


def parse_novelty(reply: str) -> int | None:
    """The class in a judge's reply: the last `NOVELTY: <1|0|-1>`, else a reply that is only the number; None
    when there is neither."""
    found = _CLASS.findall(reply or "")
    if not found:
        bare = _BARE.match(reply or "")
        found = [bare.group(1)] if bare else []
    if not found:
        return None
    return int(re.sub(r"\s+", "", found[-1]).replace("\u2212", "-"))  # 1, 0 ("-0" too) or -1


def strategies_of(value: Any) -> tuple[str, ...]:
    """A row's guideline bank as strategies: a GuidelineBank, its `to_json()` dict, a list of strings, or one
    string with a strategy a line (leading '- ' dropped; '(none yet)' is empty)."""
    if value is None:
        return ()
    if hasattr(value, "strategies"):
        value = value.strategies
    elif isinstance(value, Mapping):
        value = value.get("strategies") or ()
    if isinstance(value, str):
        lines = [re.sub(r"^\s*[-*\u2022]\s*", "", line).strip() for line in value.splitlines()]
        value = [line for line in lines if line and line.lower() != "(none yet)"]
    if not isinstance(value, (list, tuple)):
        raise InputError(f"a guideline bank must be a list of strategies or a string, got {type(value).__name__}")
    return tuple(str(s).strip() for s in value if str(s).strip())


@dataclass(frozen=True)
class Judgment:
    """One rollout's novelty class, the judge's reply ('' when no call was made) and how the class was set:
    'judge', 'empty_bank', 'unparsed' or 'judge_failed' (the last two carry the fallback class)."""

    novelty: int
    reply: str = ""
    source: str = "judge"


@dataclass(frozen=True)
class NoveltyJudge:
    """An LLM judge of strategy novelty against a guideline bank (one batched, greedy `chat` call per use)."""

    llm: LLM
    max_tokens: int = 48
    solution_chars: int = 4000
    fallback: int = VARIANT
    empty_bank_class: int = NOVEL

    def __post_init__(self) -> None:
        for name in ("fallback", "empty_bank_class"):
            if getattr(self, name) not in NOVELTY_CLASSES:
                raise InputError(f"NoveltyJudge.{name} must be one of 1, 0, -1, got {getattr(self, name)!r}")

    def conversation(self, problem: str, strategies: Sequence[str], solution: str) -> list[dict[str, str]]:
        listed = "\n".join(f"- {s}" for s in strategies)
        text = solution if len(solution) <= self.solution_chars else solution[: self.solution_chars] + " ..."
        return [{"role": "system", "content": JUDGE_SYSTEM},
                {"role": "user", "content": JUDGE_USER.format(problem=problem.strip(), strategies=listed,
                                                              solution=text.strip())}]

    def judge(self, problems: Sequence[str], solutions: Sequence[str],
              banks: Sequence[Sequence[str]]) -> list[Judgment]:
        """One Judgment per solution, in order; rows with an empty bank make no call."""
        if not len(problems) == len(solutions) == len(banks):
            raise InputError(f"{len(problems)} problems, {len(solutions)} solutions and {len(banks)} banks")
        out: list[Judgment | None] = [None] * len(solutions)
        asked = []
        for i, (problem, solution, bank) in enumerate(zip(problems, solutions, banks)):
            if bank:
                asked.append(i)
            else:
                out[i] = Judgment(self.empty_bank_class, source="empty_bank")
        if asked:
            conversations = [self.conversation(problems[i], banks[i], solutions[i]) for i in asked]
            params = SamplingParams(n=1, temperature=0.0, max_tokens=self.max_tokens)
            try:
                replies = [c.texts[0] if c.texts else "" for c in self.llm.chat(conversations, params)]
            except MorkitError as err:
                reason = f"{type(err).__name__}: {err}"
                for i in asked:
                    out[i] = Judgment(self.fallback, reason, "judge_failed")
            else:
                for i, reply in zip(asked, replies):
                    novelty = parse_novelty(reply)
                    out[i] = (Judgment(novelty, reply) if novelty is not None
                              else Judgment(self.fallback, reply, "unparsed"))
        return [j for j in out if j is not None]


def answer_novelty(solutions: Sequence[str], seen_answers: Sequence[Sequence[str] | None]) -> list[int]:
    """Answer-level fallback: 1 when a solution's final answer is equivalent to none of its row's seen answers,
    else -1 (no final answer brings nothing new: -1)."""
    if len(seen_answers) != len(solutions):
        raise InputError(f"column 'seen_answers' has {len(seen_answers)} rows for {len(solutions)} completions")
    out = []
    for solution, previous in zip(solutions, seen_answers):
        answer = extract_answer(solution)
        fresh = answer is not None and not any(answers_equivalent(answer, s) for s in previous or ())
        out.append(NOVEL if fresh else REPEAT)
    return out
