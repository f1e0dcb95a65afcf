"""`morkit label`: grade the candidates that lack `correct`, with the grader of each query's domain."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from morkit.cli.args import CONTRACT, add_input_options, output_file


def cmd_label(args: argparse.Namespace) -> int:
    from morkit.data.contract import save_queries
    from morkit.question_pool.labels import fill_labels
    from morkit.services.pools import load_inputs

    output_file(args.output)
    queries, _ = load_inputs(args.input, args.dataset, args.data_dir)
    labelled, report = fill_labels(queries, progress=not args.quiet)
    save_queries(args.output, labelled)
    correct = sum(bool(c.correct) for q in labelled for c in q.candidates)
    print(f"label: {report.by_reference} candidates graded by reference answer, {report.by_tests} by tests "
          f"({report.undecided} undecided: false, with a label_reason), {report.no_source} left unlabelled; "
          f"{correct} correct in all -> {args.output}", file=sys.stderr)
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    from morkit.question_pool.graders import GRADERS

    graders = "; ".join(f"{e.name}: {e.summary}" for e in GRADERS.entries())
    p = sub.add_parser("label", parents=[parent], help="grade candidates that lack `correct` (per-domain graders)",
                       description="Grades every candidate without `correct` with its query's grader: the "
                                   "query's `domain` when a grader has that name, else code when it has `tests`, "
                                   f"else math when it has a `reference` ({graders}). A grader that cannot decide "
                                   "(no stated final answer) labels false and records why in `label_reason`. "
                                   "pool build and pool add use the same graders.")
    p.add_argument("input", nargs="*", help=f"query files ({CONTRACT})")
    add_input_options(p)
    p.add_argument("-o", "--output", required=True, help="output JSONL, written atomically")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_label)
