"""The learned selector, morkit's default: a candidate ranker over rich RM features, chosen by CV on the pool.

Each setting in SETTINGS (a learner from LEARNERS, a feature set from FEATURE_SETS, the learner's
parameters) is scored by grouped k-fold cross-validation over pool questions (a question's candidates
never straddle folds; features' pool statistics and scales are refitted on each training part), as
expected best-of-n accuracy with ties shared; so is a blend of the best setting of each (learner,
feature set) family, their scores standardised per query and summed (averaging diverse rankers
lowers their variance); and so is every single RM on its own. A learned model is kept only when it
beats the best single RM by more than one standard error of their paired difference, corrected for having
picked the best of many rows (`margin`), so a pool whose evidence does not support learning keeps its
best RM. The pick is refitted on the whole pool. Its
out-of-fold picks also fit the confidence calibrator and give the pool report its reliability diagram
and per-domain gains. A pool with fewer than MIN_MIXED questions holding both a right and a wrong answer
is too small to learn from: the method falls back to PRES and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from morkit.question_pool.ensembles import Ensemble
from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.prr import best_of_n_matrix
from morkit.selection import confidence as conf
from morkit.selection.coverage import covered_rows
from morkit.selection.features import FEATURE_SETS, FeatureSpec, feature_spec
from morkit.selection.learners import LEARNERS, mixed
from morkit.selection.mor import query_zscore

MIN_MIXED = 20
LEARN_SAMPLE = 20_000
"""Pools larger than this many questions learn from a seeded sample of them (features are ~100 per RM-candidate)."""


@dataclass(frozen=True)
class Setting:
    """One learner configuration the cross-validation weighs."""

    learner: str
    features: str
    params: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""  # shown instead of the generated label (a single RM's baseline is named by its RM)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        shown = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.params.items())
        return f"{self.learner} [{self.features}]" + (f" ({shown})" if shown else "")

    def to_json(self) -> dict[str, Any]:
        return {"learner": self.learner, "features": self.features, "params": dict(self.params), "name": self.name}


SETTINGS = (
    *(Setting("logit", "scores", {"penalty": p}) for p in (0.3, 1.0, 3.0, 10.0, 30.0)),
    *(Setting("logit", "full", {"penalty": p}) for p in (1.0, 3.0, 10.0, 30.0)),
    Setting("lambdarank", "full", {"rounds": 100, "learning_rate": 0.05, "leaves": 7}),
    Setting("lambdarank", "full", {"rounds": 200, "learning_rate": 0.03, "leaves": 4}),
)

STACKER_SETTINGS = tuple(Setting("logit", features, {"penalty": p}) for features in ("query-z", "pool-z")
                         for p in (0.1, 1.0, 10.0, 100.0))
"""The former stacker as settings: a conditional logit over one normalised score per RM (the query's or the
pool's z-score) at each of its penalties. Not in SETTINGS: added to the table on 9 rewardmath pools, CV never
picked one (bench/selection_stacker.py: a richer logit won, or where a stacker row scored best, on weak RMs,
the margin rule kept the best single RM); the "stacker" method name is the learned selector restricted to
them (morkit.selection.learned_method.stacker)."""


class TooFewMixed(LookupError):
    """The pool has too few questions with both a right and a wrong answer to learn a ranker from."""


@dataclass(frozen=True)
class PoolSlice:
    """The arrays of some pool rows for some members: what features are computed from."""

    scores: np.ndarray  # (Q, N, len(members))
    steps: np.ndarray | None  # (Q, N, len(step members), 3)
    correct: np.ndarray
    valid: np.ndarray
    domains: tuple[str, ...]

    @classmethod
    def of(cls, pool: QuestionPool, rows: np.ndarray, members: Sequence[str]) -> "PoolSlice":
        cols = [pool.rm_names.index(m) for m in members]
        steps = None
        if pool.steps is not None:
            steps = np.asarray(pool.steps[rows])[:, :, [pool.step_rms.index(m) for m in members
                                                        if m in pool.step_rms]]
        return cls(np.asarray(pool.scores[rows])[:, :, cols], steps, np.asarray(pool.correct[rows]),
                   np.asarray(pool.valid[rows]), tuple(pool.questions[r].domain for r in rows))

    def part(self, keep: np.ndarray) -> "PoolSlice":
        return PoolSlice(self.scores[keep], None if self.steps is None else self.steps[keep], self.correct[keep],
                         self.valid[keep], tuple(np.asarray(self.domains, dtype=object)[keep]))


@dataclass(frozen=True)
class Component:
    """One fitted setting: its features (with the statistics fitted on the training rows) and its model."""

    setting: Setting
    spec: FeatureSpec
    model: Any  # a fitted LEARNERS model

    def scores(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray, rm_names: Sequence[str],
               step_rms: Sequence[str]) -> np.ndarray:
        """(Q, N) from member scores in `rm_names` order and step scores in `step_rms` order."""
        x_scores = np.asarray(scores)[:, :, [list(rm_names).index(m) for m in self.spec.members]]
        x_steps = None
        if self.spec.step_members:
            x_steps = np.asarray(steps)[:, :, [list(step_rms).index(m) for m in self.spec.step_members]]
        return self.model.scores(self.spec.apply(x_scores, x_steps, valid))

    def importances(self) -> dict[str, float]:
        return dict(zip(self.spec.names(), (float(v) for v in self.model.importances())))

    def to_json(self) -> dict[str, Any]:
        return {"setting": self.setting.to_json(), "spec": self.spec.to_json(), "model": self.model.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Component":
        setting = Setting(obj["setting"]["learner"], obj["setting"]["features"], obj["setting"]["params"],
                          obj["setting"].get("name", ""))
        model = LEARNERS.get(setting.learner).load().from_json(obj["model"])
        return cls(setting, FeatureSpec.from_json(obj["spec"]), model)


def blended(parts: Sequence[np.ndarray], valid: np.ndarray) -> np.ndarray:
    """One component's scores as they are; several, as the sum of each standardised within its query (so
    learners with different score scales weigh alike)."""
    if len(parts) == 1:
        return parts[0]
    return sum(query_zscore(np.where(valid, p, np.nan)[..., None], valid)[..., 0] for p in parts)


@dataclass(frozen=True)
class LearnedFit:
    """The setting (or blend of settings) CV chose, fitted on the pool, with its CV evidence and its confidence
    calibrator."""

    label: str
    components: tuple[Component, ...]
    cv_best_of_n: float
    cv_table: tuple[tuple[str, float, float], ...]  # (label, CV best-of-n, sd over folds)
    calibrator: conf.Calibrator
    report: Mapping[str, Any]  # reliability of the out-of-fold confidence, importances, per-domain gains

    @property
    def members(self) -> tuple[str, ...]:
        return self.components[0].spec.members

    def importances(self) -> dict[str, float]:
        """Feature -> weight: one model's own (logit coefficients, or lambdarank gain shares); for a blend, the
        mean over its components of each one's scaled to a total absolute value of 1."""
        if len(self.components) == 1:
            return self.components[0].importances()
        out: dict[str, float] = {}
        for component in self.components:
            values = component.importances()
            total = sum(abs(v) for v in values.values()) or 1.0
            for name, value in values.items():
                out[name] = out.get(name, 0.0) + value / total / len(self.components)
        return out

    def ensemble(self) -> Ensemble:
        """The members with each one's share of the absolute importance, for the output contract."""
        weight = dict.fromkeys(self.members, 0.0)
        for name, value in self.importances().items():
            member = name.split(":", 1)[1].split("@")[0]
            if member in weight:
                weight[member] += abs(value)
        total = sum(weight.values()) or 1.0
        return Ensemble(self.members, tuple(weight[m] / total for m in self.members), "learned")

    def scores(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray, rm_names: Sequence[str],
               step_rms: Sequence[str]) -> np.ndarray:
        """(Q, N) candidate scores from member scores in `rm_names` order and step scores in `step_rms` order."""
        valid = np.asarray(valid, dtype=bool)
        parts = [c.scores(scores, steps, valid, rm_names, step_rms) for c in self.components]
        return np.where(valid, blended(parts, valid), np.nan)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "components": [c.to_json() for c in self.components],
                "cv_best_of_n": self.cv_best_of_n, "cv_table": [list(row) for row in self.cv_table],
                "calibrator": self.calibrator.to_json(), "report": dict(self.report)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "LearnedFit":
        components = tuple(Component.from_json(c) for c in obj["components"])
        if not components:
            raise ValueError("no components")
        return cls(str(obj["label"]), components, float(obj["cv_best_of_n"]),
                   tuple((str(a), float(b), float(c)) for a, b, c in obj["cv_table"]),
                   conf.Calibrator.from_json(obj["calibrator"]), obj["report"])


def _fit_model(setting: Setting, x: np.ndarray, data: PoolSlice) -> Any:
    return LEARNERS.get(setting.learner).load().fit(x, data.correct, data.valid, **setting.params)


def _hits(scores: np.ndarray, data: PoolSlice) -> np.ndarray:
    return best_of_n_matrix(np.where(data.valid, scores, np.nan)[:, :, None], data.correct, data.valid)[:, 0]


def _spec(features: str, data: PoolSlice, members: Sequence[str], step_members: Sequence[str],
          reduction: str) -> FeatureSpec:
    return feature_spec(FEATURE_SETS[features], members, step_members, reduction, data.scores, data.steps, data.valid)


def fit_learned(pool: QuestionPool, members: Sequence[str] | None = None, *, folds: int = 5, seed: int = 0,
                settings: Sequence[Any] = SETTINGS, baselines: bool = True,
                min_mixed: int = MIN_MIXED) -> LearnedFit:
    """Cross-validate every setting on the pool (or its LEARN_SAMPLE), then fit the best on all of it.

    `baselines`: also weigh every single RM (with the margin rule) and the blend of each family's best; off, the
    best of `settings` is kept whatever it gains (the "stacker" name's grid). Only the questions every member
    scored are used (morkit.selection.coverage): in a pool mixing domains, a fit over the RMs a query can use
    learns from the questions like it. TooFewMixed when fewer than `min_mixed` of them have both a right and a
    wrong answer."""
    members = tuple(members or pool.rm_names)
    step_members = tuple(m for m in members if m in pool.step_rms)
    data = PoolSlice.of(pool, covered_rows(pool, members, LEARN_SAMPLE, seed), members)
    n_mixed = int(mixed(data.correct, data.valid).sum())
    if n_mixed < max(1, min_mixed):
        raise TooFewMixed(f"the pool has {n_mixed} questions with both a right and a wrong answer; the learned "
                          f"selector needs {max(1, min_mixed)}")
    n = len(data.correct)
    fold_of = np.random.default_rng(seed).permutation(n) % max(2, min(folds, n))
    reduction = pool.config.reduction
    spec_of = lambda name, rows: _spec(name, rows, members, step_members, reduction)  # noqa: E731
    singles = [Setting("single", "query-z", {"column": i}, f"single RM: {m}") for i, m in enumerate(members)]
    table, oof, candidates = _cross_validate([*settings, *(singles if baselines else ())], data, fold_of, spec_of,
                                             blend=baselines)
    best = _one_standard_error(table, oof, candidates, data)
    label, chosen = table[best][0], candidates[best]
    scores = oof[label]
    hits = _hits(scores, data)
    signals = conf.signals(scores, data.scores, data.valid)
    calibrator = conf.Calibrator.fit(signals, hits)
    components = []
    for setting in chosen:
        spec = spec_of(setting.features, data)
        components.append(Component(setting, spec, _fit_model(setting, spec.apply(data.scores, data.steps,
                                                                                   data.valid), data)))
    fit = LearnedFit(label, tuple(components), table[best][1], tuple(table), calibrator, {})
    report = {
        "reliability": conf.reliability(conf.cross_fitted(signals, hits, fold_of), hits),
        "importances": fit.importances(),
        "domains": _domain_gains(data, hits, members),
        "questions": n, "mixed": n_mixed, "folds": int(len(np.unique(fold_of))),
    }
    return replace(fit, report=report)


def _cross_validate(settings: Sequence[Setting], data: PoolSlice, fold_of: np.ndarray, spec_of: Any, blend: bool = True
                    ) -> tuple[list[tuple[str, float, float]], dict[str, np.ndarray], list[list[Setting]]]:
    """Out-of-fold scores of every setting and (`blend`) of the blend of each family's best: the CV table, the
    scores by label, and the settings behind each row (a blend has several)."""
    parts = []  # per fold: where its test rows are, its training slice, and each feature set's (train, test) x
    for f in np.unique(fold_of):
        train, test = data.part(fold_of != f), data.part(fold_of == f)
        specs = {name: spec_of(name, train) for name in {s.features for s in settings}}
        x = {name: (spec.apply(train.scores, train.steps, train.valid), spec.apply(test.scores, test.steps, test.valid))
             for name, spec in specs.items()}
        parts.append((fold_of == f, train, x))
    table, oof = [], {}
    for setting in settings:
        scores = np.full(data.valid.shape, np.nan)
        for where, train, x in parts:
            scores[where] = _fit_model(setting, x[setting.features][0], train).scores(x[setting.features][1])
        table.append(_cv_row(setting.label, scores, data, fold_of))
        oof[setting.label] = scores
    candidates = [[setting] for setting in settings]
    if not blend:
        return table, oof, candidates
    family_best: dict[tuple[str, str], int] = {}  # diverse rankers averaged vary less than any one of them
    for i, setting in enumerate(settings):
        key = (setting.learner, setting.features)
        if setting.learner == "single":
            continue  # baselines, not learners
        if key not in family_best or table[i][1] > table[family_best[key]][1]:
            family_best[key] = i
    if len(family_best) > 1:
        blend = [settings[i] for i in sorted(family_best.values())]
        label = "blend of " + " + ".join(s.label for s in blend)
        oof[label] = blended([oof[s.label] for s in blend], data.valid)
        table.append(_cv_row(label, oof[label], data, fold_of))
        candidates.append(blend)
    return table, oof, candidates


def _one_standard_error(table: Sequence[tuple[str, float, float]], oof: Mapping[str, np.ndarray],
                        candidates: Sequence[Sequence[Setting]], data: PoolSlice) -> int:
    """The row CV picks: the best, unless it is a learned model that beats the best single RM by no more than
    `margin(n)` standard errors of their paired per-question difference, n being the learned rows compared
    (the one-standard-error rule, corrected for the best of n rows: see `margin`): where the pool cannot tell
    them apart, the single RM, which has nothing to overfit."""
    best = max(range(len(table)), key=lambda i: table[i][1])  # the first (simplest) of equal candidates
    singles = [i for i, c in enumerate(candidates) if c[0].learner == "single"]
    if not singles or candidates[best][0].learner == "single":
        return best
    single = max(singles, key=lambda i: table[i][1])
    diff = _hits(oof[table[best][0]], data) - _hits(oof[table[single][0]], data)
    diff = diff[~np.isnan(diff)]
    if len(diff) < 2:
        return single
    se = diff.std(ddof=1) / np.sqrt(len(diff))
    return best if diff.mean() > margin(len(candidates) - len(singles)) * se else single


def margin(learned_rows: int) -> float:
    """How many standard errors the best of `learned_rows` learned CV rows must beat the best single RM by.

    One row: 1, the one-standard-error rule, whose one-sided false-pick rate is P(Z > 1) ~ 0.16. The best of
    n noisy CV estimates is biased upward (the winner's curse), so that rate is shared among the n rows
    (Bonferroni): 2.2 standard errors for the 12 rows of SETTINGS and their blend."""
    from statistics import NormalDist

    normal = NormalDist()
    return -normal.inv_cdf(normal.cdf(-1.0) / max(1, learned_rows))


def _cv_row(label: str, scores: np.ndarray, data: PoolSlice, fold_of: np.ndarray) -> tuple[str, float, float]:
    """(label, mean out-of-fold best-of-n, its sd over the folds)."""
    hits = _hits(scores, data)
    per_fold = [float(np.nanmean(hits[fold_of == f])) for f in np.unique(fold_of)]
    return label, float(np.nanmean(hits)), float(np.std(per_fold, ddof=1))


def _domain_gains(data: PoolSlice, hits: np.ndarray, members: Sequence[str]) -> dict[str, Any]:
    """Per domain: questions, the learned selector's CV best-of-n, and the best single RM's there (the RM
    chosen on the same questions, so the gain is if anything understated)."""
    from morkit.question_pool.rows import nanmean_columns

    singles = best_of_n_matrix(data.scores, data.correct, data.valid)
    domains = np.asarray(data.domains, dtype=object)
    out = {}
    for domain in sorted(set(data.domains)):
        inside = domains == domain
        means = np.nan_to_num(nanmean_columns(singles[inside]), nan=-1.0)
        best = int(np.argmax(means))
        out[domain] = {"questions": int(inside.sum()), "learned": float(np.nanmean(hits[inside])),
                       "best_single": float(means[best]), "best_single_rm": members[best]}
    return out
