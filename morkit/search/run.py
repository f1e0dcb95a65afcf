"""Run search methods over many queries: agents answer, a per-query MoR verifier is chosen, each method runs.
Finished queries go to a work file as they complete, so an interrupted run resumes where it stopped; the
final output is written atomically from it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from morkit.core.grading import is_correct
from morkit.core.types import Candidate, Query
from morkit.llm.agents import (
    AgentAnswer,
    AgentsConfig,
    LLMPool,
    generate_answers,
    question_asked,
)
from morkit.question_pool.graders import grader_name
from morkit.search.aggregate import Aggregator
from morkit.search.base import SearchResult
from morkit.search.methods import SEARCH_METHODS, SearchOptions, SearchSetup
from morkit.verify.mor import query_verifier


@dataclass
class SearchRunner:
    """Holds what is shared across queries: the pool's router, member RMs (built on demand), cache, agents and
    their LLMs."""

    router: Any  # morkit.selection.router.Router over the pool
    config: AgentsConfig
    rms: Any  # name -> built RM, e.g. a ScoringSession
    cache: Any = None
    options: SearchOptions = SearchOptions()
    llms: LLMPool = field(default_factory=LLMPool)

    def answers(self, query: Query) -> tuple[list[AgentAnswer], list[str], int]:
        """The query's own candidate texts if it has them, else fresh agent answers; (answers, failures, calls)."""
        given = [AgentAnswer(c.agent or "input", c.text) for c in query.candidates if c.text is not None]
        if given:
            return given, [], 0
        answers, failures = generate_answers(self.config, question_asked(query), self.llms)
        return answers, failures, len(self.config.agents)

    def run(self, query: Query, methods: Sequence[str]) -> "QueryRun":
        answers, failures, agent_calls = self.answers(query)
        probe = replace(query, candidates=tuple(Candidate(text=a.text, agent=a.agent) for a in answers))
        selection, verifier = query_verifier(self.router, probe, self.rms, self.cache)
        spec = self.config.aggregator
        aggregator = Aggregator(self.llms.llm(spec), spec.params, **({"system": spec.system} if spec.system else {}),
                                shown_question=question_asked(query), prompt=self.options.aggregator_prompt)
        setup = SearchSetup(verifier, aggregator, self.config, self.options, kind=grader_name(query))
        results = {name: SEARCH_METHODS.load(name)(setup).run(query.question, answers) for name in methods}
        return QueryRun(query, selection, tuple(answers), agent_calls, tuple(failures), results,
                        self.options.strict_grading)


@dataclass(frozen=True)
class QueryRun:
    """One query's search: the agents' answers, the chosen ensemble, and each method's result; `correct`
    in the output is graded against the reference, with `strict`: on a stated final answer only."""

    query: Query
    selection: Any
    answers: tuple[AgentAnswer, ...]
    agent_calls: int
    agent_failures: tuple[str, ...]
    results: Mapping[str, SearchResult]
    strict: bool = False

    def to_json(self) -> dict[str, Any]:
        results = {}
        for name, result in self.results.items():
            correct = is_correct(result.answer, self.query.reference, strict=self.strict)
            results[name] = {**result.to_json(), "correct": correct}
        return {"id": self.query.id, "ensemble": self.selection.to_json()["ensemble"],
                "answers": [{"agent": a.agent, "text": a.text} for a in self.answers],
                "agent_calls": self.agent_calls, "agent_failures": list(self.agent_failures), "results": results}


def completed(path: Path) -> dict[str, dict]:
    """Records already in a work file (a torn last line from a crash is ignored)."""
    from morkit.data.jsonl import logged_records

    return {record["id"]: record for record in logged_records(path)}


def run_all(runner: SearchRunner, queries: Sequence[Query], methods: Sequence[str], output: str | os.PathLike,
            progress: Callable[[Iterable], Iterable] = lambda x: x) -> list[dict]:
    """Search every query, resuming from `<output>.partial`; writes `output` atomically at the end."""
    from morkit.data.jsonl import encoded_line, write_jsonl

    work = Path(str(output) + ".partial")
    done = {k: r for k, r in completed(work).items() if set(methods) <= set(r.get("results", {}))}
    with open(work, "ab") as log:
        for query in progress([q for q in queries if q.id not in done]):
            record = runner.run(query, methods).to_json()
            log.write(encoded_line(record, str(work), len(done) + 1))
            log.flush()
            done[query.id] = record
    records = [done[q.id] for q in queries]
    write_jsonl(output, records)
    work.unlink()
    return records
