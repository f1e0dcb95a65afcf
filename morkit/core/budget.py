"""A bound on the work of one call, set by whoever waits for it (the reward server's engine thread): within
`work_bounded(deadline, symbolic_classes)` grading compares with at most that many classes, and work past the
deadline raises `DeadlinePassed`. Outside it nothing is bounded.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from morkit.core.errors import MorkitError


class DeadlinePassed(MorkitError):
    """The work of a call went on past the deadline its caller set: nobody waits for its result."""


@dataclass(frozen=True)
class WorkBound:
    deadline: float | None = None
    symbolic_classes: int | None = None

    def check(self) -> None:
        """Raise DeadlinePassed once the deadline has passed."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlinePassed("the call ran past its deadline; its result would reach nobody")


_CURRENT = threading.local()


def current() -> WorkBound:
    """The bound in force on this thread (no bound outside `work_bounded`)."""
    return getattr(_CURRENT, "bound", None) or WorkBound()


@contextmanager
def work_bounded(deadline: float | None, symbolic_classes: int | None = None) -> Iterator[WorkBound]:
    previous = getattr(_CURRENT, "bound", None)
    _CURRENT.bound = WorkBound(deadline, symbolic_classes)
    try:
        yield _CURRENT.bound
    finally:
        _CURRENT.bound = previous
