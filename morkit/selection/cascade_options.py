"""What a cascade is (`CascadeOptions`): the cheap RMs, the RMs escalation adds, and when a query escalates; data
only, so `SelectOptions` carries it (and pickles it to Ray Serve) without loading the cascade's code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from morkit.core import checks
from morkit.core.errors import InputError


@dataclass(frozen=True)
class CascadeOptions:
    """Which RMs each route reads, and when a query escalates from the cheap route to the expensive one.

    Args:
        cheap: The cheap route's pool RMs (`--cascade`).
        then: The RMs the escalated route adds to them (`--then`); none of them cheap.
        below: Escalate a query whose cheap pick's calibrated confidence is below this, in [0, 1].
        spend: Or the share of queries to escalate, in (0, 1): the threshold is that quantile of the cheap route's
            confidence on the pool's out-of-fold picks.

    Raises:
        InputError: A route names no RM or one RM twice, an RM is in both routes, or not exactly one of `below` and
            `spend` is given within its range.
    """

    cheap: tuple[str, ...]
    then: tuple[str, ...]
    below: float | None = None
    spend: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "cheap", tuple(self.cheap))
        object.__setattr__(self, "then", tuple(self.then))
        for flag, names in (("--cascade", self.cheap), ("--then", self.then)):
            if not names:
                raise InputError(f"{flag}: name at least one pool RM")
            twice = [n for i, n in enumerate(names) if n in names[:i]]
            if twice:
                raise InputError(f"{flag} {twice[0]}: named twice")
        both = [n for n in self.then if n in self.cheap]
        if both:
            raise InputError(f"--then {both[0]}: also a cheap RM (--cascade); the escalated route adds RMs the cheap "
                             "one lacks")
        if (self.below is None) == (self.spend is None):
            raise InputError("cascade: give exactly one of --below (escalate under this confidence) and --spend (the "
                             "share of queries to escalate)" + (", not both" if self.below is not None else ""))
        checks.optional(checks.probability, self.below, "--below")
        checks.optional(checks.share, self.spend, "--spend")

    @property
    def members(self) -> tuple[str, ...]:
        """Every RM of the cascade: the escalated route's."""
        return (*self.cheap, *self.then)

    def check(self, rm_names: Sequence[str]) -> None:
        """Check that every RM named is one of the pool's.

        Args:
            rm_names: The pool's RMs.

        Raises:
            InputError: An RM is not the pool's (naming its flag and the RM).
        """
        for flag, names in (("--cascade", self.cheap), ("--then", self.then)):
            for name in names:
                if name not in rm_names:
                    raise InputError(f"{flag} {name}: not an RM of the pool ({', '.join(rm_names)})")

    def to_json(self) -> dict[str, Any]:
        """The options as `/health` reports them.

        Returns:
            {"cheap", "then", "below", "spend"}.
        """
        return {"cheap": list(self.cheap), "then": list(self.then), "below": self.below, "spend": self.spend}
