"""RewardModelSet: registered RMs built on first use, each once, with one set of ScoringOptions.

Search, loops and `rank` ask for member RMs by name as queries choose them; this keeps one built copy
of each and lets the caller release them all when done.
"""

from __future__ import annotations

from typing import Any, Mapping

from morkit.reward_models.catalog import REWARD_MODELS, load_rm
from morkit.reward_models.options import ScoringOptions


class RewardModelSet:
    """name -> built RM, building registered RMs lazily; `given` RMs (objects) are used as they are."""

    def __init__(self, options: ScoringOptions = ScoringOptions(), given: Mapping[str, Any] | None = None):
        self.options = options
        self._built: dict[str, Any] = dict(given or {})

    def get(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = load_rm(name, **self.options.load_options(REWARD_MODELS.get(name)))
        return self._built[name]

    __getitem__ = get

    def release(self) -> None:
        """Forget every built RM (their models go once nothing else holds them)."""
        for rm in self._built.values():
            close = getattr(rm, "close", None)
            if close is not None:
                close()
        self._built.clear()
