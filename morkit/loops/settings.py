"""`--set KEY=VALUE` for a loop's config dataclass (any field of TMASConfig, StreamMAConfig or ATLASConfig) and
the few flags each config declares (`LoopFlag`, a shorthand for it). Values are parsed by the field's type; an
unknown key or a bad value is an InputError naming it and listing what is accepted."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Sequence

from morkit.core.errors import InputError

TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def parse_setting(text: str) -> tuple[str, str]:
    """'key=value' -> (key, value), the key with dashes read as underscores."""
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key:
        raise InputError(f"--set {text!r}: expected KEY=VALUE")
    return key, value.strip()


def unescape(text: str) -> str:
    """Backslash escapes read as a Python string would ('\\n' -> a newline), so a shell can pass them; a
    malformed escape is an InputError."""
    if "\\" not in text:
        return text
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError as err:
        raise InputError(f"{text!r}: a malformed backslash escape ({err.reason}); write a backslash as \\\\") from None


def _convert(value: str, kind: Any, key: str) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if type(None) in options and value.lower() in ("none", "null", ""):
            return None
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _convert(value, option, key)
            except InputError as err:
                errors.append(str(err))
        raise InputError(errors[-1] if errors else f"setting {key}: cannot read {value!r}")
    if origin is tuple:
        inner = typing.get_args(kind)[0] if typing.get_args(kind) else str
        return tuple(_convert(v.strip(), inner, key) for v in value.split(",") if v.strip())
    if origin is typing.Literal:
        allowed = typing.get_args(kind)
        if value not in allowed:
            raise InputError(f"setting {key}: {value!r} is not one of {', '.join(map(str, allowed))}")
        return value
    if kind is bool:
        if value.lower() in TRUE:
            return True
        if value.lower() in FALSE:
            return False
        raise InputError(f"setting {key}: {value!r} is not a boolean (true/false)")
    if kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            raise InputError(f"setting {key}: {value!r} is not {'an integer' if kind is int else 'a number'}") from None
    if kind is str:
        try:
            return unescape(value)
        except InputError as err:
            raise InputError(f"setting {key}: {err}") from None
    raise InputError(f"setting {key}: its type {kind!r} cannot be set from the command line")


def settable_fields(config_cls: type) -> dict[str, Any]:
    """A config dataclass's fields that take a value from text, name -> type."""
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls) if f.init}


def configure(config_cls: type, settings: Sequence[tuple[str, str]] = (), **base: Any) -> Any:
    """`config_cls(**base)` with each (key, value) of `settings` parsed by its field's type and laid over it."""
    fields = settable_fields(config_cls)
    values: dict[str, Any] = dict(base)
    for key, value in settings:
        if key not in fields:
            raise InputError(f"{config_cls.__name__} has no setting {key!r}; settings: {', '.join(sorted(fields))}")
        values[key] = _convert(value, fields[key], key)
    return config_cls(**values)


@dataclass(frozen=True)
class LoopFlag:
    """A command-line flag of one loop, a shorthand for `--set FIELD=VALUE` on the loop's config: its config class
    lists it in `FLAGS`, and `morkit loop NAME` offers it to that loop only.

    Args:
        flag: The option string, e.g. "--iterations".
        field: The config field it sets, e.g. "iterations".
        help: What it sets; the command line adds the field's default.
    """

    flag: str
    field: str
    help: str

