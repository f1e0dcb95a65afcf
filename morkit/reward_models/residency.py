"""What stays in memory: the fit check before models load, the one load every handle goes through, and the
Residency that keeps one model at a time (a run) or every one (a server)."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from morkit.core.errors import ScoreError
from morkit.reward_models.memory import MemoryNeed
from morkit.reward_models.options import ScoringOptions

log = logging.getLogger(__name__)


class Residency:
    """Which loaded models stay in memory: one at a time (a run), or every one (a server, `keep_all`)."""

    def __init__(self, keep_all: bool = False):
        self.keep_all = keep_all
        self.loaded: dict[str, Any] = {}
        self.loads: list[str] = []  # every model load, in order (what a run cost)

    def hold(self, handle: Any) -> Any:
        """The loaded model of `handle` (an RMHandle), loading it now (after releasing the one before, unless all
        are kept)."""
        if handle.name in self.loaded:
            return self.loaded[handle.name]
        if not self.keep_all:
            self.release_all()
        model = load_checked(handle)
        self.loaded[handle.name] = model
        self.loads.append(handle.name)
        return model

    def let_go(self, handle: Any) -> None:
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


def load_checked(handle: Any) -> Any:
    """`handle`'s (an RMHandle's) model, loaded after the fit check; refused (and released) when it would cut
    pairs under another truncation than the one its scores are cached under. Every load goes through here: a
    session's, a lone handle's, a Ray replica's."""
    check_fits([handle])
    log.info("loading reward model %s", handle.name)
    model = handle.load()
    made = getattr(model, "truncation", None)
    if handle.truncation is not None and made is not None and made.signature != handle.truncation.signature:
        _release(model)
        raise ScoreError(f"reward model {handle.name!r} loaded cutting pairs under {made.signature}, but its "
                         f"scores are cached under {handle.truncation.signature}")
    return model


def check_fits(handles: Sequence[Any], beside: Mapping[str, MemoryNeed | None] | None = None,
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
        (device, dtype, _), placement = first.device_plan(), first.placement
    else:  # the models beside alone (an embedder: float32, as sentence-transformers loads it)
        device, dtype, placement = resolve_device((options or ScoringOptions()).device), "float32", "transformers"
    total = MemoryNeed(sum(n.weights for n in needs.values()), max(n.activations for n in needs.values()),
                       max(n.devices for n in needs.values()))
    memory.check_fit(" + ".join(needs), total, device, dtype, placement=placement)
