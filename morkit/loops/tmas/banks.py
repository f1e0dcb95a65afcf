"""TMAS memory: the experience and guideline banks, and the line protocol agents edit them with (`ADD`,
`REFINE`, `DELETE`, `KEEP`; `STRATEGY:`). Junk lines are rejected with a reason, and banks are immutable, so
each round's snapshot stays as it was (docs/loops/tmas.md, "Memory banks")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

EXPERIENCE_KINDS = ("result", "avoid")

_BULLET = r"^\s*(?:[-*\u2022>]+|\d+[.)])?\s*"
_ID = r"\[?\s*(?:E|#|id\s*)?(\d+)\s*\]?"
_ADD = re.compile(_BULLET + r"ADD\s+\[?(result|avoid)\]?\s*[:\-]\s*(.+?)\s*$", re.IGNORECASE)
_REFINE = re.compile(_BULLET + r"REFINE\s+" + _ID + r"\s*[:\-]\s*(.+?)\s*$", re.IGNORECASE)
_DELETE = re.compile(_BULLET + r"DELETE\s+" + _ID + r"\s*\.?\s*$", re.IGNORECASE)
_KEEP = re.compile(_BULLET + r"KEEP\s+" + _ID + r"\s*\.?\s*$", re.IGNORECASE)
_STRATEGY = re.compile(_BULLET + r"STRATEGY\s*:\s*(.+?)\s*$", re.IGNORECASE)


def _clean(text: str, max_chars: int) -> str:
    """One line of text: whitespace collapsed, surrounding quotes dropped, at most `max_chars` characters."""
    text = re.sub(r"\s+", " ", text).strip().strip("\"'`").strip()
    return text if len(text) <= max_chars else text[: max_chars - 3].rstrip() + "..."


def _key(text: str) -> str:
    """What counts as 'the same text' for de-duplication: lower case, letters and digits only."""
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def jaccard(a: str, b: str) -> float:
    """Word-set Jaccard similarity of two texts (after `_key` normalisation); 0 when both are empty."""
    sa, sb = set(_key(a).split()), set(_key(b).split())
    return len(sa & sb) / len(sa | sb) if sa | sb else 0.0


@dataclass(frozen=True)
class Rejected:
    """An agent's line that was not applied, and why (malformed, unknown id, duplicate, empty)."""

    line: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"line": self.line, "reason": self.reason}


# -- experience bank --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Experience:
    """One lesson: a `result` worth reusing (a verified intermediate result) or a pitfall to `avoid`."""

    id: int
    kind: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "text": self.text}


@dataclass(frozen=True)
class ExperienceOp:
    """A parsed operation: op in ADD/REFINE/DELETE/KEEP; `kind` for ADD, `id` for the others."""

    op: str
    line: str
    kind: str | None = None
    id: int | None = None
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "kind": self.kind, "id": self.id, "text": self.text}


def parse_experience_ops(reply: str) -> tuple[list[ExperienceOp], list[Rejected]]:
    """Operations in an experience agent's reply, in order, and the non-blank lines that are none."""
    ops: list[ExperienceOp] = []
    rejected: list[Rejected] = []
    for line in reply.splitlines():
        if not line.strip():
            continue
        if m := _ADD.match(line):
            ops.append(ExperienceOp("ADD", line.strip(), kind=m.group(1).lower(), text=m.group(2)))
        elif m := _REFINE.match(line):
            ops.append(ExperienceOp("REFINE", line.strip(), id=int(m.group(1)), text=m.group(2)))
        elif m := _DELETE.match(line):
            ops.append(ExperienceOp("DELETE", line.strip(), id=int(m.group(1))))
        elif m := _KEEP.match(line):
            ops.append(ExperienceOp("KEEP", line.strip(), id=int(m.group(1))))
        else:
            rejected.append(Rejected(line.strip(), "not an operation"))
    return ops, rejected


@dataclass(frozen=True)
class ExperienceUpdate:
    """What applying one reply did: the new bank, the operations applied, lines rejected, ids evicted."""

    bank: "ExperienceBank"
    applied: tuple[ExperienceOp, ...]
    rejected: tuple[Rejected, ...]
    evicted: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        """The changes (the bank itself is saved separately, once per iteration)."""
        return {"applied": [op.to_json() for op in self.applied], "rejected": [r.to_json() for r in self.rejected],
                "evicted": list(self.evicted)}


@dataclass(frozen=True)
class ExperienceBank:
    """Lessons carried between iterations; ids are never reused. `capacity` (None: none) is a hard cap;
    `jaccard` (None: exact duplicates only) the similarity at which an ADD duplicates an entry."""

    entries: tuple[Experience, ...] = ()
    next_id: int = 1
    capacity: int | None = 35
    max_chars: int = 300
    jaccard: float | None = None

    def get(self, entry_id: int) -> Experience | None:
        return next((e for e in self.entries if e.id == entry_id), None)

    def render(self) -> str:
        """The bank as prompt text, one `[id] kind: text` line an entry; '(empty)' when there is none."""
        return "\n".join(f"[{e.id}] {e.kind}: {e.text}" for e in self.entries) or "(empty)"

    def to_json(self) -> dict[str, Any]:
        return {"entries": [e.to_json() for e in self.entries], "next_id": self.next_id, "capacity": self.capacity}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExperienceBank:
        """The bank `to_json` wrote (a missing next_id follows the highest id; a missing capacity is the default)."""
        entries = tuple(Experience(int(e["id"]), str(e["kind"]), str(e["text"])) for e in data.get("entries") or ())
        next_id = int(data.get("next_id") or max((e.id for e in entries), default=0) + 1)
        return cls(entries=entries, next_id=next_id, capacity=data.get("capacity", cls.capacity))

    def apply_reply(self, reply: str) -> ExperienceUpdate:
        """Parse an agent's reply and apply it (see `apply`); malformed lines are rejected, not fatal."""
        ops, rejected = parse_experience_ops(reply)
        update = self.apply(ops)
        return replace(update, rejected=tuple(rejected) + update.rejected)

    def _duplicate(self, text: str, entries: dict[int, Experience]) -> bool:
        return any(_key(e.text) == _key(text) or (self.jaccard is not None and jaccard(e.text, text) >= self.jaccard)
                   for e in entries.values())

    def apply(self, ops: list[ExperienceOp]) -> ExperienceUpdate:
        """Apply operations in order. ADD of a text already in the bank (or, with `jaccard`, too similar
        to an entry), and REFINE/DELETE/KEEP of an unknown id, are rejected. Over capacity, the oldest
        entries no operation touched go first."""
        entries = {e.id: e for e in self.entries}
        next_id, touched = self.next_id, set()
        applied: list[ExperienceOp] = []
        rejected: list[Rejected] = []
        for op in ops:
            text = _clean(op.text, self.max_chars)
            if op.op in ("ADD", "REFINE") and not _key(text):
                rejected.append(Rejected(op.line, "empty text"))
            elif op.op == "ADD" and self._duplicate(text, entries):
                rejected.append(Rejected(op.line, "already in the bank"))
            elif op.op != "ADD" and op.id not in entries:
                rejected.append(Rejected(op.line, f"unknown id {op.id}"))
            else:
                if op.op == "ADD":
                    op = replace(op, id=next_id)
                    next_id += 1
                if op.op == "DELETE":
                    del entries[op.id]
                elif op.op in ("ADD", "REFINE"):
                    kind = op.kind or entries[op.id].kind
                    entries[op.id] = Experience(op.id, kind, text)
                touched.add(op.id)
                applied.append(replace(op, text=text))
        kept, evicted = _cap(list(entries.values()), touched, self.capacity)
        bank = replace(self, entries=tuple(kept), next_id=next_id)
        return ExperienceUpdate(bank, tuple(applied), tuple(rejected), tuple(evicted))


def _cap(entries: list[Experience], touched: set[int], capacity: int | None
         ) -> tuple[list[Experience], list[int]]:
    """Entries within capacity (oldest untouched evicted first, then oldest touched), in id order."""
    entries.sort(key=lambda e: e.id)
    excess = 0 if capacity is None else len(entries) - capacity
    if excess <= 0:
        return entries, []
    order = sorted(entries, key=lambda e: (e.id in touched, e.id))
    gone = {e.id for e in order[:excess]}
    return [e for e in entries if e.id not in gone], sorted(gone)


# -- guideline bank ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GuidelineUpdate:
    """What applying one reply did: the new bank, strategies added, lines rejected (nothing is ever evicted)."""

    bank: "GuidelineBank"
    added: tuple[str, ...]
    rejected: tuple[Rejected, ...]

    def to_json(self) -> dict[str, Any]:
        """The changes (the bank itself is saved separately, once per iteration)."""
        return {"added": list(self.added), "rejected": [r.to_json() for r in self.rejected]}


@dataclass(frozen=True)
class GuidelineBank:
    """Every high-level strategy tried so far, oldest first, de-duplicated; none is ever dropped."""

    strategies: tuple[str, ...] = field(default=())
    max_chars: int = 200

    def render(self, max_chars: int | None = None) -> str:
        """The strategies as prompt lines; '(none yet)' when empty. With `max_chars`, the newest strategies
        that fit, after a line saying how many older ones are not shown (they stay in the bank)."""
        lines = [f"- {s}" for s in self.strategies]
        if not lines:
            return "(none yet)"
        text = "\n".join(lines)
        if max_chars is None or len(text) <= max_chars:
            return text

        def note(left_out: int) -> str:
            return (f"[{left_out} older strateg{'y' if left_out == 1 else 'ies'} not shown for length; "
                    "they were tried too]")

        budget = max_chars - len(note(len(lines))) - 1  # the note counts towards the limit
        shown: list[str] = []
        used = 0
        for line in reversed(lines):  # the newest that fit, at least one
            if shown and used + len(line) + 1 > budget:
                break
            shown.append(line)
            used += len(line) + 1
        note_line = note(len(lines) - len(shown))
        return "\n".join([note_line, *reversed(shown)])

    def to_json(self) -> dict[str, Any]:
        return {"strategies": list(self.strategies)}

    def apply_reply(self, reply: str) -> GuidelineUpdate:
        """Add each `STRATEGY: <text>` line not already known; other non-blank lines are rejected."""
        strategies = list(self.strategies)
        seen = {_key(s) for s in strategies}
        added: list[str] = []
        rejected: list[Rejected] = []
        for line in reply.splitlines():
            if not line.strip():
                continue
            m = _STRATEGY.match(line)
            text = _clean(m.group(1), self.max_chars) if m else ""
            if not m:
                rejected.append(Rejected(line.strip(), "not a STRATEGY line"))
            elif not _key(text):
                rejected.append(Rejected(line.strip(), "empty text"))
            elif _key(text) in seen:
                rejected.append(Rejected(line.strip(), "already in the bank"))
            else:
                seen.add(_key(text))
                strategies.append(text)
                added.append(text)
        return GuidelineUpdate(replace(self, strategies=tuple(strategies)), tuple(added), tuple(rejected))
