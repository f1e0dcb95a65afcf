"""Loops as a service: run a registered test-time-scaling loop on each query with morkit's verifier
(`morkit.run_loop("tmas", queries)`; `pool=` verifies with the query's MoR ensemble). Guide: docs/loops/index.md."""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.llm.agents import AgentsConfig, LLMPool
from morkit.loops.registry import LOOPS, LoopOptions, LoopSetup, check_loop, loop_critic
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.selection.methods import SelectOptions
from morkit.selection.router import Router
from morkit.services.searching import agents_config
from morkit.verify.base import Verifier
from morkit.verify.kinds import VERIFIERS, VerifierSetup


def verifiers_for(kind: str, pool: QuestionPool | None, critic: Verifier, selection: SelectOptions,
                  session: ScoringSession) -> Callable[[Query], Any]:
    """query -> its verifier, for a registered verifier kind (see morkit.verify.kinds)."""
    entry = VERIFIERS.get(kind)
    needs_pool = bool(entry.meta.get("needs_pool"))
    if needs_pool and pool is None:
        raise InputError(f"verifier {kind!r} needs a pool (--pool; the MoR ensemble comes from a pool)")
    router = Router.from_options(pool, selection, device=session.options.device) if needs_pool else None
    return entry.load()(VerifierSetup(critic, router, session, session.cache))


def run_loop(loop: str, queries: Sequence[Query], *, agents: AgentsConfig | str | os.PathLike | None = None,
             pool: QuestionPool | None = None, verifier: str | None = None, options: LoopOptions = LoopOptions(),
             config: Any = None, selection: SelectOptions = SelectOptions(),
             scoring: ScoringOptions = ScoringOptions()) -> list[dict[str, Any]]:
    """One record per query: `{"id", ...LoopResult}` with the answer, score, stop reason, costs, state, trace.

    `verifier`: a name in VERIFIERS, "llm", "mor" or "both" (default: mor with a pool, else llm).

    Args:
        loop: A name registered in LOOPS (`tmas`, `streamma`, `atlas`).
        queries: The problems; each query's question is solved and its `reference` passed to the loop.
        agents: An AgentsConfig, an agents.toml path, or None for the packaged offline SmolLM2 pool. The LLM
            critic of `llm` and `both` is the loop's (`loops.registry.loop_critic`): TMAS's verification agent
            on the first agent's model (`--set verification_agent=critic`: the generic critic on the aggregator),
            the generic critic on the aggregator for StreamMA and ATLAS.
        pool: A question pool; verifiers that need one (`mor`, `both`) pick each query's MoR ensemble from it.
        verifier: A name in VERIFIERS; None is `mor` with a pool, else `llm`.
        options: What every loop shares: the budget, the seed, the solvers' token limit, `--set` settings.
        config: The loop's own config (TMASConfig, StreamMAConfig, ATLASConfig), used as written, with the seed,
            token limit and settings of `options` laid over; None: the config's defaults. A TMAS or StreamMA
            `max_tokens` left None is the solver agent's.
        selection: How each query's ensemble is chosen (with a pool).
        scoring: How the member RMs run; `progress` also shows the loop's progress bar.

    Returns:
        One JSON-ready record per query: its `id` and the LoopResult (answer, score, stop reason, costs, state,
        trace).

    Raises:
        InputError: The loop or verifier is unknown, the verifier needs a pool and none is given, `config` is not
            the loop's config class, or a setting is unknown or bad.
    """
    from tqdm import tqdm

    check_loop(loop, options, config)
    make_loop = LOOPS.load(loop)
    team = agents_config(agents)
    llms = LLMPool()
    critic = loop_critic(loop, team, llms, options, config)  # the LOOPS entry's critic (TMAS: its verification agent)
    records = []
    with ScoringSession(scoring) as session:
        verifier_for = verifiers_for(verifier or ("mor" if pool is not None else "llm"), pool, critic, selection,
                                     session)
        for query in tqdm(queries, desc=loop, unit="query", disable=not scoring.progress):
            setup = LoopSetup(team, llms, verifier_for(query), options, config)
            result = make_loop(setup).run(query.question, query.reference)
            records.append({"id": query.id, **result.to_json()})
    return records
