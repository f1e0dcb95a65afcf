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
    Parser,
    add_agent_choices,
    add_scoring_options,
    add_select_options,
    agents_from_flags,
    choices_help,
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


def flag_value(config_cls: type, field: str) -> Any:
    """argparse type of a loop's flag (`LoopFlag`): the text, once the loop's config accepts it as `field` (parsed
    by the field's type, backslash escapes read in text, checked by the config); the text itself is passed on, as
    `--set field=text` would be."""
    from morkit.core.errors import InputError
    from morkit.loops.settings import configure

    def parse(text: str) -> str:
        try:
            configure(config_cls, [(field, text)])
        except InputError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return text

    return parse


def _default(config_cls: type, field: str) -> str:
    """A flag's default for its help, read from the field (a config class is never built for it): its value, the
    value its factory makes, or "required"."""
    import dataclasses

    spec = next(f for f in dataclasses.fields(config_cls) if f.name == field)
    if spec.default is not dataclasses.MISSING:
        return repr(spec.default)
    if spec.default_factory is not dataclasses.MISSING:
        return repr(spec.default_factory())
    return "required"


def _metavar(config_cls: type, field: str) -> str:
    """A flag's metavar from its field's type: N, X, TEXT, or the choices of a Literal."""
    import typing

    from morkit.loops.settings import settable_fields

    kind = settable_fields(config_cls)[field]
    if typing.get_origin(kind) is typing.Literal:
        return "{" + ",".join(map(str, typing.get_args(kind))) + "}"
    return {int: "N", float: "X"}.get(kind, "TEXT")


def other_loops_flag(owners: list[str], loop: str, own: list[str]) -> Any:
    """argparse type of another loop's flag under `morkit loop LOOP`: always an error saying whose flag it is."""

    def parse(text: str) -> str:
        mine = ", ".join(own) + ", " if own else ""
        raise argparse.ArgumentTypeError(f"a flag of {' and '.join(owners)}, not of {loop}; {loop} takes {mine}"
                                         "--set KEY=VALUE")

    return parse


def before_the_name(flag: str, owners: list[str]) -> Any:
    """argparse type of a loop's flag written before the loop's name (`morkit loop --iterations 3 tmas`): always
    an error saying where it goes."""

    def parse(text: str) -> str:
        name = owners[0] if len(owners) == 1 else "NAME"
        raise argparse.ArgumentTypeError(f"a loop's flags come after its name: morkit loop {name} ... {flag} {text}")

    return parse


def cmd_loop(args: argparse.Namespace) -> int:
    from morkit.data.contract import load_queries
    from morkit.data.jsonl import write_jsonl
    from morkit.loops.base import Budget
    from morkit.loops.registry import LoopOptions, check_loop, config_class
    from morkit.question_pool.pool import load_pool
    from morkit.services.looping import run_loop

    started = time.perf_counter()
    flags = tuple((f.field, value) for f in getattr(config_class(args.loop), "FLAGS", ())
                  if (value := getattr(args, FLAG_DEST + f.field)) is not None)
    options = LoopOptions(Budget(args.max_calls, args.max_total_tokens, args.max_seconds), seed=args.seed,
                          gen_tokens=args.gen_tokens, settings=flags + tuple(args.set))
    check_loop(args.loop, options)
    scoring = scoring_options(args)
    output_file(args.output)
    queries = load_queries(args.input)
    pool = load_pool(args.pool) if args.pool else None
    records = run_loop(args.loop, queries, agents=agents_from_flags(args), pool=pool, verifier=args.verifier,
                       options=options, selection=select_options(args), scoring=scoring)
    write_jsonl(args.output, records)
    print(f"{args.loop}: {len(records)} queries in {time.perf_counter() - started:.1f}s -> {args.output}",
          file=sys.stderr)
    return 0


FLAG_DEST = "loop_flag_"
"""Namespace prefix of a loop's own flags (a config field may share a name with a common flag: `agents`)."""


def _shared_flags() -> argparse.ArgumentParser:
    """The flags every loop takes."""
    from morkit.verify.kinds import VERIFIERS

    p = argparse.ArgumentParser(add_help=False)
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
    g = p.add_argument_group("every loop")
    g.add_argument("--seed", type=NON_NEGATIVE_INT,
                   help="base seed of the loop's sampling (default: TMAS 0; StreamMA unseeded; ATLAS each "
                        "agent's seed)")
    g.add_argument("--gen-tokens", type=POSITIVE_INT,
                   help="new tokens per solver generation (default: each agent's max_tokens in agents.toml)")
    add_scoring_options(p)
    return p


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    from morkit.loops.registry import LOOPS, config_class

    p = sub.add_parser("loop", parents=[parent],
                       help="run a test-time-scaling loop (" + ", ".join(LOOPS.names()) + ") on each query",
                       description="Runs the loop on each query with the agents of --agents (default: the embedded "
                                   "SmolLM2, offline) and morkit's verifier; writes one JSON line per query with the "
                                   "answer, score, stop reason, calls, tokens, time, the loop's state (memory banks, "
                                   "evidence, latencies) and its full event trace. `morkit loop NAME --help` lists a "
                                   "loop's own flags. Loops: " + choices_help(LOOPS))
    loops = p.add_subparsers(dest="loop", required=True, parser_class=Parser)
    shared = _shared_flags()
    configs = {name: config_class(name) for name in LOOPS.names()}
    owners: dict[str, list[str]] = {}
    for name, cls in configs.items():
        for f in getattr(cls, "FLAGS", ()):
            owners.setdefault(f.flag, []).append(name)
    for flag, names in {**owners, "--set": list(LOOPS.names())}.items():  # else argparse reads the value as a loop
        p.add_argument(flag, type=before_the_name(flag, names), default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for name, cls in configs.items():
        q = loops.add_parser(name, parents=[parent, shared], help=LOOPS.get(name).summary,
                             description=f"{name}: {LOOPS.get(name).summary}.")
        flags = getattr(cls, "FLAGS", ())  # a config may declare no flags of its own
        own = [f.flag for f in flags]
        g = q.add_argument_group(f"{name} settings")
        for f in flags:
            g.add_argument(f.flag, dest=FLAG_DEST + f.field, type=flag_value(cls, f.field),
                           metavar=_metavar(cls, f.field), help=f"{f.help} (default {_default(cls, f.field)})")
        g.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=VALUE",
                       help=f"any field of {cls.__name__ if cls else 'the loop config'}, by name; repeatable; "
                            "applied after the flags above. The fidelity tables of docs/loops/ name each paper's "
                            "mechanism and its setting")
        for flag, names in owners.items():
            if flag not in own:
                q.add_argument(flag, type=other_loops_flag(names, name, own), help=argparse.SUPPRESS)
        q.set_defaults(func=cmd_loop)
