"""Calibrated confidence: a logistic map from scale-free signals of a ranking to "the pick was correct", fitted
on out-of-sample picks; `reliability` bins them for the pool report (docs/selection.md, "Calibrated confidence")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from morkit.selection.features import top_flags

SIGNALS = ("margin", "top-mass", "rm-agreement", "log-candidates")
DEFAULT_BINS = 10


def signals(scores: np.ndarray, members: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(Q, len(SIGNALS)) from a method's candidate scores (Q, N) and the member RMs' raw scores (Q, N, R)."""
    scores = np.asarray(scores, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool) & np.isfinite(scores)
    s = np.where(valid, scores, -np.inf)
    order = np.argsort(-s, axis=1, kind="stable")
    top = np.take_along_axis(s, order[:, :1], axis=1)[:, 0]
    second = np.take_along_axis(s, order[:, 1:2], axis=1)[:, 0] if s.shape[1] > 1 else top
    count = valid.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(valid, s, 0.0).sum(axis=1) / count
        sd = np.sqrt(np.where(valid, (s - mean[:, None]) ** 2, 0.0).sum(axis=1) / count)
        margin = np.where((sd > 0) & np.isfinite(second), (top - second) / sd, 0.0)
        e = np.where(valid, np.exp(s - top[:, None]), 0.0)
        mass = 1.0 / e.sum(axis=1)
    pick = order[:, 0]
    present = ~np.isnan(members) & valid[:, :, None]
    tops, _ = top_flags(members, present)
    picked = np.take_along_axis(tops, pick[:, None, None], axis=1)[:, 0, :]
    voters = present.any(axis=1).sum(axis=1)
    agreement = np.where(voters > 0, picked.sum(axis=1) / np.maximum(voters, 1), 0.0)
    out = np.stack([margin, mass, agreement, np.log(np.maximum(count, 1))], axis=1)
    return np.where(np.isfinite(out), out, 0.0)


@dataclass(frozen=True)
class Calibrator:
    """P(pick correct) = sigmoid(b + c . standardised signals), fitted by penalised maximum likelihood."""

    coef: tuple[float, ...]
    intercept: float
    center: tuple[float, ...]
    spread: tuple[float, ...]
    fitted_on: int  # out-of-sample picks it was fitted on

    @classmethod
    def fit(cls, x: np.ndarray, hits: np.ndarray, penalty: float = 1.0) -> "Calibrator":
        """`hits` in [0, 1]: the expected correctness of each pick (a tie shares it)."""
        from scipy.optimize import minimize

        x, y = np.asarray(x, dtype=np.float64), np.clip(np.asarray(hits, dtype=np.float64), 0.0, 1.0)
        center, spread = x.mean(axis=0), x.std(axis=0)
        spread = np.where(spread > 1e-12, spread, 1.0)
        z = (x - center) / spread

        def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
            u = theta[0] + z @ theta[1:]
            p = 1.0 / (1.0 + np.exp(-u))
            value = np.logaddexp(0.0, u).sum() - (y * u).sum() + penalty * theta[1:] @ theta[1:]
            grad = np.concatenate([[(p - y).sum()], z.T @ (p - y) + 2 * penalty * theta[1:]])
            return float(value), grad

        start = np.zeros(x.shape[1] + 1)
        if len(y):
            rate = np.clip(y.mean(), 1e-3, 1 - 1e-3)
            start[0] = np.log(rate / (1 - rate))
        theta = minimize(loss, start, jac=True, method="L-BFGS-B").x if len(y) else start
        return cls(tuple(float(v) for v in theta[1:]), float(theta[0]), tuple(float(v) for v in center),
                   tuple(float(v) for v in spread), int(len(y)))

    def shifted(self, x: np.ndarray, hits: np.ndarray) -> "Calibrator":
        """This calibrator with its intercept refitted (by maximum likelihood) on some picks, its slopes kept: the
        calibrator conditioned on a subset of picks. One number fitted on tens of picks varies less than the five
        a full fit on them would.

        Args:
            x: (P, len(SIGNALS)) the picks' signals.
            hits: (P,) their expected correctness, in [0, 1].

        Returns:
            The shifted calibrator, bounded for P picks; this one unchanged where P is 0.
        """
        from scipy.optimize import minimize_scalar

        y = np.clip(np.asarray(hits, dtype=np.float64), 0.0, 1.0)
        if not len(y):
            return self
        z = (np.asarray(x, dtype=np.float64) - np.asarray(self.center)) / np.asarray(self.spread)
        slope = z @ np.asarray(self.coef)

        def loss(b: float) -> float:
            return float(np.logaddexp(0.0, slope + b).sum() - (y * (slope + b)).sum())

        bound = 30.0 + float(np.abs(slope).max())  # a shift past this moves no probability any more
        b = minimize_scalar(loss, bounds=(-bound, bound), method="bounded").x
        return Calibrator(self.coef, float(b), self.center, self.spread, int(len(y)))

    def predict(self, x: np.ndarray) -> np.ndarray:
        """P(pick correct), kept within the rule of succession's bounds for `fitted_on` picks: a pool where
        every pick was right does not make a new pick certain."""
        z = (np.asarray(x, dtype=np.float64) - np.asarray(self.center)) / np.asarray(self.spread)
        p = 1.0 / (1.0 + np.exp(-(self.intercept + z @ np.asarray(self.coef))))
        bound = 1.0 / (self.fitted_on + 2)
        return np.clip(p, bound, 1.0 - bound)

    def to_json(self) -> dict[str, Any]:
        return {"signals": list(SIGNALS), "coef": list(self.coef), "intercept": self.intercept,
                "center": list(self.center), "spread": list(self.spread), "fitted_on": self.fitted_on}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Calibrator":
        return cls(tuple(float(v) for v in obj["coef"]), float(obj["intercept"]),
                   tuple(float(v) for v in obj["center"]), tuple(float(v) for v in obj["spread"]),
                   int(obj["fitted_on"]))


def cross_fitted(x: np.ndarray, hits: np.ndarray, fold_of: np.ndarray) -> np.ndarray:
    """Each pick's confidence from a calibrator fitted on the other folds' picks: honest for a diagram."""
    out = np.empty(len(hits))
    for f in np.unique(fold_of):
        test = fold_of == f
        out[test] = Calibrator.fit(x[~test], hits[~test]).predict(x[test])
    return out


def reliability(confidence: np.ndarray, hits: np.ndarray, bins: int = DEFAULT_BINS) -> dict[str, Any]:
    """Equal-width bins of confidence: count, mean confidence and accuracy each; and the expected
    calibration error (count-weighted |accuracy - confidence|)."""
    confidence, hits = np.asarray(confidence, dtype=np.float64), np.asarray(hits, dtype=np.float64)
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        inside = which == b
        if inside.any():
            conf, acc = float(confidence[inside].mean()), float(hits[inside].mean())
            rows.append({"low": b / bins, "high": (b + 1) / bins, "count": int(inside.sum()),
                         "confidence": conf, "accuracy": acc})
    return {"bins": rows, "ece": calibration_error(rows, len(hits)), "picks": int(len(hits))}


def calibration_error(bins: list[dict[str, Any]], picks: int) -> float:
    """Expected calibration error of reliability bins: count-weighted |accuracy - confidence| over `picks`."""
    return sum(b["count"] * abs(b["accuracy"] - b["confidence"]) for b in bins) / max(1, picks)
