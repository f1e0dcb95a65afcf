"""`morkit search`: agents answer each query, a per-query MoR ensemble verifies, ACS (or a baseline) decides."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from morkit.cli_common import add_scoring_options, build_rms, open_cache, pool_selector


def make_runner(args: argparse.Namespace, pool: Any) -> Any:
    from morkit.llm.agents import load_agents
    from morkit.search.run import SearchRunner

    selector = pool_selector(pool, args, args.selection, k=args.k)
    return SearchRunner(selector, load_agents(args.agents), lambda name: build_rms([name], [], args)[0],
                        open_cache(args), {"k": args.top_k, "residual": not args.no_residual, "agent": args.sc_agent})


def cmd_search(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from morkit.data.contract import load_queries
    from morkit.question_pool.store import load_pool
    from morkit.search.run import run_all

    started = time.perf_counter()
    pool = load_pool(args.pool)
    queries = load_queries(args.input)
    runner = make_runner(args, pool)
    methods = args.method or ["acs"]
    try:
        records = run_all(runner, queries, methods, args.output,
                          progress=lambda xs: tqdm(xs, desc="search", unit="query", disable=args.quiet))
    finally:
        if runner.cache is not None:
            runner.cache.close()
    for name in methods:
        graded = [r["results"][name]["correct"] for r in records if r["results"][name]["correct"] is not None]
        acc = f", accuracy {sum(graded) / len(graded):.3f} on {len(graded)} with a reference" if graded else ""
        print(f"{name}: {len(records)} queries{acc}", file=sys.stderr)
    print(f"searched {len(records)} queries in {time.perf_counter() - started:.1f}s -> {args.output}", file=sys.stderr)
    return 0


def add_search_parser(sub: Any) -> None:
    from morkit.search.run import METHODS
    from morkit.selection.selector import DEFAULT_METHOD as DEFAULT_SELECTION
    from morkit.selection.selector import METHODS as SELECTIONS

    p = sub.add_parser("search", help="answer queries with an agent pool, verified by a per-query RM ensemble (ACS)",
                       description="Each agent in --agents answers each query (or the query's own candidate texts "
                                   "are used); the pool picks the query's RM ensemble; then Agent Collaboration "
                                   "Search (or a baseline) builds the final answer. Each output line holds the "
                                   "ensemble, the answers, and per method the answer, score, costs and the trace. "
                                   "Finished queries go to OUT.partial as they complete, so a rerun resumes.")
    p.add_argument("input", help="query JSONL (architecture.md contract); candidates are optional")
    p.add_argument("--pool", required=True, help="pool directory (morkit pool build)")
    p.add_argument("-o", "--output", required=True, help="output JSONL, written atomically at the end")
    p.add_argument("--agents", help="agents.toml (default: the packaged offline SmolLM2 pool)")
    p.add_argument("--method", action="append", choices=tuple(METHODS),
                   help="search method, repeatable to compare on the same answers (default acs)")
    p.add_argument("--top-k", type=int, default=2, help="ACS initial set size (default 2, as in the paper)")
    p.add_argument("--no-residual", action="store_true", help="skip ACS's final residual aggregation")
    p.add_argument("--sc-agent", help="agent whose samples self-consistency votes over (default: the first)")
    p.add_argument("--selection", choices=tuple(SELECTIONS), default=DEFAULT_SELECTION,
                   help=f"how the per-query RM ensemble is chosen (default {DEFAULT_SELECTION})")
    p.add_argument("--k", type=int, default=100, help="pool neighbours per query (default 100)")
    add_scoring_options(p)
    p.set_defaults(func=cmd_search)
