"""`morkit serve --ray`: the same FastAPI app on Ray Serve. The router and embedder are one ingress deployment (the
app create_app builds; the selection options travel to it pickled); each model RM of the pool is its own deployment,
fixed or autoscaled, called in parts sent at once, a replica hung past the timeout replaced after its health check.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from morkit.core.errors import ScoreError, UnavailableError
from morkit.reward_models.backends.ray import ReplicaHandle, connect, load_replica, replica_key, replica_options
from morkit.reward_models.options import ScoringOptions
from morkit.selection.methods import SelectOptions
from morkit.services.serving.limits import ServeLimits
from morkit.services.serving.ray_options import RayServeOptions

__all__ = ["RayServeOptions", "build_app", "deploy", "shutdown"]

APP_NAME = "morkit"
SERVE_INSTALL = "--ray needs Ray Serve, which is not installed here: pip install 'morkit[ray]' (ray[serve])"


class RMReplica:
    """One replica of a model RM: loaded once (after its fit check) on the placement the options pick there, its
    cache key worked out there too (on the replica's own device and dtype). It tells Serve's health check when a
    scoring call has run past `stall_s` (the request timeout, after which nobody waits for it): a hung model, which
    Serve then replaces."""

    def __init__(self, entry: Any, options: ScoringOptions, stall_s: float = 120.0):
        self.name = entry.name
        self.key = replica_key(entry, options)
        self.rm = load_replica(entry, options)
        self.stall_s = stall_s
        self._running: dict[int, float] = {}  # call number -> time.monotonic() when it began
        self._calls = itertools.count()
        self._lock = threading.Lock()

    def cache_key(self) -> str:
        """The key this replica's scores are cached under."""
        return self.key

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Any]:
        call = next(self._calls)
        with self._lock:
            self._running[call] = time.monotonic()
        try:
            scores = list(self.rm.score([tuple(p) for p in pairs]))
        finally:
            with self._lock:
                del self._running[call]
        if len(scores) != len(pairs):
            raise ScoreError(f"reward model returned {len(scores)} scores for {len(pairs)} pairs")
        return scores

    def stalled_s(self) -> float | None:
        """Seconds the oldest scoring call has run when that is past `stall_s`, else None."""
        with self._lock:
            oldest = min(self._running.values(), default=None)
        running = None if oldest is None else time.monotonic() - oldest
        return running if running is not None and running > self.stall_s else None

    async def check_health(self) -> None:
        """Ray Serve's health check (every `RayServeOptions.health_check_s`): fails while a scoring call has run
        past `stall_s`, so Serve replaces this replica. Async: it runs beside the hung call, not behind it."""
        running = self.stalled_s()
        if running is not None:
            raise ScoreError(f"reward model {self.name!r}: a scoring call has run {running:.0f} s, past the request "
                             f"timeout of {self.stall_s:g} s (--timeout); this replica is stalled")


class ServeRMHandle(ReplicaHandle):
    """A model RM served by a Ray Serve deployment, called through its DeploymentHandle within the caller's deadline
    (`core.budget`, else `timeout_s`). The pairs go in parts of the scoring chunk, all sent at once: Serve spreads
    them over the replicas, and its autoscaler counts those in flight or waiting. A call not answered by the
    deadline is cancelled, `on_timeout(rm name)` is told, and the job fails with DeadlinePassed (a 504)."""

    placement = "ray-serve"
    on_timeout: Callable[[str], None] | None = None

    def __init__(self, entry: Any, options: ScoringOptions, deployment: Any, timeout_s: float = 120.0,
                 on_timeout: Callable[[str], None] | None = None):
        super().__init__(entry, options)
        self.deployment = deployment
        self.timeout_s = timeout_s
        self.on_timeout = on_timeout

    def reported_key(self) -> str:
        """The key its deployment's replica reports, having worked it out where it runs (its GPU share, device,
        dtype and weights, not this ingress's)."""
        return str(self._result(self.deployment.cache_key.remote(), None, "say its cache key"))

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Any]:
        from morkit.core import budget

        return self._result(self.deployment.score.remote([tuple(p) for p in pairs]), budget.current().deadline,
                            "answer")

    def score_batches(self, pairs: Sequence[tuple[str, str]], chunk: int) -> Iterator[tuple[list, list]]:
        """(part, scores) for every `chunk` pairs, all parts sent to the deployment before the first is waited for,
        each yielded in order within the caller's deadline; the parts still out when it ends early are cancelled.

        Args:
            pairs: The (question, answer) pairs to score.
            chunk: Pairs per deployment call.

        Returns:
            An iterator of (the part's pairs, their scores).

        Raises:
            DeadlinePassed: The caller's deadline passed before a part was answered.
            ScoreError: A replica failed, or gave no answer within `timeout_s` where there is no deadline.
        """
        from morkit.core import budget

        deadline = budget.current().deadline
        parts = [[tuple(p) for p in pairs[start : start + chunk]] for start in range(0, len(pairs), chunk)]
        out = [self.deployment.score.remote(part) for part in parts]
        waited = 0
        try:
            for part, response in zip(parts, out):
                waited += 1
                yield part, self._result(response, deadline, "answer")
        finally:
            for response in out[waited:]:
                response.cancel()

    def _result(self, response: Any, deadline: float | None, what: str) -> Any:
        """A deployment call's result by `deadline` (time.monotonic(); None: within `timeout_s`), cancelled past it;
        its failure in one line."""
        from morkit.core.budget import DeadlinePassed

        timeout_s = self.timeout_s if deadline is None else max(deadline - time.monotonic(), 0.001)
        try:
            return response.result(timeout_s=timeout_s)
        except TimeoutError:
            response.cancel()
            if self.on_timeout is not None:
                self.on_timeout(self.name)
            if deadline is not None:
                raise DeadlinePassed(f"reward model {self.name!r}: its Ray Serve deployment did not {what} by the "
                                     "request's deadline (--timeout)") from None
            raise ScoreError(f"reward model {self.name!r}: its Ray Serve deployment did not {what} within "
                             f"{timeout_s:.3g} s") from None
        except Exception as exc:  # noqa: BLE001 - a RayTaskError's str is the replica's whole traceback
            raise ScoreError(f"reward model {self.name!r}: its Ray Serve deployment failed: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    """`Type: message` of the error a replica raised (a RayTaskError's cause), its first line only."""
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0] if lines else ''}"[:300]


class Ingress:
    """The router and embedder: the pool, the RoutingEngine over the RM deployments' handles, and the app, whose
    /metrics also shows each RM deployment's replicas and the calls abandoned at their deadline. `entries` are the
    driver's registrations of the pool's RMs: one this process lacks (a user's own RM) is registered here too."""

    def __init__(self, pool_dir: str, select: SelectOptions, scoring: ScoringOptions, limits: ServeLimits,
                 api_key: str | None, deployments: dict[str, Any], embedder: Any = None,
                 entries: Mapping[str, Any] | None = None):
        from morkit.question_pool.pool import load_pool
        from morkit.reward_models.catalog import REWARD_MODELS
        from morkit.services.serving.engine import RoutingEngine

        for name, entry in (entries or {}).items():
            if name not in REWARD_MODELS:
                REWARD_MODELS.add(entry)
        self.metrics: Any = None  # the app's ServerMetrics, once it is built
        handles = {name: ServeRMHandle(REWARD_MODELS.get(name), scoring, handle, limits.timeout_s, self._timed_out)
                   for name, handle in deployments.items()}
        self.engine = RoutingEngine(load_pool(pool_dir), select, scoring, embedder=embedder, handles=handles)
        self.limits, self.api_key, self.rms = limits, api_key, list(deployments)

    def _timed_out(self, rm: str) -> None:
        if self.metrics is not None:
            self.metrics.rm_timeouts.labels(rm).inc()

    def __serve_build_asgi_app__(self) -> Any:
        from ray import serve

        from morkit.services.serving.app import create_app

        app = create_app(self.engine, self.limits, api_key=self.api_key)
        self.metrics = app.state.metrics
        app_name = serve.get_replica_context().app_name
        self.metrics.watch_replicas(lambda: replica_states(app_name, self.rms))
        return app

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()


def replica_states(app_name: str, rms: Sequence[str]) -> dict[str, dict[str, int]]:
    """RM name -> {replica state ("RUNNING", "STARTING", ...): replicas} of each RM's deployment in Serve
    application `app_name`, as Serve reports them now (serve.status)."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    deployments = app.deployments if app is not None else {}
    out: dict[str, dict[str, int]] = {}
    for name in rms:
        found = deployments.get(f"rm-{name}")
        if found is not None:
            out[name] = {str(getattr(state, "value", state)): int(n) for state, n in found.replica_states.items()}
    return out


def model_rms(pool: Any, select: SelectOptions) -> list[str]:
    """The pool RMs that get a deployment: registered model RMs that can run, within the fixed ensemble's or the
    cascade's RMs if any (SelectOptions.rm_scope)."""
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.selection.router import runnable_rms

    names = runnable_rms(pool) if select.allow_run else []
    scope = select.rm_scope
    return [n for n in names if (scope is None or n in scope) and REWARD_MODELS.get(n).spec.loads_model]


def build_app(pool_dir: str, select: SelectOptions = SelectOptions(), scoring: ScoringOptions = ScoringOptions(),
              limits: ServeLimits = ServeLimits(), *, api_key: str | None = None,
              placement: RayServeOptions = RayServeOptions(), embedder: Any = None) -> Any:
    """The Serve application: an RM deployment per model RM of the pool (placed and scaled by `placement`, each
    replica held to the request timeout), bound into the ingress with the driver's registrations of the pool's RMs."""
    from ray import serve

    from morkit.question_pool.pool import load_pool
    from morkit.reward_models.catalog import REWARD_MODELS

    pool = load_pool(pool_dir)
    names = model_rms(pool, select)
    scoring = replace(scoring, ray=None)
    deployments = {name: serve.deployment(RMReplica, name=f"rm-{name}", **placement.rm_deployment(limits.timeout_s))
                   .bind(REWARD_MODELS.get(name), replica_options(scoring), limits.timeout_s) for name in names}
    entries = {name: REWARD_MODELS.get(name) for name in pool.rm_names if name in REWARD_MODELS}
    ingress = serve.deployment(serve.ingress()(Ingress), name="ingress", num_replicas=placement.ingress_replicas,
                               ray_actor_options={"num_cpus": placement.ingress_cpus},
                               max_ongoing_requests=limits.queue_size + limits.max_batch)
    return ingress.bind(str(pool_dir), select, scoring, limits, api_key, deployments, embedder, entries)


def deploy(app: Any, placement: RayServeOptions = RayServeOptions(), *, address: str | None = "auto",
           **local: Any) -> str:
    """Run `app` on the Ray cluster at `address` (connect's rules), Serve's HTTP proxy on `placement`'s host and
    port; returns its URL once every replica is up. `local` goes to ray.init when it starts a local Ray."""
    try:
        from ray import serve
    except ImportError:
        raise UnavailableError(SERVE_INSTALL) from None

    connect(address, **local)
    serve.start(http_options={"host": placement.host, "port": placement.port})
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    return f"http://{placement.host}:{placement.port}"


def shutdown() -> None:
    """Remove the morkit application and stop Serve on the cluster (also after a deploy that failed half-way)."""
    from ray import serve

    try:
        serve.delete(APP_NAME)
    finally:
        serve.shutdown()
