"""Model families: the code that builds one architecture of reward model on every placement (in this process, its
vLLM/servers/Ray recipe, its vLLM class). A model RM's family is written once: it is its registry target, and its
card's `family` ("module:attr", resolved on first use, so listing RMs imports no torch or vLLM, or the object)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, Iterable, Protocol, runtime_checkable

from morkit.core.errors import InputError
from morkit.reward_models.card import RMCard

MODEL_RUNS = "transformers"
"""The `runs` of a model RM, the one kind of RM a family builds (plain code runs as its target is)."""


@runtime_checkable
class Family(Protocol):
    """How one architecture of model RM is built, wherever it is placed.

    Attributes:
        pooling: How vLLM pools its output on an engine or servers: `classify` (one row per prompt),
            `token_classify` (a row per token; the last is read), `step` (a row at each step tag) or `embed` (the raw
            last-token state, for a head applied here); see morkit.reward_models.backends.pooling_io. None for a
            family that runs only in this process (its `engine_spec` refuses).
        architecture: The name its vLLM class is registered under (`hf_overrides` architectures); None: vLLM's own
            class for the checkpoint runs it.
        vllm_class: That class, as "module:Class" (imported only in vLLM processes).
    """

    pooling: str | None
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


FAMILY_MEMBERS = ("load", "engine_spec", "pooling", "architecture", "vllm_class")
"""What an object needs to be a Family (the protocol's members), for the error that names those it lacks."""


def lacks(obj: Any) -> list[str]:
    """The Family members `obj` does not have (empty: it is a family)."""
    return [member for member in FAMILY_MEMBERS if not hasattr(obj, member)]


def settle_family(name: str, target: Any, card: RMCard) -> tuple[Any, RMCard]:
    """A registered RM's target and card with its family written once (REWARD_MODELS applies it to every entry): a
    model RM (`runs="transformers"`) is built by its family, which is both its registry target and its card's
    `family`. `register(name, FAMILY, summary, runs="transformers", ...)` gives the card that family; a card that
    names its family (the built-in cards) is registered with no target, and the family becomes it.

    Args:
        name: The RM's registered name.
        target: The registered target ("module:attr" or the object); None for a card that names its family.
        card: The RM's card.

    Returns:
        (target, card), the card's `family` set for a model RM.

    Raises:
        InputError: A family given twice (as the target and in the card) and differently, a model RM whose target
            is an object that is no Family, a Family registered as plain code, or no target at all.
    """
    what = f"reward model {name!r}"
    if card.family is not None:
        if target is not None and target != card.family:
            raise InputError(f"{what}: its card names a family and a different target is given; a model RM's "
                             "family is its one registered target")
        target = card.family
    elif card.runs == MODEL_RUNS and target is not None:
        missing = [] if isinstance(target, str) else lacks(target)
        if missing:
            raise InputError(f"{what}: runs={MODEL_RUNS!r} is built by its target, a model family, but "
                             f"{_named(target)} lacks {', '.join(missing)} (plain code runs as 'python')")
        card = dataclasses.replace(card, family=target)
    elif target is not None and not isinstance(target, str) and not lacks(target):
        raise InputError(f"{what}: its target {_named(target)} is a model family, so its card needs "
                         f"runs={MODEL_RUNS!r}, not {card.runs!r}")
    if target is None:
        raise InputError(f"{what} has no target: give its factory, or its family for runs={MODEL_RUNS!r}")
    if card.family is not None and card.runs != MODEL_RUNS:
        raise InputError(f"{what}: a card with a family runs as {MODEL_RUNS!r}, not {card.runs!r}")
    return target, card


def _named(obj: Any) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    return f"{kind.__module__}:{kind.__qualname__}" + ("" if obj is kind else " (an instance)")


@functools.lru_cache(maxsize=None)
def bind(cls: type, card: RMCard, **facts: Any) -> type:
    """`cls` as the RM of `card`: a subclass (made once per card) carrying the card, its name and kind, and the
    class attributes `facts` a family takes from the card, so those facts are written only on the card.

    Args:
        cls: The RM class of a family.
        card: The card it is bound to.
        **facts: More class attributes, each from the card (its window, its weights' id, ...).

    Returns:
        The bound class.
    """
    attrs = {"card": card, "name": card.name, "kind": card.kind, **facts,
             "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    return type(cls.__name__, (cls,), attrs)


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
    family = _resolve(card.family) if isinstance(card.family, str) else card.family
    missing = lacks(family)
    if missing:
        shown = card.family if isinstance(card.family, str) else _named(family)
        raise InputError(f"reward model {card.name!r}: its family {shown} lacks {', '.join(missing)}")
    return family


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
