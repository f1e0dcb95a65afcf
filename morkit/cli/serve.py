"""`morkit serve`: an HTTP reward server that scores candidates with each query's routed RM ensemble."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from morkit.cli.args import (
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    add_scoring_options,
    add_select_options,
    scoring_options,
    select_options,
)


def cmd_serve(args: argparse.Namespace) -> int:
    from morkit.core.errors import InputError
    from morkit.question_pool.pool import load_pool
    from morkit.services.serving.app import ServeLimits
    from morkit.services.serving.engine import RoutingEngine
    from morkit.services.serving.server import require_packages, serve

    require_packages()
    if args.ray:
        raise InputError("--ray: morkit serve keeps its RMs resident in this process; score on Ray with "
                         "`morkit score --ray`, or run one server per node")
    limits = ServeLimits(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, queue_size=args.queue_size,
                         timeout_s=args.timeout, max_body_bytes=args.max_body_bytes, max_items=args.max_items)
    pool = load_pool(args.pool)
    engine = RoutingEngine(pool, select_options(args), scoring_options(args), rms=args.rm)  # refuses a misfit
    try:
        resident = ", ".join(engine.models) or "none (cached scores only)"
        print(f"morkit serve: pool {args.pool} ({len(pool)} questions), {engine.method}, resident RMs: {resident}",
              file=sys.stderr, flush=True)
        serve(engine, limits, host=args.host, port=args.port, log_level="info" if getattr(args, "verbose", False) else "warning")
    finally:
        engine.close()
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "serve", parents=[parent], help="serve routed RM rewards over HTTP (rank, OpenRLHF remote RM, metrics)",
        description="An HTTP server (FastAPI on uvicorn) that scores candidates with the ensemble the pool "
                    "selects for each query, or with a fixed ensemble (--rm). POST /v1/rank takes "
                    '{"queries": [contract queries]} and answers {"results": [...]}, each result a line of '
                    "`morkit rank` output. POST /get_reward is OpenRLHF's remote-RM protocol "
                    '({"query": [prompt + response], "prompts": [...], "labels": [...]} -> {"rewards", "scores"}). '
                    "GET /health, GET /metrics (Prometheus). Concurrent requests are micro-batched into one "
                    "engine thread; every RM the pool may run is loaded once and stays resident; the score "
                    "cache is shared. SIGTERM finishes the requests in flight, then exits 0.")
    p.add_argument("--pool", required=True, help="pool directory (morkit pool build)")
    p.add_argument("--rm", action="append", default=[], metavar="NAME",
                   help="score with this fixed pool RM instead of routing per query; repeat for a fixed ensemble "
                        "(the pool's best-weighted ensemble of exactly these RMs)")
    p.add_argument("--no-run", action="store_true",
                   help="use cached candidate scores only; never run an RM (no model is loaded)")
    add_select_options(p)
    s = p.add_argument_group("server")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only)")
    s.add_argument("--port", type=POSITIVE_INT, default=8000, help="port (default 8000)")
    s.add_argument("--max-batch", type=POSITIVE_INT, default=32,
                   help="requests per engine call (default 32; 1 turns micro-batching off)")
    s.add_argument("--max-wait-ms", type=NON_NEGATIVE, default=5.0,
                   help="how long a batch's first request waits for others to join it (default 5 ms)")
    s.add_argument("--queue-size", type=POSITIVE_INT, default=256,
                   help="requests that may wait for the engine; more are answered 503 with Retry-After (default 256)")
    s.add_argument("--timeout", type=POSITIVE, default=120.0,
                   help="seconds a request may take, queueing included, before a 504 (default 120)")
    s.add_argument("--max-body-bytes", type=POSITIVE_INT, default=16 * 2**20,
                   help="largest request body; a larger one is refused (413) before it is parsed (default 16 MiB)")
    s.add_argument("--max-items", type=POSITIVE_INT, default=4096,
                   help="most queries (/v1/rank) or items (/get_reward) in one request (default 4096)")
    add_scoring_options(p)
    p.set_defaults(func=cmd_serve)
