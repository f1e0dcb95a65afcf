"""The HTTP app of `morkit serve` (FastAPI): /v1/rank, OpenRLHF's /get_reward, vLLM's /classify (verl), /health,
/metrics. Every limit is enforced where input enters, before any work (docs/serving.md lists each and its answer).
"""

# no `from __future__ import annotations`: FastAPI reads the handlers' `Request` annotation at run time

import asyncio
import hashlib
import hmac
import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, Callable

from morkit.core import settings
from morkit.core.budget import DeadlinePassed
from morkit.core.errors import InputError, MorkitError
from morkit.services.serving.batcher import Batcher
from morkit.services.serving.classify import classify_job, classify_reply
from morkit.services.serving.limits import ByteBudget, Overloaded, Reservation, ServeLimits, size_text
from morkit.services.serving.metrics import ServerMetrics
from morkit.services.serving.protocol import (
    TooLarge,
    decode_body,
    rank_queries,
    reward_job,
    reward_reply,
)

__all__ = ["ServeLimits", "create_app"]

ROUTES = ("/v1/rank", "/get_reward", "/classify", "/health", "/metrics")
SMALL_BODY = 64 * 1024
"""Bodies up to this size are parsed on a thread of their own, so a small request never waits behind large ones."""


class _Refused(Exception):
    """A request answered with an error status and a one-line reason."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None):
        super().__init__(reason)
        self.status = status
        self.reason = " ".join(reason.split())
        self.headers = headers


def _declared_length(request: Any, limit: int) -> int | None:
    """The body's Content-Length, refused (413) when over `limit` before a byte is read; None when chunked."""
    length = request.headers.get("content-length")
    if length is None:
        return None
    if not length.isdigit():
        raise _Refused(400, f"bad Content-Length header {length[:40]!r}")
    if int(length) > limit:
        raise _Refused(413, f"request body of {length} bytes is over this server's limit of {limit} bytes "
                            "(--max-body-bytes); send fewer queries per request")
    return int(length)


async def _read_body(request: Any, limit: int, reservation: Reservation) -> bytes:
    """The body; its reservation grows as its bytes arrive (503 when the budget runs out), so a slow sender
    holds only what it sent."""
    from starlette.requests import ClientDisconnect

    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _Refused(413, f"request body is over this server's limit of {limit} bytes (--max-body-bytes)")
            reservation.grow(len(chunk))
            chunks.append(chunk)
    except ClientDisconnect:
        raise _Refused(499, "the client closed the connection while sending the body") from None
    except Overloaded as exc:
        raise _Refused(503, str(exc), {"Retry-After": "1"}) from None
    return b"".join(chunks)


async def _client_gone(request: Any) -> None:
    """Returns when the client disconnects (the ASGI server sends http.disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _closing_cutoff(app: Any) -> None:
    """Returns when the server, shutting down, stops waiting for the engine: a request still waiting then is
    answered 503 at 0.7 of the grace, before uvicorn cancels it at 0.8."""
    await app.state.closing.wait()
    await asyncio.sleep(max(app.state.stop_by - 0.3 * app.state.limits.grace_s - time.monotonic(), 0.0))


async def _outcome(request: Any, future: asyncio.Future, timeout_s: float, budget_s: float) -> Any:
    gone = asyncio.ensure_future(_client_gone(request))
    closing = asyncio.ensure_future(_closing_cutoff(request.app))
    try:
        done, _ = await asyncio.wait({future, gone, closing}, timeout=max(budget_s, 0.0),
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        closing.cancel()
        if not future.done():
            future.cancel()  # queued: it leaves the queue now; running: its result is dropped
    if future in done:
        return future.result()
    if gone in done:
        raise _Refused(499, "the client closed the connection")
    if closing in done:
        raise _Refused(503, "the server is shutting down and the engine did not answer this request within its "
                            "grace (--grace); retry elsewhere or later", {"Retry-After": "1"})
    raise _too_late(timeout_s)


def _too_late(timeout_s: float) -> _Refused:
    return _Refused(504, f"not answered within {timeout_s:g} s (--timeout); the server is busy or the request is "
                         "too large")


class _BearerKey:
    """ASGI middleware: every HTTP route but /health needs `Authorization: Bearer KEY`, else 401 before the
    body is read. The key is compared by its SHA-256 in constant time (neither its content nor length leaks)."""

    def __init__(self, app: Any, key: str, metrics: ServerMetrics):
        self.app = app
        self._digest = hashlib.sha256(key.encode("utf-8")).digest()
        self._metrics = metrics

    def _allowed(self, scope: dict) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.strip().partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    hashlib.sha256(token.strip()).digest(), self._digest)
        return False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or (scope["type"] == "http" and (
                scope["path"] == "/health" or self._allowed(scope))):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # a websocket or anything else: this server has none
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "missing or wrong API key: send the header 'Authorization: Bearer KEY' "
                                    "with this server's key (--api-key or MORKIT_API_KEY)"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="morkit serve"')]})
        await send({"type": "http.response.body", "body": body})
        self._metrics.observe_request(scope["path"] if scope["path"] in ROUTES else "other", 401, 0.0)


def create_app(engine: Any, limits: ServeLimits = ServeLimits(), *, api_key: str | None = None) -> Any:
    """The FastAPI app over `engine` (a RoutingEngine, or anything with `run(jobs)`, `cache` and `health()`).

    With `api_key`, every route but /health needs it as a bearer token. On SIGTERM the server sets
    `app.state.stop_by` and `app.state.closing`: requests still waiting at 0.7 of the grace are answered 503.

    Args:
        engine: A RoutingEngine, or anything with `run(jobs)`, `cache` and `health()`.
        limits: Micro-batching, request limits and the shutdown grace.
        api_key: The bearer token every route but /health requires; None requires none.

    Returns:
        The FastAPI app (run it with uvicorn, or use `serve`).

    Raises:
        InputError: `api_key` is blank or has whitespace around it.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    problem = None if api_key is None else settings.api_key_problem(api_key)
    if problem:
        raise InputError(f"the API key {problem}")
    batcher: Batcher | None = None
    budget = ByteBudget(limits.max_inflight_bytes)
    metrics = ServerMetrics(getattr(engine, "cache", None), lambda: batcher.depth if batcher else 0,
                            lambda: budget.used)
    batcher = Batcher(engine.run, max_batch=limits.max_batch, max_wait_ms=limits.max_wait_ms,
                      queue_size=limits.queue_size, on_batch=metrics.observe_batch)
    parsers: list[ThreadPoolExecutor] = []  # [large bodies, small bodies]

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        parsers.append(ThreadPoolExecutor(max_workers=2, thread_name_prefix="morkit-parse"))
        parsers.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="morkit-parse-small"))
        app.state.closing = asyncio.Event()  # set by the server when it begins to shut down
        await batcher.start()
        try:
            yield
        finally:  # SIGTERM: uvicorn has finished (or, past the grace, cancelled) the requests in flight
            stop_by = app.state.stop_by or time.monotonic() + limits.grace_s
            await batcher.stop(max(stop_by - time.monotonic(), 0.0))
            while parsers:
                parsers.pop().shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="morkit serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine, app.state.batcher, app.state.metrics, app.state.limits = engine, batcher, metrics, limits
    app.state.budget, app.state.stop_by, app.state.closing = budget, None, None
    if api_key is not None:
        app.add_middleware(_BearerKey, key=api_key, metrics=metrics)

    async def scored(request: Request, route: str, parse: Callable[[dict], tuple[Any, Any]],
                     reply: Callable[[Any, Any], dict]) -> Any:
        started, status = time.perf_counter(), 500
        deadline = time.monotonic() + limits.timeout_s
        reservation: Reservation | None = None
        try:
            length = _declared_length(request, limits.max_body_bytes)
            try:
                budget.check_room(length or 0)  # before a byte is read: a full budget refuses at once
                reservation = budget.reserve(0)
            except Overloaded as exc:
                raise _Refused(503, str(exc), {"Retry-After": "1"}) from None
            try:
                raw = await asyncio.wait_for(_read_body(request, limits.max_body_bytes, reservation),
                                             min(limits.body_timeout_s, limits.timeout_s))
            except asyncio.TimeoutError:
                raise _Refused(408, f"the body did not arrive within {min(limits.body_timeout_s, limits.timeout_s):g}"
                                    " s (--body-timeout)") from None
            try:
                job, context = await asyncio.get_running_loop().run_in_executor(
                    parsers[len(raw) <= SMALL_BODY], lambda: parse(decode_body(raw, limits.max_json_values)))
                del raw  # the parsed job is what is held from here on
                future = batcher.submit(job, reservation, deadline)
            except TooLarge as exc:
                raise _Refused(413, str(exc)) from None
            except InputError as exc:
                raise _Refused(400, str(exc)) from None
            except Overloaded as exc:
                raise _Refused(503, str(exc), {"Retry-After": "1"}) from None
            except (RecursionError, MemoryError, ValueError, TypeError) as exc:  # e.g. JSON nested too deep
                raise _Refused(400, f"request body: cannot be parsed ({type(exc).__name__})") from None
            try:
                rankings = await _outcome(request, future, limits.timeout_s, deadline - time.monotonic())
                body = reply(context, rankings)
                metrics.observe_rankings(rankings)
            except InputError as exc:
                raise _Refused(400, str(exc)) from None
            except DeadlinePassed:  # the engine dropped it at its deadline, a moment before the wait above ended
                raise _too_late(limits.timeout_s) from None
            except MorkitError as exc:
                raise _Refused(500, str(exc)) from None
            except _Refused:
                raise
            except Exception as exc:  # noqa: BLE001 - a bug: one line, the server goes on
                raise _Refused(500, f"internal error: {type(exc).__name__}: {exc}") from None
            status = 200
            return JSONResponse(body)
        except _Refused as refused:
            status = refused.status
            return JSONResponse({"error": refused.reason}, status_code=refused.status, headers=refused.headers)
        finally:
            if reservation is not None:
                reservation.release()
            metrics.observe_request(route, status, time.perf_counter() - started)

    @app.post("/v1/rank")
    async def rank(request: Request) -> Any:
        """Body {"queries": [contract queries]}; reply {"results": [one `morkit rank` line per query]}."""
        return await scored(request, "/v1/rank", lambda body: (rank_queries(body, limits), None),
                            lambda _, rankings: {"results": [r.to_json() for r in rankings]})

    @app.post("/get_reward")
    async def get_reward(request: Request) -> Any:
        """OpenRLHF's remote RM: body {"query", "prompts", "labels"}; reply {"rewards", "scores"}."""

        def parse(body: dict) -> tuple[Any, Any]:
            job = reward_job(body, limits)
            return job.queries, job

        return await scored(request, "/get_reward", parse,
                            lambda job, rankings: reward_reply(job, [r.scores for r in rankings]))

    @app.post("/classify")
    async def classify(request: Request) -> Any:
        """vLLM's /classify as verl posts it: {"model", "input": chat text(s), "activation"}; each text is
        routed and scored on its own; reply {"data": [{"probs": [reward]}, ...]} (vLLM's shape)."""

        def parse(body: dict) -> tuple[Any, Any]:
            job = classify_job(body, limits)
            return job.queries, job

        return await scored(request, "/classify", parse,
                            lambda job, rankings: classify_reply(job, [r.scores[0] for r in rankings]))

    @app.get("/health")
    async def health() -> Any:
        """The engine's state, the queue, and whether an engine call has run past --timeout (503 "stalled":
        every request in it has had its 504, and nothing else can run)."""
        busy = None if batcher.busy_since is None else time.monotonic() - batcher.busy_since
        body = {**engine.health(), "queue_depth": batcher.depth, "in_flight": batcher.in_flight,
                "engine_busy_s": None if busy is None else round(busy, 3), "held_bytes": budget.used,
                "held": size_text(budget.used)}
        stalled = busy is not None and busy > limits.timeout_s
        if stalled:
            body["status"] = "stalled"
        metrics.observe_request("/health", 503 if stalled else 200, 0.0)
        return JSONResponse(body, status_code=503 if stalled else 200)

    @app.get("/metrics")
    async def prometheus() -> Any:
        """The Prometheus text, rendered on a thread: a collector may ask another process (Ray Serve's controller
        for the RM replicas), which must not hold up the event loop."""
        body, media_type = await asyncio.get_running_loop().run_in_executor(None, metrics.render)
        return Response(body, media_type=media_type)

    return app
