"""Repeated grouped cross-validation of the learned selector's rows, and the margin rule that picks one
(docs/selection.md, "Repeated cross-validation and the margin rule")."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

CV_THREADS = 2
"""Folds fitted at once, in threads: LightGBM and NumPy release the GIL while they work, and every fit is
single-threaded and seeded, so the numbers are those of one fold at a time (about 1.6x faster on 2 cores). Two
bound the extra memory to one more fold's feature matrices."""

CVRow = tuple[str, float, float]
"""(label, mean out-of-fold best-of-n over repeats and questions, sd of the per-fold means over repeats x folds)."""


@dataclass(frozen=True)
class Folds:
    """Fold assignments of Q questions, one row per repeat."""

    of: np.ndarray  # (repeats, Q) int

    @classmethod
    def dealt(cls, questions: int, folds: int, seed: int, repeats: int, groups: np.ndarray | None = None) -> "Folds":
        """`repeats` seeded deals into `folds` folds; rows of one group (a repeated question text) share a fold."""
        ids = np.arange(questions) if groups is None else np.unique(np.asarray(groups), return_inverse=True)[1]
        n = int(ids.max()) + 1 if questions else 0
        k = max(2, min(folds, n))
        return cls(np.stack([(np.random.default_rng(seed + r).permutation(n) % k)[ids]
                             for r in range(max(1, repeats))]))

    @property
    def repeats(self) -> int:
        return len(self.of)

    def splits(self) -> list[tuple[int, np.ndarray]]:
        """(repeat, training mask) for every fold of every repeat; the held-out rows are the rest."""
        return [(r, self.of[r] != f) for r in range(self.repeats) for f in np.unique(self.of[r])]


@dataclass
class CVResult:
    """Out-of-fold evidence of every row: hits (repeats, Q) and scores (repeats, Q, N) by label, and the
    settings behind each row (a blend has several; PRES and the singles one)."""

    folds: Folds
    hits: dict[str, np.ndarray]
    scores: dict[str, np.ndarray]
    candidates: dict[str, list[Any]]

    def add(self, label: str, scores: np.ndarray, hits: np.ndarray, settings: list[Any]) -> None:
        self.scores[label], self.hits[label], self.candidates[label] = scores, hits, settings

    def row(self, label: str) -> CVRow:
        hits = self.hits[label]
        per_fold = [float(np.nanmean(hits[r][self.folds.of[r] == f]))
                    for r in range(self.folds.repeats) for f in np.unique(self.folds.of[r])]
        return label, float(np.nanmean(hits)), float(np.std(per_fold, ddof=1))

    def table(self) -> list[CVRow]:
        return [self.row(label) for label in self.hits]


def out_of_fold(settings: Sequence[Any], folds: Folds, n_candidates: int,
                fit_fold: Callable[[int, np.ndarray], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """(repeats, Q, N) out-of-fold scores of every setting's label; `fit_fold(repeat, train mask)` returns each
    label's scores of the held-out rows."""
    from morkit.runtime.threads import one_blas_thread

    q = folds.of.shape[1]
    out = {s.label: np.full((folds.repeats, q, n_candidates), np.nan) for s in settings}
    splits = folds.splits()
    workers = min(CV_THREADS, len(splits), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else os.cpu_count() or 1)
    if workers > 1:  # BLAS on one thread throughout: the folds are the parallelism (and the logit's limit nests)
        with one_blas_thread(), ThreadPoolExecutor(workers) as pool:
            fitted = list(pool.map(lambda split: fit_fold(*split), splits))
    else:
        fitted = [fit_fold(repeat, train) for repeat, train in splits]
    for (repeat, train), scores_of in zip(splits, fitted):
        for label, scores in scores_of.items():
            out[label][repeat, ~train] = scores
    return out


def pick(result: CVResult, learned_labels: Sequence[str], baseline_labels: Sequence[str]) -> str:
    """The row CV picks: the best baseline (rule) by CV mean, unless the best row is learned and beats it by more
    than `margin(len(learned_labels))` standard errors of their paired per-question difference."""
    table = {label: mean for label, mean, _ in result.table()}
    best = max(table, key=lambda label: table[label])  # the first (simplest) of equal rows
    if not baseline_labels or best in baseline_labels:
        return best
    baseline = max(baseline_labels, key=lambda label: table[label])
    diff = np.nanmean(result.hits[best] - result.hits[baseline], axis=0)
    diff = diff[~np.isnan(diff)]
    if len(diff) < 2:
        return baseline
    se = diff.std(ddof=1) / np.sqrt(len(diff))
    return best if diff.mean() > margin(len(learned_labels)) * se else baseline


def margin(learned_rows: int) -> float:
    """How many standard errors the best of `learned_rows` learned CV rows must beat the best rule by: the
    one-standard-error rule's false-pick rate P(Z > 1) shared among them (Bonferroni; 1 row: 1, 28 rows: 2.5)."""
    from statistics import NormalDist

    normal = NormalDist()
    return -normal.inv_cdf(normal.cdf(-1.0) / max(1, learned_rows))
