"""Ranking a query's candidates with a chosen ensemble: MoR scores, the pick (ties broken by a seeded shuffle)
and its calibrated confidence -> Ranking."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.pool import QuestionPool
from morkit.selection.base import Choice
from morkit.selection.calibration import PickCalibrator
from morkit.selection.chooser import Selection
from morkit.selection.mor import choice_scores, member_matrix, pick_best


@dataclass(frozen=True)
class Ranking:
    """A query's best candidate under its selection, with the calibrated probability that it is correct;
    `abstain` is set when the caller asked to flag picks below a confidence."""

    selection: Selection
    scores: tuple[float, ...]
    best_index: int | None  # None: the query had no candidates
    tied: tuple[int, ...]
    confidence: float = float("nan")
    abstain: bool | None = None

    def to_json(self) -> dict[str, Any]:
        sel = self.selection.to_json()
        out = {"id": self.selection.query_id, "best_index": self.best_index, "ensemble": sel["ensemble"],
               "scores": list(self.scores), "tied": list(self.tied), "method": self.selection.method,
               "confidence": round(self.confidence, 6) if np.isfinite(self.confidence) else None}
        details = self.selection.choice.details
        if "learner" in details:
            out["learner"] = details["learner"]
        if details.get("fallback"):
            out["fallback"] = details["fallback"]
        if self.selection.missing_rms:
            out["missing_rms"] = list(self.selection.missing_rms)
            out["skipped_rms"] = dict(self.selection.skipped_rms)
        if self.abstain is not None:
            out["abstain"] = self.abstain
        return out


class Ranker:
    """Scores candidates under a selection against one pool and calibrates the pick."""

    def __init__(self, pool: QuestionPool, calibration: PickCalibrator):
        self.pool = pool
        self.calibration = calibration

    def candidate_scores(self, query: Query, choice: Choice, raw: np.ndarray | None = None) -> np.ndarray:
        """The choice's score for each of the query's candidates; the member scores must be cached on them.
        `raw`: the query's member_matrix over the pool's RMs, if already read. Member scores the pool's
        normaliser cannot standardise are refused whatever the method (the pool refuses to hold them too)."""
        lacking = [m for m in choice.ensemble.members if any(m not in c.scores for c in query.candidates)]
        if lacking:
            raise InputError(f"query {query.id!r}: candidates lack scores of {', '.join(lacking)}; "
                             "score them first (morkit score) or let rank run the registered RMs")
        pool = self.pool
        raw = member_matrix(query, pool.rm_names, pool.config.reduction) if raw is None else raw
        scores = choice_scores(query, choice, pool.normalizer, pool.config.reduction, pool.rm_names, pool.step_rms,
                               raw)
        members = list(choice.ensemble.members)
        with np.errstate(all="ignore"):
            standardised = pool.normalizer.apply(members, raw[:, [pool.rm_names.index(m) for m in members]])
        if not np.isfinite(scores).all() or np.isinf(standardised).any():
            raise InputError(f"query {query.id!r}: the ensemble {', '.join(members)} gives "
                             "non-finite scores; its candidates' scores of these RMs are too large for the pool's "
                             "normaliser")
        return scores

    def rank_selected(self, query: Query, selection: Selection, abstain_below: float | None = None) -> Ranking:
        """MoR scores of the query's candidates under a selection, the pick and its confidence; a query without
        candidates has no pick (best_index None), as `score` passes it through with no scores."""
        if not query.candidates:
            return Ranking(selection, (), None, (), float("nan"), None if abstain_below is None else True)
        if not selection.choice.ensemble.members:  # no pool RM applies: every candidate ties, nothing to trust
            picked = pick_best(query.id, np.zeros(len(query.candidates)))
            return Ranking(selection, picked.scores, picked.best_index, picked.tied, float("nan"),
                           None if abstain_below is None else True)
        raw = member_matrix(query, self.pool.rm_names, self.pool.config.reduction)  # read once, used twice
        scores = self.candidate_scores(query, selection.choice, raw)
        picked = pick_best(query.id, scores)
        confidence = self.calibration.confidence(query, selection.choice, scores, raw)
        abstain = None if abstain_below is None else bool(confidence < abstain_below)
        return Ranking(selection, picked.scores, picked.best_index, picked.tied, confidence, abstain)
