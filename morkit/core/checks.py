"""Value checks shared by option dataclasses and the CLI's argument parsing, so both say the same thing: each returns
the value (converted where lossless) or raises InputError naming `what` ("TMASConfig.epsilon", "--epsilon").
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable

from morkit.core.errors import InputError


def shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters, for messages (a 400-digit number or a huge list stays one short line)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        digits = int(value.bit_length() * math.log10(2)) + 1  # str() may refuse a long integer (4300 digits)
        if 10 ** (digits - 1) > abs(value):
            digits -= 1
        return f"an integer of {digits} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def finite_float(value: Any) -> float | None:
    """`value` as a finite float, or None: a bool, a non-number, NaN, an infinity, or an int too large for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def quantity(text: str) -> tuple[str, float, str] | None:
    """A non-negative number as a flag gives it, an optional "$" before it and a unit after it ("$0.02", "8B",
    "3e5 GFLOP", "25%"; "_" separates digits): ("$" or "", the finite number, the unit as written); None for any
    other text."""
    match = re.fullmatch(r"(\$?)\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z%]*)", text.strip().replace("_", ""))
    if not match:
        return None
    try:
        number = finite_float(float(match.group(2)))
    except ValueError:  # "1.2.3"
        return None
    return None if number is None else (match.group(1), number, match.group(3))


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what} must be a number, got {shown(value)}")
    return value


def finite(value: Any, what: str) -> float:
    """A finite number (not NaN, not an infinity, not an int too large for a float)."""
    if finite_float(_number(value, what)) is None:
        raise InputError(f"{what} must be a finite number, got {shown(value)}")
    return value


def positive_int(value: Any, what: str, at_most: int | None = None) -> int:
    """A whole number >= 1, and <= `at_most` where a larger one can only be a typo (it would overflow later)."""
    if (isinstance(value, bool) or not isinstance(value, int) or value < 1
            or (at_most is not None and value > at_most)):
        bound = ">= 1" if at_most is None else f"from 1 to {at_most:,}"
        raise InputError(f"{what} must be a whole number {bound}, got {shown(value)}")
    return value


def non_negative_int(value: Any, what: str) -> int:
    """A whole number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{what} must be a whole number >= 0, got {shown(value)}")
    return value


def non_negative(value: Any, what: str) -> float:
    """A finite number >= 0."""
    _number(value, what)
    if finite_float(value) is None or value < 0:
        raise InputError(f"{what} must be a finite number >= 0, got {shown(value)}")
    return value


def positive(value: Any, what: str) -> float:
    """A finite number > 0."""
    _number(value, what)
    if finite_float(value) is None or value <= 0:
        raise InputError(f"{what} must be a finite number > 0, got {shown(value)}")
    return value


def probability(value: Any, what: str) -> float:
    """A number in [0, 1]."""
    number = _number(value, what)
    if not 0.0 <= number <= 1.0:
        raise InputError(f"{what} must be in [0, 1], got {shown(value)}")
    return value


def share(value: Any, what: str) -> float:
    """A number strictly between 0 and 1 (a split's share)."""
    number = _number(value, what)
    if not 0.0 < number < 1.0:
        raise InputError(f"{what} must be between 0 and 1 (exclusive), got {shown(value)}")
    return value


def one_of(value: Any, choices: Iterable[str], what: str) -> str:
    """One of a fixed set of names."""
    choices = tuple(choices)
    if value not in choices:
        raise InputError(f"{what} must be one of {', '.join(choices)}, got {value!r}")
    return value


def http_url(value: Any, what: str) -> str:
    """An http:// or https:// URL with a host (and a valid port, if any): a server morkit may send requests to."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value) if isinstance(value, str) else None
        ok = parts is not None and parts.scheme in ("http", "https") and bool(parts.hostname)
        ok = ok and (parts.port is None or parts.port > 0)
    except ValueError:  # a bad port or bracketed host
        ok = False
    if not ok:
        raise InputError(f"{what} must be an http:// or https:// URL with a host, got {shown(value)}")
    return value


def optional(check: Any, value: Any, what: str) -> Any:
    """`check(value, what)` unless value is None (an unset limit)."""
    return None if value is None else check(value, what)
