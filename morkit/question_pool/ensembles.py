"""RM ensembles as data: members, weights, and the per-RM normalisation their scores pass through.

Score = sum_m w_m * norm_m(score_m); the CTTS-MM weightings and the normalisers are in docs/pools.md.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError

log = logging.getLogger(__name__)

WEIGHTINGS = ("linear", "softmax", "sum")
NORMALIZERS = ("zscore", "raw")


@dataclass(frozen=True)
class Ensemble:
    """A weighted combination of RMs by name; `weighting` says how the weights were made."""

    members: tuple[str, ...]
    weights: tuple[float, ...]
    weighting: str = "single"

    @property
    def name(self) -> str:
        joined = "+".join(self.members)
        return joined if self.weighting == "single" else f"{joined}@{self.weighting}"

    def to_json(self) -> dict[str, Any]:
        return {"members": list(self.members), "weights": list(self.weights), "weighting": self.weighting}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Ensemble":
        return cls(tuple(obj["members"]), tuple(float(w) for w in obj["weights"]), obj.get("weighting", "single"))


@dataclass(frozen=True)
class Normalizer:
    """Per-RM affine map (score - shift) / scale, fitted on the pool's candidate scores."""

    kind: str = "zscore"
    shift: Mapping[str, float] = field(default_factory=dict)
    scale: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def fit(cls, kind: str, rm_names: Sequence[str], scores: np.ndarray, valid: np.ndarray) -> "Normalizer":
        """Fit on scores (Q, N, R) over valid candidates; "raw" is the identity."""
        checks.one_of(kind, NORMALIZERS, "normaliser")
        shift, scale = {}, {}
        for r, name in enumerate(rm_names):
            values = scores[:, :, r][valid & ~np.isnan(scores[:, :, r])]
            if kind == "raw" or values.size == 0:
                shift[name], scale[name] = 0.0, 1.0
                continue
            with np.errstate(all="ignore"):  # scores near the float limit overflow: the pool builder names them
                std = float(values.std())
                mean = float(values.mean())
            if std == 0.0:
                log.warning("%s gives every pool candidate the same score; z-scoring leaves it at 0", name)
            shift[name], scale[name] = mean, std if std > 0 else 1.0
        return cls(kind, shift, scale)

    def apply(self, rm_names: Sequence[str], scores: np.ndarray) -> np.ndarray:
        """Normalise (..., R) scores whose last axis follows `rm_names`; NaN stays NaN (an overflow gives an
        infinity, without a warning: callers that store or rank the result check for it)."""
        shift = np.array([self.shift[n] for n in rm_names])
        scale = np.array([self.scale[n] for n in rm_names])
        with np.errstate(over="ignore", invalid="ignore"):
            return (np.asarray(scores, dtype=np.float64) - shift) / scale

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "shift": dict(self.shift), "scale": dict(self.scale)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Normalizer":
        return cls(obj["kind"], {k: float(v) for k, v in obj["shift"].items()},
                   {k: float(v) for k, v in obj["scale"].items()})


def member_weights(weighting: str, quality: Sequence[float], temperature: float = 1.0) -> tuple[float, ...]:
    """Weights of an ensemble's members from their global PRR (`quality`), by the named scheme."""
    q = np.nan_to_num(np.asarray(quality, dtype=np.float64), nan=0.0)
    if weighting == "sum":
        w = np.ones_like(q)
    elif weighting == "linear":
        w = q / q.sum() if q.sum() > 0 else np.full_like(q, 1.0 / q.size)
    elif weighting == "softmax":
        checks.positive(temperature, "softmax temperature")
        with np.errstate(over="ignore"):  # a tiny temperature: the best members share all the weight
            w = np.exp((q - q.max()) / temperature)
        w /= w.sum()
    else:
        checks.one_of(weighting, WEIGHTINGS, "weighting")
    return tuple(float(x) for x in w)


def enumerate_ensembles(rm_names: Sequence[str], global_prr: Mapping[str, float], *, max_members: int = 3,
                        weightings: Sequence[str] = WEIGHTINGS, temperature: float = 1.0) -> list[Ensemble]:
    """Every single RM, then every 2..max_members combination under each weighting, in a stable order.

    An RM without a global PRR (it never scored a question with mixed labels) has no weight to
    give, so it appears only as a single."""
    out = [Ensemble((name,), (1.0,)) for name in rm_names]
    rated = [name for name in rm_names if np.isfinite(global_prr[name])]
    for size in range(2, max_members + 1):
        for members in itertools.combinations(rated, size):
            for weighting in weightings:
                weights = member_weights(weighting, [global_prr[m] for m in members], temperature)
                ensemble = Ensemble(members, weights, weighting)
                if not all(np.isfinite(weights)):
                    raise InputError(f"ensemble {ensemble.name}: its weights are not finite ({weights}, from global "
                                     f"PRR {[global_prr[m] for m in members]}, temperature {temperature!r})")
                out.append(ensemble)
    return out


def weight_matrix(ensembles: Sequence[Ensemble], rm_names: Sequence[str]) -> np.ndarray:
    """(R, E) matrix W with W[r, e] = weight of RM r in ensemble e (0 when not a member)."""
    column = {name: r for r, name in enumerate(rm_names)}
    w = np.zeros((len(rm_names), len(ensembles)))
    for e, ens in enumerate(ensembles):
        for member, weight in zip(ens.members, ens.weights):
            if member not in column:
                raise InputError(f"ensemble {ens.name} uses {member!r}, which has no scores here")
            w[column[member], e] = weight
    return w


def member_slots(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each ensemble's members in the order `combine` adds them: (slots, E) RM columns and their weights
    (weight 0, RM 0 past an ensemble's last member), from W (R, E)."""
    weights = np.asarray(weights, dtype=np.float64)
    used = weights != 0
    per = used.sum(axis=0)
    width = max(1, int(per.max(initial=0)))
    columns, rows = np.nonzero(used.T)  # by ensemble, each one's RMs in row order
    slot = np.arange(len(columns)) - np.repeat(np.cumsum(per) - per, per)  # the k of each (RM, ensemble)
    members = np.zeros((width, weights.shape[1]), dtype=np.int64)
    member_weights = np.zeros((width, weights.shape[1]))
    members[slot, columns] = rows
    member_weights[slot, columns] = weights[rows, columns]
    return members, member_weights


def combine(normalised: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Ensemble scores (..., E) from normalised member scores (..., R) and W (R, E), members added term by term.

    Each term is one member's score gathered and times its weight (rounds exactly as w * x), so a tie stays a
    tie; a NaN member score makes exactly the ensembles that use it NaN."""
    normalised = np.asarray(normalised, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    members, member_weights = member_slots(weights)
    present = ~np.isnan(normalised)
    filled = np.where(present, normalised, 0.0)
    shape = normalised.shape[:-1] + (weights.shape[1],)
    out = np.take(filled, members[0], axis=-1)  # in place from here: no (..., E) temporary per term
    out *= member_weights[0]
    term = np.empty_like(out)
    for k in range(1, len(members)):
        np.take(filled, members[k], axis=-1, out=term)
        term *= member_weights[k]
        out += term
    if not present.all():
        lacking = (~present).reshape(-1, weights.shape[0]).astype(np.float32) @ (weights != 0).astype(np.float32)
        out[lacking.reshape(shape) > 0] = np.nan
    return out
