"""`morkit select` and `morkit rank`: each query's RM ensemble from a pool, and MoR ranking with it."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from morkit.cli.args import (
    CONTRACT,
    PROBABILITY,
    add_budget_options,
    add_cascade_options,
    add_device_options,
    add_fixed_option,
    add_scoring_options,
    add_select_options,
    output_file,
    scoring_options,
    select_options,
)


def cmd_select(args: argparse.Namespace) -> int:
    from morkit.data.contract import load_queries
    from morkit.data.jsonl import write_jsonl
    from morkit.question_pool.pool import load_pool
    from morkit.selection.chooser import method_summary
    from morkit.services.routing import select

    started = time.perf_counter()
    output_file(args.output)
    queries = load_queries(args.input)
    selections = select(queries, load_pool(args.pool), select_options(args), device=args.device)
    write_jsonl(args.output, (s.to_json() for s in selections))
    print(f"selected ensembles for {len(queries)} queries ({method_summary(selections)}) in "
          f"{time.perf_counter() - started:.1f}s{_costs((s.cost, s.full_cost) for s in selections)} -> "
          f"{args.output}", file=sys.stderr)
    return 0


def cmd_rank(args: argparse.Namespace) -> int:
    from morkit.data.contract import load_queries
    from morkit.data.jsonl import write_jsonl
    from morkit.question_pool.pool import load_pool
    from morkit.selection.chooser import method_summary
    from morkit.services.routing import rank

    started = time.perf_counter()
    options = scoring_options(args)
    output_file(args.output)
    queries = load_queries(args.input)
    select = select_options(args)
    rankings = rank(queries, load_pool(args.pool), select, options)
    write_jsonl(args.output, (r.to_json() for r in rankings))
    abstained = f"; {sum(bool(r.abstain) for r in rankings)} marked abstain" if args.abstain_below is not None else ""
    cascaded = select.cascade is not None
    costs = ((r.cost, None) for r in rankings) if cascaded else ((r.selection.cost, r.selection.full_cost)
                                                                 for r in rankings)
    print(f"ranked {sum(len(q.candidates) for q in queries)} candidates of {len(queries)} queries "
          f"({method_summary(r.selection for r in rankings)}) in {time.perf_counter() - started:.1f}s{abstained}"
          f"{_escalated(rankings) if cascaded else ''}{_costs(costs)} -> {args.output}", file=sys.stderr)
    return 0


def _costs(costs: Any) -> str:
    """The run's cost for its summary line ("; mean cost ... per query, 23% of the full route's"), where known, from
    each query's (cost, full route's cost or None)."""
    from morkit.selection.budget import cost_summary

    text = cost_summary(costs)
    return f"; {text}" if text else ""


def _escalated(rankings: Any) -> str:
    """How many queries a cascade escalated, for the summary line ("; escalated 12 of 40 (30%)")."""
    count = sum(bool(r.escalated) for r in rankings)
    return f"; escalated {count} of {len(rankings)} ({count / len(rankings):.0%})" if rankings else ""


def _add_common(p: argparse.ArgumentParser, *, scoring: bool) -> None:
    p.add_argument("input", help=f"query file ({CONTRACT}); labels are not needed")
    p.add_argument("--pool", required=True, help="pool directory (morkit pool build)")
    p.add_argument("-o", "--output", required=True, help="output JSONL, written atomically")
    add_select_options(p)
    add_fixed_option(p, "rank" if scoring else "select")
    add_budget_options(p)
    add_cascade_options(p)
    p.add_argument("--singles-only", action="store_true", help="PRES over single RMs only (no combinations)")
    p.add_argument("--no-run", action="store_true",
                   help="use cached candidate scores only; never run an RM (pool RMs without scores are skipped)")
    if scoring:  # rank runs member RMs; select only embeds the question
        p.add_argument("--abstain-below", type=PROBABILITY, metavar="P",
                       help="mark a query \"abstain\": true when its pick's confidence (the calibrated probability "
                            "that it is correct) is below P, for callers who spend more compute there; every "
                            "line still carries its pick and confidence")
        add_scoring_options(p)
    else:
        add_device_options(p)


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("select", parents=[parent],
                       help="choose an RM ensemble per query from a pool, with the evidence",
                       description="For each query: embed it, find its nearest pool questions, and choose an "
                                   "ensemble. Writes the ensemble, weights, normaliser, criterion, runner-ups, "
                                   "neighbours with similarities, and which pool RMs were skipped and why: an RM that "
                                   "does not apply to the query's domain (`morkit rms`), or one without scores that "
                                   "may not run.")
    _add_common(p, scoring=False)
    p.set_defaults(func=cmd_select)
    p = sub.add_parser("rank", parents=[parent],
                       help="select an ensemble per query and pick the best candidate with it",
                       description="Like select, then score every candidate with the chosen ensemble (cached "
                                   "scores, or running registered RMs where missing) and write "
                                   "{id, best_index, ensemble, scores, tied, confidence}; ties are broken by a seeded "
                                   "shuffle. confidence is the probability that the pick is correct, calibrated by "
                                   "cross-validation on the pool. Only pool RMs that apply to the query are used; the "
                                   "others are listed under skipped_rms with the reason.")
    _add_common(p, scoring=True)
    p.set_defaults(func=cmd_rank)
