"""Which queries a reward model applies to, and the rule that tells a query it skips from a broken one.

The four rules (a domain is what makes a missing field an error) are on the docs page Scoring and backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from morkit.core.errors import InputError
from morkit.core.types import Query

SKIPPED_KEY = "skipped_rms"
"""The query key (kept in its `extra`) that records, per RM name, why that RM gave it no score."""


def _present(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, (list, tuple, dict)):
        return bool(value)
    return True


def has_field(query: Query, name: str) -> bool:
    """Whether the query carries a non-empty `name`: a contract field (`reference`, `tests`) or an extra key."""
    value = getattr(query, name) if name in ("reference", "tests", "domain") else query.extra.get(name)
    return _present(value)


@dataclass(frozen=True)
class Applicability:
    """The queries an RM scores: those of `domains` (None: any domain) that carry one of `fields` (if any)."""

    domains: frozenset[str] | None = None
    fields: tuple[str, ...] = ()

    @classmethod
    def of(cls, value: "Applicability | Mapping[str, Any] | str | None") -> "Applicability":
        """From registry metadata: an Applicability, {"domains": [...], "fields": [...]}, or "all"/None."""
        if isinstance(value, Applicability):
            return value
        if value is None or value == "all":
            return ALL
        if isinstance(value, Mapping) and set(value) <= {"domains", "fields"}:
            domains = value.get("domains")
            return cls(None if domains is None else frozenset(_strings(domains, "domains")),
                       tuple(_strings(value.get("fields", ()), "fields")))
        raise InputError(f"an RM's applicability must be 'all' or {{'domains': [...], 'fields': [...]}}, "
                         f"got {value!r}")

    def describe(self) -> str:
        """One line for `morkit rms`: "all", "choice, math", "code; needs tests or stdio_tests"."""
        if self.domains is None and not self.fields:
            return "all"
        where = "all domains" if self.domains is None else ", ".join(sorted(self.domains))
        return where + (f"; needs {' or '.join(self.fields)}" if self.fields else "")

    def to_json(self) -> dict[str, Any]:
        """{"domains": [...] or None, "fields": [...]}: what `of` reads back (kept in pool.json, `rms --json`)."""
        return {"domains": None if self.domains is None else sorted(self.domains), "fields": list(self.fields)}

    def skip_reason(self, query: Query, rm: str) -> str | None:
        """Why `rm` does not apply to `query` (rules 1 and 3), or None when it does or the query is broken."""
        return self._verdict(query, rm)[0]

    def check(self, query: Query, rm: str) -> str | None:
        """`skip_reason`, after raising an InputError for a query of the RM's domains that lacks its fields."""
        reason, broken = self._verdict(query, rm)
        if broken:
            raise InputError(f"query {query.id!r} (domain {query.domain!r}) has no {' or '.join(self.fields)}, "
                             f"which {rm} needs; a {query.domain} query without them is a data error (give them, "
                             f"or set the query's domain to one {rm} does not score)")
        return reason

    def _verdict(self, query: Query, rm: str) -> tuple[str | None, bool]:
        """(why the RM skips the query or None, whether the query is broken for it: rule 2)."""
        domain = query.domain
        if domain is not None and self.domains is not None and domain not in self.domains:
            return f"{rm} scores {', '.join(sorted(self.domains))} queries, not {domain!r} ones", False
        if not self.fields or any(has_field(query, f) for f in self.fields):
            return None, False
        if domain is None or self.domains is None:
            return f"no {' or '.join(self.fields)}" + (" and no domain" if domain is None else ""), False
        return None, True


ALL = Applicability()


def _strings(values: Iterable[Any] | str, what: str) -> list[str]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InputError(f"an RM's applicability {what} must be a list of strings, got {values!r}")
    return list(values)


def recorded_skips(query: Query) -> dict[str, str]:
    """The query's `skipped_rms` record: RM name -> why it gave no score (empty when none is recorded)."""
    value = query.extra.get(SKIPPED_KEY)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}
