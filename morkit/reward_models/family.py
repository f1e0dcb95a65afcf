"""Model families: the code that builds one architecture of reward model on every placement (in this process, its
vLLM/servers/Ray recipe, its vLLM class). A card names its family ("module:attr", resolved on first use, so listing
RMs imports no torch or vLLM)."""

from __future__ import annotations

import functools
import importlib
from typing import Any, Iterable, Protocol, runtime_checkable

from morkit.core.errors import InputError
from morkit.reward_models.card import RMCard


@runtime_checkable
class Family(Protocol):
    """How one architecture of model RM is built, wherever it is placed.

    Attributes:
        architecture: The name its vLLM class is registered under (`hf_overrides` architectures); None: vLLM's own
            class for the checkpoint runs it.
        vllm_class: That class, as "module:Class" (imported only in vLLM processes).
    """

    architecture: str | None
    vllm_class: str | None

    def load(self, card: RMCard, **options: Any) -> Any:
        """The RM of `card` in this process (its transformers implementation), built with the load options.

        Args:
            card: The RM's card.
            **options: morkit's load options (device, dtype, batching, prefix_reuse, truncation, path, ...).

        Returns:
            The RM: an object with `score(pairs)`.
        """
        ...

    def engine_spec(self, card: RMCard, options: Any) -> Any:
        """How `card`'s RM runs on a vLLM engine or vLLM servers; an InputError where it runs only in this process.

        Args:
            card: The RM's card.
            options: The ScoringOptions (servers need only the checkpoint's config and tokenizer here).

        Returns:
            Its EngineSpec.
        """
        ...


@functools.lru_cache(maxsize=None)
def _resolve(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def family_of(card: RMCard) -> Family:
    """The family that builds `card`'s RM, imported now; InputError where the card has none.

    Args:
        card: A registered RM's card.

    Returns:
        Its family.
    """
    if card.family is None:
        raise InputError(f"reward model {card.name!r} has no model family; it runs only as plain code")
    return _resolve(card.family) if isinstance(card.family, str) else card.family


def vllm_architectures(cards: Iterable[RMCard]) -> dict[str, str]:
    """Architecture name -> "module:Class" for every family of `cards` that brings its own vLLM class (what the
    vLLM plugin registers); imports those families' modules, none of vLLM."""
    found: dict[str, str] = {}
    for card in cards:
        if card.family is None:
            continue
        family = family_of(card)
        if family.architecture and family.vllm_class:
            found[family.architecture] = family.vllm_class
    return found


def card_for_architecture(architecture: str, cards: Iterable[RMCard]) -> RMCard:
    """The first of `cards` whose family registers vLLM class `architecture` (a vLLM class finds its head here).

    Raises:
        InputError: No card's family registers it.
    """
    for card in cards:
        if card.family is not None and family_of(card).architecture == architecture:
            return card
    raise InputError(f"no registered reward model runs as vLLM architecture {architecture!r}")
