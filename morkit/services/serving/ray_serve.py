"""`morkit serve --ray`: the same FastAPI app on Ray Serve. The router and embedder are one ingress deployment (the
app create_app builds, with its limits, auth, /health and /metrics; the SelectOptions, budget and cascade included,
travel to it pickled); each model RM of the pool is its own deployment, called through a DeploymentHandle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

from morkit.core.errors import InputError, ScoreError, UnavailableError
from morkit.reward_models.backends.ray import ReplicaHandle, connect, load_replica, replica_key, replica_options
from morkit.reward_models.options import ScoringOptions
from morkit.selection.methods import SelectOptions
from morkit.services.serving.limits import ServeLimits

APP_NAME = "morkit"
SERVE_INSTALL = "--ray needs Ray Serve, which is not installed here: pip install 'morkit[ray]' (ray[serve])"


@dataclass(frozen=True)
class RayServeOptions:
    """How the deployments are placed: replicas of each RM (or autoscaling up to `max_rm_replicas`), GPUs and
    CPUs per RM replica, ingress replicas and CPUs, and where Serve's HTTP proxy listens."""

    rm_replicas: int = 1
    max_rm_replicas: int | None = None  # set: each RM autoscales between rm_replicas and this
    rm_gpus: float = 0.0
    rm_cpus: float = 1.0
    ingress_replicas: int = 1
    ingress_cpus: float = 1.0
    host: str = "127.0.0.1"
    port: int = 8000

    def __post_init__(self) -> None:
        if self.rm_replicas < 1 or self.ingress_replicas < 1:
            raise InputError("--ray-workers: each deployment needs at least one replica")
        if self.max_rm_replicas is not None and self.max_rm_replicas < self.rm_replicas:
            raise InputError(f"--ray-max-replicas {self.max_rm_replicas} is below --ray-workers {self.rm_replicas}")
        if self.rm_gpus < 0 or self.rm_cpus < 0 or self.ingress_cpus < 0:
            raise InputError("--ray-gpus: GPUs and CPUs per replica must not be negative")

    def rm_deployment(self) -> dict[str, Any]:
        """serve.deployment options of one RM: its replicas (or autoscaling) and actor resources."""
        scale: dict[str, Any] = {"num_replicas": self.rm_replicas}
        if self.max_rm_replicas is not None and self.max_rm_replicas > self.rm_replicas:
            scale = {"autoscaling_config": {"min_replicas": self.rm_replicas, "max_replicas": self.max_rm_replicas,
                                            "target_ongoing_requests": 2}}
        return {**scale, "ray_actor_options": {"num_gpus": self.rm_gpus, "num_cpus": self.rm_cpus},
                "max_ongoing_requests": 8}


class RMReplica:
    """One replica of a model RM: loaded once (after its fit check) on the placement the options pick there, its
    cache key worked out there too (on the replica's own device and dtype)."""

    def __init__(self, entry: Any, options: ScoringOptions):
        self.key = replica_key(entry, options)
        self.rm = load_replica(entry, options)

    def cache_key(self) -> str:
        """The key this replica's scores are cached under."""
        return self.key

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Any]:
        scores = list(self.rm.score([tuple(p) for p in pairs]))
        if len(scores) != len(pairs):
            raise ScoreError(f"reward model returned {len(scores)} scores for {len(pairs)} pairs")
        return scores


class ServeRMHandle(ReplicaHandle):
    """A model RM served by a Ray Serve deployment: `score(pairs)` calls it through its DeploymentHandle,
    within the caller's deadline (`core.budget`, else `timeout_s`)."""

    placement = "ray-serve"

    def __init__(self, entry: Any, options: ScoringOptions, deployment: Any, timeout_s: float = 120.0):
        super().__init__(entry, options)
        self.deployment = deployment
        self.timeout_s = timeout_s

    def reported_key(self) -> str:
        """The key its deployment's replica reports, having worked it out where it runs (its GPU share, device,
        dtype and weights, not this ingress's)."""
        return str(self._result(self.deployment.cache_key.remote(), self.timeout_s, "say its cache key"))

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Any]:
        from morkit.core import budget

        deadline = budget.current().deadline
        timeout = self.timeout_s if deadline is None else max(deadline - time.monotonic(), 0.001)
        return self._result(self.deployment.score.remote([tuple(p) for p in pairs]), timeout, "answer")

    def _result(self, response: Any, timeout_s: float, what: str) -> Any:
        """A deployment call's result within `timeout_s` (cancelled past it), its failure in one ScoreError line."""
        try:
            return response.result(timeout_s=timeout_s)
        except TimeoutError:
            response.cancel()
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
    """The router and embedder: the pool, the RoutingEngine over the RM deployments' handles, and the app."""

    def __init__(self, pool_dir: str, select: SelectOptions, scoring: ScoringOptions, limits: ServeLimits,
                 api_key: str | None, deployments: dict[str, Any], embedder: Any = None):
        from morkit.question_pool.pool import load_pool
        from morkit.reward_models.catalog import REWARD_MODELS
        from morkit.services.serving.engine import RoutingEngine

        handles = {name: ServeRMHandle(REWARD_MODELS.get(name), scoring, handle, limits.timeout_s)
                   for name, handle in deployments.items()}
        self.engine = RoutingEngine(load_pool(pool_dir), select, scoring, embedder=embedder, handles=handles)
        self.limits, self.api_key = limits, api_key

    def __serve_build_asgi_app__(self) -> Any:
        from morkit.services.serving.app import create_app

        return create_app(self.engine, self.limits, api_key=self.api_key)

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()


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
    """The Serve application: an RM deployment per model RM of the pool, bound into the ingress."""
    from ray import serve

    from morkit.question_pool.pool import load_pool
    from morkit.reward_models.catalog import REWARD_MODELS

    names = model_rms(load_pool(pool_dir), select)
    scoring = replace(scoring, ray=None)
    deployments = {name: serve.deployment(RMReplica, name=f"rm-{name}", **placement.rm_deployment()).bind(
        REWARD_MODELS.get(name), replica_options(scoring)) for name in names}
    ingress = serve.deployment(serve.ingress()(Ingress), name="ingress", num_replicas=placement.ingress_replicas,
                               ray_actor_options={"num_cpus": placement.ingress_cpus},
                               max_ongoing_requests=limits.queue_size + limits.max_batch)
    return ingress.bind(str(pool_dir), select, scoring, limits, api_key, deployments, embedder)


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
