"""`morkit loop tmas|streamma|atlas`: run a test-time-scaling loop per query with morkit's verifier.

Offline by default: every role is the embedded SmolLM2 (the packaged agents.toml) and the verifier is
an LLM critic; with --pool, each query's MoR ensemble verifies (--verifier both adds the critic).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from morkit.cli_common import add_scoring_options, build_rms, open_cache, pool_selector
from morkit.core.errors import InputError

LOOPS = ("tmas", "streamma", "atlas")


def _budget(args: argparse.Namespace) -> Any:
    from morkit.loops.base import Budget

    return Budget(args.max_calls, args.max_total_tokens, args.max_seconds)


def _loop_factory(args: argparse.Namespace, config: Any, llms: Any) -> Callable[[Any], Any]:
    """verifier -> a ready loop object, for the chosen loop and agents."""
    from morkit.llm.base import SamplingParams

    agents = config.agents
    main = llms.llm(agents[0])
    if args.loop == "tmas":
        from morkit.loops.tmas.loop import TMAS, TMASConfig

        cfg = TMASConfig(iterations=args.iterations, solutions=args.solutions, verifications=args.verifications,
                         epsilon=args.epsilon, seed=args.seed, max_tokens=args.gen_tokens)
        return lambda verifier: TMAS(main, verifier, cfg, _budget(args))
    if args.loop == "streamma":
        from morkit.loops.streamma.loop import StreamMA, StreamMAConfig

        chain = [llms.llm(agents[i % len(agents)]) for i in range(args.chain)]
        cfg = StreamMAConfig(agents=args.chain, protocol=args.protocol, step_marker=args.step_marker,
                             max_tokens=args.gen_tokens, seed=args.seed)
        return lambda verifier: StreamMA(chain, verifier, cfg, _budget(args))
    from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Solver

    solvers = {a.name: Solver(llms.llm(a), SamplingParams(1, a.params.temperature, a.params.top_p, args.gen_tokens,
                                                          a.params.stop, args.seed), **({"system": a.system} if a.system else {}))
               for a in agents}
    cfg = ATLASConfig(max_explores=args.max_explores)
    return lambda verifier: ATLAS(llms.llm(config.aggregator), solvers, verifier, cfg, _budget(args))


def _verifiers(args: argparse.Namespace, llms: Any, config: Any) -> tuple[Callable[[Any], Any], Any]:
    """query -> its verifier, plus the score cache to close at the end."""
    from morkit.selection.verifier import CombinedVerifier, LLMVerifier, mor_verifier

    critic = LLMVerifier(llms.llm(config.aggregator))
    if not args.pool:
        if args.verifier != "llm":
            raise InputError(f"--verifier {args.verifier} needs --pool (the MoR ensemble comes from a pool)")
        return (lambda query: critic), None
    from morkit.question_pool.store import load_pool

    pool = load_pool(args.pool)
    selector = pool_selector(pool, args, args.selection)
    cache, built = open_cache(args), {}

    def rm(name: str) -> Any:
        if name not in built:
            built[name] = build_rms([name], [], args)[0]
        return built[name]

    def verifier(query: Any) -> Any:
        selection = selector.select(query)
        mor = mor_verifier(selection, pool, {m: rm(m) for m in selection.choice.ensemble.members}, cache)
        if args.verifier == "llm":
            return critic
        return CombinedVerifier(mor, critic) if args.verifier == "both" else mor

    return verifier, cache


def cmd_loop(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from morkit.data.contract import load_queries
    from morkit.data.jsonl import write_jsonl
    from morkit.llm.agents import LLMPool, load_agents

    started = time.perf_counter()
    args.verifier = args.verifier or ("mor" if args.pool else "llm")
    queries = load_queries(args.input)
    config = load_agents(args.agents)
    llms = LLMPool()
    verifier_for, cache = _verifiers(args, llms, config)
    make_loop = _loop_factory(args, config, llms)
    records = []
    try:
        for query in tqdm(queries, desc=args.loop, unit="query", disable=args.quiet):
            result = make_loop(verifier_for(query)).run(query.question, query.reference)
            records.append({"id": query.id, **result.to_json()})
    finally:
        if cache is not None:
            cache.close()
    write_jsonl(args.output, records)
    print(f"{args.loop}: {len(records)} queries in {time.perf_counter() - started:.1f}s -> {args.output}",
          file=sys.stderr)
    return 0


def add_loop_parser(sub: Any) -> None:
    from morkit.selection.selector import DEFAULT_METHOD, METHODS

    p = sub.add_parser("loop", help="run a test-time-scaling loop (TMAS, StreamMA, ATLAS) on each query",
                       description="Runs the loop on each query with the agents of --agents (default: the embedded "
                                   "SmolLM2, offline) and morkit's verifier; writes one JSON line per query with the "
                                   "answer, score, stop reason, calls, tokens, time, the loop's state (memory banks, "
                                   "evidence, latencies) and its full event trace.")
    p.add_argument("loop", choices=LOOPS)
    p.add_argument("input", help="query JSONL (architecture.md contract); a reference is only used for grading")
    p.add_argument("-o", "--output", required=True, help="output JSONL, written atomically")
    p.add_argument("--agents", help="agents.toml (default: the packaged offline SmolLM2 pool)")
    p.add_argument("--pool", help="pool directory: verify with each query's MoR ensemble")
    p.add_argument("--verifier", choices=("llm", "mor", "both"), default=None,
                   help="llm critic, MoR ensemble, or both added (default: mor with --pool, else llm)")
    p.add_argument("--selection", choices=tuple(METHODS), default=DEFAULT_METHOD, help="ensemble choice with --pool")
    p.add_argument("--max-calls", type=int, help="LLM call budget per query")
    p.add_argument("--max-total-tokens", type=int, help="token budget per query")
    p.add_argument("--max-seconds", type=float, help="wall-time budget per query")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--iterations", type=int, default=2, help="TMAS rounds (paper: up to 20)")
    p.add_argument("--solutions", type=int, default=4, help="TMAS solutions per round (paper: 8)")
    p.add_argument("--verifications", type=int, default=1, help="TMAS verification passes per solution (paper: 8)")
    p.add_argument("--epsilon", type=float, default=0.2, help="TMAS exploration probability (paper: 0.2)")
    p.add_argument("--chain", type=int, default=4, help="StreamMA agents in the chain")
    p.add_argument("--protocol", choices=("stream", "serial", "single"), default="stream", help="StreamMA protocol")
    p.add_argument("--step-marker", default="\n", help="StreamMA end-of-step marker (default: newline)")
    p.add_argument("--max-explores", type=int, default=3, help="ATLAS explore budget")
    p.add_argument("--gen-tokens", type=int, default=192, help="new tokens per solver generation (default 192)")
    add_scoring_options(p)
    p.set_defaults(func=cmd_loop)

