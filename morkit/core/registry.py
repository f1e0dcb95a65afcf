"""The one registry pattern of morkit: name -> lazy target ("package.module:attribute", imported only when loaded,
or the object itself) plus metadata, for every extension point, so listing never imports torch, vLLM or a model.
`register()` works before or after listing; a name is taken once unless `replace=True`.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping

from morkit.core.errors import InputError, UnknownName


def spec_fields(spec_type: type, what: str, given: Mapping[str, Any], *, tuples: Iterable[str] = (),
                unknown_is: str = "unknown field", exclude: Iterable[str] = ()) -> dict[str, Any]:
    """A registration's metadata as keyword fields of the frozen dataclass `spec_type`: an unknown field is an
    InputError naming `what` and the field, and the `tuples` fields' lists become tuples.

    Args:
        spec_type: The spec dataclass.
        what: Who registered it, for the error ("reward model 'x'").
        given: The metadata.
        tuples: Fields given as lists and stored as tuples.
        unknown_is: The error's words before the unknown field's name.
        exclude: Fields of `spec_type` the metadata may not set (set by the caller).

    Returns:
        The fields, ready for `spec_type(**fields)`.

    Raises:
        InputError: `given` names a field `spec_type` does not have.
    """
    known = {f.name for f in fields(spec_type)} - set(exclude)
    unknown = sorted(set(given) - known)
    if unknown:
        raise InputError(f"{what}: {unknown_is} {unknown[0]!r}; fields: {', '.join(sorted(known))}")
    out = dict(given)
    for key in tuples:
        if key in out:
            out[key] = tuple(out[key])
    return out


@dataclass(frozen=True)
class Entry:
    """One registered extension: its name, what to import, a one-line summary, and what it is: a typed `spec`
    where its registry declares one (reward models: `RMCard`; `meta` is then a read-only view of its fields),
    else free-form metadata."""

    name: str
    target: Any  # "package.module:attribute", or the object itself
    summary: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    spec: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    @property
    def target_path(self) -> str:
        """Where the target lives, as "module:attribute" (for listings and error messages)."""
        if isinstance(self.target, str):
            return self.target
        module = getattr(self.target, "__module__", "?")
        return f"{module}:{getattr(self.target, '__qualname__', repr(self.target))}"

    def load(self) -> Any:
        """The target object, importing its module now if needed."""
        if not isinstance(self.target, str):
            return self.target
        module_name, _, attribute = self.target.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in attribute.split(".") if attribute else ():
            obj = getattr(obj, part)
        return obj


class Registry:
    """Entries of one kind (reward models, selection methods, ...), in registration order."""

    def __init__(self, what: str, entries: Iterable[Entry] = (), *, spec_type: Any = None,
                 settle: Callable[[str, Any, Any], tuple[Any, Any]] | None = None):
        self.what = what  # used in messages: "unknown {what} 'x'"
        self.spec_type = spec_type  # a frozen dataclass with `of(**fields)`: each entry's metadata, typed
        self.settle = settle  # (name, target, spec) -> (target, spec): how a typed entry's target and spec agree
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        for entry in entries:
            self.add(entry)

    def add(self, entry: Entry, *, replace: bool = False) -> Entry:
        if self.spec_type is not None:  # metadata given as keywords becomes the typed spec; `meta` reads it back
            spec = entry.spec if entry.spec is not None else self.spec_type.of(entry.name, **entry.meta)
            target = entry.target
            if self.settle is not None:  # e.g. a model RM's family: its target, and named by its card
                target, spec = self.settle(entry.name, target, spec)
            entry = Entry(entry.name, target, entry.summary, dict(vars(spec)), spec)
        with self._lock:
            if entry.name in self._entries and not replace:
                raise InputError(f"{self.what} {entry.name!r} is already registered (pass replace=True to override)")
            self._entries[entry.name] = entry
        return entry

    def register(self, name: str, target: Any, summary: str = "", *, replace: bool = False, **meta: Any) -> Entry:
        """Add `name` -> `target` ("module:attribute" or an object) with its metadata (the fields of the
        registry's spec type, where it has one)."""
        return self.add(Entry(name, target, summary, meta), replace=replace)

    def unregister(self, name: str) -> Entry:
        """Remove `name` (e.g. a test's temporary entry); an unknown name lists the known ones."""
        entry = self.get(name)
        with self._lock:
            del self._entries[name]
        return entry

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownName(self.what, name, self._entries) from None

    def load(self, name: str) -> Any:
        """The target registered as `name`, imported now."""
        return self.get(name).load()

    def names(self) -> list[str]:
        return list(self._entries)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries())

    def __len__(self) -> int:
        return len(self._entries)
