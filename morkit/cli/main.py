"""The `morkit` command line: each verb parses its flags into typed options, calls a service, and prints.

Exit codes: 0 ok, 1 runtime failure, 2 bad input; every expected failure is one line on stderr (-v: the traceback).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from typing import Sequence

from morkit import __version__
from morkit.cli import (
    data,
    demo,
    generate,
    label,
    loop,
    pipeline,
    pool,
    score,
    search,
    select,
    serve,
)
from morkit.cli.args import Parser
from morkit.core.errors import MorkitError

VERBS = (data, generate, label, score, pool, select, search, loop, pipeline, serve, demo)  # each adds its parsers, in the order --help lists them


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="morkit", description="Reward-model ensembles and per-query RM routing for test-time "
                                               "scaling. `morkit VERB --help` explains each verb.")
    parser.add_argument("--version", action="version", version=f"morkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, and tracebacks on errors")
    common = argparse.ArgumentParser(add_help=False)  # lets -v also follow the verb
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="VERB", parser_class=Parser)
    for verb in VERBS:
        verb.add_parsers(sub, common)
    return parser


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split("\n")) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    verbose = getattr(args, "verbose", False)
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="morkit: %(levelname)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say to a closed pipe
        return 0
    except KeyboardInterrupt:
        print("morkit: interrupted", file=sys.stderr)
        return 130
    except MorkitError as exc:
        if verbose:
            traceback.print_exc()
        print(f"morkit: error: {_one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a bug: one line, the traceback with -v
        if verbose:
            traceback.print_exc()
        print(f"morkit: internal error: {type(exc).__name__}: {_one_line(exc)} (run with -v for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
