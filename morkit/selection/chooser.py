"""Choosing an ensemble for a query: its pool neighbours, the pool RMs it can use, the method's pick -> Selection.

RMs a query cannot use are skipped and said why (docs/selection.md, "Queries that cannot use every RM")."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.ensembles import Ensemble
from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.rows import rm_rules
from morkit.reward_models.catalog import relative_scores
from morkit.reward_models.cost import CostTable
from morkit.selection.base import (
    Choice,
    CostLimit,
    Neighbours,
    SelectionMethod,
    chosen_in_place,
    method_label,
)
from morkit.selection.budget import Budget, budget_costs, budget_details, cost_limit
from morkit.selection.coverage import like_neighbours
from morkit.selection.methods import DEFAULT_NEIGHBOURHOOD
from morkit.selection.mor import available_members
from morkit.selection.neighbourhood import NeighbourSearch


@dataclass(frozen=True)
class Selection:
    """Why a query gets the ensemble it gets: the pick, its evidence, the neighbours, the runner-ups."""

    query_id: str
    method: str  # the method that chose, with why where it chose in place of the one asked for (method_label)
    choice: Choice
    normalizer: str  # the transform the weights apply to, named for the output contract
    neighbours: Neighbours
    skipped_rms: Mapping[str, str] = field(default_factory=dict)  # pool RM this query cannot use -> why
    cost: float | None = None  # what scoring the query with the pick costs (COST_UNIT), when costs are known
    full_cost: float | None = None  # what scoring it with every pool RM it can use costs, when costs are known

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
            **({"cost": self.cost} if self.cost is not None else {}),
            **({"budget": dict(self.choice.details["budget"])} if "budget" in self.choice.details else {}),
        }


NOT_APPLICABLE = "not applicable: "
NEEDS_SIBLINGS = ("needs sibling answers: it scores an answer against the others scored with it, so a lone answer "
                  "would get the same score whatever it says")
"""Why a query with one candidate skips an RM with `relative_scores` (math-consensus)."""
NO_RM_APPLIES = Choice(Ensemble((), (), "none"), "raw", float("nan"), (),
                       {"criterion": None, "fallback": "no pool RM applies to this query: its candidates tie",
                        **chosen_in_place("none", "no pool RM applies to this query")})
"""The choice for a query that no pool RM applies to (a code query in a math-only pool): no scores, a tie
broken by the seeded shuffle, no confidence; an error would fail a whole run over one domain."""


def method_summary(selections: Iterable[Selection]) -> str:
    """The methods that actually chose, counted, and why any chose in another's place, for a run's one-line
    summary: "learned", "pres: learned needs 20 mixed pool questions", "learned 70, pres 7: lone answer: ..."."""
    counts: Counter[str] = Counter()
    reasons: dict[str, None] = {}  # in first-seen order
    for selection in selections:
        details = selection.choice.details
        counts[details.get("chosen_by") or selection.method] += 1
        if details.get("chosen_because"):
            reasons[details["chosen_because"]] = None
    if not counts:
        return "no queries"
    shown = counts.most_common()
    head = shown[0][0] if len(shown) == 1 else ", ".join(f"{name} {n}" for name, n in shown)
    return head + (": " + "; ".join(reasons) if reasons else "")


def normalizer_name(pool: QuestionPool, transform: str) -> str:
    """The output contract's name for a choice's transform: the pool's normaliser kind for "pool-zscore"."""
    return pool.normalizer.kind if transform == "pool-zscore" else transform


class EnsembleChooser:
    """Routes queries to ensembles: finds each one's pool neighbours and asks the method to pick from the RMs
    the query can use; embeds query questions with the pool's own embedder (loaded when first needed).
    `neighbourhood`: which k pool questions a query reads (NEIGHBOURHOODS); `budget`: each query's cost limit,
    passed to the method; `costs`: each pool RM's cost per candidate, pricing each selection (a budget needs it)."""

    def __init__(self, pool: QuestionPool, method: SelectionMethod, method_name: str, *, k: int,
                 runnable: Iterable[str] = (), embedder: Any = None, device: str | None = None,
                 neighbourhood: str = DEFAULT_NEIGHBOURHOOD, budget: Budget | None = None,
                 costs: CostTable | None = None):
        if budget is not None and costs is None:
            raise ValueError("a budget needs the pool RMs' costs")
        if budget is not None and budget.active:
            budget_costs(costs)
        self.pool = pool
        self.budget = budget
        self.costs = costs
        self.method = method
        self.method_name = method_name
        self.finder = NeighbourSearch(pool, k, neighbourhood)
        self.runnable = frozenset(runnable) & set(pool.rm_names)
        self._rules = dict(zip(pool.rm_names, rm_rules(pool.rm_names, pool.meta.get("applies"))))
        self._relative = frozenset(n for n in pool.rm_names if relative_scores(n))
        self._pres: Any = None  # a lone answer's method where the pick compares answers (`_for_lone`)
        self._embedder = embedder
        self.device = device  # where the pool's embedder loads, when first needed

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from morkit.question_pool.embed import load_embedder

            embedder = load_embedder(self.pool.embedder, self.device)
            self.pool.check_dim(embedder.dim)  # a pool.json that names another model's dimension: one line
            self._embedder = embedder
        return self._embedder

    k = property(lambda self: self.finder.k)
    neighbourhood = property(lambda self: self.finder.neighbourhood)

    def neighbours(self, vectors: np.ndarray) -> list[Neighbours]:
        """Each query embedding's pool neighbours in the chooser's neighbourhood (NeighbourSearch.find)."""
        return self.finder.find(vectors)

    def skipped(self, query: Query) -> dict[str, str]:
        """The pool RMs this query cannot use, in pool order, each with why: the RM does not apply to it (its
        domain or fields, morkit.reward_models.applicability), or its scores are not on every candidate and
        it may not run (not registered here, or a candidate has no text); with one candidate, an RM that scores
        an answer against its siblings (NEEDS_SIBLINGS)."""
        cached = available_members(query, self.pool.rm_names)
        has_text = all(c.text is not None for c in query.candidates)
        lone = len(query.candidates) == 1
        out = {}
        for name in self.pool.rm_names:
            why = self._rules[name].skip_reason(query, name)
            if why is not None:
                out[name] = f"{NOT_APPLICABLE}{why}"
            elif lone and name in self._relative:
                out[name] = NEEDS_SIBLINGS
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

    def choose_many(self, queries: Sequence[Query], *, vectors: np.ndarray | None = None) -> list[Selection]:
        """Each query's Selection: its neighbours, the RMs it can use and the method's pick among them (or PRES's,
        for a lone answer a ranker cannot score alone); `vectors`: the questions' embeddings, None embeds them."""
        if vectors is None:
            vectors = self.embedder.encode([q.question for q in queries])
        out = []
        for query, neighbours in zip(queries, self.neighbours(vectors)):
            skipped = self.skipped(query)
            usable = self._usable(skipped)
            neighbours = like_neighbours(self.pool, neighbours, usable)
            if not usable and all(why.startswith(NOT_APPLICABLE) for why in skipped.values()):
                out.append(Selection(query.id, self.label(NO_RM_APPLIES), NO_RM_APPLIES, "raw", neighbours, skipped,
                                     *self._priced((), (), len(query.candidates))))
                continue
            limit = self.limit(query, usable)
            try:
                if limit is None:
                    choice = self.method.choose(neighbours, frozenset(usable))
                else:
                    choice = self.method.choose(neighbours, frozenset(usable), limit)
                if len(query.candidates) == 1:
                    choice = self._for_lone(choice, neighbours, usable, limit)
            except LookupError as exc:
                reasons = "; ".join(f"{name}: {why}" for name, why in skipped.items())
                raise InputError(f"query {query.id!r}: {exc}" + (f" ({reasons})" if reasons else "")) from exc
            if limit is not None:
                spent = budget_details(limit, choice.ensemble.members, self.budget)
                choice = replace(choice, details={**choice.details, "budget": spent})
            out.append(Selection(query.id, self.label(choice), choice,
                                 normalizer_name(self.pool, choice.transform), neighbours, skipped,
                                 *self._priced(choice.ensemble.members, usable, len(query.candidates))))
        return out

    def limit(self, query: Query, usable: Sequence[str]) -> CostLimit | None:
        """The query's cost limit under the chooser's budget (None: no budget, or one that limits nothing)."""
        if self.budget is None or not self.budget.active:
            return None
        return cost_limit(self.budget, self.costs, self.pool.rm_names, usable, len(query.candidates))

    def _priced(self, members: Sequence[str], usable: Sequence[str], candidates: int
                ) -> tuple[float | None, float | None]:
        """(cost of the pick, cost of every usable RM) for a query's candidates; (None, None) without costs."""
        if self.costs is None:
            return None, None
        return self.costs.of(members, candidates), self.costs.of(usable, candidates)

    def label(self, choice: Choice) -> str:
        """The Selection's `method` for a choice: the method asked for, or the one that chose in its place, with why
        ("pres (learned needs 20 mixed pool questions)")."""
        return method_label(choice.details.get("chosen_by", self.method_name), choice.details.get("chosen_because"))

    def _for_lone(self, choice: Choice, neighbours: Neighbours, usable: Sequence[str],
                  limit: CostLimit | None = None) -> Choice:
        """A lone answer's choice: a ranker whose score of one answer cannot move (all its features compare the
        answer with its siblings) gives way to PRES, whose weights apply to pool-standardised scores, so the
        reward still says how good the answer is."""
        if choice.scorer is None or getattr(choice.scorer, "scores_alone", False):
            return choice
        from morkit.selection.pres import PRES

        self._pres = self._pres or PRES(self.pool)
        fallback = (self._pres.choose(neighbours, frozenset(usable)) if limit is None
                    else self._pres.choose(neighbours, frozenset(usable), limit))
        return replace(fallback, details={**fallback.details, "fallback": "pres: the learned ranker scores a lone "
                                          "answer alike whatever it says (its features compare answers)",
                                          **chosen_in_place("pres", f"lone answer: the {self.method_name} ranker "
                                                                    "compares answers")})
