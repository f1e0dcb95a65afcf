"""The pipeline's comparison on the test split, per benchmark: accuracy and cost of each way to pick an answer
(oracle, best single agent, majority vote, best-of-N with the best RM, MoR rank, each search method).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from morkit.core.types import Candidate, Query
from morkit.question_pool.graders import GRADERS, grader_name, text_shares
from morkit.selection.mor import member_matrix, pick_best


@dataclass(frozen=True)
class Cost:
    tokens: float = 0.0
    llm_calls: int = 0
    rm_calls: int = 0
    seconds: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.tokens + other.tokens, self.llm_calls + other.llm_calls, self.rm_calls + other.rm_calls,
                    self.seconds + other.seconds)

    def share(self, part: float) -> "Cost":
        """This cost scaled by `part` (one sample's share of a request of several)."""
        return Cost(self.tokens * part, self.llm_calls, self.rm_calls, self.seconds * part)


@dataclass
class Outcome:
    """One method on one benchmark: correct picks and summed costs over the test questions."""

    method: str
    detail: str = ""
    correct: float = 0.0
    questions: int = 0
    cost: Cost = Cost()
    reference: bool = False  # a ceiling, not a method a user can run

    def add(self, correct: bool | float, cost: Cost) -> None:
        self.correct += float(correct)
        self.questions += 1
        self.cost += cost

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "detail": self.detail, "reference": self.reference,
                "accuracy": self.correct / self.questions if self.questions else float("nan"),
                "questions": self.questions, "tokens": round(self.cost.tokens), "llm_calls": self.cost.llm_calls,
                "rm_calls": self.cost.rm_calls, "seconds": round(self.cost.seconds, 3)}


def generation_cost(candidates: Sequence[Candidate], agent: str | None = None) -> Cost:
    """Tokens, requests and seconds that made these candidates (one request per agent: its n samples)."""
    tokens, calls, seconds, seen = 0.0, 0, 0.0, set()
    for c in candidates:
        if agent is not None and c.agent != agent:
            continue
        g = c.extra.get("generation") or {}
        tokens += float(g.get("completion_tokens") or 0)
        if c.agent not in seen:  # the request's prompt and wall time are shared by its samples
            seen.add(c.agent)
            tokens += float(g.get("prompt_tokens") or 0)
            calls += 1
            seconds += float(g.get("seconds") or 0)
    return Cost(tokens, calls, 0, seconds)


def majority_pick(query: Query) -> int:
    """The candidate most candidates agree with, by the query's grader (ties: seeded by the query id)."""
    name = grader_name(query)
    texts = [c.text for c in query.candidates]
    shares = GRADERS.load(name)().vote_shares(texts) if name else text_shares(texts)
    return pick_best(query.id, np.asarray(shares, dtype=np.float64)).best_index


def best_of_n_pick(query: Query, rm: str, reduction: str) -> int | None:
    """The candidate `rm` scores highest (ties: seeded by the query id); None when it scored none."""
    values = member_matrix(query, [rm], reduction)[:, 0]
    if not np.isfinite(values).any():
        return None
    return pick_best(query.id, np.where(np.isfinite(values), values, -np.inf)).best_index


def best_agent(queries: Sequence[Query]) -> str | None:
    """The agent whose candidates are most often correct (ties: by name)."""
    right: dict[str, list[float]] = defaultdict(list)
    for q in queries:
        for c in q.candidates:
            if c.agent is not None and c.correct is not None:
                right[c.agent].append(float(c.correct))
    return min(right, key=lambda a: (-np.mean(right[a]), a)) if right else None


def best_rm(queries: Sequence[Query], rms: Sequence[str], reduction: str) -> str | None:
    """The RM whose top pick is most often correct on these (validation) queries (ties: config order)."""
    def accuracy(rm: str) -> float:  # a question the RM did not score counts as a miss
        picks = [(q, best_of_n_pick(q, rm, reduction)) for q in queries if q.candidates]
        return float(np.mean([i is not None and bool(q.candidates[i].correct) for q, i in picks] or [0.0]))

    return max(rms, key=lambda rm: accuracy(rm)) if rms else None


def grader(name: str, strict: bool = True) -> Any:
    """The registered grader `name`, strict or not where it has the mode (math); others as they are."""
    made = GRADERS.load(name)()
    has_mode = is_dataclass(made) and "strict" in {f.name for f in fields(made)}
    return replace(made, strict=strict) if has_mode else made


def grade_text(query: Query, text: str | None, strict: bool = True) -> bool:
    name = grader_name(query)
    return bool(name and text and grader(name, strict).grade(query, [text])[0].correct)


def regraded(queries: Sequence[Query], strict: bool) -> list[Query]:
    """The queries with candidate labels as this evaluation grades: the label stage grades strictly, so a
    lenient evaluation regrades the candidates of queries whose grader has a strict mode (math)."""
    if strict:
        return list(queries)
    out = []
    for q in queries:
        name = grader_name(q)
        lenient = grader(name, strict=False) if name else None
        if lenient is None or not hasattr(lenient, "strict") or any(c.text is None for c in q.candidates):
            out.append(q)
            continue
        grades = lenient.grade(q, [c.text for c in q.candidates])
        out.append(replace(q, candidates=tuple(replace(c, correct=g.correct) for c, g in zip(q.candidates, grades))))
    return out


@dataclass
class BenchmarkEvaluation:
    """Everything the report says about one benchmark."""

    name: str
    validation: int
    test: int
    outcomes: list[Outcome] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"benchmark": self.name, "validation_questions": self.validation, "test_questions": self.test,
                "methods": [o.to_json() for o in self.outcomes]}


def evaluate_benchmark(name: str, validation: Sequence[Query], test: Sequence[Query], rms: Sequence[str],
                       reduction: str, rm_seconds: Mapping[str, float], rankings: Mapping[str, Mapping[str, Any]],
                       searches: Mapping[str, Mapping[str, Any]], search_methods: Sequence[str],
                       strict: bool = True) -> BenchmarkEvaluation:
    """Each method's outcome on one benchmark's test questions (see the module doc)."""
    validation, test = regraded(validation, strict), regraded(test, strict)
    agent, rm = best_agent(validation), best_rm(validation, rms, reduction)
    oracle = Outcome("oracle (pass@N)", "any candidate correct", reference=True)
    single = Outcome("best single agent", agent or "none")
    majority = Outcome("majority vote", "all agents")
    bon = Outcome("best-of-N, best single RM", rm or "none")
    mor = Outcome("MoR rank", "per-query ensemble")
    searched = {m: Outcome(m.upper() if m == "acs" else m, "search over the agents' answers") for m in search_methods}
    for q in test:
        everyone = generation_cost(q.candidates)
        if not q.candidates:
            for outcome in (oracle, majority, bon, mor, *searched.values()):
                outcome.add(False, everyone)
            single.add(False, Cost())
            continue
        per_rm = {r: Cost(0, 0, len(q.candidates), rm_seconds.get(r, 0.0)) for r in rms}
        oracle.add(any(c.correct for c in q.candidates), everyone)
        mine = [c for c in q.candidates if c.agent == agent]
        single.add(np.mean([bool(c.correct) for c in mine]) if mine else False,  # one sample, and its share
                   generation_cost(mine).share(1 / max(len(mine), 1)))
        majority.add(bool(q.candidates[majority_pick(q)].correct), everyone)
        pick = best_of_n_pick(q, rm, reduction) if rm else None
        bon.add(pick is not None and bool(q.candidates[pick].correct), everyone + per_rm.get(rm, Cost()))
        ranking = rankings.get(q.id)
        if ranking is not None:
            members = ranking["ensemble"]["members"]
            cost = sum((per_rm.get(m, Cost()) for m in members), everyone)
            mor.add(bool(q.candidates[ranking["best_index"]].correct), cost)
        for method, outcome in searched.items():
            result = (searches.get(q.id) or {}).get("results", {}).get(method)
            if result is None:
                continue
            own = Cost(float(result.get("llm_tokens", 0)), int(result.get("llm_calls", 0)),
                       int(result.get("rm_calls", 0)), float(result.get("seconds", 0)))
            members = (searches[q.id].get("ensemble") or {}).get("members", [])  # the answers' scores it reused
            cost = sum((per_rm.get(m, Cost()) for m in members), everyone + own)
            outcome.add(grade_text(q, result.get("answer"), strict), cost)
    outcomes = [oracle, single, majority, bon, mor, *searched.values()]
    return BenchmarkEvaluation(name, len(validation), len(test), [o for o in outcomes if o.questions or o is mor])


def evaluate(run: Any) -> dict[str, Any]:
    """The report of a finished run: per benchmark, each method's accuracy and costs, and the stage timings."""
    from morkit.data.contract import load_queries
    from morkit.data.jsonl import read_jsonl

    config = run.config
    validation = load_queries(run.path("validation.scored.jsonl"))
    test = load_queries(run.path("test.scored.jsonl"))
    scored = run.facts("test.score").get("rm_seconds", {})
    per_question = {rm: seconds / max(len(test), 1) for rm, seconds in scored.items()}
    rankings = {r["id"]: r for _, r in read_jsonl(run.path("test.ranked.jsonl"))}
    searches = ({r["id"]: r for _, r in read_jsonl(run.path("test.search.jsonl"))}
                if config.search else {})
    reduction = config.pool.reduction
    benchmarks = []
    for benchmark in config.benchmarks:
        mine = (lambda qs: [q for q in qs if q.extra.get("benchmark") == benchmark.name])
        benchmarks.append(evaluate_benchmark(benchmark.name, mine(validation), mine(test), config.rms, reduction,
                                             per_question, rankings, searches, config.search,
                                             config.search_options.strict_grading).to_json())
    stages = {name: {k: v for k, v in run.record["stages"][name].items() if k not in ("key", "running")}
              for name in run.visited}  # this run's stages only: not those of an earlier config
    return {"config": config.source, "workdir": str(config.workdir), "agents": config.agents or "packaged local",
            "rms": list(config.rms), "search": list(config.search), "aggregator": config.search_options.aggregator,
            "strict_grading": config.search_options.strict_grading, "benchmarks": benchmarks, "stages": stages}
