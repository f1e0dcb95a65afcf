"""`morkit pool build | add | info | report`: make, extend and inspect question pools."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from morkit.cli_common import DEFAULT_RMS, add_input_options, add_scoring_options, ensure_scores, load_inputs
from morkit.core.errors import InputError


def _prepare(args: argparse.Namespace, names: list[str] | None) -> tuple[list[Any], list[str], list[dict]]:
    """Inputs loaded, missing labels filled, and every pool RM's scores present."""
    from morkit.question_pool.labels import fill_labels
    from morkit.reward_models.table import table_names

    queries, provenance = load_inputs(args.input, args)
    queries, report = fill_labels(queries, progress=not args.quiet)
    if report.by_reference or report.by_tests or report.no_source:
        print(f"labels: {report.by_reference} candidates by reference answer, {report.by_tests} by tests, "
              f"{report.no_source} left unlabelled (no reference or tests)", file=sys.stderr)
    names = names or table_names(queries) or list(DEFAULT_RMS)
    return ensure_scores(queries, names, args), names, provenance


def cmd_pool_build(args: argparse.Namespace) -> int:
    from morkit.question_pool.embed import load_embedder
    from morkit.question_pool.index import IndexConfig
    from morkit.question_pool.pool import PoolConfig, build_pool
    from morkit.question_pool.store import save_pool
    from morkit.selection.stacker import with_stored_stacker

    if args.max_members < 1 or args.temperature <= 0:
        raise InputError("--max-members must be at least 1 and --temperature above 0")
    config = PoolConfig(normalizer=args.normalizer, max_members=args.max_members,
                        weightings=tuple(args.weighting or ("linear", "softmax", "sum")),
                        temperature=args.temperature, reduction=args.reduction, index=IndexConfig(kind=args.index))
    started = time.perf_counter()
    embedder = load_embedder(args.embedder, args.device)  # fail early, before any scoring
    queries, names, provenance = _prepare(args, args.rm)
    pool = build_pool(queries, embedder, rm_names=names, config=config, provenance={"inputs": provenance},
                      progress=not args.quiet)
    pool = with_stored_stacker(pool)
    save_pool(pool, args.output)
    print(f"pool: {len(pool)} questions, {len(pool.rm_names)} RMs, {len(pool.ensembles)} ensembles, "
          f"index {pool.meta['index']['kind']}, built in {time.perf_counter() - started:.1f}s -> {args.output}",
          file=sys.stderr)
    return 0


def cmd_pool_add(args: argparse.Namespace) -> int:
    from morkit.question_pool.embed import load_embedder
    from morkit.question_pool.pool import add_questions
    from morkit.question_pool.store import load_pool, save_pool
    from morkit.selection.stacker import with_stored_stacker

    pool = load_pool(args.pool)
    args.reduction = pool.config.reduction
    embedder = load_embedder(pool.embedder, args.device)
    queries, _, provenance = _prepare(args, list(pool.rm_names))
    grown = add_questions(pool, queries, embedder, provenance={"inputs": provenance}, progress=not args.quiet)
    grown = with_stored_stacker(grown)
    save_pool(grown, args.pool)
    print(f"pool: added {len(grown) - len(pool)} questions (now {len(grown)}, revision {grown.meta['revision']})"
          f" -> {args.pool}", file=sys.stderr)
    return 0


def _fmt(value: float) -> str:
    return "   n/a" if value != value else f"{value:6.3f}"


def cmd_pool_info(args: argparse.Namespace) -> int:
    from collections import Counter

    from morkit.question_pool.store import load_pool

    pool = load_pool(args.pool)
    meta = pool.meta
    domains = Counter(q.domain for q in pool.questions)
    table = pool.ensemble_table()
    singles = table[: len(pool.rm_names)]
    best = sorted(table, key=lambda r: -(r["mean_prr"] if r["mean_prr"] == r["mean_prr"] else -1))[: args.top]
    if args.json:
        print(json.dumps({
            "revision": meta["revision"], "questions": len(pool), "domains": dict(domains),
            "rms": {r["ensemble"].name: {"mean_prr": r["mean_prr"], "best_of_n": r["best_of_n"],
                                         "questions": r["questions"]} for r in singles},
            "ensembles": len(pool.ensembles), "embedder": meta["embedder"], "index": meta["index"],
            "normalizer": pool.normalizer.kind, "skipped": meta["skipped"], "missing_scores": meta["missing_scores"],
            "best": [{**r["ensemble"].to_json(), "mean_prr": r["mean_prr"], "best_of_n": r["best_of_n"]} for r in best],
        }, indent=1, default=lambda v: None))
        return 0
    print(f"pool {args.pool}: revision {meta['revision']}, created {meta['created']}, updated {meta['updated']}, "
          f"morkit {meta['morkit_version']}")
    print(f"  {len(pool)} questions ({', '.join(f'{d} {n}' for d, n in domains.most_common())}), "
          f"up to {pool.scores.shape[1]} candidates each")
    print(f"  embedder {meta['embedder']['name']} (dim {meta['embedder']['dim']}), index {meta['index']}")
    print(f"  {len(pool.rm_names)} RMs, {len(pool.ensembles)} ensembles, normaliser {pool.normalizer.kind}, "
          f"PRM steps reduced by {pool.config.reduction}")
    skipped = {k: v for k, v in meta["skipped"].items() if v}
    missing = {k: v for k, v in meta["missing_scores"].items() if v}
    if skipped or missing:
        print(f"  skipped queries {skipped or 'none'}; questions with missing scores per RM {missing or 'none'}")
    print(f"\n  {'RM':<28}{'PRR':>7}{'best-of-n':>11}{'with PRR':>11}")
    for row in sorted(singles, key=lambda r: -(r["mean_prr"] if r["mean_prr"] == r["mean_prr"] else -1)):
        print(f"  {row['ensemble'].name:<28}{_fmt(row['mean_prr']):>7}{_fmt(row['best_of_n']):>11}{row['questions']:>11}")
    print(f"\n  best {len(best)} ensembles by mean PRR:")
    for row in best:
        ens = row["ensemble"]
        weights = ", ".join(f"{w:.2f}" for w in ens.weights)
        print(f"  {_fmt(row['mean_prr'])} {_fmt(row['best_of_n'])}  {ens.name}  [{weights}]")
    return 0


def cmd_pool_report(args: argparse.Namespace) -> int:
    from morkit.question_pool.report import write_report
    from morkit.question_pool.store import load_pool

    path = write_report(load_pool(args.pool), args.output)
    print(f"report -> {path}", file=sys.stderr)
    return 0


def add_pool_parser(sub: Any) -> None:
    pool = sub.add_parser("pool", help="build, extend and inspect question pools",
                          description="A question pool holds, per labelled validation question, every RM's and RM "
                                      "ensemble's PRR, plus an embedding index; `select` and `rank` route by it.")
    verbs = pool.add_subparsers(dest="pool_command", required=True, metavar="VERB")

    p = verbs.add_parser("build", help="build a pool from labelled queries",
                         description="Label candidates that lack `correct` (reference answer or sandboxed tests), "
                                     "score them with each pool RM (cached input scores are used as they are), "
                                     "compute PRR for every RM and every 2..N-member ensemble, embed the questions "
                                     "and index them. Writes the pool directory atomically.")
    p.add_argument("input", nargs="*", default=[], help="labelled JSONL files (architecture.md contract)")
    add_input_options(p)
    p.add_argument("-o", "--output", required=True, help="pool directory to write (replaced atomically)")
    p.add_argument("--rm", action="append", metavar="NAME",
                   help="pool RM, repeatable (default: every RM with cached scores in the input, else "
                        f"{', '.join(DEFAULT_RMS)}); registered RMs are run where scores are missing")
    p.add_argument("--embedder", help="sentence-transformers model name or path (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--normalizer", choices=("zscore", "raw"), default="zscore",
                   help="per-RM score normalisation fitted on the pool (default zscore; raw = the CTTS-MM paper)")
    p.add_argument("--weighting", action="append", choices=("linear", "softmax", "sum"),
                   help="ensemble weightings to enumerate, repeatable (default all three)")
    p.add_argument("--temperature", type=float, default=1.0, help="softmax weighting temperature (default 1.0)")
    p.add_argument("--max-members", type=int, default=3, help="largest ensemble size (default 3)")
    p.add_argument("--index", choices=("auto", "flat", "hnsw"), default="auto",
                   help="FAISS index: exact (flat), approximate (hnsw), or auto by pool size (default)")
    add_scoring_options(p)
    p.set_defaults(func=cmd_pool_build)

    p = verbs.add_parser("add", help="append labelled questions to a pool without rebuilding it",
                         description="New questions are scored with the pool's RMs, normalised and weighted as the "
                                     "pool was built, embedded with its embedder, and appended as a new revision.")
    p.add_argument("pool", help="pool directory")
    p.add_argument("input", nargs="*", default=[], help="labelled JSONL files")
    add_input_options(p)
    add_scoring_options(p)
    p.set_defaults(func=cmd_pool_add)

    p = verbs.add_parser("info", help="print a pool's summary and RM table")
    p.add_argument("pool", help="pool directory")
    p.add_argument("--top", type=int, default=10, help="how many best ensembles to list (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.set_defaults(func=cmd_pool_info)

    p = verbs.add_parser("report", help="write an HTML report with plots")
    p.add_argument("pool", help="pool directory")
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.set_defaults(func=cmd_pool_report)

