"""MoRVerifier: the ensemble a Router chose for a query as a verifier, scoring answers with its member RMs
(filled in a scoring session through the score cache) and ranking them as the Router does."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query, Verdict
from morkit.question_pool.ensembles import Ensemble, Normalizer
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.selection.base import Choice
from morkit.selection.mor import ranked_candidates


@dataclass
class MoRVerifier:
    """A query's chosen RM ensemble (or learned ranker) as a verifier; `rms` maps each member name to a built RM.

    Most callers build one with `mor_verifier(selection, pool, rms)`.

    Args:
        ensemble: The chosen ensemble (members and weights).
        transform: What the weights apply to: `pool-zscore`, `query-zscore` or `features` (a learned ranker's).
        normalizer: The pool's normaliser.
        rms: Member RM name -> built RM; every member must have one.
        reduction: How PRM step scores become one score: `min`, `last`, `mean` or `prod`.
        cache: A ScoreCache member scores go through; None scores every pair.
        scorer: A learned ranker's candidate scorer; None uses the weighted sum.
        rm_names: The pool's RMs in its order (what a learned ranker reads); empty means the members.
        step_rms: The pool's step RMs.
        rm_calls: A running count of (member, answer) pairs that reached a model.
        verify_calls: A running count of `verify` calls.
        name: The verifier's name; empty gives `mor:<ensemble name>`.
        routed: The query the ensemble was chosen for: its domain, tests and other fields go with the question, so a
            member that reads them (code-tests) scores the answers; None sends the question alone.

    Raises:
        InputError: A member has no RM in `rms`.
    """

    ensemble: Ensemble
    transform: str
    normalizer: Normalizer
    rms: Mapping[str, Any]
    reduction: str = "min"
    cache: Any = None
    scorer: Any = None  # a learned ranker's (morkit.selection.base.CandidateScorer); None: the weighted sum
    rm_names: Sequence[str] = ()  # the pool's RMs and step RMs, in its order: what a learned ranker reads
    step_rms: Sequence[str] = ()
    rm_calls: int = 0  # (member, answer) pairs that reached a model, cache misses included
    verify_calls: int = 0
    name: str = field(default="")
    routed: Query | None = None

    def __post_init__(self) -> None:
        missing = [m for m in self.ensemble.members if m not in self.rms]
        if missing:
            raise InputError(f"no RM given for ensemble members {missing}")
        self.name = self.name or f"mor:{self.ensemble.name}"

    @property
    def absolute_scores(self) -> bool:
        """True for a weighted sum under the pool's fixed normaliser of members that score each answer alone;
        a learned ranker (within-call features), `query-zscore`, or a member that reads the siblings
        (`relative_scores`, such as math-consensus) makes the scores comparable only within one call."""
        return (self.scorer is None and self.transform == "pool-zscore"
                and not any(getattr(self.rms[m], "relative_scores", False) for m in self.ensemble.members))

    def verify(self, question: str, answers: Sequence[str], context: Sequence[str] = ()) -> list[Verdict]:
        """Score the answers with the member RMs and combine them as the pool did, on a Router's path: the members'
        scores filled in a scoring session over `rms` (cache first), then the candidates ranked by
        `selection.mor.ranked_candidates`, which refuses a missing member score or a non-finite ensemble score.

        Args:
            question: The question.
            answers: The answers to score.
            context: Other answers scored alongside (one copy of each answer removed), as set-level members
                such as consensus read them; not returned.

        Returns:
            One Verdict per answer: the ensemble's score, and feedback listing each member's score.

        Raises:
            InputError: A member does not apply to the question (its score is missing), or the ensemble's score of
                an answer is not finite.
        """
        texts = list(answers) + _rest(context, answers)
        if not answers:
            return []
        qid = "verify-" + hashlib.sha256(question.encode()).hexdigest()[:12]
        source = self.routed
        query = Query(qid, question, tuple(Candidate(text=t) for t in texts), source.domain if source else None,
                      None, source.tests if source else None, dict(source.extra) if source else {})
        members = self.ensemble.members
        misses_before = self.cache.misses if self.cache is not None else 0
        # a session of the members as placed RMs, through `cache` (none opened, none kept): a Router's fill
        with ScoringSession(ScoringOptions(cache=None), cache=self.cache,
                            placed={m: self.rms[m] for m in members}) as session:
            scored = session.fill([query], [members])[0]
        pair_members = sum(not hasattr(self.rms[m], "score_query") for m in members)
        query_members = len(members) - pair_members
        if self.cache is not None:
            self.rm_calls += (self.cache.misses - misses_before) + query_members * len(texts)
        else:
            self.rm_calls += len(members) * len(texts)
        self.verify_calls += 1
        choice = Choice(self.ensemble, self.transform, 0.0, scorer=self.scorer)
        picked, raw = ranked_candidates(scored, choice, self.normalizer, self.reduction, self.rm_names or members,
                                        self.step_rms)
        out = []
        for i in range(len(answers)):
            value = picked.scores[i]
            listed = ", ".join(f"{m} {raw[i, j]:.3f}" for j, m in enumerate(members))
            out.append(Verdict(value, f"{'learned' if self.scorer else 'ensemble'} score {value:.3f} ({listed})"))
        return out


def _rest(context: Sequence[str], answers: Sequence[str]) -> list[str]:
    """The context less one copy of each answer, so the answers and the rest are the context's multiset when
    the answers come from it (set-level members such as consensus count each copy as a vote)."""
    left = Counter(answers)
    rest = []
    for text in context:
        if left[text] > 0:
            left[text] -= 1
        else:
            rest.append(text)
    return rest


def mor_verifier(selection: Any, pool: Any, rms: Mapping[str, Any], cache: Any = None,
                 routed: Query | None = None) -> MoRVerifier:
    """The verifier for one query's Selection (see morkit.selection.router).

    Args:
        selection: The query's Selection (`Router.select`).
        pool: The pool it was selected from (its normaliser, reduction and RM order are used).
        rms: Member RM name -> built RM, for every member of the chosen ensemble.
        cache: A ScoreCache member scores go through; None scores every pair.
        routed: The query the selection was made for (its domain, tests and other fields reach the members).

    Returns:
        The MoRVerifier of the chosen ensemble (or learned ranker).
    """
    choice = selection.choice
    return MoRVerifier(choice.ensemble, choice.transform, pool.normalizer, rms, pool.config.reduction, cache,
                       choice.scorer, pool.rm_names, pool.step_rms, routed=routed)


def query_verifier(router: Any, query: Query, rms: Any, cache: Any = None) -> tuple[Any, MoRVerifier]:
    """The query's Selection from `router` (a morkit.selection.router.Router) and the MoR verifier of its ensemble
    (member RMs from `rms`)."""
    selection = router.select(query)
    members = {name: rms[name] for name in selection.choice.ensemble.members}
    return selection, mor_verifier(selection, router.pool, members, cache, routed=query)
