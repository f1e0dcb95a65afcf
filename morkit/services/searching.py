"""Search as a service: agents answer each query, the pool picks its MoR verifier, each method builds the answer.

    records = morkit.run_search(queries, pool, agents="agents.toml", methods=["acs", "majority"])
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.llm.agents import AgentsConfig, load_agents
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.search.methods import DEFAULT_SEARCH, SEARCH_METHODS, SearchOptions
from morkit.search.run import SearchRunner, run_all
from morkit.selection.methods import SelectOptions
from morkit.selection.router import Router


def agents_config(agents: AgentsConfig | str | os.PathLike | None) -> AgentsConfig:
    """An AgentsConfig as given, or parsed from an agents.toml path (None: the packaged offline SmolLM2 pool)."""
    return agents if isinstance(agents, AgentsConfig) else load_agents(agents)


def run_search(queries: Sequence[Query], pool: QuestionPool, *, agents: AgentsConfig | str | os.PathLike | None = None,
           methods: Sequence[str] = (DEFAULT_SEARCH,), options: SearchOptions = SearchOptions(),
           selection: SelectOptions = SelectOptions(), scoring: ScoringOptions = ScoringOptions(),
           output: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """One record per query: the ensemble, the agents' answers, and per method its answer, score, costs, trace.

    With `output`, finished queries go to `<output>.partial` as they complete (a rerun resumes) and the
    records are written to `output` atomically at the end.

    Args:
        queries: The questions to search answers for.
        pool: The question pool that picks each query's MoR verifier.
        agents: An AgentsConfig, an agents.toml path, or None for the packaged offline SmolLM2 pool.
        methods: Names registered in SEARCH_METHODS, each run on every query.
        options: The search methods' settings (ACS, aggregator, self-consistency agent, grading).
        selection: How each query's ensemble is chosen.
        scoring: How the member RMs run; `progress` also shows the search's progress bar.
        output: A JSONL file for the records, written at the end (resumable via `<output>.partial`); None writes
            nothing.

    Returns:
        One JSON-ready record per query: `id`, `ensemble`, `answers`, agent calls and failures, and `results` (per
        method: answer, score, correct, costs, trace).

    Raises:
        InputError: A method is unknown, or `options.sc_agent` is not one of the agents.
    """
    from tqdm import tqdm

    for name in methods:
        SEARCH_METHODS.get(name)  # an unknown method fails before any work
    config = agents_config(agents)
    names = [a.name for a in config.agents]
    if options.sc_agent is not None and options.sc_agent not in names:
        raise InputError(f"self-consistency agent {options.sc_agent!r} is not in {config.source}; agents: "
                         + ", ".join(names))
    router = Router.from_options(pool, selection, device=scoring.device)

    def bar(items: Any) -> Any:
        return tqdm(items, desc="search", unit="query", disable=not scoring.progress)

    with ScoringSession(scoring) as session:
        runner = SearchRunner(router, config, session, session.cache, options)
        if output is not None:
            return run_all(runner, queries, methods, output, progress=bar)
        return [runner.run(query, methods).to_json() for query in bar(queries)]
