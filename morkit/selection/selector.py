"""Per-query RM selection and MoR ranking against a question pool: `Selector(pool).select(q)` / `.rank(q)`.

Methods are looked up by name in SELECTION_METHODS (morkit.selection.methods). The default is the
pool-learned stacker; "pres" is the CTTS-MM paper's rule, "pres-top1" the same rule on best-of-n.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.ensembles import Ensemble
from morkit.question_pool.index import search
from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.rows import rm_rules
from morkit.selection.base import Choice, Neighbours, SelectionMethod
from morkit.selection.confidence import SIGNALS, Calibrator, signals
from morkit.selection.coverage import like_neighbours
from morkit.selection.methods import DEFAULT_METHOD, check_method
from morkit.selection.mor import (
    available_members,
    choice_scores,
    member_matrix,
    pick_best,
    scores_under,
)


@dataclass(frozen=True)
class Selection:
    """Why a query gets the ensemble it gets: the pick, its evidence, the neighbours, the runner-ups."""

    query_id: str
    method: str
    choice: Choice
    normalizer: str  # the transform the weights apply to, named for the output contract
    neighbours: Neighbours
    skipped_rms: Mapping[str, str] = field(default_factory=dict)  # pool RM this query cannot use -> why

    @property
    def missing_rms(self) -> tuple[str, ...]:
        """The pool RMs this query cannot use (ensembles with them were skipped), in pool order."""
        return tuple(self.skipped_rms)

    def to_json(self) -> dict[str, Any]:
        ens = self.choice.ensemble
        return {
            "id": self.query_id,
            "method": self.method,
            "ensemble": {"members": list(ens.members), "weights": list(ens.weights), "weighting": ens.weighting,
                         "normalizer": self.normalizer},
            "criterion": {"name": self.choice.details.get("criterion"),
                          "value": self.choice.score if np.isfinite(self.choice.score) else None},
            "runner_ups": [{"ensemble": name, "value": value} for name, value in self.choice.alternatives],
            "neighbours": [{"id": i, "similarity": round(float(s), 6)}
                           for i, s in zip(self.neighbours.ids, self.neighbours.similarities)],
            "skipped": {"missing_rms": list(self.missing_rms), "why": dict(self.skipped_rms),
                        **{k: v for k, v in self.choice.details.items() if k.startswith("skipped")}},
        }


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


NOT_APPLICABLE = "not applicable: "
NO_RM_APPLIES = Choice(Ensemble((), (), "none"), "raw", float("nan"), (),
                       {"criterion": None, "fallback": "no pool RM applies to this query: its candidates tie"})
"""The choice for a query that no pool RM applies to (a code query in a math-only pool): no scores, a tie
broken by the seeded shuffle, no confidence; an error would fail a whole run over one domain."""


def _normalizer_name(pool: QuestionPool, transform: str) -> str:
    return pool.normalizer.kind if transform == "pool-zscore" else transform


class Selector:
    """Routes queries to ensembles using a pool; embeds query questions with the pool's own embedder."""

    def __init__(self, pool: QuestionPool, method: str = DEFAULT_METHOD, *, embedder: Any = None, k: int = 100,
                 singles_only: bool = False, runnable: Iterable[str] = ()):
        if len(pool) == 0:
            raise InputError("the pool is empty: build it from labelled questions first")
        entry = check_method(method, singles_only)
        checks.positive_int(k, "k")
        if embedder is not None and embedder.name != pool.embedder:
            raise InputError(f"the pool was built with embedder {pool.embedder!r}; queries were to be embedded "
                             f"with {embedder.name!r}, and similarities across embedders mean nothing")
        self.pool = pool
        self.method_name = method
        self.method: SelectionMethod = entry.load()(pool, **({"singles_only": True} if singles_only else {}))
        self.k = k
        self.runnable = frozenset(runnable) & set(pool.rm_names)
        self._rules = dict(zip(pool.rm_names, rm_rules(pool.rm_names, pool.meta.get("applies"))))
        self._embedder = embedder
        self._calibrator: Calibrator | None = None

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from morkit.question_pool.embed import load_embedder

            self._embedder = load_embedder(self.pool.embedder)
        return self._embedder

    def neighbours(self, vectors: np.ndarray) -> list[Neighbours]:
        sims, rows = search(self.pool.index, vectors, self.k)
        out = []
        for s, r in zip(sims, rows):
            keep = r >= 0
            out.append(Neighbours(r[keep], tuple(self.pool.questions[i].id for i in r[keep]), s[keep]))
        return out

    def skipped(self, query: Query) -> dict[str, str]:
        """The pool RMs this query cannot use, in pool order, each with why: the RM does not apply to it (its
        domain or fields, morkit.reward_models.applicability), or its scores are not on every candidate and
        it may not run (not registered here, or a candidate has no text)."""
        cached = available_members(query, self.pool.rm_names)
        has_text = all(c.text is not None for c in query.candidates)
        out = {}
        for name in self.pool.rm_names:
            why = self._rules[name].skip_reason(query, name)
            if why is not None:
                out[name] = f"{NOT_APPLICABLE}{why}"
            elif name not in cached and not (name in self.runnable and has_text):
                out[name] = ("no score on every candidate, and " + ("a candidate has no text to run it on"
                             if name in self.runnable else "it is not run here"))
        return out

    def available(self, query: Query) -> frozenset[str]:
        """Pool RMs that apply to the query and have cached scores on every candidate, or may run on them."""
        return frozenset(self._usable(self.skipped(query)))

    def _usable(self, skipped: Mapping[str, str]) -> list[str]:
        """The pool RMs not in `skipped`, in pool order."""
        return [n for n in self.pool.rm_names if n not in skipped]

    def select_many(self, queries: Sequence[Query], *, vectors: np.ndarray | None = None) -> list[Selection]:
        if vectors is None:
            vectors = self.embedder.encode([q.question for q in queries])
        out = []
        for query, neighbours in zip(queries, self.neighbours(vectors)):
            skipped = self.skipped(query)
            usable = self._usable(skipped)
            available = frozenset(usable)
            neighbours = like_neighbours(self.pool, neighbours, usable)
            if not usable and all(why.startswith(NOT_APPLICABLE) for why in skipped.values()):
                out.append(Selection(query.id, self.method_name, NO_RM_APPLIES, "raw", neighbours, skipped))
                continue
            try:
                choice = self.method.choose(neighbours, available)
            except LookupError as exc:
                reasons = "; ".join(f"{name}: {why}" for name, why in skipped.items())
                raise InputError(f"query {query.id!r}: {exc}" + (f" ({reasons})" if reasons else "")) from exc
            out.append(Selection(query.id, self.method_name, choice,
                                 _normalizer_name(self.pool, choice.transform), neighbours, skipped))
        return out

    def select(self, query: Query) -> Selection:
        return self.select_many([query])[0]

    def candidate_scores(self, query: Query, choice: Choice, raw: np.ndarray | None = None) -> np.ndarray:
        """The choice's score for each of the query's candidates; the member scores must be cached on them.
        `raw`: the query's member_matrix over the pool's RMs, if already read."""
        lacking = [m for m in choice.ensemble.members if any(m not in c.scores for c in query.candidates)]
        if lacking:
            raise InputError(f"query {query.id!r}: candidates lack scores of {', '.join(lacking)}; "
                             "score them first (morkit score) or let rank run the registered RMs")
        pool = self.pool
        scores = choice_scores(query, choice, pool.normalizer, pool.config.reduction, pool.rm_names, pool.step_rms,
                               raw)
        if not np.isfinite(scores).all():
            raise InputError(f"query {query.id!r}: the ensemble {', '.join(choice.ensemble.members)} gives "
                             "non-finite scores; its candidates' scores of these RMs are too large for the pool's "
                             "normaliser")
        return scores

    def confidence(self, query: Query, choice: Choice, scores: np.ndarray, raw: np.ndarray | None = None) -> float:
        """The calibrated probability that the top-scored candidate is correct; `raw` as in candidate_scores."""
        calibrator = choice.calibrator or self.calibrator()
        members = choice.ensemble.members
        if raw is None:
            members_raw = member_matrix(query, members, self.pool.config.reduction)
        else:
            members_raw = raw[:, [self.pool.rm_names.index(m) for m in members]]
        valid = np.ones((1, len(scores)), dtype=bool)
        return float(calibrator.predict(signals(np.asarray(scores)[None], members_raw[None], valid))[0])

    def calibrator(self) -> Calibrator:
        """For methods without their own: calibrated on leave-one-out picks over a seeded sample of pool
        questions (each question's neighbours exclude itself), fitted once per Selector."""
        if self._calibrator is None:
            self._calibrator = leave_one_out_calibrator(self.pool, self.method, self.k)
        return self._calibrator

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
        confidence = self.confidence(query, selection.choice, scores, raw)
        abstain = None if abstain_below is None else bool(confidence < abstain_below)
        return Ranking(selection, picked.scores, picked.best_index, picked.tied, confidence, abstain)

    def rank(self, query: Query) -> Ranking:
        return self.rank_selected(query, self.select(query))


LOO_SAMPLE = 1000
"""Pool questions whose leave-one-out picks calibrate a method that has no cross-validation of its own."""


def leave_one_out_calibrator(pool: QuestionPool, method: SelectionMethod, k: int, seed: int = 1) -> Calibrator:
    """A Calibrator fitted on the method's leave-one-out picks (`leave_one_out_picks`)."""
    return Calibrator.fit(*leave_one_out_picks(pool, method, k, seed))


def leave_one_out_picks(pool: QuestionPool, method: SelectionMethod, k: int, seed: int = 1
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(signals, hits) of the method's picks for a seeded sample of LOO_SAMPLE pool questions, each chosen from
    its neighbours other than itself and scored from the pool's stored member scores; a hit is the expected
    best-of-n correctness of the pick (ties shared)."""
    from morkit.question_pool.prr import best_of_n_matrix
    from morkit.question_pool.rows import sample_rows
    rows = sample_rows(len(pool), LOO_SAMPLE, seed)
    sims, found = search(pool.index, np.ascontiguousarray(pool.embeddings[rows]), k + 1)
    features, hits = [], []
    for row, s, r in zip(rows, sims, found):
        keep = (r >= 0) & (r != row)
        neighbours = Neighbours(r[keep][:k], tuple(pool.questions[i].id for i in r[keep][:k]), s[keep][:k])
        scores, valid, correct = (np.asarray(a[row]) for a in (pool.scores, pool.valid, pool.correct))
        available = frozenset(n for j, n in enumerate(pool.rm_names) if not np.isnan(scores[valid, j]).any())
        neighbours = like_neighbours(pool, neighbours, [n for n in pool.rm_names if n in available])
        if not available or not neighbours.rows.size:
            continue
        try:
            choice = method.choose(neighbours, available)
        except LookupError:
            continue
        members = scores[:, [pool.rm_names.index(m) for m in choice.ensemble.members]]
        steps = None if pool.steps is None else np.asarray(pool.steps[row])[None]
        picked = scores_under(choice, scores[None], steps, valid[None], pool.normalizer, pool.rm_names,
                              pool.step_rms)
        picked = np.where(valid[None], picked, np.nan)
        features.append(signals(picked, members[None], valid[None])[0])
        hits.append(best_of_n_matrix(picked[:, :, None], correct[None], valid[None])[0, 0])
    hits_array = np.nan_to_num(np.asarray(hits, dtype=np.float64), nan=0.0)
    return np.asarray(features).reshape(-1, len(SIGNALS)), hits_array
