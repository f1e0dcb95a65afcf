"""The verifier kinds loops can use, in VERIFIERS: name -> factory(VerifierSetup) -> (query -> Verifier), a
function per query since the MoR ensemble differs per query; register one with `needs_pool` metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from morkit.core.registry import Entry, Registry
from morkit.core.types import Query
from morkit.verify.base import Verifier

VerifierFor = Callable[[Query], Verifier]


@dataclass(frozen=True)
class VerifierSetup:
    """What verifier factories may use: the LLM critic (the loop's: morkit.loops.registry.loop_critic), and with a
    pool its router, member RMs and cache."""

    critic: Verifier
    router: Any = None  # morkit.selection.router.Router over the pool
    rms: Any = None  # name -> built RM (a ScoringSession)
    cache: Any = None  # a ScoreCache, or None


def critic(setup: VerifierSetup) -> VerifierFor:
    return lambda query: setup.critic


def mor(setup: VerifierSetup) -> VerifierFor:
    from morkit.verify.mor import query_verifier

    return lambda query: query_verifier(setup.router, query, setup.rms, setup.cache)[1]


def mor_and_critic(setup: VerifierSetup) -> VerifierFor:
    from morkit.verify.combined import CombinedVerifier

    ensemble = mor(setup)
    return lambda query: CombinedVerifier(ensemble(query), setup.critic)


_HERE = "morkit.verify.kinds"
VERIFIERS = Registry("verifier", [
    Entry("llm", f"{_HERE}:critic", "the loop's LLM critic (TMAS: its verification agent on the solver's model; "
          "else the aggregator of agents.toml): feedback and a parsed score",
          {"needs_pool": False}),
    Entry("mor", f"{_HERE}:mor", "the query's MoR ensemble, chosen from a pool", {"needs_pool": True}),
    Entry("both", f"{_HERE}:mor_and_critic", "the MoR ensemble's score plus the critic's", {"needs_pool": True}),
])
"""Verifier kinds by name (an MoR ensemble, an LLM critic, both) that search and the loops score answers with."""
