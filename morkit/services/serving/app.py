"""The HTTP app of `morkit serve` (FastAPI): /v1/rank, OpenRLHF's /get_reward, /health and /metrics.

Every scoring request goes through one micro-batcher into the engine. Limits are enforced where input
enters: the body size before parsing (413), the number of items (400), a bounded queue (503 with
Retry-After), and a per-request timeout (504). A bad body is a 400 with a one-line reason. A client that
disconnects has its queued work dropped before the engine runs it.
"""


import asyncio
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Callable

from morkit.core import checks
from morkit.core.errors import InputError, MorkitError
from morkit.services.serving.batcher import Batcher, Overloaded
from morkit.services.serving.metrics import ServerMetrics
from morkit.services.serving.protocol import (
    decode_body,
    rank_queries,
    reward_job,
    reward_reply,
)


@dataclass(frozen=True)
class ServeLimits:
    """Micro-batching and the request limits of one server."""

    max_batch: int = 32  # requests per engine call (1 turns micro-batching off)
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    queue_size: int = 256  # requests waiting at most; more get 503
    timeout_s: float = 120.0  # per request, queueing included; then 504
    max_body_bytes: int = 16 * 2**20
    max_items: int = 4096  # queries of a /v1/rank body, items of a /get_reward body

    def __post_init__(self) -> None:
        checks.positive_int(self.max_batch, "max_batch")
        checks.non_negative(self.max_wait_ms, "max_wait_ms")
        checks.positive_int(self.queue_size, "queue_size")
        checks.positive(self.timeout_s, "timeout_s")
        checks.positive_int(self.max_body_bytes, "max_body_bytes")
        checks.positive_int(self.max_items, "max_items")


class _Refused(Exception):
    """A request answered with an error status and a one-line reason."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None):
        super().__init__(reason)
        self.status = status
        self.reason = " ".join(reason.split())
        self.headers = headers


async def _read_body(request: Any, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise _Refused(400, f"bad Content-Length header {length!r}")
        if int(length) > limit:
            raise _Refused(413, f"request body of {length} bytes is over this server's limit of {limit} bytes "
                                "(--max-body-bytes); send fewer queries per request")
    from starlette.requests import ClientDisconnect

    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _Refused(413, f"request body is over this server's limit of {limit} bytes (--max-body-bytes)")
            chunks.append(chunk)
    except ClientDisconnect:
        raise _Refused(499, "the client closed the connection while sending the body") from None
    return b"".join(chunks)


async def _client_gone(request: Any) -> None:
    """Returns when the client disconnects (the ASGI server sends http.disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _outcome(request: Any, future: asyncio.Future, timeout_s: float) -> Any:
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        done, _ = await asyncio.wait({future, gone}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if future in done:
        return future.result()
    future.cancel()  # still queued: the batcher drops it; running: its result is dropped
    if gone in done:
        raise _Refused(499, "the client closed the connection")
    raise _Refused(504, f"not answered within {timeout_s:g} s (--timeout); the server is busy or the request "
                        "is too large")


def create_app(engine: Any, limits: ServeLimits = ServeLimits()) -> Any:
    """The FastAPI app over `engine` (a RoutingEngine, or anything with `run(jobs)`, `cache` and `health()`)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    batcher: Batcher | None = None
    metrics = ServerMetrics(getattr(engine, "cache", None), lambda: batcher.depth if batcher else 0)
    batcher = Batcher(engine.run, max_batch=limits.max_batch, max_wait_ms=limits.max_wait_ms,
                      queue_size=limits.queue_size, on_batch=metrics.observe_batch)

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()  # SIGTERM: uvicorn has finished the requests in flight; nothing is left queued

    app = FastAPI(title="morkit serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine, app.state.batcher, app.state.metrics, app.state.limits = engine, batcher, metrics, limits

    async def scored(request: Request, route: str, parse: Callable[[dict], tuple[Any, Any]],
                     reply: Callable[[Any, Any], dict]) -> Any:
        started, status = time.perf_counter(), 500
        try:
            raw = await _read_body(request, limits.max_body_bytes)
            try:
                job, context = parse(decode_body(raw))
                future = batcher.submit(job)
            except InputError as exc:
                raise _Refused(400, str(exc)) from None
            except Overloaded as exc:
                raise _Refused(503, str(exc), {"Retry-After": "1"}) from None
            try:
                body = reply(context, await _outcome(request, future, limits.timeout_s))
            except InputError as exc:
                raise _Refused(400, str(exc)) from None
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
            metrics.observe_request(route, status, time.perf_counter() - started)

    @app.post("/v1/rank")
    async def rank(request: Request) -> Any:
        """Body {"queries": [contract queries]}; reply {"results": [one `morkit rank` line per query]}."""
        return await scored(request, "/v1/rank", lambda body: (rank_queries(body, limits.max_items), None),
                            lambda _, rankings: {"results": [r.to_json() for r in rankings]})

    @app.post("/get_reward")
    async def get_reward(request: Request) -> Any:
        """OpenRLHF's remote RM: body {"query", "prompts", "labels"}; reply {"rewards", "scores"}."""

        def parse(body: dict) -> tuple[Any, Any]:
            job = reward_job(body, limits.max_items)
            return job.queries, job

        return await scored(request, "/get_reward", parse,
                            lambda job, rankings: reward_reply(job, [r.scores for r in rankings]))

    @app.get("/health")
    async def health() -> Any:
        metrics.observe_request("/health", 200, 0.0)
        return {**engine.health(), "queue_depth": batcher.depth, "in_flight": batcher.in_flight}

    @app.get("/metrics")
    async def prometheus() -> Any:
        body, media_type = metrics.render()
        return Response(body, media_type=media_type)

    return app
