"""LLMVerifier: an LLM critic whose feedback is its critique and whose score is parsed, never evaluated."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Verdict
from morkit.llm.base import SamplingParams

LLM_VERIFIER_SYSTEM = (
    "You check solutions to problems. Read the solution step by step, point out the first mistake if there "
    "is one, and say briefly how to fix it. End with a line 'Score: N/10', where 10 means surely correct."
)
LLM_VERIFIER_USER = "Problem:\n{question}\n\nSolution:\n{answer}"
"""The critic's user message: `{question}` and `{answer}` are filled in (str.format: other braces doubled)."""
_SCORE_LINE = re.compile(r"(?i)score\s*[:=]\s*(\d+(?:\.\d+)?)\s*(?:/\s*(\d+(?:\.\d+)?))?")


def parse_llm_score(text: str) -> float | None:
    """The last 'Score: N/10' (or N/M, or N meaning N/10) in a critique, in [0, 1]; None if absent."""
    matches = _SCORE_LINE.findall(text)
    if not matches:
        return None
    value, scale = matches[-1]
    score = float(value) / (float(scale) if scale and float(scale) > 0 else 10.0)
    return min(max(score, 0.0), 1.0)


@dataclass
class LLMVerifier:
    """An LLM critic: feedback text per answer and a score parsed from its 'Score: N/10' line.

    A critique without a readable score gets `unparsed_score` (0.5, undecided) and says so in feedback.

    Args:
        llm: The critic LLM (an object with `chat(conversations, params)`).
        params: Sampling parameters for the critiques; None is temperature 0 and 192 tokens.
        system: The system prompt asking for a critique that ends in 'Score: N/10'.
        user: The user message, a str.format template with `{question}` and `{answer}`.
        unparsed_score: The score of a critique without a readable score.
        name: The verifier's name.
        calls: A running count of critiques asked for.

    Raises:
        InputError: `user` is not a str.format template naming exactly `{question}` and `{answer}`.
    """

    llm: Any
    params: Any = None
    system: str = LLM_VERIFIER_SYSTEM
    user: str = LLM_VERIFIER_USER
    unparsed_score: float = 0.5
    name: str = "llm-verifier"
    calls: int = 0
    absolute_scores: ClassVar[bool] = True  # each answer is read alone and scored out of 10

    def __post_init__(self) -> None:
        try:  # a stray brace or a missing field fails here, not at the first critique mid-loop
            named = {f for _, f, _, _ in string.Formatter().parse(self.user) if f is not None}
        except (TypeError, ValueError) as exc:
            raise InputError(f"LLMVerifier.user is not a str.format template ({exc}); double a literal brace") from None
        if named != {"question", "answer"}:
            raise InputError(f"LLMVerifier.user must name exactly {{question}} and {{answer}}, got "
                             f"{sorted(named) or 'no field'} (a literal brace is doubled)")

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        """Ask the LLM to critique each answer alone; the score is parsed from its 'Score: N/10' line.

        Args:
            question: The problem.
            answers: The solutions to critique, one conversation each.
            context: Unused: each answer is read alone.

        Returns:
            One Verdict per answer: the parsed score in [0, 1] (`unparsed_score` when absent), and the critique.
        """
        params = self.params or SamplingParams(temperature=0.0, max_tokens=192)
        conversations = [[{"role": "system", "content": self.system},
                          {"role": "user", "content": self.user.format(question=question, answer=answer)}]
                         for answer in answers]
        completions = self.llm.chat(conversations, params) if conversations else []
        self.calls += len(conversations)
        out = []
        for completion in completions:
            critique = completion.texts[0].strip() if completion.texts else ""
            score = parse_llm_score(critique)
            if score is None:
                out.append(Verdict(self.unparsed_score, critique + "\n[no readable score: counted as undecided]"))
            else:
                out.append(Verdict(score, critique))
        return out
