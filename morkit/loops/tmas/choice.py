"""The answer so far: which of TMAS's solutions the loop would answer with, and by what rule.
Scores of different verify calls compare only when the verifier declares them absolute; otherwise each
round's best is re-scored with the others in one call (docs/loops/tmas.md, "Which answer")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from morkit.core.errors import ScoreError
from morkit.core.grading import answers_equivalent, majority_groups


@dataclass(frozen=True)
class Choice:
    """The chosen rollout, the score it was chosen by, and the rule: score, rescore, vote, or newest (the newest
    round's best, when a re-score failed)."""

    rollout: Any
    score: float | None
    rule: str

    def to_json(self) -> dict[str, Any]:
        return {"iteration": self.rollout.iteration, "index": self.rollout.index, "score": self.score,
                "rule": self.rule}


def ranked(rollouts: Sequence[Any]) -> list[Any]:
    """Best first: scored before unscored, higher score first, earlier first among equals."""
    return sorted(rollouts, key=lambda r: (r.score is None, -(r.score or 0.0), r.iteration, r.index))


def voted(rollouts: Sequence[Any]) -> Any:
    """The best-ranked rollout carrying the most common final answer (answers compared by equivalence; a tie
    between answers goes to the one whose best rollout ranks first)."""
    order = ranked(rollouts)
    groups = majority_groups([r.answer for r in order])
    return order[groups[0][0]] if groups else order[0]


def agree(rollouts: Sequence[Any]) -> bool:
    """Whether the round has at least two solutions and all of them give the same final answer."""
    answers = [r.answer for r in rollouts]
    return len(answers) >= 2 and all(answers_equivalent(answers[0], a) for a in answers[1:])


def finalists(rollouts: Sequence[Any]) -> list[Any]:
    """Each round's best-scored rollout (its scores share a call, so the round's ranking is sound), round order;
    rounds without a score have none."""
    rounds: dict[int, list[Any]] = {}
    for r in rollouts:
        if r.score is not None:
            rounds.setdefault(r.iteration, []).append(r)
    return [ranked(rounds[t])[0] for t in sorted(rounds)]


def rescored(verifier: Any, problem: str, finals: Sequence[Any], context: Sequence[str]) -> list[float]:
    """The finalists' scores from one `verify` call with `context` as their siblings."""
    verdicts = verifier.verify(problem, [r.text for r in finals], context=list(context))
    if len(verdicts) != len(finals):
        raise ScoreError(f"verifier returned {len(verdicts)} verdicts for {len(finals)} finalists")
    return [float(v.score) for v in verdicts]


def best_of(finals: Sequence[Any], scores: Sequence[float]) -> tuple[Any, float]:
    """The highest-scored finalist (the earlier round among equals) and its score."""
    k = max(range(len(finals)), key=lambda i: (scores[i], -i))
    return finals[k], scores[k]
