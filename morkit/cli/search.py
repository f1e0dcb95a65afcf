"""`morkit search`: agents answer each query, a per-query MoR ensemble verifies, ACS (or a baseline) decides."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from morkit.cli.args import (
    CONTRACT,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    add_agent_choices,
    add_scoring_options,
    add_select_options,
    agents_from_flags,
    choices_help,
    output_file,
    scoring_options,
    select_options,
)


def cmd_search(args: argparse.Namespace) -> int:
    from morkit.data.contract import load_queries
    from morkit.question_pool.pool import load_pool
    from morkit.search.methods import DEFAULT_SEARCH, SearchOptions
    from morkit.services.searching import run_search

    started = time.perf_counter()
    methods = args.method or [DEFAULT_SEARCH]
    scoring = scoring_options(args)
    output_file(args.output)
    agents = agents_from_flags(args)
    records = run_search(load_queries(args.input), load_pool(args.pool), agents=agents, methods=methods,
                         options=SearchOptions(top_k=args.top_k, residual=not args.no_residual,
                                               sc_agent=args.sc_agent, aggregator=args.aggregator,
                                               strict_grading=args.strict_grading, acs_step=args.acs_step,
                                               max_steps=args.max_steps or None, acs_order=args.acs_order,
                                               aggregator_prompt=args.aggregator_prompt),
                         selection=select_options(args), scoring=scoring, output=args.output)
    for name in methods:
        graded = [r["results"][name]["correct"] for r in records if r["results"][name]["correct"] is not None]
        how = "strict: stated final answers only" if args.strict_grading else "last number counts"
        accuracy = (f", accuracy {sum(graded) / len(graded):.3f} on {len(graded)} with a reference ({how})"
                    if graded else "")
        print(f"{name}: {len(records)} queries{accuracy}", file=sys.stderr)
    print(f"searched {len(records)} queries in {time.perf_counter() - started:.1f}s -> {args.output}", file=sys.stderr)
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    from morkit.search.acs import ACS_ORDERS, ACS_STEPS, PAPER_MAX_STEPS
    from morkit.search.aggregate import AGGREGATOR_PROMPTS, DEFAULT_AGGREGATOR_PROMPT
    from morkit.search.aggregators import AGGREGATORS, DEFAULT_AGGREGATOR
    from morkit.search.methods import DEFAULT_SEARCH, SEARCH_METHODS

    p = sub.add_parser("search", parents=[parent],
                       help="answer queries with an agent pool, verified by a per-query RM ensemble (ACS)",
                       description="Each agent in --agents answers each query (or the query's own candidate texts "
                                   "are used); the pool picks the query's RM ensemble; then Agent Collaboration "
                                   "Search (or a baseline) builds the final answer. Each output line holds the "
                                   "ensemble, the answers, and per method the answer, score, costs and the trace. "
                                   "Finished queries go to OUT.partial as they complete, so a rerun resumes.")
    p.add_argument("input", help=f"query file ({CONTRACT}); candidates are optional")
    p.add_argument("--pool", required=True, help="pool directory (morkit pool build)")
    p.add_argument("-o", "--output", required=True, help="output JSONL, written atomically at the end")
    p.add_argument("--agents", help="agents.toml (default: the packaged offline SmolLM2 pool)")
    add_agent_choices(p)
    p.add_argument("--method", action="append", choices=SEARCH_METHODS.names(),
                   help="search method, repeatable to compare on the same answers: "
                        + choices_help(SEARCH_METHODS, DEFAULT_SEARCH))
    p.add_argument("--top-k", type=POSITIVE_INT, default=2, help="ACS initial set size (default 2, as in the paper)")
    p.add_argument("--no-residual", action="store_true", help="skip ACS's final residual aggregation")
    p.add_argument("--aggregator", choices=AGGREGATORS.names(), default=DEFAULT_AGGREGATOR,
                   help="how ACS turns a set of answers into one (moa always uses the LLM): "
                        + choices_help(AGGREGATORS, DEFAULT_AGGREGATOR))
    p.add_argument("--acs-step", choices=ACS_STEPS, default="argmax",
                   help="ACS's greedy step: argmax (the paper's Section 3.2: aggregate every addition, keep the best "
                        "if it improves; default) or first (its Algorithm A: passes over the remaining answers, each "
                        "kept at once if it improves, until a pass improves nothing)")
    p.add_argument("--acs-order", choices=ACS_ORDERS, default="answers",
                   help="the order a `first` pass tries answers in: answers (the agents' order, as Algorithm A "
                        "iterates its answer set; default) or scores (best-scored first)")
    p.add_argument("--max-steps", type=NON_NEGATIVE_INT, default=PAPER_MAX_STEPS,
                   help=f"ACS steps at most: rounds under argmax, passes under first (default {PAPER_MAX_STEPS}, "
                        "the paper's; 0: until none improves)")
    p.add_argument("--aggregator-prompt", choices=AGGREGATOR_PROMPTS.names(), default=DEFAULT_AGGREGATOR_PROMPT,
                   help="the LLM aggregator's prompt: " + choices_help(AGGREGATOR_PROMPTS, DEFAULT_AGGREGATOR_PROMPT)
                        + "; an agents.toml [aggregator] system replaces its text")
    p.add_argument("--strict-grading", action="store_true",
                   help="grade `correct` (against a query's reference) on a stated final answer only: \\boxed{X}, "
                        "'#### X', 'The answer is X', 'Final answer: X' or a last 'A: X' line; an answer that "
                        "states none is wrong (default: its last number counts as its answer)")
    p.add_argument("--sc-agent", help="agent whose samples self-consistency votes over (default: the first)")
    add_select_options(p, flag="--selection")
    add_scoring_options(p)
    p.set_defaults(func=cmd_search)
