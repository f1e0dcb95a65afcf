"""The `morkit` command line. Each verb has --help; exit codes: 0 ok, 1 runtime failure, 2 bad input."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from morkit import __version__
from morkit.cli_common import DEFAULT_RMS, add_scoring_options, build_rms, open_cache
from morkit.cli_loop import add_loop_parser
from morkit.cli_pool import add_pool_parser
from morkit.cli_search import add_search_parser
from morkit.cli_select import add_select_parsers
from morkit.core.errors import MorkitError


def cmd_rms(args: argparse.Namespace) -> int:
    from morkit.reward_models import registry

    rows = [("NAME", "KIND", "BACKEND", "AVAILABLE", "NEEDS / DESCRIPTION")]
    for spec in registry.specs():
        reason = spec.missing()
        rows.append((spec.name, spec.kind, spec.backend, "yes" if reason is None else f"no: {reason}",
                     f"{spec.needs}; {spec.description}"))
    rows.append(("<any name in scores>", "table", "input", "yes", "cached `scores` in the input JSONL"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from morkit.data.contract import load_queries, save_queries
    from morkit.reward_models.scoring import score_queries
    from morkit.reward_models.table import table_names

    queries = load_queries(args.input)
    rms = build_rms(args.rm or DEFAULT_RMS, table_names(queries), args)
    cache = open_cache(args)
    started = time.perf_counter()
    try:
        scored = score_queries(queries, rms, cache=cache, chunk=args.chunk, progress=not args.quiet)
    finally:
        hits = cache.hits if cache else 0
        if cache:
            cache.close()
    save_queries(args.output, scored)
    pairs = sum(len(q.candidates) for q in queries)
    truncated = sum(len(c.extra.get("truncated", [])) for q in scored for c in q.candidates)
    print(f"scored {pairs} candidates of {len(queries)} queries with {', '.join(r.name for r in rms)} "
          f"in {time.perf_counter() - started:.1f}s (cache hits {hits}, truncated {truncated}) -> {args.output}",
          file=sys.stderr)
    return 0


def cmd_train_head(args: argparse.Namespace) -> int:
    from morkit.reward_models.embedded import MiniLMProbe, SmolLM2ORM, load_minilm, load_smollm2
    from morkit.reward_models.heads import packaged_head_path
    from morkit.reward_models.hf import Truncation
    from morkit.services.train_heads import train

    truncation = Truncation(max_tokens=args.max_tokens)
    if args.rm == "smollm2-orm":
        rm = SmolLM2ORM(load_smollm2(args.device), None, truncation=truncation)
    else:
        rm = MiniLMProbe(load_minilm(args.device), None, truncation=truncation)
    out = Path(args.output) if args.output else packaged_head_path(args.rm)
    from morkit.runtime.assets import cache_dir

    head = train(args.rm, rm.features, args.data, out, test_fraction=args.test_fraction, seed=args.seed,
                 work_dir=cache_dir() / "train", data_dir=Path(args.data_dir) if args.data_dir else None)
    held = head.info["held_out"]
    print(f"{args.rm}: held-out accuracy {held['accuracy']:.3f} (majority class {held['majority_class_accuracy']:.3f}), "
          f"mean PRR {held['mean_prr']:.3f}, best-of-n {held['best_of_n']:.3f} (random {held['random_pick']:.3f}) "
          f"-> {out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from morkit.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="morkit", description="Reward-model ensembles and per-query RM routing for test-time scaling.")
    parser.add_argument("--version", action="version", version=f"morkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("rms", help="list registered reward models and whether each can run here")
    p.set_defaults(func=cmd_rms)

    p = sub.add_parser("score", help="add RM scores to every candidate of a JSONL file",
                       description="Read queries (architecture.md contract), score each candidate with each --rm, "
                                   "write the same lines with `scores` filled in. Output is written atomically.")
    p.add_argument("input", help="input JSONL, one query per line")
    p.add_argument("-o", "--output", required=True, help="output JSONL")
    p.add_argument("--rm", action="append", metavar="NAME",
                   help=f"reward model (repeatable; default {', '.join(DEFAULT_RMS)}); see `morkit rms`")
    add_scoring_options(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("train-head", help="fit an embedded RM's logistic head on labelled shared data",
                       description="Extract frozen-backbone features, fit a logistic head (C by grouped CV), "
                                   "report held-out accuracy / PRR / best-of-n, and save the head.")
    p.add_argument("rm", choices=("smollm2-orm", "minilm-probe"))
    p.add_argument("--data", nargs="+", default=["gsm8k_model_solutions:200", "qwen25_math_rm8:30"],
                   help="data sets as NAME or NAME:N (first N questions)")
    p.add_argument("--data-dir", help="shared data folder (default $MORKIT_DATA_DIR or ../shared/data)")
    p.add_argument("--max-tokens", type=int, default=768)
    p.add_argument("--test-fraction", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device")
    p.add_argument("-o", "--output", help="head file (default: the packaged head)")
    p.set_defaults(func=cmd_train_head)

    add_pool_parser(sub)
    add_select_parsers(sub)
    add_search_parser(sub)
    add_loop_parser(sub)

    p = sub.add_parser("demo", help="the whole path offline: score a sample, build a pool, search with local agents",
                       description="Scores a packaged sample with every embedded RM and prints the tables; then "
                                   "builds a pool from the scored math questions, lets PRES pick each new "
                                   "question's RM ensemble, has local SmolLM2 agents answer, and prints ACS's trace.")
    p.add_argument("--rm", action="append", metavar="NAME", help="RMs to show (default: all embedded)")
    p.add_argument("--input", help="JSONL to use instead of the packaged sample")
    p.add_argument("--agents", help="agents.toml for the search part (default: the packaged SmolLM2 pool)")
    p.add_argument("--no-search", dest="search", action="store_false", help="stop after the scoring tables")
    p.add_argument("--device")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="morkit: %(levelname)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return args.func(args)
    except MorkitError as exc:
        print(f"morkit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("morkit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
