"""The learned selector, morkit's default: a candidate ranker over RM features, chosen by CV on the pool among
SETTINGS, their blend, PRES and every single RM, then refitted on the whole pool (docs/selection.md)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from morkit.core import checks
from morkit.question_pool.ensembles import Ensemble
from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.prr import best_of_n_matrix
from morkit.question_pool.rows import STEP_REDUCTIONS, sample_rows
from morkit.question_pool.store import SHAPE_ERRORS
from morkit.selection import confidence as conf
from morkit.selection.coverage import covered_rows
from morkit.selection.cv import CVResult, Folds, out_of_fold, pick
from morkit.selection.features import FEATURE_SETS, FeatureSpec, feature_spec
from morkit.question_pool.prr import mixed_questions
from morkit.selection.learners import LEARNERS
from morkit.selection.local import Neighbourhood, single_stats
from morkit.selection.mor import query_zscore
from morkit.selection.pres import pres_out_of_fold, pres_served_out_of_fold

MIN_MIXED = 20
LEARN_SAMPLE = 20_000
"""Pools larger than this many questions learn from a seeded sample of them (features are ~100 per RM-candidate)."""
REPEATS = 3
"""Fold deals the cross-validation averages over (seeds seed, seed + 1, ...), on pools of at most REPEATS_UP_TO
questions: one deal's luck moved the pick on a few hundred questions, hardly on thousands, where it would
only triple the fit's time."""
REPEATS_UP_TO = 5_000
CV_SAMPLE = 3_000
"""Above REPEATS_UP_TO questions the cross-validation weighs the grid on a seeded sample of this many of them
(one deal), and only the pick is refitted on all of them (at most LEARN_SAMPLE): the grid's cost stays bounded."""
LOCAL_K = 20
"""Nearest pool questions whose evidence the "local" features read."""
PRES_K = 100
"""Neighbours PRES reads in the cross-validation, as the Router's default k."""
PRES_LABEL = "PRES (paper, with combinations)"
NEIGHBOURS = ("pool", "sample")
"""Where a fit's questions find the neighbours that the local features and PRES read (fit_learned's
`neighbours`). "pool": among every pool question the fit's RMs cover, found in the pool's index as a query's are,
so what the CV weighs and the refit learns from is what a query is served with. "sample": among the questions the
fit reads itself (its CV sample in the CV, its learning sample in the refit), as earlier releases did: no index
search, but on pools larger than those samples the neighbours are more distant than a query's."""


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


BAG = 3
"""Boosters a lambdarank setting averages (each a seed and 80% of the questions): its single fits were the least
stable rows of the CV (sd over folds 7.4 points against 4-5 for the logits on rewardmath)."""

STACKER_SETTINGS = tuple(Setting("logit", features, {"penalty": p}) for features in ("query-z", "pool-z")
                         for p in (0.1, 1.0, 10.0, 100.0))
"""The former stacker as settings: a conditional logit over one normalised score per RM (the query's or the
pool's z-score) at each of its penalties; the "stacker" method name is the learned selector restricted to them
(morkit.selection.learned_method.stacker). In SETTINGS they compete with the rest, but stay out of the blend."""

SETTINGS = (
    *STACKER_SETTINGS,
    *(Setting("logit", "scores", {"penalty": p}) for p in (0.3, 1.0, 3.0, 10.0, 30.0)),
    *(Setting("logit", "full", {"penalty": p}) for p in (1.0, 3.0, 10.0, 30.0)),
    Setting("lambdarank", "full", {"rounds": 100, "learning_rate": 0.05, "leaves": 7, "bag": BAG}),
    Setting("lambdarank", "full", {"rounds": 200, "learning_rate": 0.03, "leaves": 4, "bag": BAG}),
    *(Setting("logit", "scores+local", {"penalty": p}) for p in (1.0, 3.0, 10.0, 30.0)),
    *(Setting("logit", "full+local", {"penalty": p}) for p in (3.0, 10.0, 30.0)),
    Setting("lambdarank", "full+local", {"rounds": 100, "learning_rate": 0.05, "leaves": 7, "bag": BAG}),
)

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
    members: tuple[str, ...]  # the RMs of the last axis of `scores` and `stats`
    groups: np.ndarray  # (Q,) one id per distinct question text: a repeated question is one group
    vectors: np.ndarray  # (Q, d) their question embeddings
    stats: np.ndarray  # (Q, 2, len(members)) each member's PRR and best-of-n hit (morkit.selection.local)

    @classmethod
    def of(cls, pool: QuestionPool, rows: np.ndarray, members: Sequence[str]) -> "PoolSlice":
        cols = [pool.rm_names.index(m) for m in members]
        steps = None
        if pool.steps is not None:
            steps = np.asarray(pool.steps[rows])[:, :, [pool.step_rms.index(m) for m in members
                                                        if m in pool.step_rms]]
        return cls(np.asarray(pool.scores[rows])[:, :, cols], steps, np.asarray(pool.correct[rows]),
                   np.asarray(pool.valid[rows]), tuple(pool.questions[r].domain for r in rows), tuple(members),
                   np.unique([pool.questions[r].question for r in rows], return_inverse=True)[1],
                   np.asarray(pool.embeddings[rows], dtype=np.float32), single_stats(pool, rows, members))

    def part(self, keep: np.ndarray) -> "PoolSlice":
        return PoolSlice(self.scores[keep], None if self.steps is None else self.steps[keep], self.correct[keep],
                         self.valid[keep], tuple(np.asarray(self.domains, dtype=object)[keep]), self.members,
                         self.groups[keep], self.vectors[keep], self.stats[keep])


@dataclass(frozen=True)
class Component:
    """One fitted setting: its features (with the statistics fitted on the training rows) and its model."""

    setting: Setting
    spec: FeatureSpec
    model: Any  # a fitted LEARNERS model

    def scores(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray, rm_names: Sequence[str],
               step_rms: Sequence[str], local: np.ndarray | None = None) -> np.ndarray:
        """(Q, N) from member scores in `rm_names` order, step scores in `step_rms` order and (features of the
        "local" group) each query's local evidence over the members."""
        x_scores = np.asarray(scores)[:, :, [list(rm_names).index(m) for m in self.spec.members]]
        x_steps = None
        if self.spec.step_members:
            x_steps = np.asarray(steps)[:, :, [list(step_rms).index(m) for m in self.spec.step_members]]
        return self.model.scores(self.spec.apply(x_scores, x_steps, valid, local))

    def importances(self) -> dict[str, float]:
        return dict(zip(self.spec.names(), (float(v) for v in self.model.importances())))

    def to_json(self) -> dict[str, Any]:
        return {"setting": self.setting.to_json(), "spec": self.spec.to_json(), "model": self.model.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Component":
        """A stored component, checked so that scoring with it cannot fail on its own values: the spec's scales,
        normaliser and local centre cover its feature columns, and the model reads exactly that many (a
        ValueError naming the field otherwise; a model's own check names its field, e.g. a booster's tree)."""
        setting = Setting(obj["setting"]["learner"], obj["setting"]["features"], obj["setting"]["params"],
                          obj["setting"].get("name", ""))
        spec = FeatureSpec.from_json(obj["spec"])
        _check_spec(spec)
        try:
            model = LEARNERS.get(setting.learner).load().from_json(obj["model"])
        except (*SHAPE_ERRORS, LookupError) as exc:
            raise ValueError(f"model: {stored_problem(exc)}") from exc
        width = getattr(model, "width", None)
        if width is not None and width != len(spec.names()):
            raise ValueError(f"model: reads {width} features; its spec makes {len(spec.names())}")
        return cls(setting, spec, model)


def stored_problem(exc: BaseException) -> str:
    """An exception's message for a one-line error: a KeyError's is the missing key."""
    return f"missing {exc}" if isinstance(exc, KeyError) else str(exc)


def _finite(values: Sequence[float]) -> bool:
    return all(np.isfinite(v) for v in values)


def _check_spec(spec: FeatureSpec) -> None:
    """A stored spec that features can be computed with: ValueError naming the field."""
    columns = len(spec.names())
    if len(set(spec.members)) != len(spec.members) or not spec.members:
        raise ValueError("spec.members: expected distinct RM names")
    if not set(spec.step_members) <= set(spec.members) or not set(spec.step_reductions) <= set(STEP_REDUCTIONS):
        raise ValueError("spec.step_members/step_reductions: not members and STEP_REDUCTIONS")
    if len(spec.scale) != columns or not all(np.isfinite(v) and v > 0 for v in spec.scale):
        raise ValueError(f"spec.scale: expected {columns} positive numbers, one per feature column")
    normalised = [*spec.members, *spec.step_columns]
    if not all(_finite((spec.pool_z.shift.get(c, np.nan), spec.pool_z.scale.get(c, np.nan))) for c in normalised):
        raise ValueError("spec.pool_z: a finite shift and scale for every member and step column")
    if spec.uses_local and (len(spec.local_centre) != 2 * len(spec.members) or not _finite(spec.local_centre)
                            or spec.local_k < 1):
        raise ValueError(f"spec.local_centre/local_k: expected {2 * len(spec.members)} finite numbers and k >= 1")


def blended(parts: Sequence[np.ndarray], valid: np.ndarray) -> np.ndarray:
    """One component's scores as they are; several, as the sum of each standardised within its query (so
    learners with different score scales weigh alike)."""
    if len(parts) == 1:
        return parts[0]
    return sum(query_zscore(np.where(valid, p, np.nan)[..., None], valid)[..., 0] for p in parts)


@dataclass(frozen=True, eq=False)
class OutOfFold:
    """The chosen row's out-of-fold picks on the pool questions its cross-validation weighed (the first fold deal):
    each pick's pool row, confidence signals, hit (expected best-of-n correctness) and fold. The cascade sets its
    threshold and conditional calibrators from them (morkit.selection.cascade)."""

    rows: np.ndarray  # (Q,) pool row indices
    signals: np.ndarray  # (Q, len(conf.SIGNALS))
    hits: np.ndarray  # (Q,)
    folds: np.ndarray  # (Q,) fold id of each question in that deal


@dataclass(frozen=True)
class LearnedFit:
    """The setting (or blend of settings) CV chose, fitted on the pool, with its CV evidence and its confidence
    calibrator. No components: CV chose PRES over these members (`pres_members`)."""

    label: str
    components: tuple[Component, ...]
    cv_best_of_n: float
    cv_table: tuple[tuple[str, float, float], ...]  # (label, CV best-of-n, sd over repeats x folds)
    calibrator: conf.Calibrator
    report: Mapping[str, Any]  # reliability of the out-of-fold confidence, importances, per-domain gains
    pres_members: tuple[str, ...] = ()
    out_of_fold: OutOfFold | None = field(default=None, compare=False, repr=False)  # None: loaded, not fitted here

    @property
    def members(self) -> tuple[str, ...]:
        return self.components[0].spec.members if self.components else self.pres_members

    @property
    def is_pres(self) -> bool:
        return not self.components

    @property
    def local_k(self) -> int:
        """Neighbours whose evidence its features read (0: none, the scores alone decide)."""
        return max((c.spec.local_k for c in self.components if c.spec.uses_local), default=0)

    @property
    def scores_alone(self) -> bool:
        """Whether a lone candidate's score moves with its own member scores: one component (a blend standardises
        each component within the query) with a pool-standardised feature of non-zero weight; every other
        feature compares a candidate with its siblings, and is constant for one."""
        if len(self.components) != 1:
            return False
        return any(value != 0 and name.startswith("pool-z:") for name, value in self.components[0].importances().items())

    def importances(self) -> dict[str, float]:
        """Feature -> weight: one model's own (logit coefficients, or lambdarank gain shares); for a blend, the
        mean over its components of each one's scaled to a total absolute value of 1."""
        if len(self.components) <= 1:
            return self.components[0].importances() if self.components else {}
        out: dict[str, float] = {}
        for component in self.components:
            values = component.importances()
            total = sum(abs(v) for v in values.values()) or 1.0
            for name, value in values.items():
                out[name] = out.get(name, 0.0) + value / total / len(self.components)
        return out

    def ensemble(self) -> Ensemble:
        """The members with each one's share of the absolute importance, for the output contract."""
        weight = dict.fromkeys(self.members, 0.0 if self.components else 1.0)
        for name, value in self.importances().items():
            member = name.split(":", 1)[1].split("@")[0]
            if member in weight:
                weight[member] += abs(value)
        total = sum(weight.values()) or 1.0
        return Ensemble(self.members, tuple(weight[m] / total for m in self.members), "learned")

    def scores(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray, rm_names: Sequence[str],
               step_rms: Sequence[str], local: np.ndarray | None = None) -> np.ndarray:
        """(Q, N) candidate scores from member scores in `rm_names` order, step scores in `step_rms` order and,
        where its features read them, each query's local evidence (Q, 2, len(members))."""
        if self.is_pres:
            raise TypeError("CV chose PRES for these RMs: it picks an ensemble per query (Learned.choose), it has "
                            "no candidate scorer of its own")
        valid = np.asarray(valid, dtype=bool)
        parts = [c.scores(scores, steps, valid, rm_names, step_rms, local) for c in self.components]
        return np.where(valid, blended(parts, valid), np.nan)

    def at(self, local: np.ndarray) -> "AtQuery":
        """This fit bound to one query's local evidence (1, 2, len(members)): the query's candidate scorer."""
        return AtQuery(self, local)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "components": [c.to_json() for c in self.components],
                "cv_best_of_n": self.cv_best_of_n, "cv_table": [list(row) for row in self.cv_table],
                "calibrator": self.calibrator.to_json(), "report": dict(self.report),
                **({"pres_members": list(self.pres_members)} if self.is_pres else {})}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "LearnedFit":
        """A stored fit, every component checked (Component.from_json); a ValueError names the field."""
        components = []
        for i, component in enumerate(obj["components"]):
            try:
                components.append(Component.from_json(component))
            except (*SHAPE_ERRORS, LookupError) as exc:
                raise ValueError(f"components[{i}]: {stored_problem(exc)}") from exc
        pres_members = tuple(obj.get("pres_members") or ())
        if not components and not pres_members:
            raise ValueError("no components")
        if len({c.spec.members for c in components}) > 1:
            raise ValueError("components: a blend's components must read the same members")
        try:
            calibrator = conf.Calibrator.from_json(obj["calibrator"])
        except (*SHAPE_ERRORS, LookupError) as exc:
            raise ValueError(f"calibrator: {stored_problem(exc)}") from exc
        width = len(conf.SIGNALS)
        if not (len(calibrator.coef) == len(calibrator.center) == len(calibrator.spread) == width
                and _finite((*calibrator.coef, calibrator.intercept, *calibrator.center))
                and all(np.isfinite(v) and v > 0 for v in calibrator.spread) and calibrator.fitted_on >= 0):
            raise ValueError(f"calibrator: expected {width} finite coefficients, centres and positive spreads")
        return cls(str(obj["label"]), tuple(components), float(obj["cv_best_of_n"]),
                   tuple((str(a), float(b), float(c)) for a, b, c in obj["cv_table"]),
                   calibrator, obj["report"], pres_members)

    def check_pool(self, rm_names: Sequence[str], step_rms: Sequence[str]) -> None:
        """ValueError unless this fit reads only the pool's RMs (and step scores only of its step RMs)."""
        for i, component in enumerate(self.components):
            spec = component.spec
            if not set(spec.members) <= set(rm_names) or not set(spec.step_members) <= set(step_rms):
                raise ValueError(f"components[{i}]: spec: reads RMs or step scores the pool does not hold")
        if not set(self.pres_members) <= set(rm_names):
            raise ValueError("pres_members: RMs the pool does not hold")


@dataclass(frozen=True)
class AtQuery:
    """A fit whose features read local evidence, bound to one query's (a CandidateScorer)."""

    fit: LearnedFit
    local: np.ndarray

    @property
    def scores_alone(self) -> bool:
        return self.fit.scores_alone

    def scores(self, scores: np.ndarray, steps: np.ndarray | None, valid: np.ndarray, rm_names: Sequence[str],
               step_rms: Sequence[str]) -> np.ndarray:
        return self.fit.scores(scores, steps, valid, rm_names, step_rms, self.local)


def _fit_model(setting: Setting, x: np.ndarray, data: PoolSlice) -> Any:
    return LEARNERS.get(setting.learner).load().fit(x, data.correct, data.valid, **setting.params)


def _hits(scores: np.ndarray, data: PoolSlice) -> np.ndarray:
    return best_of_n_matrix(np.where(data.valid, scores, np.nan)[:, :, None], data.correct, data.valid)[:, 0]


def fit_learned(pool: QuestionPool, members: Sequence[str] | None = None, *, folds: int = 5, seed: int = 0,
                repeats: int | None = None, settings: Sequence[Any] = SETTINGS, baselines: bool = True,
                min_mixed: int = MIN_MIXED, cv_sample: int = CV_SAMPLE, neighbours: str = "pool") -> LearnedFit:
    """Cross-validate `settings` on the questions every member scored (at most LEARN_SAMPLE; above REPEATS_UP_TO,
    on `cv_sample` of them) over `repeats` fold deals (None: REPEATS up to REPEATS_UP_TO questions, else one), then
    fit the pick on all of them, keeping its out-of-fold picks (`out_of_fold`). `baselines`: also weigh the blend,
    PRES and every single RM (off: the "stacker" grid); `neighbours`: NEIGHBOURS. TooFewMixed below `min_mixed`."""
    checks.one_of(neighbours, NEIGHBOURS, "neighbours")
    members = tuple(members or pool.rm_names)
    step_members = tuple(m for m in members if m in pool.step_rms)
    universe = covered_rows(pool, members, len(pool))  # every question the members cover: where neighbours lie
    pool_rows = universe[sample_rows(len(universe), LEARN_SAMPLE, seed)]  # covered_rows(..., LEARN_SAMPLE, seed)
    everything = PoolSlice.of(pool, pool_rows, members)
    n_mixed = int(mixed_questions(everything.correct, everything.valid).sum())
    if n_mixed < max(1, min_mixed):
        raise TooFewMixed(f"the pool has {n_mixed} questions with both a right and a wrong answer; the learned "
                          f"selector needs {max(1, min_mixed)}")
    if repeats is None:
        repeats = REPEATS if len(everything.correct) <= REPEATS_UP_TO else 1
    data, data_rows = everything, pool_rows  # what the cross-validation weighs the grid on
    if len(everything.correct) > REPEATS_UP_TO:
        keep = np.zeros(len(everything.correct), bool)
        keep[sample_rows(len(keep), cv_sample, seed)] = True
        data, data_rows = everything.part(keep), pool_rows[keep]
    dealt = Folds.dealt(len(data.correct), folds, seed, repeats, data.groups)
    singles = [Setting("single", "query-z", {"column": i}, f"single RM: {m}") for i, m in enumerate(members)]
    rows = [*settings, *(singles if baselines else ())]

    within = None
    if neighbours == "pool" and len(universe) < len(pool):
        within = np.zeros(len(pool), bool)
        within[universe] = True

    def from_pool(part_rows: np.ndarray) -> bool:  # whether questions beyond the part's own are its neighbours
        return neighbours == "pool" and len(part_rows) < len(universe)

    found: dict[int, Neighbourhood] = {}
    finding = threading.Lock()  # the CV's fold threads ask at once: one of them finds the lists

    def lists_of(part: PoolSlice, part_rows: np.ndarray, k: int, deals: np.ndarray | None = None) -> Neighbourhood:
        """The part's neighbours, found at most once, when local features or PRES read them: `k` of them outside
        any one fold of `deals` from the pool, else among the part's own (as many as twice the most read)."""
        with finding:
            if id(part) not in found:
                found[id(part)] = (Neighbourhood.in_pool(pool, part_rows, members, k, within, deals)
                                   if from_pool(part_rows) else
                                   Neighbourhood.among(part_rows, part.vectors, part.groups, part.stats,
                                                       2 * max(LOCAL_K, PRES_K)))
            return found[id(part)]

    def lists() -> Neighbourhood:
        return lists_of(data, data_rows, PRES_K if baselines else LOCAL_K, dealt.of)

    def spec_of(features: str, part: PoolSlice, local: np.ndarray | None) -> FeatureSpec:
        return feature_spec(FEATURE_SETS[features], members, step_members, pool.config.reduction, part.scores,
                            part.steps, part.valid, local, LOCAL_K)

    def local_of(train: np.ndarray | None) -> np.ndarray:
        return lists().evidence(LOCAL_K, train)

    result = _cross_validate(rows, data, dealt, spec_of, local_of, blend=baselines)
    if baselines:
        if from_pool(data_rows):  # each held-out question routed as a query is served
            pres_scores = pres_served_out_of_fold(pool, data, lists(), dealt, PRES_K)
        else:
            pres_scores = pres_out_of_fold(pool, data, lists().lists, dealt, PRES_K)
        if pres_scores is not None:
            result.add(PRES_LABEL, pres_scores, np.stack([_hits(s, data) for s in pres_scores]), [PRES_LABEL])
    rules = [s.label for s in singles] + ([PRES_LABEL] if PRES_LABEL in result.hits else []) if baselines else []
    label = pick(result, [x for x in result.hits if x not in rules], rules)
    scores, hits = result.scores[label][0], result.hits[label][0]
    signals = conf.signals(scores, data.scores, data.valid)
    chosen = result.candidates[label]
    components = []
    if chosen != [PRES_LABEL]:
        local = None
        if any("local" in FEATURE_SETS[s.features] for s in chosen):
            if data is not everything:
                found.pop(id(data), None)  # the CV's lists are done with
            local = lists_of(everything, pool_rows, LOCAL_K).evidence(LOCAL_K)
        for setting in chosen:
            spec = spec_of(setting.features, everything, local)
            x = spec.apply(everything.scores, everything.steps, everything.valid, local)
            components.append(Component(setting, spec, _fit_model(setting, x, everything)))
    table = tuple(result.table())
    fit = LearnedFit(label, tuple(components), dict((r[0], r[1]) for r in table)[label], table,
                     conf.Calibrator.fit(signals, hits), {}, () if components else members,
                     OutOfFold(np.asarray(data_rows), signals, hits, dealt.of[0]))
    report = {
        # a PRES pick is calibrated as PRES is, on its own picks' signals (Learned.choose): no diagram of this one
        "reliability": conf.reliability(conf.cross_fitted(signals, hits, dealt.of[0]), hits) if components else {},
        "importances": fit.importances(),
        "domains": _domain_gains(data, hits, members),
        "questions": len(everything.correct), "mixed": n_mixed, "folds": int(len(np.unique(dealt.of[0]))),
        "repeats": dealt.repeats, **({"cv_questions": len(data.correct)} if data is not everything else {}),
    }
    return replace(fit, report=report)


def _cross_validate(settings: Sequence[Setting], data: PoolSlice, dealt: Folds, spec_of: Any, local_of: Any,
                    blend: bool = True) -> CVResult:
    """Out-of-fold scores and hits of every setting on every repeat and (`blend`) of the blend of each family's
    best (by mean over repeats)."""
    names = {s.features for s in settings}
    needs_local = any("local" in FEATURE_SETS[name] for name in names)

    def fit_fold(repeat: int, train: np.ndarray) -> dict[str, np.ndarray]:
        local = local_of(train) if needs_local else None
        inside, held = data.part(train), data.part(~train)
        local_in, local_held = (None, None) if local is None else (local[train], local[~train])
        x = {}
        for name in names:
            spec = spec_of(name, inside, local_in)
            x[name] = (spec.apply(inside.scores, inside.steps, inside.valid, local_in),
                       spec.apply(held.scores, held.steps, held.valid, local_held))
        return {s.label: _fit_model(s, x[s.features][0], inside).scores(x[s.features][1]) for s in settings}

    oof = out_of_fold(settings, dealt, data.valid.shape[1], fit_fold)
    result = CVResult(dealt, {}, {}, {})
    for setting in settings:
        result.add(setting.label, oof[setting.label], np.stack([_hits(s, data) for s in oof[setting.label]]),
                   [setting])
    if not blend:
        return result
    family_best: dict[tuple[str, str], Setting] = {}  # diverse rankers averaged vary less than any one of them
    means = {label: mean for label, mean, _ in result.table()}
    for setting in settings:
        key = (setting.learner, setting.features)
        if setting.learner == "single" or setting in STACKER_SETTINGS:
            continue  # baselines, and one score per RM: the blend averages the rankers of many features
        if key not in family_best or means[setting.label] > means[family_best[key].label]:
            family_best[key] = setting
    if len(family_best) > 1:
        parts = sorted(family_best.values(), key=settings.index)
        label = "blend of " + " + ".join(s.label for s in parts)
        scores = np.stack([blended([oof[s.label][r] for s in parts], data.valid) for r in range(dealt.repeats)])
        result.add(label, scores, np.stack([_hits(s, data) for s in scores]), parts)
    return result


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
