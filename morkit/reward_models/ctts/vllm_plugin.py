"""morkit's vLLM plugin (entry point `vllm.general_plugins`: `morkit`): in each vLLM process, registers the vLLM class
of every RM registered in that process whose family brings one, bound to its adapter; an RM only your script
registers may be missing there (a package's own plugin registers it, then calls `register()`; docs: Extending morkit).
"""

from __future__ import annotations


def architectures() -> dict[str, str]:
    """vLLM architecture name -> "module:Class", from the families of the registered cards; a checkpoint runs as
    one through `hf_overrides={"architectures": [name]}`."""
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.family import vllm_architectures

    return vllm_architectures(entry.spec for entry in REWARD_MODELS)


def bound_classes() -> dict[str, type]:
    """vLLM architecture name -> its class (imported now); for a family with an adapter class (AdapterFamily), a
    subclass whose `adapter` is that class bound to the first registered card of the family, whose head it builds."""
    import importlib

    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.family import card_for_architecture, family_of

    cards = [entry.spec for entry in REWARD_MODELS]
    found: dict[str, type] = {}
    for name, target in architectures().items():
        module, _, attr = target.partition(":")
        base = getattr(importlib.import_module(module), attr)
        card = card_for_architecture(name, cards)
        bind = getattr(family_of(card), "adapter_class", None)  # an AdapterFamily's; another family's class is whole
        found[name] = base if bind is None else type(base.__name__, (base,), {
            "adapter": bind(card), "__module__": base.__module__, "__qualname__": base.__qualname__})
    return found


def register() -> None:
    """Register morkit's classes with vLLM's model registry (idempotent; vLLM calls it once per process)."""
    from vllm import ModelRegistry

    known = set(ModelRegistry.get_supported_archs())
    for name, cls in bound_classes().items():
        if name not in known:
            ModelRegistry.register_model(name, cls)
