"""`morkit rms`, `morkit score` and `morkit train-head`: the reward models, scoring a file, fitting a head."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from morkit.cli.args import (
    CONTRACT,
    DATA_DIR_HELP,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    SHARE,
    add_scoring_options,
    output_file,
    scoring_options,
)


def _gpu(info: Any) -> str:
    return f"{info.gpu_gib:.0f} GiB" if info.gpu_gib else "-"


def _available(info: Any) -> str:
    if info.missing_what:
        return f"no: {info.missing_what}"
    return "yes, with options" if info.card.options else "yes"


def _cost(info: Any) -> str:
    from morkit.reward_models.cost import USER_GIVEN

    return info.cost.describe() if info.cost is not None else USER_GIVEN


def _details(info: Any) -> None:
    """`morkit rms NAME`: every field of its JSON, one a line; its cost read out, and each measurement on a line."""
    from morkit.reward_models.cost import TOKENS_PER_PAIR, USER_GIVEN
    from morkit.reward_models.timing import short_number

    record = info.to_json()
    cost = record.pop("cost")
    del record["measured"]
    if info.cost is None:
        record["cost"] = f"{USER_GIVEN}: --cost {info.name}=VALUE (8B, $0.02, 3ms, 40GFLOP) or a cost file"
    else:
        record["cost"] = (f"{cost['describe']}: {short_number(cost['gflop_per_candidate'])} GFLOP-equivalents per "
                          f"candidate at the default rates ({TOKENS_PER_PAIR} tokens per pair)")
        record["cost_source"] = cost.get("source")
    if info.card.options:  # a bare client: its name does not say which model ran, so it is not timed
        measured = ["-"]
    else:
        measured = [m.describe() for m in info.measured] or [f"not yet (`morkit score --rm {info.name}`)"]
    width = max(len(k) for k in (*record, "measured"))
    for key, value in record.items():
        shown = ", ".join(value) if isinstance(value, list) else value
        print(f"{key:<{width}}  {'-' if shown in (None, '') else shown}")
    for i, line in enumerate(measured):
        print(f"{'measured' if i == 0 else '':<{width}}  {line}")


def _cost_file(args: argparse.Namespace) -> int:
    """`morkit rms --costs FILE`: the RMs a cost file prices, their cost and GFLOP-equivalents per candidate."""
    from morkit.reward_models.cost import cost_file_entries, cost_file_rows

    entries = cost_file_entries(args.costs)
    if args.json:
        print(json.dumps([{"name": e.name, "model": e.model, "note": e.note,
                           "cost": None if e.cost is None else e.cost.to_json(),
                           "gflop_per_candidate": None if e.cost is None else e.cost.per_candidate()}
                          for e in entries], indent=1))
        return 0
    rows = [("NAME", "MODEL", "COST", "GFLOP/CANDIDATE")] + [tuple(r) for r in cost_file_rows(entries)]
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print(f"\nEach figure's source is in the file ({args.costs}); --json gives every field.")
    return 0


def cmd_rms(args: argparse.Namespace) -> int:
    from morkit.reward_models.catalog import REWARD_MODELS, list_rms, rm_status

    if args.costs:
        return _cost_file(args)
    if args.name:
        info = rm_status(REWARD_MODELS.get(args.name))
        if args.json:
            print(json.dumps(info.to_json(), indent=1))
            return 0
        _details(info)
        return 0
    infos = list_rms()
    if args.json:
        print(json.dumps([i.to_json() for i in infos], indent=1))
        return 0
    rows = [("NAME", "KIND", "AVAILABLE", "GPU", "COST", "APPLIES TO")]
    rows += [(i.name, i.card.kind, _available(i), _gpu(i), _cost(i), i.card.applies.describe()) for i in infos]
    rows.append(("<name in scores>", "table", "yes", "-", "given by the user", "queries with its scores"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print("\n`morkit rms NAME` shows what an RM computes, needs and where it looked, how it runs, and its measured\n"
          "seconds per pair; --json gives every field. GPU: its weights in bf16. COST: per token read (a model),\n"
          "per call (an API judge) or CPU per pair (a rule); `--costs rewardmath` lists a packaged cost file.\n"
          "APPLIES TO: an RM skips queries of other domains (a missing score, not an error); a query of its\n"
          "domains without the fields it needs is an error; one without a domain is skipped if it lacks them.")
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from morkit.data.contract import load_queries, save_queries
    from morkit.reward_models.scoring import skip_counts
    from morkit.reward_models.session import ScoringSession
    from morkit.services.scoring import DEFAULT_RMS

    options = scoring_options(args)
    output_file(args.output)
    queries = load_queries(args.input)
    names = args.rm or list(DEFAULT_RMS)
    started = time.perf_counter()
    with ScoringSession(options) as session:
        scored = session.score(queries, names)
        hits = session.cache.hits if session.cache is not None else 0
    save_queries(args.output, scored)
    pairs = sum(len(q.candidates) for q in queries)
    truncated = sum(len(c.extra.get("truncated", [])) for q in scored for c in q.candidates)
    skipped = skip_counts(scored)
    shown = "; ".join(f"{name} on {n} queries" for name, n in skipped.items() if name in names)
    print(f"scored {pairs} candidates of {len(queries)} queries with {', '.join(names)} in "
          f"{time.perf_counter() - started:.1f}s (cache hits {hits}, truncated {truncated}"
          + (f"; not applicable, scores missing: {shown}" if shown else "") + f") -> {args.output}",
          file=sys.stderr)
    return 0


def cmd_train_head(args: argparse.Namespace) -> int:
    from morkit.services.train_heads import train_head

    output_file(args.output)
    head, out = train_head(args.rm, args.data, args.output, max_tokens=args.max_tokens, truncation=args.truncation,
                           test_fraction=args.test_fraction, seed=args.seed, device=args.device, data_dir=args.data_dir)
    held = head.info["held_out"]
    print(f"{args.rm}: held-out accuracy {held['accuracy']:.3f} "
          f"(majority class {held['majority_class_accuracy']:.3f}), "
          f"mean PRR {held['mean_prr']:.3f}, best-of-n {held['best_of_n']:.3f} (random {held['random_pick']:.3f}) "
          f"-> {out}")
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    from morkit.reward_models.truncation import DEFAULT_POLICY, TRUNCATION_POLICIES
    from morkit.services.scoring import DEFAULT_RMS
    from morkit.services.train_heads import TRAINABLE

    p = sub.add_parser("rms", parents=[parent], help="list the registered reward models and whether each can run here",
                       description="A table of every registered RM (name, kind, whether it can run here, GPU "
                                   "memory for its weights in bf16, what scoring a candidate costs, the queries it "
                                   "applies to); NAME shows one in full: how its code runs, its context window (the "
                                   "tokens a pair may have before it is cut) and where that comes from, its cost and "
                                   "source, and the seconds per pair scoring runs measured on each placement.")
    p.add_argument("name", nargs="?", help="one RM to describe in full")
    p.add_argument("--costs", metavar="FILE",
                   help="list a cost file's RMs and costs instead: a packaged one by name (rewardmath) or a path")
    p.add_argument("--json", action="store_true", help="every field, as JSON")
    p.set_defaults(func=cmd_rms)

    p = sub.add_parser("score", parents=[parent], help="add RM scores to every candidate of a JSONL file",
                       description=f"Read queries ({CONTRACT}), score each candidate with each --rm, and write the "
                                   "same lines with `scores` filled in. Scored chunks go to the score cache as they "
                                   "finish (with --ray, as each batch comes back from the cluster); the output is "
                                   "written atomically. An RM skips queries of domains it does not apply to (`morkit "
                                   "rms`, APPLIES TO): their score is missing and each such query says why under "
                                   "`skipped_rms`; a query of its domain without the fields it needs is an error.")
    p.add_argument("input", help="input JSONL")
    p.add_argument("-o", "--output", required=True, help="output JSONL")
    p.add_argument("--rm", action="append", metavar="NAME",
                   help=f"reward model, repeatable (default {', '.join(DEFAULT_RMS)}): a name from `morkit rms`, "
                        "or an RM name cached under `scores` in the input")
    add_scoring_options(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("train-head", parents=[parent], help="fit an embedded RM's logistic head on labelled data",
                       description="Extract frozen-backbone features, fit a logistic head (objective and C by grouped "
                                   "CV), report held-out accuracy, PRR and best-of-n, and save the head.")
    p.add_argument("rm", choices=TRAINABLE)
    p.add_argument("--data", nargs="+", default=["gsm8k_model_solutions:200", "qwen25_math_rm8:30"],
                   help="registered data sets as NAME or NAME:N (first N questions)")
    p.add_argument("--data-dir", help=DATA_DIR_HELP)
    p.add_argument("--max-tokens", type=POSITIVE_INT,
                   help="tokens per pair (default: the RM's window, 2048 for smollm2-orm, 256 for minilm-probe)")
    p.add_argument("--truncation", choices=TRUNCATION_POLICIES, default=DEFAULT_POLICY,
                   help=f"how a longer pair is cut (default {DEFAULT_POLICY}; the packaged heads were fitted "
                        "with right)")
    p.add_argument("--test-fraction", type=SHARE, default=0.25, help="held-out share of questions (default 0.25)")
    p.add_argument("--seed", type=NON_NEGATIVE_INT, default=0)
    p.add_argument("--device", help="torch device (default: auto)")
    p.add_argument("-o", "--output", help="head file (default: the packaged head)")
    p.set_defaults(func=cmd_train_head)
