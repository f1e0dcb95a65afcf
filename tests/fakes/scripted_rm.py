"""A model RM stand-in for the serving tests (control flow only, no model): it takes a fixed time per call, and an
answer that says HANG holds its call (a hung model), so a test can make a replica hang when it wants."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

from morkit.core.types import Score

NAME = "scripted-rm"


class ScriptedRM:
    """Each call takes `cost_s`, then scores each pair by its answer's length; a call with an answer that says HANG
    first sleeps `hang_s`. With `log_dir`, each instance writes its process id there when built (`started-PID`)
    and when it hangs (`hung-PID`), so a test can tell replicas apart and see the hung one go."""

    def __init__(self, log_dir: str | None = None, cost_s: float = 0.05, hang_s: float = 300.0):
        self.log_dir, self.cost_s, self.hang_s = log_dir, cost_s, hang_s
        self._mark("started")

    def _mark(self, what: str) -> None:
        if self.log_dir is not None:
            (Path(self.log_dir) / f"{what}-{os.getpid()}").touch()

    def score(self, pairs):
        if any("HANG" in answer for _, answer in pairs):
            self._mark("hung")
            time.sleep(self.hang_s)
        time.sleep(self.cost_s)
        return [Score(len(answer) % 10 / 10) for _, answer in pairs]


def register(**options) -> None:
    """Register NAME as a model RM (the user's own engine, `runs="vllm"`) built as ScriptedRM(**options)."""
    from morkit.reward_models.catalog import REWARD_MODELS

    REWARD_MODELS.register(NAME, functools.partial(ScriptedRM, **options), "a scripted stand-in for a model RM",
                           kind="orm", runs="vllm")


def unregister() -> None:
    from morkit.reward_models.catalog import REWARD_MODELS

    REWARD_MODELS.unregister(NAME)


def pids(log_dir, what: str) -> set[int]:
    """The process ids that wrote `what` ("started" or "hung") to `log_dir`."""
    return {int(p.name.rsplit("-", 1)[1]) for p in Path(log_dir).glob(f"{what}-*")}
