"""ScoringOptions: how registered RMs are loaded and how a scoring run goes, as one typed value.

The CLI's scoring flags map onto these fields one to one; the Python API takes the same object.
Model RMs run on one backend: `transformers` (in this process), `vllm` (an offline engine), or the
vLLM servers in `urls` (which then wins over `backend`). With `ray` set, each model RM's scoring is spread
over a Ray cluster instead (`reward_models.ray_scoring`), one replica per actor, on that backend.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.registry import Entry
from morkit.reward_models.base import REDUCTIONS
from morkit.reward_models.truncation import DEFAULT_POLICY, TRUNCATION_POLICIES, Truncation

BACKENDS = ("transformers", "vllm")
_BOUND_URL = re.compile(r"^([A-Za-z0-9_.\-]+)=(.+)$")
RAY_ADDRESS = re.compile(r"^(?:ray://)?\[?([^\s/\]]+)\]?:(\d+)$")  # HOST:PORT or ray://HOST:PORT (Ray client)


def split_url(text: str) -> tuple[str | None, str]:
    """`RM=URL` binds a server to one RM; a bare URL serves every model RM of the run."""
    bound = _BOUND_URL.match(text)
    name, url = (bound.group(1), bound.group(2)) if bound else (None, text)
    checks.http_url(url, "server URL")
    return name, url.rstrip("/")


@dataclass(frozen=True)
class ScoringOptions:
    """Model loading (backend, device, dtype, batch size, token limit, truncation, memory), cached-PRM
    reduction, chunking, cache and progress bars."""

    device: str | None = None  # None: auto (cuda, mps, else cpu)
    batch_size: int = 16
    max_tokens: int | None = None  # None: the model's own window
    truncation: str = DEFAULT_POLICY  # how a pair over the limit is cut (morkit.reward_models.truncation)
    reduction: str = "min"
    chunk: int = 64
    cache: str | os.PathLike | None = None  # score cache file; None: no cache
    progress: bool = False
    backend: str = "transformers"  # where model RMs run: transformers or vllm
    urls: tuple[str, ...] = ()  # vLLM servers ("URL" or "RM=URL"); when set, model RMs are scored there
    dtype: str | None = None  # None: auto (bf16 on accelerators, fp32 on CPU)
    tensor_parallel_size: int = 1  # vLLM: GPUs per model
    device_map: str | None = None  # transformers: e.g. "auto" spreads a model over every visible GPU
    max_model_len: int | None = None  # vLLM context length (default: max_tokens, else the model's window)
    gpu_memory_utilization: float | None = None  # vLLM's share of device memory (default 0.9 GPU, 0.2 CPU)
    prefix_reuse: bool = True  # compute a query's shared prompt prefix once (KV reuse / prefix caching)
    check_fit: bool = True  # refuse a model that cannot fit the free device memory, before loading it
    ray: str | None = None  # score model RMs on Ray: "auto" ($RAY_ADDRESS, else a local instance) or an address
    ray_workers: int | None = None  # Ray actors (RM replicas) per RM; None: the cluster's GPUs, else one per node

    def __post_init__(self) -> None:
        checks.positive_int(self.batch_size, "batch_size")
        checks.optional(checks.positive_int, self.max_tokens, "max_tokens")
        checks.one_of(self.truncation, TRUNCATION_POLICIES, "truncation")
        checks.one_of(self.reduction, REDUCTIONS, "reduction")
        checks.positive_int(self.chunk, "chunk")
        checks.one_of(self.backend, BACKENDS, "backend")
        checks.positive_int(self.tensor_parallel_size, "tensor_parallel_size")
        checks.optional(checks.positive_int, self.max_model_len, "max_model_len")
        checks.optional(checks.share, self.gpu_memory_utilization, "gpu_memory_utilization")
        checks.optional(checks.positive_int, self.ray_workers, "ray_workers")
        if self.ray_workers is not None and self.ray is None:
            raise InputError("ray_workers (--ray-workers) applies only with ray (--ray)")
        if self.ray is not None and (not isinstance(self.ray, str)
                                     or not (self.ray == "auto" or RAY_ADDRESS.match(self.ray))):
            raise InputError(f"ray must be 'auto', HOST:PORT or ray://HOST:PORT, got {self.ray!r}")
        if self.ray is not None and self.urls:
            raise InputError("ray and urls (vLLM servers) are two ways to spread scoring: give one")
        if isinstance(self.urls, str):
            object.__setattr__(self, "urls", (self.urls,))
        for url in self.urls:
            split_url(url)
        if self.dtype is not None and self.dtype != "auto":
            from morkit.runtime.device import DTYPES

            checks.one_of(self.dtype, ("auto", *DTYPES), "dtype")

    def server_urls(self, rm: str) -> list[str]:
        """The servers that score `rm`: those bound to it by name, else the unbound ones."""
        parsed = [split_url(u) for u in self.urls]
        bound = [url for name, url in parsed if name == rm]
        return bound or [url for name, url in parsed if name is None]

    def engine_length(self, window: int) -> int:
        """The offline vLLM engine's max_model_len for a model whose own window is `window` tokens."""
        return self.max_model_len or self.max_tokens or window

    def truncation_for(self, on_vllm: bool = False) -> Truncation:
        """How a model RM cuts pairs: under `truncation`, to `max_tokens`, else to the model's own window (the RM
        fills it in); on an offline vLLM engine (`on_vllm`), never past the engine's `max_model_len`."""
        return Truncation(self.max_tokens, self.truncation, ceiling=self.max_model_len if on_vllm else None)

    def load_options(self, entry: Entry) -> dict[str, Any]:
        """Keyword options for building `entry` on the transformers backend: device, dtype, batching, truncation
        (its limit is the model's own window unless `max_tokens` is set)."""
        if entry.meta.get("backend") != "transformers":
            return {}
        from morkit.reward_models.hf import Batching

        options: dict[str, Any] = {"batching": Batching(max_batch=self.batch_size), "prefix_reuse": self.prefix_reuse,
                                   "truncation": self.truncation_for()}
        if self.device:
            options["device"] = self.device
        if entry.meta.get("model_id"):  # the CTTS adapters take dtype and a device map too
            if self.dtype:
                options["dtype"] = self.dtype
            if self.device_map:
                options["device_map"] = self.device_map
        return options

    def open_cache(self) -> Any:
        """The score cache these options name, or None."""
        if self.cache is None:
            return None
        from morkit.reward_models.cache import ScoreCache

        return ScoreCache(self.cache)
