"""`morkit select` and `morkit rank`: per-query ensemble choice against a pool, and MoR ranking with it."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from typing import Any, Sequence

from morkit.cli_common import add_scoring_options, open_cache, pool_selector


def _selector(args: argparse.Namespace) -> tuple[Any, list[Any], list[Any]]:
    from morkit.data.contract import load_queries
    from morkit.question_pool.store import load_pool

    pool = load_pool(args.pool)
    queries = load_queries(args.input)
    selector = pool_selector(pool, args, args.method, k=args.k, singles_only=args.singles_only,
                             allow_run=not args.no_run)
    return selector, queries, selector.select_many(queries)


def _fill_member_scores(queries: Sequence[Any], selections: Sequence[Any], args: argparse.Namespace) -> list[Any]:
    """Run each chosen member RM on the queries that chose it and lack its scores (via the score cache)."""
    from morkit.cli_common import build_rms
    from morkit.reward_models.scoring import score_queries

    queries = list(queries)
    needed: dict[str, list[int]] = {}
    for i, (query, selection) in enumerate(zip(queries, selections)):
        for member in selection.choice.ensemble.members:
            if any(member not in c.scores for c in query.candidates):
                needed.setdefault(member, []).append(i)
    if not needed:
        return queries
    cache = open_cache(args)
    try:
        for name, rows in needed.items():
            rm = build_rms([name], [], args)[0]
            scored = score_queries([queries[i] for i in rows], [rm], cache=cache, chunk=args.chunk,
                                   progress=not args.quiet)
            for i, query in zip(rows, scored):
                queries[i] = replace(queries[i], candidates=query.candidates)
    finally:
        if cache:
            cache.close()
    return queries


def cmd_select(args: argparse.Namespace) -> int:
    from morkit.data.jsonl import write_jsonl

    started = time.perf_counter()
    _, queries, selections = _selector(args)
    write_jsonl(args.output, (s.to_json() for s in selections))
    print(f"selected ensembles for {len(queries)} queries ({args.method}) in {time.perf_counter() - started:.1f}s "
          f"-> {args.output}", file=sys.stderr)
    return 0


def cmd_rank(args: argparse.Namespace) -> int:
    from morkit.data.jsonl import write_jsonl

    started = time.perf_counter()
    selector, queries, selections = _selector(args)
    queries = _fill_member_scores(queries, selections, args)
    rankings = [selector.rank_selected(q, s) for q, s in zip(queries, selections)]
    write_jsonl(args.output, (r.to_json() for r in rankings))
    print(f"ranked {sum(len(q.candidates) for q in queries)} candidates of {len(queries)} queries ({args.method}) "
          f"in {time.perf_counter() - started:.1f}s -> {args.output}", file=sys.stderr)
    return 0


def _add_common(p: argparse.ArgumentParser) -> None:
    from morkit.selection.selector import DEFAULT_METHOD, METHODS

    p.add_argument("input", help="query JSONL (architecture.md contract); labels are not needed")
    p.add_argument("--pool", required=True, help="pool directory (morkit pool build)")
    p.add_argument("-o", "--output", required=True, help="output JSONL, written atomically")
    p.add_argument("--method", choices=tuple(METHODS), default=DEFAULT_METHOD,
                   help="stacker (default): listwise weights over every usable RM, learned on the pool by CV; "
                        "pres: the CTTS-MM rule, argmax of similarity-weighted PRR over the k nearest pool "
                        "questions; pres-top1: the same rule on best-of-n hits")
    p.add_argument("--k", type=int, default=100, help="pool neighbours per query (default 100, as in the paper)")
    p.add_argument("--singles-only", action="store_true", help="PRES over single RMs only (no combinations)")
    p.add_argument("--no-run", action="store_true",
                   help="use cached candidate scores only; never run an RM (pool RMs without scores are skipped)")
    add_scoring_options(p)


def add_select_parsers(sub: Any) -> None:
    p = sub.add_parser("select", help="choose an RM ensemble per query from a pool, with the evidence",
                       description="For each query: embed it, find its nearest pool questions, and choose an "
                                   "ensemble. Writes the ensemble, weights, normaliser, criterion, runner-ups, "
                                   "neighbours with similarities, and which RMs were skipped for lack of scores.")
    _add_common(p)
    p.set_defaults(func=cmd_select)
    p = sub.add_parser("rank", help="select an ensemble per query and pick the best candidate with it",
                       description="Like select, then score every candidate with the chosen ensemble (cached "
                                   "scores, or running registered RMs where missing) and write "
                                   "{id, best_index, ensemble, scores, tied}; ties are broken by a seeded shuffle.")
    _add_common(p)
    p.set_defaults(func=cmd_rank)
