"""ScoringOptions: how registered RMs are loaded and how a scoring run goes, as one typed value.

The CLI's scoring flags map onto these fields one to one; the Python API takes the same object.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from morkit.core import checks
from morkit.core.registry import Entry
from morkit.reward_models.base import REDUCTIONS
from morkit.reward_models.hf import TRUNCATION_POLICIES


@dataclass(frozen=True)
class ScoringOptions:
    """Model loading (device, batch size, token limit, truncation), cached-PRM reduction, chunking, cache, bars."""

    device: str | None = None  # None: auto (cuda, mps, else cpu)
    batch_size: int = 16
    max_tokens: int | None = None  # None: the model's own limit
    truncation: str = "right"
    reduction: str = "min"
    chunk: int = 64
    cache: str | os.PathLike | None = None  # score cache file; None: no cache
    progress: bool = False

    def __post_init__(self) -> None:
        checks.positive_int(self.batch_size, "batch_size")
        checks.optional(checks.positive_int, self.max_tokens, "max_tokens")
        checks.one_of(self.truncation, TRUNCATION_POLICIES, "truncation")
        checks.one_of(self.reduction, REDUCTIONS, "reduction")
        checks.positive_int(self.chunk, "chunk")

    def load_options(self, entry: Entry) -> dict[str, Any]:
        """Keyword options for building `entry`: transformers RMs take device, batching and truncation."""
        if entry.meta.get("backend") != "transformers":
            return {}
        from morkit.reward_models.hf import Batching, Truncation

        options: dict[str, Any] = {"batching": Batching(max_batch=self.batch_size)}
        if self.max_tokens:
            options["truncation"] = Truncation(max_tokens=self.max_tokens, policy=self.truncation)
        elif self.truncation != "right":
            options["truncation"] = Truncation(policy=self.truncation)
        if self.device:
            options["device"] = self.device
        return options

    def open_cache(self) -> Any:
        """The score cache these options name, or None."""
        if self.cache is None:
            return None
        from morkit.reward_models.cache import ScoreCache

        return ScoreCache(self.cache)
