"""Model RMs scored on a Ray cluster: Ray Data spreads the pairs the cache lacks over an actor pool, one RM replica
per actor, and each finished batch goes to the score cache at once. The driver loads no model, restarts are
bounded by RESTARTS, and every index must come back exactly once; `ray` is imported only when a run uses it.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

from morkit.core.errors import (
    InputError,
    MorkitError,
    PartialScoreError,
    ScoreError,
    UnavailableError,
)
from morkit.core.types import Score
from morkit.reward_models.options import RAY_ADDRESS, ScoringOptions
from morkit.core.registry import Entry
from morkit.reward_models.handles import RMHandle
from morkit.reward_models.placement import place
from morkit.reward_models.residency import load_checked
from morkit.runtime.ray_runs import RESTARTS, ActorRun, actor_error, cluster, first_line

log = logging.getLogger(__name__)

AUTO = "auto"  # RAY_ADDRESS when set, else a new local instance
RAY_INSTALL = "--ray needs Ray Data, which is not installed here: pip install 'morkit[ray]' (ray[data])"


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UnavailableError(RAY_INSTALL) from None
    return ray


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast, in one line naming the address, where nothing listens (ray.init would wait for minutes)."""
    match = RAY_ADDRESS.match(address)
    if not match:
        raise InputError(f"Ray address must be auto, HOST:PORT or ray://HOST:PORT, got {address!r}")
    try:
        socket.create_connection((match.group(1), int(match.group(2))), timeout=timeout_s).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise UnavailableError(f"cannot reach the Ray cluster at {address}: {reason.lower()}") from None


def connect(address: str | None = AUTO, **local: Any) -> Any:
    """Attach this process to Ray once: `address` ("auto": $RAY_ADDRESS, else a new local instance), or reuse
    the connection already made. `local` goes to ray.init when it starts a local instance (e.g. num_cpus).
    Returns the ray module."""
    ray = _import_ray()
    if address not in (None, AUTO):
        _probe(address)  # even when attached already: an address that cannot be reached is a mistake to report
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address not in (None, AUTO) and not address.startswith("ray://") and address != current:
            raise InputError(f"--ray {address}: this process is already attached to the Ray cluster at {current} "
                             "and can attach to one only; run morkit in a new process")
        _quiet_data(ray)
        return ray
    target = os.environ.get("RAY_ADDRESS") if address in (None, AUTO) else address
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
             "ignore_reinit_error": True}
    if target:
        if address in (None, AUTO) and RAY_ADDRESS.match(target):  # else ("auto", ...) Ray resolves it
            _probe(target)
        try:
            ray.init(address=target, **{k: v for k, v in quiet.items() if k != "include_dashboard"})
        except Exception as err:  # noqa: BLE001 - one line naming the address, whatever Ray raised
            raise UnavailableError(f"cannot attach to the Ray cluster at {target}: {first_line(err)}") from None
    else:
        ray.init(**quiet, **local)
    _quiet_data(ray)
    return ray


def _quiet_data(ray: Any) -> None:
    """No Ray Data progress bars or execution banners on morkit's stderr."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.enable_auto_log_stats = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)


def replica_resources(options: ScoringOptions, cluster: dict[str, float], workers: int | None = None
                      ) -> tuple[int, dict[str, float]]:
    """(actors, per-actor resources) for one RM on a cluster with `cluster` resources: on GPUs, `tensor_parallel_size`
    GPUs per replica on vLLM, else one, and as many actors as the GPUs hold; without GPUs (or on `device="cpu"`) no
    GPU, the CPUs split evenly, one actor per node by default."""
    gpus = cluster.get("GPU", 0.0)
    cpus = max(1.0, cluster.get("CPU", 1.0))
    if gpus >= 1 and options.device != "cpu":
        per = options.vllm.tensor_parallel_size if options.placement == "vllm" else 1
        if per > gpus:
            raise UnavailableError(f"a replica needs {per} GPUs (tensor_parallel_size) but the Ray cluster has "
                                   f"{gpus:g}")
        count = workers or max(1, int(gpus // per))
        return count, {"num_gpus": float(per), "num_cpus": 1.0}
    count = workers or max(1, int(cluster.get("nodes", 1)))
    return count, {"num_gpus": 0.0, "num_cpus": max(1.0, float(int(cpus // count)))}


class _Replica:
    """One actor's RM: its cache key worked out where it runs (`key_of`), then the RM built once from the shipped
    factory; scores each batch of (index, q, a) rows, each row beside that key (the driver checks it)."""

    def __init__(self, factory: Callable[[], Any], key_of: Callable[[], str]):
        self.key = key_of()
        self.rm = factory()

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        pairs = list(zip(batch["q"].tolist(), batch["a"].tolist()))
        error = ""
        try:
            scores = list(self.rm.score(pairs))
        except PartialScoreError as err:  # keep the successes: the driver caches them, then fails the run
            scores, error = list(err.scores), str(err) or "partial failure"
        if len(scores) != len(pairs):
            raise ScoreError(f"reward model returned {len(scores)} scores for {len(pairs)} pairs")
        column = np.empty(len(scores), dtype=object)
        column[:] = scores
        return {"i": batch["i"], "score": column, "error": np.array([error] * len(scores), dtype=object),
                "key": np.array([self.key] * len(scores), dtype=object)}


def load_replica(entry: Entry, options: ScoringOptions) -> Any:
    """Registered RM `entry` built in a Ray actor on the placement `options` (without ray) pick, after its fit
    check there."""
    return load_checked(place(entry, options))


def replica_key(entry: Entry, options: ScoringOptions) -> str:
    """The key registered RM `entry`'s scores are cached under where it runs on the placement `options` (without
    ray) pick, with that process's device and dtype; called in a replica, never in the driver."""
    return place(entry, options).cache_key


def replica_options(options: ScoringOptions) -> ScoringOptions:
    """What each replica loads with: these options less Ray, progress and the cache (the driver owns the cache)."""
    return replace(options, ray=None, progress=False, cache=None)


class ReplicaHandle(RMHandle):
    """A model RM scored by replicas elsewhere (Ray Data actors, Ray Serve deployments): the driver loads nothing
    and looks for no GPU. The truncation and the cache key are the replicas' own: a replica works the key out where
    it runs (`replica_key`: its device, dtype, weights and window, not the driver's), so cached scores are shared
    with a run of that placement on such a machine."""

    resident_model = False

    def __init__(self, entry: Entry, options: ScoringOptions, residency: Any = None):
        self.local = replica_options(options)
        self.replica = place(entry, self.local)  # what each replica loads (not loaded here)
        self.key_of = functools.partial(replica_key, entry, self.local)  # run where a replica runs, never here
        super().__init__(entry, options, residency)

    def planned_truncation(self) -> Any:
        return self.replica.truncation  # what the replicas cut pairs under (the score cache keys on it)

    @functools.cached_property
    def cache_key(self) -> str:
        """The key a replica works out where it runs (`key_of`), asked once: never resolved in the driver, whose
        device, GPUs and weights may not be a replica's."""
        return self.reported_key()

    def reported_key(self) -> str:
        """`key_of` as a replica runs it."""
        raise NotImplementedError

    def memory_need(self) -> None:
        return None  # each replica checks its own fit before loading

    def measured_device(self) -> str:
        return ""  # it scores on the replicas

    def load(self) -> Any:
        return self

    def close(self) -> None:
        return None


class RayHandle(ReplicaHandle):
    """A model RM whose scoring runs on Ray Data: `factory()` builds one replica in each actor; the driver loads
    nothing. `score_batches(pairs, batch)` yields (pairs, scores) per finished batch, in any order; `score(pairs)`
    collects them in order."""

    placement = "ray"

    def __init__(self, entry: Entry, options: ScoringOptions, residency: Any = None):
        super().__init__(entry, options, residency)
        self.factory: Callable[[], Any] = functools.partial(load_replica, entry, self.local)
        self.pairs_sent = 0
        self.last_run: ActorRun | None = None  # the last run's actors, by name

    def reported_key(self) -> str:
        """`key_of` run once on the cluster, in a task holding one actor's resources (replica_resources: its GPU
        share, so the device and dtype it resolves are an actor's); each actor works it out again and its batches
        are checked against it."""
        ray = connect(self.options.ray.address)
        _, resources = replica_resources(self.options, cluster(ray), self.options.ray.workers)
        task = ray.remote(_call).options(max_retries=RESTARTS, **resources)
        failure: MorkitError | None = None
        try:
            return str(ray.get(task.remote(self.key_of)))
        except Exception as err:  # noqa: BLE001 - Ray wraps the task's error
            failure = actor_error(err, f"reward model {self.name!r}: Ray could not work out its cache key", ScoreError)
        raise failure

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        out: dict[tuple[str, str], Score] = {}
        for part, scores in self.score_batches(pairs, self.options.chunk):
            out.update(zip(part, scores))
        return [out[tuple(p)] for p in pairs]

    def score_batches(self, pairs: Sequence[tuple[str, str]], batch: int) -> Iterator[tuple[list, list]]:
        pairs = [tuple(p) for p in pairs]
        if not pairs:
            return
        ray = connect(self.options.ray.address)
        count, resources = replica_resources(self.options, cluster(ray), self.options.ray.workers)
        rows = [{"i": i, "q": q, "a": a} for i, (q, a) in enumerate(pairs)]
        # One input block per batch, so each batch is one output block that streams back when it is done.
        blocks = max(1, -(-len(rows) // batch))
        run = self.last_run = ActorRun("score")
        scored = run.map(ray, ray.data.from_items(rows, override_num_blocks=blocks), _Replica,
                         (self.factory, self.key_of), batch_size=batch, size=min(count, blocks), resources=resources)
        self.pairs_sent += len(pairs)
        seen: set[int] = set()
        stream = run.blocks(scored, f"reward model {self.name!r} failed on Ray", ScoreError)
        try:  # an error raised here closes the stream first: the run's actors are gone before it propagates
            for block in stream:
                index = [int(i) for i in block["i"]]
                if seen.intersection(index) or len(set(index)) != len(index):
                    raise ScoreError(f"reward model {self.name!r}: Ray returned a pair twice")
                seen.update(index)
                if "cache_key" in self.__dict__:  # its scores are cached under that key: made under it
                    _check_key(self.name, self.cache_key, block["key"])
                part, scores = [pairs[i] for i in index], list(block["score"])
                errors = [e for e in block["error"] if e]
                if errors:
                    err = PartialScoreError(f"reward model {self.name!r} on Ray: {errors[0]}", scores)
                    err.pairs = part
                    raise err
                yield part, scores
        finally:
            stream.close()
        if len(seen) != len(pairs):
            raise ScoreError(f"reward model {self.name!r}: Ray returned {len(seen)} of {len(pairs)} pairs")


def _call(function: Callable[[], Any]) -> Any:
    """`function()`, as a Ray task runs it."""
    return function()


def _check_key(name: str, expected: str, reported: Sequence[str]) -> None:
    """Refuse a batch whose replica computed under another key than the one its scores are cached under (a node
    with other weights, GPUs or settings than the one that worked the key out): a ScoreError before any of its
    scores is cached."""
    other = sorted(set(reported) - {expected})
    if other:
        raise ScoreError(f"reward model {name!r}: a Ray replica computes under {other[0]}, not under {expected}, "
                         "the key its scores are cached under; give every node the same weights, GPUs and settings")
