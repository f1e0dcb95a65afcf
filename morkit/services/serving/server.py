"""Run the app under uvicorn, programmatically: uvicorn's own SIGINT/SIGTERM handling stops accepting,
finishes the requests in flight, then the app's lifespan drains the batcher and the process exits."""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Any, Iterator

from morkit.core.errors import UnavailableError
from morkit.services.serving.app import ServeLimits, create_app

SERVE_INSTALL = "morkit serve needs {missing}, which is not installed here: pip install 'morkit[serve]'"


def require_packages() -> None:
    """Refuse, before any model loads, when the server's packages are missing."""
    import importlib.util

    missing = [m for m in ("fastapi", "uvicorn", "prometheus_client") if importlib.util.find_spec(m) is None]
    if missing:
        raise UnavailableError(SERVE_INSTALL.format(missing=", ".join(missing)))


def make_server(engine: Any, limits: ServeLimits = ServeLimits(), *, host: str = "127.0.0.1", port: int = 8000,
                log_level: str = "warning") -> Any:
    """A uvicorn.Server for the app over `engine` (not started: call `.run()`, or `await .serve()`); it says
    where it listens on stderr once the port is bound."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                # uvicorn re-raises the signal that stopped it; after SIGTERM the work in flight is done and
                # the batcher drained, so this is a normal end (exit 0), not a death by signal
                captured = getattr(self, "_captured_signals", [])
                captured[:] = [s for s in captured if s != signal.SIGTERM]

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started:
                print(f"morkit serve: listening on http://{host}:{port} (POST /v1/rank, POST /get_reward, "
                      "GET /health, GET /metrics)", file=sys.stderr, flush=True)

    config = uvicorn.Config(create_app(engine, limits), host=host, port=port, log_level=log_level,
                            lifespan="on", timeout_graceful_shutdown=int(limits.timeout_s) + 5, access_log=False)
    return Server(config)


def serve(engine: Any, limits: ServeLimits = ServeLimits(), *, host: str = "127.0.0.1", port: int = 8000,
          log_level: str = "warning") -> None:
    """Serve until SIGTERM or SIGINT; then finish the work in flight and return."""
    make_server(engine, limits, host=host, port=port, log_level=log_level).run()
