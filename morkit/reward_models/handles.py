"""RM handles: a registered RM placed on one backend, knowing before it loads its kind, cache key, truncation and
memory need; `load()` builds the scorer with that very truncation, so the cache's record cannot drift.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Mapping, Sequence

from morkit.core.errors import InputError, ScoreError, UnavailableError
from morkit.core.registry import Entry, Registry
from morkit.reward_models.memory import MemoryNeed
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.spec import RMSpec
from morkit.reward_models.truncation import Truncation

log = logging.getLogger(__name__)


def cache_key(name: str, spec: RMSpec) -> str:
    """The key registered RM `name`'s scores are cached under, known without loading it: its packaged head's
    hash, or its declared version, else its name."""
    if spec.head:
        from morkit.reward_models.heads import head_cache_key, load_packaged_head

        return head_cache_key(name, load_packaged_head(spec.head))
    return f"{name}@{spec.version}" if spec.version else name


def dtype_name(options: ScoringOptions, device: str) -> str:
    """The dtype a model loads in on `device`: the one the options name, else auto (bf16 on GPUs, fp32 on CPU)."""
    from morkit.runtime.device import DTYPES, resolve_dtype

    if options.dtype and options.dtype != "auto":
        return DTYPES[options.dtype]
    return str(resolve_dtype(device, "auto")).removeprefix("torch.")


def build(entry: Entry, **options: Any) -> Any:
    """Registered RM `entry` built with `options`: a required option left out is an InputError naming it; an
    absent package, head or weights an UnavailableError saying which."""
    spec = entry.spec
    required = [o for o in spec.options if o not in options]
    if required:
        raise InputError(f"reward model {entry.name!r} needs option(s) {', '.join(required)} ({spec.needs})")
    found = spec.absent(options)
    if found:
        raise UnavailableError(f"reward model {entry.name!r} cannot run here: {found[1]}")
    return entry.load()(**options)


class RMHandle:
    """A registered RM placed on one backend, before it loads. Subclasses say how it loads there.

    `score(pairs)` loads it through its residency (by default its own: the model stays until `close`);
    a scoring session shares one Residency between its handles, so one model is in memory at a time."""

    backend: ClassVar[str] = "python"
    resident_model: ClassVar[bool] = True  # a model that takes memory (swapped one at a time in a session)

    def __init__(self, entry: Entry, options: ScoringOptions, residency: Any = None):
        self.entry = entry
        self.name = entry.name
        self.spec: RMSpec = entry.spec
        self.options = options
        self.kind = self.spec.kind
        self.cache_key = cache_key(self.name, self.spec)
        self.truncation = self.planned_truncation()
        self.residency = residency if residency is not None else Residency()

    def planned_truncation(self) -> Truncation | None:
        """The truncation this RM cuts pairs under here (its signature keys the score cache); None: sent whole."""
        return None

    def placement(self) -> tuple[str, str, int]:
        """(device, dtype name, devices one copy spreads over) where it would load."""
        from morkit.runtime.device import resolve_device

        device = resolve_device(self.options.device)
        return device, dtype_name(self.options, device), 1

    def batch_tokens(self) -> int:
        """The tokens one forward pass may hold, for the activation estimate."""
        return 8192

    def memory_need(self) -> MemoryNeed | None:
        """What loading it takes on its devices; None where it places no weights of its own (rules, tables,
        the embedded models that share the process's copies, models on servers)."""
        if not self.spec.model_id:
            return None
        from morkit.reward_models import memory
        from morkit.reward_models.weights import locate_weights

        root = locate_weights(self.spec.model_id, required=self.spec.required)
        _, dtype, spread = self.placement()
        return memory.estimate(root, dtype, batch_tokens=self.batch_tokens(), devices=max(spread, 1))

    def load(self) -> Any:
        """The scorer, built now (after the fit check)."""
        raise NotImplementedError

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Any]:
        return self.residency.hold(self).score(pairs)

    def close(self) -> None:
        self.residency.let_go(self)


class PlainHandle(RMHandle):
    """Rules, tables, plain-Python RMs and the bare engine clients: built once with the caller's options, kept."""

    resident_model = False

    def __init__(self, entry: Entry, options: ScoringOptions, residency: Any = None):
        super().__init__(entry, options, residency)
        self._built: Any = None

    def load(self) -> Any:
        return build(self.entry)

    def scorer(self) -> Any:
        """The built RM itself (rules score whole queries: `score_query`, `cache_context`, `applies`)."""
        if self._built is None:
            self._built = self.load()
        return self._built

    def close(self) -> None:
        built, self._built = self._built, None
        close = getattr(built, "close", None)
        if close is not None:
            close()


class Residency:
    """Which loaded models stay in memory: one at a time (a run), or every one (a server, `keep_all`)."""

    def __init__(self, keep_all: bool = False):
        self.keep_all = keep_all
        self.loaded: dict[str, Any] = {}
        self.loads: list[str] = []  # every model load, in order (what a run cost)

    def hold(self, handle: RMHandle) -> Any:
        """The loaded model of `handle`, loading it now (after releasing the one before, unless all are kept)."""
        if handle.name in self.loaded:
            return self.loaded[handle.name]
        if not self.keep_all:
            self.release_all()
        model = load_checked(handle)
        self.loaded[handle.name] = model
        self.loads.append(handle.name)
        return model

    def let_go(self, handle: RMHandle) -> None:
        """Close `handle`'s model, if loaded, and give its memory back."""
        model = self.loaded.pop(handle.name, None)
        if model is not None:
            _release(model)
            log.info("released reward model %s", handle.name)

    def release_all(self) -> None:
        for name in list(self.loaded):
            _release(self.loaded.pop(name))
            log.info("released reward model %s", name)


def _release(model: Any) -> None:
    """Close a loaded model and give its memory (host and device) back before going on."""
    close = getattr(model, "close", None)
    if close is not None:
        close()
    del model
    from morkit.runtime.models import free_memory

    free_memory()


def load_checked(handle: RMHandle) -> Any:
    """`handle`'s model, loaded after the fit check; refused (and released) when it would cut pairs under another
    truncation than the one its scores are cached under. Every load goes through here: a session's, a lone
    handle's, a Ray replica's."""
    check_fits([handle])
    log.info("loading reward model %s", handle.name)
    model = handle.load()
    made = getattr(model, "truncation", None)
    if handle.truncation is not None and made is not None and made.signature != handle.truncation.signature:
        _release(model)
        raise ScoreError(f"reward model {handle.name!r} loaded cutting pairs under {made.signature}, but its "
                         f"scores are cached under {handle.truncation.signature}")
    return model


SCORING_BACKENDS = Registry("scoring backend", [
    Entry("python", PlainHandle, "plain code (rules, tables, clients given their model): built once, kept"),
    Entry("transformers", "morkit.reward_models.backends.transformers:TransformersHandle",
          "the RM's transformers implementation, in this process"),
    Entry("vllm", "morkit.reward_models.backends.vllm_engine:VLLMEngineHandle",
          "an offline vLLM engine started in this process, from the RM's EngineSpec"),
    Entry("servers", "morkit.reward_models.backends.servers:ServerHandle",
          "vLLM servers that serve the RM under its name, from its EngineSpec"),
    Entry("ray", "morkit.reward_models.backends.ray:RayHandle",
          "Ray Data actors, each loading one replica on the backend the options pick"),
])


def backend_of(name: str, spec: RMSpec, options: ScoringOptions) -> str:
    """Where `options` place registered RM `name`: Ray when set, else its servers where any serve it, else the
    chosen model backend; RMs that load no model run as plain code."""
    if not spec.loads_model:
        return "python"
    if options.ray is not None:
        return "ray"
    return "servers" if options.servers.urls_for(name) else options.backend


def place(entry: Entry, options: ScoringOptions, residency: Any = None) -> RMHandle:
    """Registered RM `entry`'s handle on the backend `options` place it on (nothing loads yet)."""
    return SCORING_BACKENDS.load(backend_of(entry.name, entry.spec, options))(entry, options, residency)


def check_fits(handles: Sequence[RMHandle], beside: Mapping[str, MemoryNeed | None] | None = None,
               options: ScoringOptions | None = None) -> None:
    """Refuse (UnavailableError naming them) when these RMs cannot all be in memory at once on their devices:
    their weights together plus the largest one's activations (one runs at a time). One RM before it loads,
    or every RM a server keeps resident with the other models it keeps on the same device (`beside`: name ->
    need, such as a server's embedder, None where unknown; on `options`' device when no RM places weights)."""
    needs = {h.name: need for h in handles if h.options.check_fit and (need := h.memory_need()) is not None}
    if options is None or options.check_fit:
        needs.update({name: need for name, need in (beside or {}).items() if need is not None})
    if not needs:
        return
    from morkit.reward_models import memory
    from morkit.runtime.device import resolve_device

    first = next((h for h in handles if h.name in needs), None)
    if first is not None:
        (device, dtype, _), backend = first.placement(), first.backend
    else:  # the models beside alone (an embedder: float32, as sentence-transformers loads it)
        device, dtype, backend = resolve_device((options or ScoringOptions()).device), "float32", "transformers"
    total = MemoryNeed(sum(n.weights for n in needs.values()), max(n.activations for n in needs.values()),
                       max(n.devices for n in needs.values()))
    memory.check_fit(" + ".join(needs), total, device, dtype, backend=backend)
