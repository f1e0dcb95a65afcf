"""AdapterFamily: a family whose in-process RM is a chat adapter class (a `CttsRM` subclass: chat rendering, a
transformers backbone, a head loaded by name) and whose vLLM recipe is derived from that same class, so the
placements cannot drift apart. The eight CTTS-MM models are families of this kind; so can be any chat RM.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from morkit.reward_models.card import RMCard
from morkit.reward_models.family import bind


@dataclass(frozen=True)
class AdapterFamily:
    """A chat adapter class run on every placement.

    Args:
        adapter: The adapter class, "module:Class" (a `CttsRM` subclass: `load`, `messages`, `build_head`,
            `empty_score`).
        pooling: How vLLM pools its output: classify | token_classify | step | embed
            (morkit.reward_models.backends.pooling_io).
        architecture: The name its vLLM class is registered under; None: vLLM's own class runs the checkpoint.
        vllm_class: That class, "module:Class", registered by morkit's vLLM plugin.
    """

    adapter: str
    pooling: str = "classify"
    architecture: str | None = None
    vllm_class: str | None = None

    def adapter_class(self, card: RMCard) -> type:
        """The adapter class bound to `card` (imports its module): its name, kind, weights and files are the card's."""
        module, _, name = self.adapter.partition(":")
        return bind(getattr(importlib.import_module(module), name), card, model_id=card.model_id or "",
                    required_files=card.required)

    def load(self, card: RMCard, **options: Any) -> Any:
        """`card`'s adapter in this process: finds its weights (never downloading) and builds backbone and head."""
        return self.adapter_class(card).load(**options)

    def engine_spec(self, card: RMCard, options: Any) -> Any:
        """The EngineSpec: finds the checkpoint (servers need only its config and tokenizer here)."""
        from morkit.reward_models.weights import locate_weights

        required = ("config.json",) if options.servers.urls_for(card.name) else card.required
        return self.spec_at(card, locate_weights(card.model_id, required=required))

    def spec_at(self, card: RMCard, root: Path) -> Any:
        """`card`'s EngineSpec with its checkpoint (at least the config and tokenizer) at `root`."""
        from morkit.reward_models.backends.engine_rm import EngineSpec
        from morkit.reward_models.families.checkpoint import load_tokenizer, render_chat

        adapter = self.adapter_class(card)
        tokenizer = load_tokenizer(root)

        def render(question: str, answer: str) -> list[int]:
            return render_chat(tokenizer, adapter.messages(question, answer))

        return EngineSpec(card=card, family=self, model_dir=root, render=render,
                          tokenizer=tokenizer, max_context=card.window_at(root),
                          **self.engine_fields(root, tokenizer, adapter))

    def engine_fields(self, root: Path, tokenizer: Any, adapter: type) -> dict[str, Any]:
        """The EngineSpec fields this family sets beyond the rendering: its empty-answer floor, and prefix caching
        off for token pooling (which never reads vLLM's prefix cache). A family with more facts extends this."""
        from morkit.reward_models.backends.engine_rm import empty_answers_score

        fields: dict[str, Any] = {}
        if adapter.empty_score is not None:
            fields["not_shown"] = empty_answers_score(float(adapter.empty_score))
        if self.pooling == "token_classify":
            fields["prefix_caching"] = False  # token pooling never reads vLLM's prefix cache
        return fields
