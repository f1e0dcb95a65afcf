"""Where a registered RM runs: the placements (plain code, transformers, offline vLLM, vLLM servers, Ray), which
one the options pick, and the handle placed there (nothing loads yet)."""

from __future__ import annotations

from typing import Any

from morkit.core.registry import Entry, Registry
from morkit.reward_models.handles import PlainHandle, RMHandle
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.card import RMCard

PLACEMENTS = Registry("placement", [
    Entry("python", PlainHandle, "plain code (rules, tables, clients given their model): built once, kept"),
    Entry("transformers", "morkit.reward_models.backends.transformers:TransformersHandle",
          "the RM's transformers implementation, in this process"),
    Entry("vllm", "morkit.reward_models.backends.vllm_engine:VLLMEngineHandle",
          "an offline vLLM engine started in this process, from the RM's EngineSpec"),
    Entry("servers", "morkit.reward_models.backends.servers:ServerHandle",
          "vLLM servers that serve the RM under its name, from its EngineSpec"),
    Entry("ray", "morkit.reward_models.backends.ray:RayHandle",
          "Ray Data actors, each loading one replica on the placement the options pick"),
])


def placement_of(name: str, card: RMCard, options: ScoringOptions) -> str:
    """Where `options` place registered RM `name`: Ray when set, else its servers where any serve it, else the
    chosen `placement`; RMs that load no model run as plain code."""
    if not card.loads_model:
        return "python"
    if options.ray is not None:
        return "ray"
    return "servers" if options.servers.urls_for(name) else options.placement


def place(entry: Entry, options: ScoringOptions, residency: Any = None) -> RMHandle:
    """Registered RM `entry`'s handle on the placement `options` pick (nothing loads yet)."""
    return PLACEMENTS.load(placement_of(entry.name, entry.spec, options))(entry, options, residency)
