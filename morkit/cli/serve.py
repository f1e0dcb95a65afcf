"""`morkit serve`: an HTTP reward server that scores candidates with each query's routed RM ensemble."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from morkit.cli.args import (
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    add_budget_options,
    add_cascade_options,
    add_fixed_option,
    add_scoring_options,
    add_select_options,
    checked,
    scoring_options,
    select_options,
)
from morkit.core import settings
from morkit.services.serving.limits import ServeLimits, port_number
from morkit.services.serving.ray_options import RayServeOptions

PORT = checked(int, port_number)


def api_key_text(text: str) -> str:
    """An argparse type for --api-key: the rule $MORKIT_API_KEY follows (settings.api_key_problem)."""
    problem = settings.api_key_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"the key {problem}")
    return text


def cmd_serve(args: argparse.Namespace) -> int:
    from morkit.core.errors import InputError
    from morkit.question_pool.pool import load_pool
    from morkit.services.serving.engine import RoutingEngine
    from morkit.services.serving.server import bind_socket, require_packages, serve

    require_packages()
    if (args.ray_max_replicas is not None or args.ray_gpus is not None) and not args.ray:
        raise InputError("--ray-max-replicas and --ray-gpus apply only with --ray")
    scaling = {"--ray-target-ongoing": args.ray_target_ongoing, "--ray-upscale-delay": args.ray_upscale_delay,
               "--ray-downscale-delay": args.ray_downscale_delay}
    given = [flag for flag, value in scaling.items() if value is not None]
    if given and args.ray_max_replicas is None:
        raise InputError(f"{given[0]} applies only with --ray-max-replicas (autoscaling on --ray)")
    limits = ServeLimits(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, queue_size=args.queue_size,
                         timeout_s=args.timeout, max_body_bytes=args.max_body_bytes, max_items=args.max_items,
                         max_candidates=args.max_candidates, max_text_chars=args.max_text_chars,
                         max_json_values=args.max_json_values, max_inflight_bytes=args.max_inflight_bytes,
                         body_timeout_s=args.body_timeout, max_connections=args.max_connections, grace_s=args.grace)
    api_key = args.api_key or settings.api_key()  # an empty $MORKIT_API_KEY is refused there, as --api-key ""
    if args.ray:
        return _serve_on_ray(args, limits, api_key)
    sock = bind_socket(args.host, args.port)  # a bad host or a port in use: exit 2 now, before any model loads
    try:
        pool = load_pool(args.pool)
        engine = RoutingEngine(pool, select_options(args), scoring_options(args))  # refuses a misfit
    except BaseException:
        sock.close()
        raise
    clean = True
    try:
        resident = ", ".join(engine.models) or "none (cached scores only)"
        print(f"morkit serve: pool {args.pool} ({len(pool)} questions), {engine.method}, resident RMs: {resident}",
              file=sys.stderr, flush=True)
        clean = serve(engine, limits, api_key=api_key, sock=sock,
                      log_level="info" if getattr(args, "verbose", False) else "warning")
    finally:
        if clean:
            engine.close()
    if not clean:  # a model call that hangs must not keep the process: exit without waiting for its thread
        print(f"morkit serve: an engine call was still running {args.grace:g} s after the signal; exiting "
              "without it", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    return 0


def _serve_on_ray(args: argparse.Namespace, limits: ServeLimits, api_key: str | None) -> int:
    """Deploy the app on Ray Serve (an ingress, a deployment per model RM), then wait for SIGTERM or SIGINT and
    delete it."""
    import signal
    import threading
    from dataclasses import replace

    from morkit.question_pool.pool import load_pool
    from morkit.reward_models.backends.ray import connect
    from morkit.services.serving import ray_serve
    from morkit.selection.fixed import FixedEnsemble

    pool = load_pool(args.pool)  # a bad pool, --rm or --cascade fails here, before Ray starts
    select = select_options(args)
    if select.rms:
        FixedEnsemble(pool, select.rms)
    if select.cascade is not None:
        select.cascade.check(pool.rm_names)
    scoring = replace(scoring_options(args), ray=None)
    ray = connect(args.ray)
    stop = threading.Event()  # over Ray's own handler (which aborts the driver), before the deployments start
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    gpus = args.ray_gpus
    if gpus is None:
        gpus = 1.0 if scoring.device != "cpu" and ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    scaling = {key: value for key, value in (("target_ongoing", args.ray_target_ongoing),
                                             ("upscale_delay_s", args.ray_upscale_delay),
                                             ("downscale_delay_s", args.ray_downscale_delay)) if value is not None}
    placement = RayServeOptions(rm_replicas=args.ray_workers or 1, max_rm_replicas=args.ray_max_replicas,
                                rm_gpus=gpus, host=args.host, port=args.port, **scaling)
    names = ray_serve.model_rms(pool, select)
    app = ray_serve.build_app(str(args.pool), select, scoring, limits, api_key=api_key, placement=placement)
    try:
        url = ray_serve.deploy(app, placement, address=args.ray)
    except BaseException:
        ray_serve.shutdown()  # a deployment that failed half-way must not keep its replicas (and GPUs)
        raise
    print(f"morkit serve: pool {args.pool} ({len(pool)} questions) on Ray Serve; RM deployments: "
          f"{', '.join(names) or 'none'} ({placement.replicas_text()} each, {gpus:g} GPU a replica); listening "
          f"on {url} (POST /v1/rank, POST /get_reward, POST /classify, GET /health, GET /metrics)",
          file=sys.stderr, flush=True)
    try:
        stop.wait()
    finally:
        ray_serve.shutdown()
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
                    "cache is shared. Every request is bounded before any work (body bytes, items, candidates, "
                    "text) and memory by the bytes of bodies held at once. With an API key (--api-key or "
                    "MORKIT_API_KEY) every route but /health needs 'Authorization: Bearer KEY'. SIGTERM finishes "
                    "the requests in flight and exits 0; after --grace seconds it exits anyway (1). POST /classify is "
                    "vLLM's classify route as verl's reward loop posts it (chat-rendered texts, each scored on "
                    "its own). With --ray [ADDRESS] the same app runs on Ray Serve: the router and embedder as one "
                    "ingress deployment, each model RM as its own deployment (--ray-workers replicas, or Ray Serve's "
                    "autoscaling up to --ray-max-replicas; --ray-gpus each; a replica whose call runs past "
                    "--timeout is replaced); the pool directory must be readable where the ingress runs. With "
                    "--budget or --cost-weight each query's route fits its budget, and with --cascade ... --then ... "
                    "a query the cheap route is unsure of is ranked again with the expensive RMs; each result then "
                    "carries its cost (where the RMs' costs are known) and whether it escalated, /metrics counts "
                    "escalations and spend, and /health shows the settings.")
    p.add_argument("--pool", required=True, help="pool directory (morkit pool build)")
    add_fixed_option(p)
    p.add_argument("--no-run", action="store_true",
                   help="use cached candidate scores only; never run an RM (no model is loaded)")
    add_select_options(p)
    add_budget_options(p)
    add_cascade_options(p)
    limits = ServeLimits()  # the defaults shown
    s = p.add_argument_group("server")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this machine only)")
    s.add_argument("--port", type=PORT, default=8000, help="port, 1-65535 (default 8000)")
    s.add_argument("--api-key", type=api_key_text, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' on every route but /health (default: $MORKIT_API_KEY; "
                        "prefer the variable: a flag shows in the process list). Without a key, listening on "
                        "another address than 127.0.0.1/::1 prints a warning")
    s.add_argument("--max-batch", type=POSITIVE_INT, default=limits.max_batch,
                   help="requests per engine call (default 32; 1 turns micro-batching off)")
    s.add_argument("--max-wait-ms", type=NON_NEGATIVE, default=limits.max_wait_ms,
                   help="how long a batch's first request waits for others to join it (default 5 ms)")
    s.add_argument("--queue-size", type=POSITIVE_INT, default=limits.queue_size,
                   help="requests that may wait for the engine; more are answered 503 with Retry-After (default 256)")
    s.add_argument("--timeout", type=POSITIVE, default=limits.timeout_s,
                   help="seconds a request may take, queueing included, before a 504 (default 120)")
    s.add_argument("--max-body-bytes", type=POSITIVE_INT, default=limits.max_body_bytes,
                   help="largest request body; a larger one is refused (413) before it is parsed (default 16 MiB)")
    s.add_argument("--max-items", type=POSITIVE_INT, default=limits.max_items,
                   help="most queries (/v1/rank) or items (/get_reward) in one request; more are a 400 (default 4096)")
    s.add_argument("--max-candidates", type=POSITIVE_INT, default=limits.max_candidates,
                   help="most candidates in one request, all its queries together; more are a 413 before any "
                        "scoring (default 4096)")
    s.add_argument("--max-text-chars", type=POSITIVE_INT, default=limits.max_text_chars,
                   help="most characters in the strings of one request body; more are a 413 before any scoring "
                        "(default 8388608)")
    s.add_argument("--max-json-values", type=POSITIVE_INT, default=limits.max_json_values,
                   help="most JSON values (objects, lists, strings, numbers) in one request body, counted from its "
                        "bytes; more are a 413 before the body is parsed: they bound what it becomes in memory "
                        f"(default {limits.max_json_values})")
    s.add_argument("--max-inflight-bytes", type=POSITIVE_INT, default=limits.max_inflight_bytes,
                   help="request bodies the server holds at once (being read, queued or scored); a request that "
                        "would pass it is answered 503 with Retry-After at once (default 256 MiB; the parsed "
                        "requests take a few times that in memory)")
    s.add_argument("--body-timeout", type=POSITIVE, default=limits.body_timeout_s,
                   help=f"seconds a request body may take to arrive; then a 408 (default {limits.body_timeout_s:g})")
    s.add_argument("--max-connections", type=POSITIVE_INT, default=limits.max_connections,
                   help="open connections and requests at once; more are answered 503 (default "
                        f"{limits.max_connections}). Headers are capped at 64 KiB a connection")
    s.add_argument("--grace", type=POSITIVE, default=limits.grace_s,
                   help="seconds after SIGTERM/SIGINT to finish the requests in flight; then the process exits "
                        "anyway, even if a model call hangs (default 30)")
    add_scoring_options(p)
    r = p.add_argument_group("Ray Serve (--ray)")
    placed = RayServeOptions()  # the defaults shown
    r.add_argument("--ray-max-replicas", type=POSITIVE_INT, metavar="N",
                   help="with --ray: Ray Serve's autoscaler keeps each RM deployment between --ray-workers (default "
                        "1) and N replicas, from the scoring calls in flight or waiting per replica (each call is "
                        "--chunk pairs; a request's calls go out at once). Default: no autoscaling")
    r.add_argument("--ray-target-ongoing", type=POSITIVE, metavar="R",
                   help="with --ray-max-replicas: the calls in flight or waiting per RM replica the autoscaler aims "
                        f"at; it adds replicas while there are more (default {placed.target_ongoing:g}; a replica "
                        "runs one call at a time, so above 1 some wait)")
    r.add_argument("--ray-upscale-delay", type=NON_NEGATIVE, metavar="S",
                   help="with --ray-max-replicas: seconds the load must stay above the target before replicas are "
                        f"added (default {placed.upscale_delay_s:g})")
    r.add_argument("--ray-downscale-delay", type=NON_NEGATIVE, metavar="S",
                   help="with --ray-max-replicas: seconds the load must stay below the target before replicas are "
                        f"removed (default {placed.downscale_delay_s:g}: a model replica is slow to load again)")
    r.add_argument("--ray-gpus", type=NON_NEGATIVE, metavar="G",
                   help="with --ray: GPUs per RM replica (default 1 where the cluster has GPUs and --device is not "
                        "cpu, else 0)")
    p.set_defaults(func=cmd_serve)
