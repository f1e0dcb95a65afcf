"""`morkit demo`: what morkit does, offline on CPU, in about two minutes."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_demo(args: argparse.Namespace) -> int:
    from morkit.demo import DemoOptions, run_demo

    return run_demo(DemoOptions(live=args.live, rms=tuple(args.rm or ()), input=args.input, agents=args.agents,
                                device=args.device))


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("demo", parents=[parent], help="per-query routing on real scores, then the live path offline",
                       description="1. Builds a pool from the real cached scores of 22 RMs on RewardMATH problems "
                                   "and shows morkit's per-query selection against the best single RM on held-out "
                                   "problems. 2. Scores a packaged sample with the embedded RMs, routes new "
                                   "questions with PRES, has local SmolLM2 agents answer, and prints ACS's trace.")
    p.add_argument("--no-live", dest="live", action="store_false", help="stop after the routing part (no LLM runs)")
    p.add_argument("--rm", action="append", metavar="NAME", help="live part: RMs to score with (default: per domain)")
    p.add_argument("--input", help="live part: JSONL to score instead of the packaged sample")
    p.add_argument("--agents", help="live part: agents.toml (default: the packaged SmolLM2 pool)")
    p.add_argument("--device", help="torch device (default: auto)")
    p.set_defaults(func=cmd_demo)
