"""Question embedding on a Ray cluster: Ray Data maps the texts over a pool of embedder actors (each loads the
embedder once), in the CHUNK-text chunks one process embeds, so the vectors are the same; each chunk streams back
as it finishes, for the embedding cache. `ray` is imported only when a run uses it.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from morkit.core import checks
from morkit.core.errors import MorkitError, UnavailableError
from morkit.question_pool.embed import embedder_name, load_embedder
from morkit.reward_models.backends.ray import (
    AUTO,
    RESTARTS,
    _cluster,
    _first_line,
    _morkit_cause,
    connect,
)


@dataclass(frozen=True)
class RayEmbedOptions:
    """The embedder actors (`--embed-actors`, `--embed-gpus`, `--embed-cpus`); None: picked from the cluster
    (see `actor_resources`)."""

    actors: int | None = None  # None: one per GPU (num_gpus each), else one per node
    num_gpus: float | None = None  # per actor; None: 1 where the cluster has GPUs (and device is not cpu), else 0
    num_cpus: float | None = None  # per actor; None: 1 beside a GPU, else the cluster's CPUs split over the actors

    def __post_init__(self) -> None:
        checks.optional(checks.positive_int, self.actors, "embed_actors")
        checks.optional(checks.non_negative, self.num_gpus, "embed_gpus")
        checks.optional(checks.positive, self.num_cpus, "embed_cpus")


def actor_resources(options: RayEmbedOptions, cluster: dict[str, float], device: str | None = None,
                    chunks: int | None = None) -> tuple[int, dict[str, float]]:
    """(actors, per-actor resources) on a cluster with `cluster` resources: on GPUs one GPU per actor and as many
    actors as GPUs (a fraction, e.g. 0.25, packs several small embedders on a GPU); without GPUs (or on device
    cpu) one actor per node with its share of the CPUs (torch runs that many threads). Never more than `chunks`."""
    gpus, cpus = cluster.get("GPU", 0.0), max(1.0, cluster.get("CPU", 1.0))
    per_gpu = options.num_gpus if options.num_gpus is not None else float(gpus >= 1 and device != "cpu")
    if per_gpu > 0:
        if per_gpu > gpus or (options.actors or 1) * per_gpu > gpus:
            raise UnavailableError(f"{options.actors or 1} embedder actors with {per_gpu:g} GPU each "
                                   f"(--embed-actors, --embed-gpus) need more than the Ray cluster's {gpus:g} GPUs")
        count = options.actors or max(1, int(gpus // per_gpu))
        per_cpu = options.num_cpus or 1.0
    else:
        count = options.actors or max(1, int(cluster.get("nodes", 1)))
        per_cpu = options.num_cpus or max(1.0, float(int(cpus // count)))
    return max(1, min(count, chunks or count)), {"num_gpus": float(per_gpu), "num_cpus": float(per_cpu)}


class _EmbedActor:
    """One actor's embedder, loaded once; embeds each chunk of (index, text) rows."""

    def __init__(self, source: str | None, device: str | None):
        self.embedder = load_embedder(source, device)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        return {"i": batch["i"], "vector": self.embedder.embed_chunk(batch["text"].tolist())}


class RayEmbedder:
    """A question embedder whose `encode_chunks` runs on Ray Data actors; the driver loads no model (only asking
    for `dim` does, on CPU). Same interface as SentenceEmbedder: `name`, `encode(texts, progress=...)`."""

    actor: type = _EmbedActor  # what each actor runs: built from (source, device), called per chunk

    def __init__(self, source: str | None = None, *, address: str | None = AUTO, device: str | None = None,
                 options: RayEmbedOptions = RayEmbedOptions()):
        self.source, self.name = source, embedder_name(source)
        self.address, self.device, self.options = address, device, options
        self.texts_sent = 0
        self.actors: int | None = None  # how many the last run started
        self._dim: int | None = None

    def connect(self) -> Any:
        """Attach to the cluster now (an unreachable address or a missing Ray fails here, in one line)."""
        return connect(self.address)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = load_embedder(self.source, "cpu").dim
        return self._dim

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors, in order, without a cache."""
        from morkit.question_pool.embed_cache import CachedEmbedder

        return CachedEmbedder(self).encode(texts, progress=progress)

    def encode_chunks(self, texts: Sequence[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions, vectors) per chunk as the actors finish them, in any order, each position exactly once.
        On failure the run's actors are released before the error is raised (no frame it carries holds them)."""
        texts = list(texts)
        if not texts:
            return
        seen = np.zeros(len(texts), dtype=bool)
        names: list[str] = []  # the run's actors, by name
        iterator = iter(self._dataset(texts, names).iter_batches(batch_size=None, batch_format="numpy",
                                                                 prefetch_batches=0))
        failure: BaseException | None = None
        finished = False
        try:
            while failure is None:
                block, failure = self._next(iterator)
                if block is None:
                    break
                index = np.asarray(block["i"], dtype=np.int64)
                if seen[index].any() or len(np.unique(index)) != len(index):
                    failure = MorkitError(f"embedder {self.name!r}: Ray returned a question twice")
                    break
                seen[index] = True
                yield index, np.asarray(block["vector"], dtype=np.float32)
            finished = failure is None
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
            iterator = block = None
            if not finished:  # Ray Data lets a failed run's actors go only when garbage-collected: free them now
                _release(names)
        if failure is not None:
            raise failure
        if not seen.all():
            raise MorkitError(f"embedder {self.name!r}: Ray returned {int(seen.sum())} of {len(texts)} questions")

    def _dataset(self, texts: list[str], names: list[str]) -> Any:
        """The texts as one Ray block per chunk, mapped over the actor pool: each map_batches batch is one chunk,
        cut as one process cuts it. Each actor is named, and its name added to `names`, as Ray Data starts it."""
        import pyarrow as pa

        from morkit.question_pool.embed import CHUNK

        ray = self.connect()
        starts = range(0, len(texts), CHUNK)
        count, resources = actor_resources(self.options, _cluster(ray), self.device, len(starts))
        tables = [pa.table({"i": pa.array(range(s, min(s + CHUNK, len(texts))), pa.int64()),
                            "text": pa.array(texts[s: s + CHUNK], pa.string())}) for s in starts]
        run = uuid.uuid4().hex[:12]

        def named() -> dict[str, Any]:  # Ray Data calls it as it starts each actor
            names.append(f"morkit-embed-{run}-{len(names)}")
            return {"name": names[-1]}

        source = ray.data.from_arrow(tables)
        source.context.raise_original_map_exception = True  # an actor's morkit error reaches the driver as itself
        with warnings.catch_warnings():  # Ray 2.60 has no named parameter for restarts yet (2.64 drops this form)
            warnings.simplefilter("ignore", DeprecationWarning)
            embedded = source.map_batches(
                self.actor, fn_constructor_args=(self.source, self.device), batch_size=CHUNK, batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=count), max_restarts=RESTARTS, max_task_retries=RESTARTS,
                ray_remote_args_fn=named, **resources)
        self.texts_sent += len(texts)
        self.actors = count
        return embedded

    def _next(self, iterator: Any) -> tuple[Any, BaseException | None]:
        """(next block, None), (None, None) at the end, or (None, the error in one line): an actor's morkit error
        as itself, any other failure as a MorkitError; returned, not raised, so no traceback keeps the run alive."""
        try:
            return next(iterator), None
        except StopIteration:
            return None, None
        except Exception as err:  # noqa: BLE001 - Ray wraps the actor's error (its class then is a MorkitError too)
            cause = _actor_error(err)
            if cause is None:
                cause = MorkitError(f"embedder {self.name!r} failed on Ray: {_first_line(err)}")
            return None, cause.with_traceback(None)


def _actor_error(err: BaseException) -> MorkitError | None:
    """The morkit error an actor raised, as itself: Ray's wrapper holds it as `cause`, with Ray's retry note added
    on a second line, which is dropped."""
    cause = getattr(err, "cause", None)
    found = cause if isinstance(cause, MorkitError) else _morkit_cause(err)
    if found is not None and found.args and isinstance(found.args[0], str) and "\n" in found.args[0]:
        found.args = (_first_line(found), *found.args[1:])
    return found


def _release(names: Sequence[str]) -> None:
    """Kill the named actors still alive (a failed or abandoned run's), so their resources are free at once."""
    import ray

    for name in names:
        try:
            ray.kill(ray.get_actor(name), no_restart=True)
        except ValueError:  # never started, or gone already
            continue
