"""Mixture of Reward models: a chosen ensemble's score for each of a query's candidates, from their cached
member scores through the pool's normaliser or a per-query z-score (docs/selection.md, "MoR scoring")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.ensembles import Ensemble, Normalizer, combine
from morkit.reward_models.base import reduce_steps

TRANSFORMS = ("pool-zscore", "query-zscore")


def member_matrix(query: Query, rm_names: Sequence[str], reduction: str = "min") -> np.ndarray:
    """(N, R) raw member scores from the query's cached scores; NaN where a candidate lacks one."""
    out = np.full((len(query.candidates), len(rm_names)), np.nan)
    for i, candidate in enumerate(query.candidates):
        for r, name in enumerate(rm_names):
            value = candidate.scores.get(name)
            if value is not None:
                out[i, r] = reduce_steps(value, reduction) if isinstance(value, tuple) else float(value)
    return out


def available_members(query: Query, rm_names: Sequence[str]) -> set[str]:
    """The RMs with a cached score on every candidate of the query."""
    return {name for name in rm_names if query.candidates and all(name in c.scores for c in query.candidates)}


def query_zscore(values: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Standardise each member over the candidates of each query: (..., N, R) -> same shape.

    Invalid (padding) or missing entries become 0, as does a member constant within the query."""
    values = np.asarray(values, dtype=np.float64)
    mask = ~np.isnan(values)
    if valid is not None:
        mask &= np.asarray(valid, dtype=bool)[..., None]
    count = mask.sum(axis=-2, keepdims=True)
    filled = np.where(mask, values, 0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # huge scores: refused later
        mean = filled.sum(axis=-2, keepdims=True) / count
        var = (np.where(mask, values - mean, 0.0) ** 2).sum(axis=-2, keepdims=True) / count
        z = (values - mean) / np.sqrt(var)
    return np.where(mask & (var > 0), z, 0.0)


def transform(values: np.ndarray, kind: str, normalizer: Normalizer, rm_names: Sequence[str],
              valid: np.ndarray | None = None) -> np.ndarray:
    """Member scores (..., N, R) in the feature space an ensemble's weights apply to."""
    checks.one_of(kind, TRANSFORMS, "transform")
    if kind == "pool-zscore":
        return normalizer.apply(rm_names, values)
    return query_zscore(values, valid)


@dataclass(frozen=True)
class ScoredQuery:
    scores: tuple[float, ...]
    best_index: int
    tied: tuple[int, ...]  # every candidate sharing the top score (best_index is one of them)


def ensemble_scores(raw: np.ndarray, ensemble: Ensemble, transform_kind: str, normalizer: Normalizer,
                    valid: np.ndarray | None = None) -> np.ndarray:
    """The ensemble's score (..., N) from its members' raw scores (..., N, M); NaN where a member score is missing."""
    features = transform(raw, transform_kind, normalizer, ensemble.members, valid)
    if transform_kind == "query-zscore":
        features = np.where(np.isnan(raw), np.nan, features)
    return combine(features, np.asarray(ensemble.weights, dtype=np.float64)[:, None])[..., 0]


def scores_under(choice: Any, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray,
                 normalizer: Normalizer, rm_names: Sequence[str], step_rms: Sequence[str]) -> np.ndarray:
    """A selection Choice's (Q, N) candidate scores from arrays: member scores (Q, N, R) in `rm_names` order and
    step scores (Q, N, P, 3) in `step_rms` order. Its own scorer (a learned ranker) reads them all; otherwise
    its ensemble's weighted sum of its members' columns."""
    with np.errstate(all="ignore"):
        if choice.scorer is not None:
            return choice.scorer.scores(scores, steps, valid, rm_names, step_rms)
        members = np.asarray(scores)[..., [list(rm_names).index(m) for m in choice.ensemble.members]]
        return ensemble_scores(members, choice.ensemble, choice.transform, normalizer, valid)


def choice_scores(query: Query, choice: Any, normalizer: Normalizer, reduction: str, rm_names: Sequence[str],
                  step_rms: Sequence[str], raw: np.ndarray | None = None) -> np.ndarray:
    """`scores_under` for one query's candidates; `raw`: its member_matrix over `rm_names`, if already read."""
    from morkit.question_pool.rows import step_matrix

    raw = member_matrix(query, rm_names, reduction) if raw is None else raw
    steps = step_matrix(query, step_rms)[None] if choice.scorer is not None else None
    valid = np.ones((1, len(query.candidates)), dtype=bool)
    return scores_under(choice, raw[None], steps, valid, normalizer, rm_names, step_rms)[0]


def ranked_candidates(query: Query, choice: Any, normalizer: Normalizer, reduction: str, rm_names: Sequence[str],
                      step_rms: Sequence[str]) -> tuple[ScoredQuery, np.ndarray]:
    """The choice's checked score of each of the query's candidates and the pick (`pick_best`), with the
    candidates' raw member scores (N, M) that calibrate it. Member scores the normaliser cannot standardise are
    refused whatever the method (a pool refuses to hold them too). An ensemble without members (no pool RM applies
    to the query) scores every candidate 0, so all tie. `Router.rank` and the MoR verifier both score with it.

    Args:
        query: The query; its candidates must carry the scores of the choice's members.
        choice: A selection method's pick (its ensemble, transform and scorer).
        normalizer: The pool's normaliser.
        reduction: How PRM step scores become one score.
        rm_names: The pool's RMs, in its order (what a learned scorer reads).
        step_rms: The pool's step RMs.

    Returns:
        (the scored pick, the members' raw scores in the ensemble's order).

    Raises:
        InputError: A candidate lacks a member's score, or a member score cannot be standardised.
    """
    members = list(choice.ensemble.members)
    if not members:
        return pick_best(query.id, np.zeros(len(query.candidates))), np.zeros((len(query.candidates), 0))
    lacking = [m for m in members if any(m not in c.scores for c in query.candidates)]
    if lacking:
        raise InputError(f"query {query.id!r}: candidates lack scores of {', '.join(lacking)}; "
                         "score them first (morkit score) or let rank run the registered RMs")
    raw = member_matrix(query, rm_names, reduction)
    scores = choice_scores(query, choice, normalizer, reduction, rm_names, step_rms, raw)
    member_raw = raw[:, [list(rm_names).index(m) for m in members]]
    with np.errstate(all="ignore"):
        standardised = normalizer.apply(members, member_raw)
    if not np.isfinite(scores).all() or np.isinf(standardised).any():
        raise InputError(f"query {query.id!r}: the ensemble {', '.join(members)} gives non-finite scores; its "
                         "candidates' scores of these RMs are too large for the pool's normaliser")
    return pick_best(query.id, scores), member_raw


def pick_best(query_id: str, scores: np.ndarray) -> ScoredQuery:
    """The top candidate; a tie is broken by a seeded shuffle keyed on the query id, never by position."""
    import hashlib

    scores = np.asarray(scores, dtype=np.float64)
    if np.isnan(scores).any():
        raise InputError(f"query {query_id!r}: some candidates have no ensemble score")
    tied = np.flatnonzero(scores == scores.max())
    seed = int.from_bytes(hashlib.sha256(query_id.encode()).digest()[:8], "little")
    best = int(np.random.default_rng(seed).choice(tied))
    return ScoredQuery(tuple(float(s) for s in scores), best, tuple(int(i) for i in tied))
