"""Candidate features for the learned selector: what each RM says about a candidate, relative to its siblings.

The groups and named feature sets are tabulated in docs/selection.md ("Features")."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from morkit.core import checks
from morkit.question_pool.ensembles import Normalizer
from morkit.question_pool.prr import top_answers
from morkit.question_pool.rows import STEP_REDUCTIONS
from morkit.selection.local import STATS
from morkit.selection.mor import query_zscore

FEATURE_GROUPS = ("query-z", "pool-z", "rank", "top", "tie", "steps", "agreement", "local")
FEATURE_SETS: Mapping[str, tuple[str, ...]] = {
    "query-z": ("query-z",),  # one column per RM: what the single-RM baselines read
    "pool-z": ("pool-z",),  # one column per RM: the pool-standardised scores (the stacker's other transform)
    "scores": ("query-z", "pool-z", "steps"),
    "full": ("query-z", "pool-z", "rank", "top", "tie", "steps", "agreement"),
    "scores+local": ("query-z", "pool-z", "steps", "local"),
    "full+local": FEATURE_GROUPS,
}
"""Named feature sets the selector's cross-validation chooses between."""

_RANK_CHUNK = 4096  # questions per pass of the (Q, N, N, R) rank comparison


def step_values(steps: np.ndarray, reductions: Sequence[str]) -> np.ndarray:
    """(Q, N, P, len(STEP_REDUCTIONS)) step scores -> (Q, N, P * len(reductions)) columns, member-major."""
    picks = [STEP_REDUCTIONS.index(r) for r in reductions]
    steps = np.asarray(steps, dtype=np.float64)
    return steps[:, :, :, picks].reshape(steps.shape[:2] + (-1,))


def _ranks(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    """Each candidate's rank within its query per column, scaled to [-0.5, 0.5] (ties share the mean rank)."""
    out = np.zeros(values.shape)
    for start in range(0, len(values), _RANK_CHUNK):
        v, m = values[start:start + _RANK_CHUNK], present[start:start + _RANK_CHUNK]
        both = m[:, :, None, :] & m[:, None, :, :]
        below = ((v[:, :, None, :] > v[:, None, :, :]) & both).sum(axis=2)
        equal = ((v[:, :, None, :] == v[:, None, :, :]) & both).sum(axis=2) - 1
        count = m.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            scaled = (below + 0.5 * equal) / (count - 1) - 0.5
        out[start:start + _RANK_CHUNK] = np.where(m & (count > 1), scaled, 0.0)
    return out


def top_flags(values: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(top, shared): where a candidate holds its query's top score per column, and how many hold it."""
    top = top_answers(values, present)
    return top, top.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class FeatureSpec:
    """Which features of which members, with the pool-wide statistics and scales fitted on training rows."""

    members: tuple[str, ...]
    step_members: tuple[str, ...]  # members with step scores, in `members` order
    step_reductions: tuple[str, ...]  # the STEP_REDUCTIONS besides the pool's own reduction
    groups: tuple[str, ...]
    pool_z: Normalizer  # over members, then "<step member>@<reduction>" columns
    scale: tuple[float, ...] = ()  # per feature column; () before fitting
    local_centre: tuple[float, ...] = ()  # "local" group: the training rows' mean local PRR, then hit, per member
    local_k: int = 0  # "local" group: neighbours its evidence is read from

    def __post_init__(self) -> None:
        for group in self.groups:
            checks.one_of(group, FEATURE_GROUPS, "feature group")

    @property
    def step_columns(self) -> tuple[str, ...]:
        return tuple(f"{m}@{r}" for m in self.step_members for r in self.step_reductions)

    def names(self) -> list[str]:
        """One name per feature column, "<group>:<member>", in column order."""
        out: list[str] = []
        for group in self.groups:
            if group == "steps":
                out += [f"{kind}:{c}" for kind in ("query-z", "pool-z") for c in self.step_columns]
            elif group == "agreement":
                out += ["agreement:votes", "agreement:mean-query-z"]
            elif group == "local":
                out += [f"local-{stat}:{m}" for stat in STATS for m in self.members] + ["local:best-prr"]
            else:
                out += [f"{group}:{m}" for m in self.members]
        return out

    @property
    def uses_local(self) -> bool:
        return "local" in self.groups

    def raw(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray,
            local: np.ndarray | None = None) -> np.ndarray:
        """Unscaled features (Q, N, F) from member scores (Q, N, len(members)), step scores
        (Q, N, len(step_members), len(STEP_REDUCTIONS)) of the same candidates and, for the "local" group, each
        query's local evidence (Q, 2, len(members))."""
        valid = np.asarray(valid, dtype=bool)
        present = ~np.isnan(scores) & valid[:, :, None]
        zq = query_zscore(scores, valid)
        top, shared = top_flags(scores, present)  # read by three groups: computed once
        parts = []
        for group in self.groups:
            if group == "query-z":
                parts.append(zq)
            elif group == "pool-z":
                parts.append(np.where(present, self.pool_z.apply(self.members, scores), 0.0))
            elif group == "rank":
                parts.append(_ranks(scores, present))
            elif group in ("top", "tie"):
                parts.append((top if group == "top" else top & (shared > 1)).astype(np.float64))
            elif group == "steps":
                parts += self._step_features(steps, valid)
            elif group == "local":
                parts += self._local_features(zq, local)
            else:  # agreement
                voters = np.maximum(present.any(axis=1).sum(axis=-1, keepdims=True), 1)
                votes = (top / np.maximum(shared, 1)).sum(axis=-1, keepdims=True) / voters[:, None, :]
                parts += [votes, zq.sum(axis=-1, keepdims=True) / voters[:, None, :]]
        x = np.concatenate(parts, axis=-1) if parts else np.zeros(scores.shape[:2] + (0,))
        return np.where(valid[:, :, None] & np.isfinite(x), x, 0.0)

    def _step_features(self, steps: np.ndarray | None, valid: np.ndarray) -> list[np.ndarray]:
        if not self.step_columns:
            return []
        values = step_values(steps, self.step_reductions)
        present = ~np.isnan(values) & valid[:, :, None]
        return [query_zscore(values, valid), np.where(present, self.pool_z.apply(self.step_columns, values), 0.0)]

    def _local_features(self, zq: np.ndarray, local: np.ndarray | None) -> list[np.ndarray]:
        if local is None:
            raise ValueError("the 'local' feature group needs each query's local evidence")
        centred = np.nan_to_num(np.asarray(local, np.float64) - np.reshape(self.local_centre, (len(STATS), -1)))
        interactions = [zq * centred[:, None, s, :] for s in range(len(STATS))]
        prr = np.where(np.isnan(local[:, 0, :]), -np.inf, local[:, 0, :])
        pick = np.take_along_axis(zq, np.argmax(prr, axis=1)[:, None, None], axis=2)
        pick = np.where(np.isfinite(prr).any(axis=1)[:, None, None], pick, 0.0)
        return [*interactions, pick]

    def apply(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray,
              local: np.ndarray | None = None) -> np.ndarray:
        """Scaled features (Q, N, F): what a fitted learner reads."""
        return self.raw(scores, steps, valid, local) / np.asarray(self.scale)

    def fitted(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray,
               local: np.ndarray | None = None) -> "FeatureSpec":
        """This spec with each column's scale set to its sd over the valid training candidates (1 if constant)
        and, with the "local" group, the local evidence's centre set to its mean over the training rows."""
        spec = self
        if self.uses_local:
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an RM with no defined value: centre 0
                centre = np.nan_to_num(np.nanmean(np.asarray(local, np.float64), axis=0)).ravel()
            spec = replace(self, local_centre=tuple(float(c) for c in centre))
        x = spec.raw(scores, steps, valid, local)[np.asarray(valid, dtype=bool)]
        sd = x.std(axis=0) if len(x) else np.ones(x.shape[-1])
        return replace(spec, scale=tuple(float(s) if s > 1e-12 else 1.0 for s in sd))

    def to_json(self) -> dict[str, Any]:
        return {"members": list(self.members), "step_members": list(self.step_members),
                "step_reductions": list(self.step_reductions), "groups": list(self.groups),
                "pool_z": self.pool_z.to_json(), "scale": list(self.scale),
                **({"local_centre": list(self.local_centre), "local_k": self.local_k} if self.uses_local else {})}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "FeatureSpec":
        return cls(tuple(obj["members"]), tuple(obj["step_members"]), tuple(obj["step_reductions"]),
                   tuple(obj["groups"]), Normalizer.from_json(obj["pool_z"]), tuple(float(s) for s in obj["scale"]),
                   tuple(float(c) for c in obj.get("local_centre", ())), int(obj.get("local_k", 0)))


def feature_spec(groups: Sequence[str], members: Sequence[str], step_members: Sequence[str], reduction: str,
                 scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray, local: np.ndarray | None = None,
                 local_k: int = 0) -> FeatureSpec:
    """A spec fitted on training rows: `scores` (Q, N, len(members)), `steps` (Q, N, len(step_members), 3),
    `local` (Q, 2, len(members)) read from `local_k` neighbours."""
    step_members = tuple(m for m in members if m in set(step_members)) if "steps" in groups else ()
    reductions = tuple(r for r in STEP_REDUCTIONS if r != reduction) if step_members else ()
    spec = FeatureSpec(tuple(members), step_members, reductions, tuple(groups), Normalizer(),
                       local_k=local_k if "local" in groups else 0)
    columns = list(spec.members)
    values = [np.asarray(scores, dtype=np.float64)]
    if spec.step_columns:
        values.append(step_values(steps, reductions))
        columns += spec.step_columns
    pool_z = Normalizer.fit("zscore", columns, np.concatenate(values, axis=-1), np.asarray(valid, dtype=bool))
    return replace(spec, pool_z=pool_z).fitted(scores, steps, valid, local)
