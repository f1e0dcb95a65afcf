"""Verifiers: score answers to a question, with feedback text; what search and test-time loops consume.

`MoRVerifier` is a per-query Mixture of Reward models: the ensemble a Selector chose, scoring answers
with its member RMs (through the score cache) and combining them as the pool did. Scores are
comparable within one `verify` call; pass the query's other answers as `context` so that set-level
members (answer consensus, per-query normalisation) see the same siblings every time.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from morkit.question_pool.ensembles import Ensemble, Normalizer
from morkit.reward_models.base import reduce_steps
from morkit.selection.mor import mor_scores
from morkit.core.types import Candidate, Query, Verdict


@runtime_checkable
class Verifier(Protocol):
    name: str

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        """One Verdict per answer; `context` answers are scored alongside but not returned."""
        ...


@dataclass
class MoRVerifier:
    """A weighted RM ensemble as a verifier; `rms` maps each member name to a built RM."""

    ensemble: Ensemble
    transform: str
    normalizer: Normalizer
    rms: Mapping[str, Any]
    reduction: str = "min"
    cache: Any = None
    rm_calls: int = 0  # (member, answer) pairs that reached a model, cache misses included
    verify_calls: int = 0
    name: str = field(default="")

    def __post_init__(self) -> None:
        missing = [m for m in self.ensemble.members if m not in self.rms]
        if missing:
            raise ValueError(f"no RM given for ensemble members {missing}")
        self.name = self.name or f"mor:{self.ensemble.name}"

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        from morkit.reward_models.scoring import score_queries

        texts = list(answers) + [c for c in context if c not in answers]
        if not answers:
            return []
        qid = "verify-" + hashlib.sha256(question.encode()).hexdigest()[:12]
        query = Query(qid, question, tuple(Candidate(text=t) for t in texts))
        misses_before = self.cache.misses if self.cache is not None else 0
        scored = score_queries([query], [self.rms[m] for m in self.ensemble.members], cache=self.cache)[0]
        pair_members = sum(not hasattr(self.rms[m], "score_query") for m in self.ensemble.members)
        query_members = len(self.ensemble.members) - pair_members
        if self.cache is not None:
            self.rm_calls += (self.cache.misses - misses_before) + query_members * len(texts)
        else:
            self.rm_calls += len(self.ensemble.members) * len(texts)
        self.verify_calls += 1
        values = mor_scores(scored, self.ensemble, self.transform, self.normalizer, self.reduction)
        out = []
        for i in range(len(answers)):
            members = ", ".join(f"{m} {_value(scored.candidates[i].scores[m], self.reduction):.3f}"
                                for m in self.ensemble.members)
            out.append(Verdict(float(values[i]), f"ensemble score {values[i]:.3f} ({members})"))
        return out


def _value(score: float | tuple[float, ...], reduction: str) -> float:
    return reduce_steps(score, reduction) if isinstance(score, tuple) else float(score)


def mor_verifier(selection: Any, pool: Any, rms: Mapping[str, Any], cache: Any = None) -> MoRVerifier:
    """The verifier for one query's Selection (see morkit.selection.selector)."""
    return MoRVerifier(selection.choice.ensemble, selection.choice.transform, pool.normalizer, rms,
                       pool.config.reduction, cache)


LLM_VERIFIER_SYSTEM = (
    "You check solutions to problems. Read the solution step by step, point out the first mistake if there "
    "is one, and say briefly how to fix it. End with a line 'Score: N/10', where 10 means surely correct."
)
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

    A critique without a readable score gets `unparsed_score` (0.5, undecided) and says so in feedback."""

    llm: Any
    params: Any = None
    system: str = LLM_VERIFIER_SYSTEM
    unparsed_score: float = 0.5
    name: str = "llm-verifier"
    calls: int = 0

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        from morkit.llm.base import SamplingParams

        params = self.params or SamplingParams(temperature=0.0, max_tokens=192)
        conversations = [[{"role": "system", "content": self.system},
                          {"role": "user", "content": f"Problem:\n{question}\n\nSolution:\n{answer}"}]
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


@dataclass
class CombinedVerifier:
    """MoR score plus `weight` x the LLM critic's score; the feedback is the critique, then the MoR line."""

    mor: Any
    critic: Any
    weight: float = 1.0
    name: str = "mor+llm"

    @property
    def rm_calls(self) -> int:
        return getattr(self.mor, "rm_calls", 0)

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        rewards = self.mor.verify(question, answers, context)
        critiques = self.critic.verify(question, answers, context)
        return [Verdict(r.score + self.weight * c.score, f"{c.feedback}\n{r.feedback}".strip())
                for r, c in zip(rewards, critiques)]
