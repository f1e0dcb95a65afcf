"""A stacker learned on the pool: listwise (conditional-logit) weights over normalised member scores.

Per pool question, P(candidate) = softmax over the question's candidates of w . x(candidate), and the
weights maximise the probability mass on correct answers (an L2-penalised top-1 objective; PRR's
pairwise view does not reward putting the correct answer above *all* others). The feature transform
and the penalty are chosen by k-fold cross-validation over pool questions, scoring expected best-of-n
accuracy with ties shared; test answers are never seen. A pool larger than `FIT_SAMPLE` questions is
fitted on a seeded sample of that many (a million-question pool's features would not fit in memory, and
22 weights do not need them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from morkit.question_pool.ensembles import Ensemble
from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.prr import best_of_n_matrix
from morkit.selection.base import Choice, Neighbours
from morkit.selection.coverage import covered_rows
from morkit.selection.learners import ConditionalLogit
from morkit.selection.mor import TRANSFORMS, transform

PENALTIES = (0.1, 1.0, 10.0, 100.0)
FIT_SAMPLE = 50_000


@dataclass(frozen=True)
class StackerFit:
    ensemble: Ensemble
    transform: str
    penalty: float
    cv_best_of_n: float  # mean expected best-of-n over the CV folds for the chosen setting
    cv_table: tuple[tuple[str, float, float], ...]  # (transform, penalty, CV best-of-n) for every setting

    def to_json(self) -> dict:
        return {**self.ensemble.to_json(), "transform": self.transform, "penalty": self.penalty,
                "cv_best_of_n": self.cv_best_of_n, "cv_table": [list(row) for row in self.cv_table]}

    @classmethod
    def from_json(cls, obj: dict) -> "StackerFit":
        return cls(Ensemble.from_json(obj), obj["transform"], float(obj["penalty"]), float(obj["cv_best_of_n"]),
                   tuple((str(k), float(p), float(v)) for k, p, v in obj["cv_table"]))


def _fit_weights(x: np.ndarray, correct: np.ndarray, valid: np.ndarray, penalty: float) -> np.ndarray:
    """Conditional-logit weights over the member features (morkit.selection.learners.ConditionalLogit)."""
    return np.asarray(ConditionalLogit.fit(x, correct, valid, penalty).weights)


def _features(pool: QuestionPool, scores: np.ndarray, valid: np.ndarray, members: Sequence[str],
              kind: str) -> np.ndarray:
    """Transformed member scores of the fitted rows (`scores`, `valid`: those rows of the pool's arrays)."""
    cols = [pool.rm_names.index(m) for m in members]
    x = transform(scores[:, :, cols], kind, pool.normalizer, members, valid)
    return np.where(valid[:, :, None] & ~np.isnan(x), x, 0.0)


def _expected_top1(x: np.ndarray, w: np.ndarray, correct: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return best_of_n_matrix((x @ w)[:, :, None], correct, valid)[:, 0]


def with_stored_stacker(pool: QuestionPool) -> QuestionPool:
    """The pool with its full-set stacker fitted and kept in its metadata (saved in pool.json); a pool where no
    question has every RM's scores (one mixing domains) stores none: each RM set is fitted when first used."""
    from dataclasses import replace

    try:
        fit = fit_stacker(pool)
    except LookupError:  # no question has every RM's scores
        return replace(pool, meta={k: v for k, v in pool.meta.items() if k != "stacker"})
    return replace(pool, meta={**pool.meta, "stacker": fit.to_json()})


def fit_stacker(pool: QuestionPool, members: Sequence[str] | None = None, *, folds: int = 5, seed: int = 0,
                transforms: Sequence[str] = TRANSFORMS, penalties: Sequence[float] = PENALTIES) -> StackerFit:
    """Choose transform and penalty by CV over pool questions, then fit on the whole pool: on the questions every
    member scored (morkit.selection.coverage)."""
    members = tuple(members or pool.rm_names)
    rows = covered_rows(pool, members, FIT_SAMPLE, seed)
    if not len(rows):
        raise LookupError(f"no pool question has scores of all of {', '.join(members)} to fit a stacker on")
    scores, correct, valid = (np.asarray(a[rows]) for a in (pool.scores, pool.correct, pool.valid))  # read once
    n = len(rows)
    fold_of = np.random.default_rng(seed).permutation(n) % max(2, min(folds, n))
    table = []
    for kind in transforms:
        x = _features(pool, scores, valid, members, kind)
        for penalty in penalties:
            hits = np.full(n, np.nan)
            for f in np.unique(fold_of):
                train, test = fold_of != f, fold_of == f
                w = _fit_weights(x[train], correct[train], valid[train], penalty)
                hits[test] = _expected_top1(x[test], w, correct[test], valid[test])
            table.append((kind, penalty, float(np.nanmean(hits))))
    kind, penalty, score = max(table, key=lambda row: row[2])
    w = _fit_weights(_features(pool, scores, valid, members, kind), correct, valid, penalty)
    ensemble = Ensemble(members, tuple(float(v) for v in w), "stacked")
    return StackerFit(ensemble, kind, penalty, score, tuple(table))


@dataclass
class Stacker:
    """Selection method: the pool-learned stacker over every available RM (refitted per availability set)."""

    pool: QuestionPool
    folds: int = 5
    name: str = "stacker"
    _fits: dict = field(init=False, repr=False, default_factory=dict)

    def fit_for(self, available: frozenset[str]) -> StackerFit:
        """The fit over the available RMs: stored with the pool for the full set, else fitted once here."""
        fit = self._fits.get(available)
        if fit is None:
            members = tuple(m for m in self.pool.rm_names if m in available)
            if not members:
                raise LookupError("no pool RM can score this query: its candidates lack every pool RM's scores")
            stored = self.pool.meta.get("stacker")
            if stored is not None and tuple(stored["members"]) == members:
                fit = StackerFit.from_json(stored)
            else:
                fit = fit_stacker(self.pool, members, folds=self.folds)
            self._fits[available] = fit
        return fit

    def choose(self, neighbours: Neighbours, available: frozenset[str]) -> Choice:
        fit = self.fit_for(available)
        alternatives = tuple((f"{kind} penalty {penalty:g}", score) for kind, penalty, score in fit.cv_table
                             if (kind, penalty) != (fit.transform, fit.penalty))
        skipped = [m for m in self.pool.rm_names if m not in available]
        return Choice(fit.ensemble, fit.transform, fit.cv_best_of_n, alternatives,
                      {"criterion": "cv_best_of_n", "penalty": fit.penalty, "skipped_members": skipped})
