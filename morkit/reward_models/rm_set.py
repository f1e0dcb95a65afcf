"""RewardModelSet: the registered RMs of a run, with at most one model resident at a time.

A model RM (transformers or vLLM) is a handle until it must score: then the set loads it on the
backend the ScoringOptions pick, after releasing whichever model was resident before, so two 70B
RMs in one run are never in memory together. Rules and tables are built once and kept. A handle
knows its cache key without loading, so pairs already in the score cache never load a model. With
`options.ray` set, a model RM is a `ray_scoring.RayRM` instead: it loads only in the cluster's actors.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from morkit.core.types import Score
from morkit.reward_models.catalog import REWARD_MODELS, cache_key
from morkit.reward_models.options import ScoringOptions
from morkit.runtime.models import free_memory

log = logging.getLogger(__name__)


class ResidentRM:
    """A model RM that loads through its set when it first has to score (and after being released).

    Its cache key and truncation are known without loading, so cached pairs never load a model."""

    def __init__(self, models: "RewardModelSet", name: str):
        from morkit.reward_models.backends import truncation_of

        self._models = models
        self.name = name
        self.kind = REWARD_MODELS.get(name).meta.get("kind", "orm")
        self.cache_key = cache_key(name)
        self.truncation = truncation_of(name, models.options)

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        return self._models.load(self.name).score(pairs)


class RewardModelSet:
    """name -> RM for one run: model RMs as ResidentRM handles (one loaded at a time) or, with `options.ray`,
    RayRM handles (loaded in Ray actors only); others built once."""

    def __init__(self, options: ScoringOptions = ScoringOptions(), given: Mapping[str, Any] | None = None):
        self.options = options
        self._given: dict[str, Any] = dict(given or {})
        self._handles: dict[str, Any] = {}
        self._resident: tuple[str, Any] | None = None
        self.loads: list[str] = []  # every model load, in order (what a run cost)

    def get(self, name: str) -> Any:
        if name in self._given:
            return self._given[name]
        if name not in self._handles:
            from morkit.reward_models.backends import build, is_model_rm

            entry = REWARD_MODELS.get(name)
            if not is_model_rm(entry):
                self._handles[name] = build(name, self.options)
            elif self.options.ray is not None:
                from morkit.reward_models.ray_scoring import ray_rm

                self._handles[name] = ray_rm(name, self.options)
            else:
                self._handles[name] = ResidentRM(self, name)
        return self._handles[name]

    __getitem__ = get

    @property
    def resident(self) -> str | None:
        """The name of the model loaded now, if any."""
        return self._resident[0] if self._resident else None

    def load(self, name: str) -> Any:
        """The loaded model RM `name`; loading it first releases the one resident before."""
        if self._resident and self._resident[0] == name:
            return self._resident[1]
        self.release_resident()
        from morkit.reward_models.backends import build

        log.info("loading reward model %s", name)
        model = build(name, self.options)
        self._resident = (name, model)
        self.loads.append(name)
        return model

    def release_resident(self) -> None:
        """Close and drop the resident model, and return its memory (host and device) before going on."""
        if self._resident is None:
            return
        name, model = self._resident
        self._resident = None
        close = getattr(model, "close", None)
        if close is not None:
            close()
        del model
        free_memory()
        log.info("released reward model %s", name)

    def release(self) -> None:
        """Release the resident model and forget every RM built for this run."""
        self.release_resident()
        for rm in self._handles.values():
            close = getattr(rm, "close", None)
            if close is not None and not isinstance(rm, ResidentRM):
                close()
        self._handles.clear()
