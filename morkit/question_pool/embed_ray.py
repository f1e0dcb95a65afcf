"""Question embedding on a Ray cluster: Ray Data maps the texts over embedder actors in the CHUNK-text chunks one
process embeds (the same vectors), each chunk streamed back as it finishes. The driver loads no model: the dimension
is the first chunk's width. `ray` is imported only when a run uses it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from morkit.core import checks
from morkit.core.errors import MorkitError, UnavailableError
from morkit.question_pool.embed import embedder_name, load_embedder
from morkit.reward_models.backends.ray import AUTO, connect
from morkit.runtime.ray_runs import ActorRun, cluster


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
    """A question embedder whose `encode_chunks` runs on Ray Data actors, one actor pool per call; the driver loads
    no model. Same interface as SentenceEmbedder: `name`, `dim` (None until the actors report it),
    `encode(texts, progress=...)`, `encode_chunks(texts)`."""

    actor: type = _EmbedActor  # what each actor runs: built from (source, device), called per chunk

    def __init__(self, source: str | None = None, *, address: str | None = AUTO, device: str | None = None,
                 options: RayEmbedOptions = RayEmbedOptions()):
        self.source, self.name = source, embedder_name(source)
        self.address, self.device, self.options = address, device, options
        self.texts_sent = 0
        self.runs = 0  # actor pools started (one per `encode_chunks` call that has texts)
        self.actors: int | None = None  # how many the last run started
        self.last_run: ActorRun | None = None
        self._dim: int | None = None

    def connect(self) -> Any:
        """Attach to the cluster now (an unreachable address or a missing Ray fails here, in one line)."""
        return connect(self.address)

    @property
    def dim(self) -> int | None:
        """The vectors' dimension as the actors report it (the width of the first chunk a run returned); None
        before: asking never loads the model here."""
        return self._dim

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors, in order, without a cache."""
        from morkit.question_pool.embed_cache import CachedEmbedder

        return CachedEmbedder(self).encode(texts, progress=progress)

    def encode_chunks(self, texts: Sequence[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions, vectors) per chunk as the actors finish them, in any order, each position exactly once, all
        from one actor pool. On failure, or when the caller stops early, the run's actors are killed before the
        error propagates (ActorRun.blocks); a failure is one line, an actor's morkit error as itself."""
        texts = list(texts)
        if not texts:
            return
        seen = np.zeros(len(texts), dtype=bool)
        run = self.last_run = ActorRun("embed")
        stream = run.blocks(self._dataset(texts, run), f"embedder {self.name!r} failed on Ray")
        try:  # an error raised here closes the stream first: the run's actors are gone before it propagates
            for block in stream:
                index = np.asarray(block["i"], dtype=np.int64)
                if seen[index].any() or len(np.unique(index)) != len(index):
                    raise MorkitError(f"embedder {self.name!r}: Ray returned a question twice")
                seen[index] = True
                vectors = np.asarray(block["vector"], dtype=np.float32)
                if self._dim is None and vectors.ndim == 2:
                    self._dim = int(vectors.shape[1])
                yield index, vectors
        finally:
            stream.close()
        if not seen.all():
            raise MorkitError(f"embedder {self.name!r}: Ray returned {int(seen.sum())} of {len(texts)} questions")

    def _dataset(self, texts: list[str], run: ActorRun) -> Any:
        """The texts as one Ray block per chunk, mapped over the actor pool: each map_batches batch is one chunk,
        cut as one process cuts it."""
        import pyarrow as pa

        from morkit.question_pool.embed import CHUNK

        ray = self.connect()
        starts = range(0, len(texts), CHUNK)
        count, resources = actor_resources(self.options, cluster(ray), self.device, len(starts))
        tables = [pa.table({"i": pa.array(range(s, min(s + CHUNK, len(texts))), pa.int64()),
                            "text": pa.array(texts[s: s + CHUNK], pa.string())}) for s in starts]
        embedded = run.map(ray, ray.data.from_arrow(tables), self.actor, (self.source, self.device),
                           batch_size=CHUNK, size=count, resources=resources)
        self.texts_sent += len(texts)
        self.runs += 1
        self.actors = count
        return embedded
