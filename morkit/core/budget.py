"""A bound on the work of one call, set by whoever waits for it (the server's engine thread): within `work_bounded`
grading compares with at most `symbolic_classes` classes and within its `SymbolicBudget`, work past the deadline
raises `DeadlinePassed`, and a batch's parts have deadlines of their own (`parts`). Outside it nothing is bounded.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from morkit.core.errors import MorkitError


class DeadlinePassed(MorkitError):
    """The work of a call went on past the deadline its caller set: nobody waits for its result."""


class SymbolicSpent(Exception):
    """A call's time for symbolic comparison is spent: its answers are grouped by text and exact value from here."""


Compare = Callable[[str, str, float, float], "tuple[bool | None, float]"]
"""compare(a, b, pair_s, wait_s) -> (verdict, seconds the pair took): whether two normalised answers are
equivalent, decided within `pair_s` seconds from the moment the comparison starts (None: not decided in that
time), after waiting at most `wait_s` for a comparison to be able to start (SymbolicSpent when none could)."""
READY_WAIT_S = 30.0
"""How long a comparison may wait for the comparison process to start (about a second of imports): the wait is
not charged to the request's symbolic time, so a pair's verdict does not depend on an earlier request's."""


class SymbolicBudget:
    """The time one request may spend comparing answers symbolically: `pair_s` a pair, `total_s` in all (one per
    request, mutable). A pair not decided in time counts as different, as its normalised texts do, and both answers
    are compared by text and exact value only from then on (`costly`); past `total_s`, or once `undecided` pairs
    were not decided, `equal` raises SymbolicSpent (docs/serving.md, Limits)."""

    def __init__(self, compare: Compare, pair_s: float, total_s: float, undecided: int = 3):
        self.compare, self.pair_s, self.total_s, self.undecided = compare, pair_s, total_s, undecided
        self.spent = 0.0
        self.costly: set[str] = set()
        self.misses = 0  # pairs not decided in time

    def equal(self, a: str, b: str, deadline: float | None = None) -> bool:
        if a in self.costly or b in self.costly:
            return False
        if passed(deadline):
            raise DeadlinePassed("the call ran past its deadline; its result would reach nobody")
        left = self.total_s - self.spent
        if left <= 0 or self.misses >= self.undecided:
            raise SymbolicSpent("symbolic comparison time spent")
        wait = READY_WAIT_S
        if deadline is not None:
            left = min(left, deadline - time.monotonic())
            wait = min(wait, max(deadline - time.monotonic(), 0.0) / 2)
        verdict, took = self.compare(a, b, min(self.pair_s, left), wait)
        self.spent += took
        if verdict is None:
            self.costly.update((a, b))
            self.misses += 1
            return False
        return verdict


@dataclass(frozen=True)
class WorkBound:
    deadline: float | None = None
    symbolic_classes: int | None = None
    symbolic: SymbolicBudget | None = None
    parts: tuple[float | None, ...] = ()  # each part's own deadline, for a batched call (deadline: the latest)

    def check(self) -> None:
        """Raise DeadlinePassed once the deadline has passed."""
        if passed(self.deadline):
            raise DeadlinePassed("the call ran past its deadline; its result would reach nobody")


def passed(deadline: float | None) -> bool:
    """Whether a deadline (time.monotonic(); None: none) has passed."""
    return deadline is not None and time.monotonic() > deadline


def latest(deadlines: Iterator[float | None] | tuple[float | None, ...] | list[float | None]) -> float | None:
    """The latest of some deadlines (None, no deadline, is later than any)."""
    found = max((math.inf if d is None else d for d in deadlines), default=math.inf)
    return None if found == math.inf else found


_CURRENT = threading.local()


def current() -> WorkBound:
    """The bound in force on this thread (no bound outside `work_bounded`)."""
    return getattr(_CURRENT, "bound", None) or WorkBound()


@contextmanager
def work_bounded(deadline: float | None, symbolic_classes: int | None = None, *,
                 symbolic: SymbolicBudget | None = None, parts: tuple[float | None, ...] = ()) -> Iterator[WorkBound]:
    previous = getattr(_CURRENT, "bound", None)
    _CURRENT.bound = WorkBound(deadline, symbolic_classes, symbolic, tuple(parts))
    try:
        yield _CURRENT.bound
    finally:
        _CURRENT.bound = previous
