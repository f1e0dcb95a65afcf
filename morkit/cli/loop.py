"""`morkit loop NAME`: run a test-time-scaling loop per query with morkit's verifier.

Offline by default (the packaged SmolLM2 agents, an LLM critic); --pool verifies with each query's MoR ensemble.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from morkit.cli.args import (
    CONTRACT,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    PROBABILITY,
    add_agent_choices,
    add_scoring_options,
    add_select_options,
    agents_from_flags,
    choices_help,
    non_empty,
    output_file,
    scoring_options,
    select_options,
)


def setting(text: str) -> tuple[str, str]:
    """argparse type of --set: KEY=VALUE."""
    from morkit.core.errors import InputError
    from morkit.loops.settings import parse_setting

    try:
        return parse_setting(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def step_marker(text: str) -> str:
    """argparse type of --step-marker: non-empty, backslash escapes read ('\\n' is a newline)."""
    from morkit.core.errors import InputError
    from morkit.loops.settings import unescape

    try:
        return non_empty(unescape(text))
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def cmd_loop(args: argparse.Namespace) -> int:
    from morkit.data.contract import load_queries
    from morkit.data.jsonl import write_jsonl
    from morkit.loops.base import Budget
    from morkit.loops.registry import LoopOptions
    from morkit.question_pool.pool import load_pool
    from morkit.services.looping import run_loop

    started = time.perf_counter()
    options = LoopOptions(Budget(args.max_calls, args.max_total_tokens, args.max_seconds), seed=args.seed,
                          gen_tokens=args.gen_tokens, iterations=args.iterations, solutions=args.solutions,
                          verifications=args.verifications, epsilon=args.epsilon, chain=args.chain,
                          protocol=args.protocol, step_marker=args.step_marker, max_explores=args.max_explores,
                          settings=tuple(args.set))
    scoring = scoring_options(args)
    output_file(args.output)
    queries = load_queries(args.input)
    pool = load_pool(args.pool) if args.pool else None
    records = run_loop(args.loop, queries, agents=agents_from_flags(args), pool=pool, verifier=args.verifier,
                       options=options,
                       selection=select_options(args), scoring=scoring)
    write_jsonl(args.output, records)
    print(f"{args.loop}: {len(records)} queries in {time.perf_counter() - started:.1f}s -> {args.output}",
          file=sys.stderr)
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    from morkit.loops.atlas.protocol import ATLASConfig
    from morkit.loops.registry import LOOPS
    from morkit.loops.streamma.config import StreamMAConfig
    from morkit.loops.streamma.graph import PROTOCOLS
    from morkit.loops.tmas.config import TMASConfig
    from morkit.verify.kinds import VERIFIERS

    tmas, stream, atlas = TMASConfig(), StreamMAConfig(), ATLASConfig()  # the defaults a flag left unset keeps
    p = sub.add_parser("loop", parents=[parent],
                       help="run a test-time-scaling loop (" + ", ".join(LOOPS.names()) + ") on each query",
                       description="Runs the loop on each query with the agents of --agents (default: the embedded "
                                   "SmolLM2, offline) and morkit's verifier; writes one JSON line per query with the "
                                   "answer, score, stop reason, calls, tokens, time, the loop's state (memory banks, "
                                   "evidence, latencies) and its full event trace. Loops: " + choices_help(LOOPS))
    p.add_argument("loop", choices=LOOPS.names())
    p.add_argument("input", help=f"query file ({CONTRACT}); a reference is only used for grading")
    p.add_argument("-o", "--output", required=True, help="output JSONL, written atomically")
    p.add_argument("--agents", help="agents.toml (default: the packaged offline SmolLM2 pool)")
    add_agent_choices(p, prompt=False)
    p.add_argument("--pool", help="pool directory: verify with each query's MoR ensemble")
    p.add_argument("--verifier", choices=VERIFIERS.names(), default=None,
                   help=choices_help(VERIFIERS) + " (default: mor with --pool, else llm)")
    add_select_options(p, flag="--selection")
    g = p.add_argument_group("budget per query (unlimited when unset)")
    g.add_argument("--max-calls", type=NON_NEGATIVE_INT, help="LLM calls")
    g.add_argument("--max-total-tokens", type=NON_NEGATIVE_INT, help="tokens")
    g.add_argument("--max-seconds", type=NON_NEGATIVE, help="wall time")
    g = p.add_argument_group("loop settings")
    g.add_argument("--seed", type=NON_NEGATIVE_INT,
                   help="base seed of the loop's sampling (default: TMAS 0; StreamMA unseeded; ATLAS each "
                        "agent's seed)")
    g.add_argument("--gen-tokens", type=POSITIVE_INT,
                   help="new tokens per solver generation (default: each agent's max_tokens in agents.toml)")
    g.add_argument("--iterations", type=POSITIVE_INT,
                   help=f"TMAS rounds T (default {tmas.iterations}, the paper's)")
    g.add_argument("--solutions", type=POSITIVE_INT,
                   help=f"TMAS solutions per round N (default {tmas.solutions}, the paper's)")
    g.add_argument("--verifications", type=NON_NEGATIVE_INT,
                   help=f"TMAS verification passes per solution M (default {tmas.verifications}, the paper's; "
                        "0: the no-verification ablation)")
    g.add_argument("--epsilon", type=PROBABILITY,
                   help=f"TMAS exploration probability (default {tmas.epsilon}, the paper's)")
    g.add_argument("--chain", type=POSITIVE_INT, help=f"StreamMA agents in the chain A (default {stream.agents})")
    g.add_argument("--protocol", choices=PROTOCOLS, help=f"StreamMA protocol (default {stream.protocol})")
    g.add_argument("--step-marker", type=step_marker,
                   help=f"StreamMA end-of-step marker (default {stream.step_marker!r} on a line of its own, the "
                        "paper's; '\\n\\n' splits paragraphs; the packaged SmolLM2 agents write a step a line and no "
                        "marker: use '\\n')")
    g.add_argument("--max-explores", type=POSITIVE_INT,
                   help=f"ATLAS explore cap (default {atlas.max_explores})")
    g.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=VALUE",
                   help="any field of the loop's config (TMASConfig, StreamMAConfig, ATLASConfig), e.g. "
                        "--set guidelines=false; repeatable; applied after the flags above. The fidelity tables of "
                        "docs/loops/ name each paper's mechanism and its setting")
    add_scoring_options(p)
    p.set_defaults(func=cmd_loop)
