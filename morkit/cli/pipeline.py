"""`morkit pipeline CONFIG`: the CTTS-MM flow from one TOML file, resumable at every stage, with a report."""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXAMPLE = """\
example config (pipeline.toml):

  workdir = "runs/first"                # every stage's output, run.json, report.html
  agents = "agents.toml"                # omitted: the packaged offline SmolLM2 agents
  n = 2                                 # samples per agent and question
  rms = ["smollm2-orm", "math-consensus"]
  search = ["acs"]                      # [] for none

  [scoring]                             # the scoring flags: placement, device, dtype, urls, ...
  placement = "vllm"

  [[benchmark]]
  name = "gsm8k"
  data = "gsm8k_test"                   # a registered data set (listed by `morkit generate --help`) or a JSONL file
  validation = 200                      # questions for the pool
  test = 100                            # disjoint questions to rank and search
"""


def cmd_pipeline(args: argparse.Namespace) -> int:
    from morkit.services.pipeline.config import load_pipeline_config
    from morkit.services.pipeline.stages import run_pipeline

    config = load_pipeline_config(args.config)
    say = (lambda message: None) if args.quiet else (lambda message: print(f"pipeline: {message}", file=sys.stderr))
    report = run_pipeline(config, progress=not args.quiet, log=say)
    for bench in report["benchmarks"]:
        summary = ", ".join(f"{m['method']} {m['accuracy']:.2f}" for m in bench["methods"]
                            if m["accuracy"] == m["accuracy"])
        print(f"{bench['benchmark']} ({bench['test_questions']} test questions): {summary}")
    for split in ("validation", "test"):
        facts = report["stages"].get(f"{split}.label", {})
        labels = facts.get("labels", {})
        print(f"{split} labels: {labels.get('undecided', 0)} undecided (false, with a label_reason), "
              f"{labels.get('no_source', 0)} left unlabelled, {facts.get('failed_generations', 0)} failed "
              "generations (asked again on a rerun)", file=sys.stderr)
    print(f"report: {config.workdir / 'report.html'}", file=sys.stderr)
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("pipeline", parents=[parent], help="the CTTS-MM flow end to end from one config file",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLE,
                       description="Runs the CTTS-MM flow: split each benchmark into validation and test "
                                   "questions; the agents answer the validation questions; grade the answers; "
                                   "score them with the pool RMs; build the pool; the agents answer the test "
                                   "questions; rank them with MoR and run the search methods. Every stage writes "
                                   "its output to the workdir and is skipped on a rerun unless its inputs changed; an "
                                   "answer is reused only for the same prompt and agent settings. The whole config "
                                   "is checked before the first stage. "
                                   "report.html compares, per benchmark, the best single agent, majority vote, "
                                   "best-of-N with the best single RM, MoR rank and the search methods, with "
                                   "their accuracy, tokens, calls and seconds.")
    p.add_argument("config", help="pipeline TOML (see the example below)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars or stage messages")
    p.set_defaults(func=cmd_pipeline)
