"""Run the app under uvicorn on a socket bound here first, so a bad --host or --port fails before any model loads.

SIGTERM finishes the requests in flight within `ServeLimits.grace_s`; an engine call still running then is abandoned.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import signal
import socket
import sys
import threading
import time
from typing import Any, Iterator

from morkit.core.errors import InputError, UnavailableError
from morkit.services.serving.app import create_app
from morkit.services.serving.limits import ServeLimits, port_number

SERVE_INSTALL = "morkit serve needs {missing}, which is not installed here: pip install 'morkit[serve]'"
RESOLVE_SECONDS = 10.0
"""How long resolving --host may take before start-up is refused (a resolver that never answers)."""


def require_packages() -> None:
    """Refuse, before any model loads, when the server's packages are missing."""
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "prometheus_client") if importlib.util.find_spec(m) is None]
    if missing:
        raise UnavailableError(SERVE_INSTALL.format(missing=", ".join(missing)))


def _resolve(host: str, port: int, timeout_s: float) -> tuple[Any, ...]:
    """getaddrinfo's first answer for a listening socket, on a daemon thread so a hung resolver cannot hold us."""
    found: dict[str, Any] = {}

    def resolve() -> None:
        try:
            found["infos"] = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except (OSError, UnicodeError) as exc:
            found["error"] = exc

    thread = threading.Thread(target=resolve, name="morkit-resolve", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise InputError(f"--host {host}: not resolved within {timeout_s:g} s; give an IP address")
    if "error" in found:
        exc = found["error"]
        raise InputError(f"--host {host}: cannot resolve it ({getattr(exc, 'strerror', None) or exc})")
    return found["infos"][0]


def bind_socket(host: str = "127.0.0.1", port: int = 8000, *, backlog: int = 2048,
                resolve_s: float = RESOLVE_SECONDS) -> socket.socket:
    """A TCP socket bound to `host`:`port` and listening (port 0: any free port); InputError naming --host or
    --port, at once, when the host does not resolve or the address cannot be taken."""
    port_number(port, any_free=True)
    family, kind, proto, _, address = _resolve(host, port, resolve_s)
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart over TIME_WAIT
        sock.bind(address)
        sock.listen(backlog)  # SO_REUSEADDR lets two sockets bind; only one may listen
    except OSError as exc:
        sock.close()
        flag = "--host " + host if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) else f"--port {port}"
        raise InputError(f"{flag}: cannot listen on {_shown(host, port)}: {exc.strerror or exc}") from None
    return sock


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(sock: socket.socket) -> bool:
    """Whether the socket listens on this machine only (127.0.0.0/8, ::1)."""
    try:
        return ipaddress.ip_address(sock.getsockname()[0].split("%")[0]).is_loopback
    except ValueError:
        return False


def make_server(engine: Any, limits: ServeLimits = ServeLimits(), *, host: str = "127.0.0.1", port: int = 8000,
                api_key: str | None = None, sock: socket.socket | None = None, log_level: str = "warning") -> Any:
    """A uvicorn.Server for the app over `engine`, on `sock` or a socket bound now to `host`:`port` (port 0:
    any free one; `.port` says which). Not started: call `.run()`, or `await .serve()`. It says on stderr
    where it listens once it does, and warns when that is not this machine only and there is no API key."""
    import uvicorn

    sock = sock or bind_socket(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    if api_key is None and not is_loopback(sock):
        print(f"morkit serve: warning: listening on {_shown(bound_host, bound_port)} without an API key: anyone "
              "who can reach this port can use the server (and, through `tests`, run code in its sandbox); set "
              "MORKIT_API_KEY or --api-key, or bind 127.0.0.1", file=sys.stderr, flush=True)
    app = create_app(engine, limits, api_key=api_key)

    class Server(uvicorn.Server):
        listener = sock
        port = bound_port

        @property
        def abandoned(self) -> bool:
            """Whether shutdown left an engine call running (it did not return within the grace)."""
            return app.state.batcher.abandoned

        async def serve(self, sockets: Any = None) -> None:
            await super().serve(sockets=sockets or [sock])

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                # uvicorn re-raises the signal that stopped it; after SIGTERM the work in flight is done (or
                # past the grace, given up), so this is a normal end, not a death by signal
                captured = getattr(self, "_captured_signals", [])
                captured[:] = [s for s in captured if s != signal.SIGTERM]

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                print(f"morkit serve: listening on http://{_shown(bound_host, bound_port)} (POST /v1/rank, "
                      "POST /get_reward, POST /classify, GET /health, GET /metrics)", file=sys.stderr, flush=True)

        async def shutdown(self, sockets: Any = None) -> None:
            app.state.stop_by = time.monotonic() + limits.grace_s
            if app.state.closing is not None:
                app.state.closing.set()
            await super().shutdown(sockets)

    # uvicorn waits this long for the requests in flight, then cancels them; the rest of the grace is the
    # batcher's, to let the engine's last call return
    # h11 (not httptools, which grows a header without bound, copying it on every read): at most 64 KiB of
    # headers per connection, and at most max_connections of them at once (uvicorn answers 503 past it)
    config = uvicorn.Config(app, host=bound_host, port=bound_port, log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=limits.grace_s * 0.8, access_log=False, http="h11",
                            h11_max_incomplete_event_size=64 * 1024, limit_concurrency=limits.max_connections)
    return Server(config)


def serve(engine: Any, limits: ServeLimits = ServeLimits(), *, host: str = "127.0.0.1", port: int = 8000,
          api_key: str | None = None, sock: socket.socket | None = None, log_level: str = "warning") -> bool:
    """Serve until SIGTERM or SIGINT; then finish the work in flight (within `limits.grace_s`) and return
    True, or False when an engine call was still running at the end of the grace and was abandoned.

    Args:
        engine: A RoutingEngine, or anything with `run(jobs)`, `cache` and `health()`.
        limits: Micro-batching, request limits and the shutdown grace.
        host: The address to bind when `sock` is None (a warning is printed when it is not loopback and there
            is no API key).
        port: The TCP port to bind when `sock` is None; 0 picks any free one.
        api_key: The bearer token every route but /health requires; None requires none.
        sock: An already bound socket to serve on instead of `host`:`port`.
        log_level: uvicorn's log level.

    Returns:
        True when the work in flight finished within the grace, False when an engine call was abandoned.

    Raises:
        InputError: `api_key` is blank, or `host`:`port` cannot be bound.
    """
    server = make_server(engine, limits, host=host, port=port, api_key=api_key, sock=sock, log_level=log_level)
    server.run()
    return not server.abandoned
