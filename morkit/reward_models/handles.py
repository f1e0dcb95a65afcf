"""RM handles: a registered RM on one placement (where it runs: morkit.reward_models.placement), knowing before it
loads its kind, cache key, truncation and memory need; `load()` builds the scorer with that very truncation, dtype
and engine, so the cache key cannot drift from how a score is made.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar, Sequence

from morkit.core.errors import InputError, UnavailableError
from morkit.core.registry import Entry
from morkit.reward_models.identity import cache_key, card_window, truncation_part
from morkit.reward_models.memory import MemoryNeed
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.residency import Residency
from morkit.reward_models.card import RMCard
from morkit.reward_models.truncation import Truncation


def dtype_name(options: ScoringOptions, device: str) -> str:
    """The dtype a model loads in on `device`: the one the options name, else auto (bf16 on GPUs, fp32 on CPU)."""
    from morkit.runtime.device import DTYPES, resolve_dtype

    if options.dtype and options.dtype != "auto":
        return DTYPES[options.dtype]
    return str(resolve_dtype(device, "auto")).removeprefix("torch.")


def build(entry: Entry, **options: Any) -> Any:
    """Registered RM `entry` built with `options` in this process, by its card's family (else by its target, plain
    code): a required option left out is an InputError naming it; an absent package, head or weights an
    UnavailableError saying which."""
    card = entry.spec
    required = [o for o in card.options if o not in options]
    if required:
        raise InputError(f"reward model {entry.name!r} needs option(s) {', '.join(required)} ({card.needs})")
    found = card.absent(options)
    if found:
        raise UnavailableError(f"reward model {entry.name!r} cannot run here: {found[1]}")
    if card.family is not None:
        from morkit.reward_models.family import family_of

        return family_of(card).load(card, **options)
    return entry.load()(**options)


class RMHandle:
    """A registered RM on one placement, before it loads. Subclasses say how it loads there.

    `score(pairs)` loads it through its residency (by default its own: the model stays until `close`);
    a scoring session shares one Residency between its handles, so one model is in memory at a time."""

    placement: ClassVar[str] = "python"  # where it runs: its entry in morkit.reward_models.placement.PLACEMENTS
    resident_model: ClassVar[bool] = True  # a model that takes memory (swapped one at a time in a session)

    def __init__(self, entry: Entry, options: ScoringOptions, residency: Any = None):
        self.entry = entry
        self.name = entry.name
        self.card: RMCard = entry.spec
        self.options = options
        self.kind = self.card.kind
        self.truncation = self.planned_truncation()
        self.residency = residency if residency is not None else Residency()

    @cached_property
    def cache_key(self) -> str:
        """The key its scores are cached under (morkit.reward_models.identity): its card and what of this placement
        changes a score (`score_facts`); worked out when first asked, without loading the model."""
        return cache_key(self.name, self.card, **self.score_facts())

    def score_facts(self) -> dict[str, str | None]:
        """What of this placement changes its scores (identity.cache_key's engine, dtype, device map and truncation):
        nothing for plain code, whose score is its version's."""
        return {}

    def key_truncation(self) -> str | None:
        """Its truncation as its key holds it (identity.truncation_part): the planned one, with the window its card
        gives resolved where it is known here; no model loaded."""
        if self.truncation is None:
            return None
        window = card_window(self.card) if self.truncation.max_tokens is None else None
        return truncation_part(self.truncation, window)

    def planned_truncation(self) -> Truncation | None:
        """The truncation this RM cuts pairs under here (its signature keys the score cache); None: sent whole."""
        return None

    def device_plan(self) -> tuple[str, str, int]:
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
        if not self.card.model_id:
            return None
        from morkit.reward_models import memory
        from morkit.reward_models.weights import locate_weights

        root = locate_weights(self.card.model_id, required=self.card.required)
        _, dtype, spread = self.device_plan()
        return memory.estimate(root, dtype, batch_tokens=self.batch_tokens(), devices=max(spread, 1))

    def load(self) -> Any:
        """The scorer, built now (after the fit check)."""
        raise NotImplementedError

    def load_now(self) -> None:
        """Load it through its residency now rather than on the first `score` (a scoring run times its scoring
        apart from its loading)."""
        self.residency.hold(self)

    def measured_device(self) -> str:
        """The device its scoring runs on here, as the timing ledger names it ("cpu", "cuda:0 (NVIDIA H200)");
        "" for a placement that scores elsewhere (servers, Ray)."""
        from morkit.reward_models.timing import device_label

        return device_label(self.device_plan()[0])

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
