"""`morkit generate`: every agent answers every question (K samples each), resumably, as contract JSONL."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from morkit.cli.args import (
    CONTRACT,
    POSITIVE_INT,
    add_agent_choices,
    add_input_options,
    agents_from_flags,
    checked,
    output_file,
)
from morkit.llm.base import MAX_SAMPLES, sample_count


def cmd_generate(args: argparse.Namespace) -> int:
    from morkit.services.generating import GenerateOptions, generate
    from morkit.services.pools import load_inputs

    output_file(args.output)
    agents = agents_from_flags(args)
    queries, _ = load_inputs(args.input, args.dataset, args.data_dir, bare=True)  # questions need no candidates
    report = generate(queries, agents, args.output,
                      GenerateOptions(n=args.n, chunk=args.chunk, progress=not args.quiet))
    resumed = f", {report.resumed} resumed from {args.output}.partial" if report.resumed else ""
    failed = f", {report.failed} failed (empty text, with an 'error')" if report.failed else ""
    print(f"generate: {report.questions} questions x {report.agents} agents: {report.generated} candidates"
          f"{resumed}{failed}; {report.tokens} tokens in {report.seconds:.1f}s "
          f"({report.tokens / max(report.seconds, 1e-9):.0f} tok/s) -> {args.output}", file=sys.stderr)
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser("generate", parents=[parent], help="candidates from agents: every agent answers every question",
                       description="Every agent in --agents answers every question of the inputs, --n samples "
                                   "each, through its LLM backend (local model or an OpenAI-compatible server such "
                                   "as vLLM), a chunk of questions per call. Each candidate records its agent, "
                                   "sampling, finish reason and tokens; a failed request becomes a candidate with "
                                   "empty text and an 'error'. Finished chunks go to OUT.partial at once, so a "
                                   "rerun resumes; OUT is written atomically at the end.")
    p.add_argument("input", nargs="*", help=f"query files ({CONTRACT}; `candidates` may be left out); existing "
                                            "candidates are kept")
    add_input_options(p)
    p.add_argument("-o", "--output", required=True, help="output JSONL (its folder is made if missing)")
    p.add_argument("--agents", help="agents.toml (default: the packaged offline SmolLM2 pool)")
    add_agent_choices(p)
    p.add_argument("--n", type=checked(int, sample_count),
                   help=f"samples per agent and question, 1 to {MAX_SAMPLES} (default: each agent's own n)")
    p.add_argument("--chunk", type=POSITIVE_INT, default=16,
                   help="questions per call to an agent's LLM, also what a rerun redoes at most (default 16)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_generate)
