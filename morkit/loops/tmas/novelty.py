"""Strategy novelty for the TMAS exploration reward: an LLM judge compares a rollout with the guideline bank and
answers the paper's class, 1 (new), 0 (the same as one) or -1 (cannot tell); `answer_novelty` is the older
answer-level proxy. Which words of the judge prompt are the paper's: docs/loops/tmas.md (reward fidelity)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from morkit.core import checks
from morkit.core.errors import InputError, MorkitError, ScoreError
from morkit.core.grading import answers_equivalent, extract_answer
from morkit.llm.base import LLM, SamplingParams

NOVEL, SAME, UNDETERMINED = 1, 0, -1
NOVELTY_CLASSES = (NOVEL, SAME, UNDETERMINED)

# Paper's words and morkit's: see the module docstring.
JUDGE_SYSTEM = ("You judge whether a student's solution to a math problem uses a high-level strategy that is "
                "new compared with strategies already attempted. Judge the approach, not its correctness.")
JUDGE_USER = """<problem>
{problem}
</problem>

<already_attempted_strategies>
{strategies}
</already_attempted_strategies>

<student_solution>
{solution}
</student_solution>

1. **Identify** the high-level strategy used in the student's solution (mathematical framework, \
key structural insight, angle of attack)
2. **Compare** it against each entry in <already_attempted_strategies>
3. **Classify**:
   - **1**: The student's strategy is genuinely different from ALL listed strategies.
   - **0**: The student's strategy is essentially the same as at least one listed strategy.
   - **-1**: Cannot determine the student's strategy (solution too vague/incomplete).

Respond in a JSON code block:
```json
{{
  "identified_strategy": "Brief description of the student's strategy",
  "classification": <1, 0 or -1>
}}
```"""

_NUMBER = r"([+\-\u2212]?\s*[01])(?!\d|\.\d)"
_JSON_CLASS = re.compile(r"[\"']?classification[\"']?\s*:\s*[\"']?\s*" + _NUMBER, re.IGNORECASE)
_LINE_CLASS = re.compile(r"(?:NOVELTY\**\s*[:=]?|CLASS(?:IFICATION|IFY)?\**\s*[:=])\s*\**\s*\(?\s*\**\s*" + _NUMBER,
                         re.IGNORECASE)  # markdown bold around the label or the number is common: **Classification:** 1
_BARE = re.compile(r"^\s*([+\-\u2212]?\s*[01])\s*[.)]?\s*$")


def _as_class(text: str) -> int:
    return int(re.sub(r"\s+", "", text).replace("\u2212", "-"))  # 1, 0 ("-0" too) or -1


def parse_novelty(reply: str) -> int | None:
    """The class in a judge's reply: the last JSON `"classification": <1|0|-1>` (a cut-off JSON block too),
    else the last `NOVELTY:`/`CLASS:` line, else a reply that is only the number; None when there is none."""
    reply = reply or ""
    for pattern in (_JSON_CLASS, _LINE_CLASS):
        found = pattern.findall(reply)
        if found:
            return _as_class(found[-1])
    bare = _BARE.match(reply)
    return _as_class(bare.group(1)) if bare else None


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
    max_tokens: int = 256
    """Room for the paper's JSON reply: a brief strategy description, then the class."""
    solution_chars: int = 4000
    fallback: int = SAME
    """Class of an unparsed reply or a failed call: 0, so no judgement never earns the novelty premium
    (whatever -1 is mapped to)."""
    empty_bank_class: int = NOVEL

    def __post_init__(self) -> None:
        checks.positive_int(self.max_tokens, "NoveltyJudge.max_tokens")
        checks.positive_int(self.solution_chars, "NoveltyJudge.solution_chars")
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
                if len(replies) != len(asked):
                    raise ScoreError(f"the novelty judge's backend returned {len(replies)} replies for "
                                     f"{len(asked)} conversations")
                for i, reply in zip(asked, replies):
                    novelty = parse_novelty(reply)
                    out[i] = (Judgment(novelty, reply) if novelty is not None
                              else Judgment(self.fallback, reply, "unparsed"))
        return [j for j in out if j is not None]


def answer_novelty(solutions: Sequence[str], seen_answers: Sequence[Sequence[str] | None]) -> list[int]:
    """Answer-level alternative to the judge: 1 when a solution's final answer is equivalent to none of its
    row's seen answers, 0 when it is equivalent to one, -1 when it has no final answer (nothing to compare)."""
    if len(seen_answers) != len(solutions):
        raise InputError(f"column 'seen_answers' has {len(seen_answers)} rows for {len(solutions)} completions")
    out = []
    for solution, previous in zip(solutions, seen_answers):
        answer = extract_answer(solution)
        if answer is None:
            out.append(UNDETERMINED)
        else:
            out.append(SAME if any(answers_equivalent(answer, s) for s in previous or ()) else NOVEL)
    return out
