"""ScoringOptions: how registered RMs are loaded and how a scoring run goes, as one typed value grouped by placement.
The CLI's flat flags (`FLAGS`) build it through `from_flags` / `with_flags`, which refuse a flag that does not
apply to the chosen placement, naming it.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.settings import cache_dir
from morkit.reward_models.base import REDUCTIONS
from morkit.reward_models.truncation import DEFAULT_POLICY, TRUNCATION_POLICIES, Truncation

PLACEMENT_CHOICES = ("transformers", "vllm")
"""Where `placement` may put model RMs itself (vLLM servers and Ray are chosen by `servers` and `ray`)."""
_BOUND_URL = re.compile(r"^([A-Za-z0-9_.\-]+)=(.+)$")
RAY_ADDRESS = re.compile(r"^(?:ray://)?\[?([^\s/\]]+)\]?:(\d+)$")  # HOST:PORT or ray://HOST:PORT (Ray client)

MAX_REQUEST_PAIRS = 16
"""The most pairs morkit sends in one `/pooling` request to a vLLM server. A request is the unit of the remote
client's timeout (`timeout_s`, 30 s by default, for the whole request), of its retries and of its failures: a
request that fails after its retries fails every pair in it. Throughput comes from the requests in flight
(`concurrency`, 8 by default), which the server batches itself, so a larger request gains little and makes
every retry redo, and every failure lose, more pairs."""


class CacheDefault(enum.Enum):
    """The type of DEFAULT_CACHE (an enum member, so it stays itself when options are pickled to a worker)."""

    DEFAULT = "default"

    def __repr__(self) -> str:
        return "DEFAULT_CACHE"


DEFAULT_CACHE = CacheDefault.DEFAULT
"""`ScoringOptions.cache`'s default: the shared score cache, `default_cache_path()`, found when the cache opens (so
a $MORKIT_CACHE_DIR set after the options were made still counts). The CLI's default is this same value."""


def default_cache_path() -> Path:
    """The shared score cache: scores.sqlite in morkit's cache folder ($MORKIT_CACHE_DIR, else
    $XDG_CACHE_HOME/morkit, else ~/.cache/morkit), read from the environment now."""
    return cache_dir() / "scores.sqlite"


def split_url(text: str) -> tuple[str | None, str]:
    """`RM=URL` binds a server to one RM; a bare URL serves every model RM of the run."""
    bound = _BOUND_URL.match(text)
    name, url = (bound.group(1), bound.group(2)) if bound else (None, text)
    checks.http_url(url, "server URL")
    return name, url.rstrip("/")


@dataclass(frozen=True)
class TransformersOptions:
    """Model RMs in this process (`--placement transformers`)."""

    batch_size: int = 16  # sequences per forward pass
    device_map: str | None = None  # e.g. "auto" spreads a model over every visible GPU

    def __post_init__(self) -> None:
        checks.positive_int(self.batch_size, "batch_size")


@dataclass(frozen=True)
class VLLMOptions:
    """The offline vLLM engine (`--placement vllm`), which schedules its own batches."""

    tensor_parallel_size: int = 1  # GPUs per model
    max_model_len: int | None = None  # context length (default: max_tokens, else the model's window)
    gpu_memory_utilization: float | None = None  # share of device memory (default 0.9 GPU, 0.2 CPU)

    def __post_init__(self) -> None:
        checks.positive_int(self.tensor_parallel_size, "tensor_parallel_size")
        checks.optional(checks.positive_int, self.max_model_len, "max_model_len")
        checks.optional(checks.share, self.gpu_memory_utilization, "gpu_memory_utilization")


@dataclass(frozen=True)
class ServerOptions:
    """vLLM servers (`--url`, "URL" or "RM=URL"); when any serve an RM, it is scored there."""

    urls: tuple[str, ...] = ()
    batch_size: int = 16  # pairs per /pooling request, at most MAX_REQUEST_PAIRS where there are servers

    def __post_init__(self) -> None:
        if isinstance(self.urls, str):
            object.__setattr__(self, "urls", (self.urls,))
        elif not isinstance(self.urls, tuple):
            object.__setattr__(self, "urls", tuple(self.urls))
        for url in self.urls:
            split_url(url)
        checks.positive_int(self.batch_size, "batch_size")
        if self.urls and self.batch_size > MAX_REQUEST_PAIRS:
            raise InputError(f"--batch-size {self.batch_size}: vLLM servers (--url) take at most "
                             f"{MAX_REQUEST_PAIRS} pairs per /pooling request (each request is one unit of "
                             "timeout, retry and failure)")

    def urls_for(self, rm: str) -> list[str]:
        """The servers that score `rm`: those bound to it by name, else the unbound ones."""
        parsed = [split_url(u) for u in self.urls]
        bound = [url for name, url in parsed if name == rm]
        return bound or [url for name, url in parsed if name is None]


@dataclass(frozen=True)
class RayOptions:
    """Model RMs scored by Ray actors (`--ray`)."""

    address: str = "auto"  # "auto" ($RAY_ADDRESS, else a local instance), HOST:PORT or ray://HOST:PORT
    workers: int | None = None  # actors (RM replicas) per RM; None: the cluster's GPUs, else one per node

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or not (self.address == "auto" or RAY_ADDRESS.match(self.address)):
            raise InputError(f"ray must be 'auto', HOST:PORT or ray://HOST:PORT, got {self.address!r}")
        checks.optional(checks.positive_int, self.workers, "ray_workers")


_TOP = ("device", "dtype", "max_tokens", "truncation", "reduction", "prefix_reuse", "check_fit", "chunk", "cache",
        "progress", "placement")
FLAGS = (*_TOP, "batch_size", "urls", "device_map", "tensor_parallel_size", "max_model_len",
         "gpu_memory_utilization", "ray", "ray_workers")
"""The flat scoring option names (the CLI's flags, `-` for `_`) that `from_flags`/`with_flags` take."""
_NOT_NULL = ("truncation", "reduction", "prefix_reuse", "check_fit", "chunk", "progress", "placement", "batch_size",
             "urls", "tensor_parallel_size")
"""Flags whose field cannot be None: None means "not given" (argparse's default), so it is not a choice."""
_ENGINE_ONLY = ("tensor_parallel_size", "max_model_len", "gpu_memory_utilization")


SCORE_NEUTRAL = ("progress", "cache", "chunk", "batch_size", "ray_workers", "check_fit")
"""Scoring flags (`FLAGS`) that cannot change a score: the progress bar, where scores are cached, how many pairs go
per call, per forward pass or per server request (a pair scores the same in any batch), how many Ray replicas share
the work, and the memory check made before a model loads. The one list of them: none enters an RM's cache key
(morkit.reward_models.identity) and every other flag enters the pipeline's scoring key."""
NEUTRAL_FIELDS = frozenset(("progress", "cache", "chunk", "check_fit", "transformers.batch_size", "servers.batch_size",
                            "ray.workers"))
"""The ScoringOptions fields (nested ones as `part.field`) of the SCORE_NEUTRAL flags."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_applies(given: dict[str, Any], placement: str, urls: tuple[str, ...] | Any) -> None:
    """A flag given for a placement it does not apply to is a mistake: an InputError naming the flag."""
    if placement != "vllm":
        for name in _ENGINE_ONLY:
            value = given.get(name)
            if value is not None and not (name == "tensor_parallel_size" and value == 1):
                raise InputError(f"{_flag(name)} applies only to the offline vLLM engine (--placement vllm)")
    elif given.get("device_map") is not None:
        raise InputError("--device-map applies only to the transformers placement (--placement transformers)")
    elif given.get("batch_size") is not None and not urls:
        raise InputError("--batch-size applies to the transformers placement and to vLLM servers (--url), not to "
                         "the offline vLLM engine (--placement vllm), which schedules its own batches")
    if any(split_url(url)[0] is None for url in urls or ()):  # every model RM goes to the servers
        for name, neutral in (("tensor_parallel_size", 1), ("max_model_len", None), ("gpu_memory_utilization", None),
                              ("device_map", None), ("dtype", "auto")):
            if given.get(name) not in (None, neutral):
                raise InputError(f"{_flag(name)} does not apply with an unbound --url URL, which scores every model "
                                 "RM on the servers (bind a server to one RM with --url RM=URL to load others here)")


@dataclass(frozen=True)
class ScoringOptions:
    """How every model RM reads and scores a pair, the run (chunks, cache, progress), and each placement's
    own options. Build it from the flat flags with `from_flags`; change it with `with_flags`.

    Args:
        device: The torch device for model RMs; None picks cuda, else mps, else cpu.
        dtype: `auto`, `float32`, `bfloat16` or `float16`; None (or `auto`) is bf16 on accelerators, fp32 on CPU.
        max_tokens: The tokens a (question, answer) pair may have before it is cut; None is the model's window.
        truncation: How a pair over the limit is cut: `middle`, `right`, `left` or `error`.
        reduction: How a PRM's step scores become one score: `min`, `last`, `mean` or `prod`.
        prefix_reuse: Compute a query's shared prompt prefix once (KV reuse / prefix caching).
        check_fit: Refuse a model that cannot fit the free device memory, before loading it.
        chunk: Pairs per scoring call; each finished chunk is cached at once.
        cache: The score cache file (SQLite); the default, DEFAULT_CACHE, is scores.sqlite in morkit's cache
            folder (`default_cache_path()`, as the CLI); None caches nothing.
        progress: Show progress bars.
        placement: Where model RMs run: `transformers` or `vllm` (servers in `servers` win over it for their RMs,
            and `ray` over both).
        transformers: The transformers placement's own options (batch size, device map).
        vllm: The offline vLLM engine's own options (tensor parallelism, context length, memory share).
        servers: vLLM servers (`URL` or `RM=URL`) that score model RMs.
        ray: When set, model RMs are scored by Ray actors; None scores in this process.

    Raises:
        InputError: A field is out of range or not one of its choices, or `ray` and server URLs are both given.
    """

    # how every model RM reads and scores a pair (every placement)
    device: str | None = None  # None: auto (cuda, mps, else cpu)
    dtype: str | None = None  # None: auto (bf16 on accelerators, fp32 on CPU)
    max_tokens: int | None = None  # None: the model's own window
    truncation: str = DEFAULT_POLICY  # how a pair over the limit is cut (morkit.reward_models.truncation)
    reduction: str = "min"
    prefix_reuse: bool = True  # compute a query's shared prompt prefix once (KV reuse / prefix caching)
    check_fit: bool = True  # refuse a model that cannot fit the free device memory, before loading it
    # the run
    chunk: int = 64
    cache: str | os.PathLike | CacheDefault | None = DEFAULT_CACHE  # DEFAULT_CACHE: default_cache_path(); None: off
    progress: bool = False
    placement: str = "transformers"  # where model RMs run: transformers or vllm
    transformers: TransformersOptions = TransformersOptions()
    vllm: VLLMOptions = VLLMOptions()
    servers: ServerOptions = ServerOptions()
    ray: RayOptions | None = None  # set: model RMs are scored by Ray actors

    def __post_init__(self) -> None:
        checks.optional(checks.positive_int, self.max_tokens, "max_tokens")
        checks.one_of(self.truncation, TRUNCATION_POLICIES, "truncation")
        checks.one_of(self.reduction, REDUCTIONS, "reduction")
        checks.positive_int(self.chunk, "chunk")
        checks.one_of(self.placement, PLACEMENT_CHOICES, "placement")
        for name, kind in (("transformers", TransformersOptions), ("vllm", VLLMOptions), ("servers", ServerOptions)):
            if not isinstance(getattr(self, name), kind):
                raise InputError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        if self.ray is not None and not isinstance(self.ray, RayOptions):
            raise InputError(f"ray must be a RayOptions or None, got {type(self.ray).__name__} (the flat "
                             "ray='auto' goes through ScoringOptions.from_flags)")
        if self.ray is not None and self.servers.urls:
            raise InputError("ray (--ray) and urls (--url, vLLM servers) are two ways to spread scoring: give one")
        if self.dtype is not None and self.dtype != "auto":
            from morkit.runtime.device import DTYPES

            checks.one_of(self.dtype, ("auto", *DTYPES), "dtype")

    @classmethod
    def from_flags(cls, **flags: Any) -> "ScoringOptions":
        """The options the flat flags (`FLAGS`: batch_size, urls, ray, ray_workers, tensor_parallel_size, ...)
        say, over the defaults; see `with_flags`.

        Args:
            **flags: Flat option names of `FLAGS` and their values; None for a field that cannot be None is "not
                given".

        Returns:
            The default options with those flags applied.

        Raises:
            InputError: A name is unknown, a value is invalid, or a flag does not apply to the resulting placement.
        """
        return cls().with_flags(**flags)

    def with_flags(self, **flags: Any) -> "ScoringOptions":
        """These options with the flat flags given changed (`batch_size` sets the transformers and the server batch).
        None for a flag whose field cannot be None means "not given". An unknown name, or a flag that does not apply
        to the resulting placement, is an InputError naming it.

        Args:
            **flags: Flat option names of `FLAGS` and their new values (`ray`: an address or None; `ray_workers`
                needs `ray`).

        Returns:
            A new ScoringOptions (these same options when no flag is given).

        Raises:
            InputError: A name is unknown, a value is invalid, or a flag does not apply to the resulting placement.
        """
        unknown = sorted(set(flags) - set(FLAGS))
        if unknown:
            raise InputError(f"unknown scoring option {unknown[0]!r}; known: {', '.join(FLAGS)}")
        given = {k: v for k, v in flags.items() if not (v is None and k in _NOT_NULL)}
        if not given:
            return self
        placement = checks.one_of(given.get("placement", self.placement), PLACEMENT_CHOICES, "placement")
        urls = given.get("urls", self.servers.urls)
        _check_applies(given, placement, (urls,) if isinstance(urls, str) else urls)

        def pick(names: tuple[str, ...]) -> dict[str, Any]:
            return {name: given[name] for name in names if name in given}

        ray = self.ray
        if "ray" in given:
            ray = None if given["ray"] is None else RayOptions(given["ray"], ray.workers if ray else None)
        if given.get("ray_workers") is not None and ray is None:
            raise InputError("ray_workers (--ray-workers) applies only with ray (--ray)")
        if ray is not None and "ray_workers" in given:
            ray = replace(ray, workers=given["ray_workers"])
        return replace(self, **pick(_TOP), ray=ray,
                       transformers=replace(self.transformers, **pick(("batch_size", "device_map"))),
                       vllm=replace(self.vllm, **pick(_ENGINE_ONLY)),
                       servers=replace(self.servers, **pick(("urls", "batch_size"))))

    def engine_length(self, window: int) -> int:
        """The offline vLLM engine's max_model_len for a model whose own window is `window` tokens.

        Args:
            window: The model's own context window, in tokens.

        Returns:
            `vllm.max_model_len` if set, else `max_tokens` if set, else `window`.
        """
        return self.vllm.max_model_len or self.max_tokens or window

    def truncation_for(self, on_vllm: bool = False) -> Truncation:
        """How a model RM cuts pairs: under `truncation`, to `max_tokens`, else to the model's own window (the RM
        fills it in); on an offline vLLM engine (`on_vllm`), never past the engine's `max_model_len`.

        Args:
            on_vllm: Whether the RM runs on the offline vLLM engine (then `vllm.max_model_len` caps the limit).

        Returns:
            The truncation rule.
        """
        return Truncation(self.max_tokens, self.truncation, ceiling=self.vllm.max_model_len if on_vllm else None)

    def cache_file(self) -> Path | None:
        """The score cache file these options name, with DEFAULT_CACHE resolved now (`default_cache_path()`).

        Returns:
            The file's path, or None when `cache` is None (no cache).
        """
        if self.cache is None:
            return None
        return default_cache_path() if self.cache is DEFAULT_CACHE else Path(self.cache)

    def open_cache(self) -> Any:
        """The score cache these options name (`cache_file`), or None.

        Returns:
            A ScoreCache opened on `cache_file()`, or None when `cache` is None.
        """
        path = self.cache_file()
        if path is None:
            return None
        from morkit.reward_models.cache import ScoreCache

        return ScoreCache(path)

