"""Plain values between the sandbox harness's two processes: JSON trees of tagged built-in values, framed on pipes.

Standard library only (it runs in the sandbox); `decode` refuses any tree `encode` could not have made."""

import builtins
import json
import os

MAX_MESSAGE = 64 << 20  # bytes of one message between the processes; a larger answer is refused
MAX_DEPTH = 200  # nesting of one value


class AnswerRefused(TypeError):
    """A value that cannot cross between the processes (what the tests pass, or what the candidate answers)."""


def encode(value, handles=None, depth=0):
    """`value` as a JSON tree, by its built-in base type (a subclass crosses as its plain value); an iterator
    (a generator, map, zip, ...) stays in `handles` and crosses as its number (without `handles`, it is
    refused unread). Raises AnswerRefused for anything else (functions, objects of other classes)."""
    import collections
    import datetime
    import decimal
    import fractions
    import re

    if depth > MAX_DEPTH:
        raise AnswerRefused("a value nested too deep")
    down = depth + 1
    if value is None:
        return ["N"]
    if isinstance(value, bool):
        return ["T" if value else "F"]
    if isinstance(value, int):
        return ["i", hex(int.__index__(value))]
    if isinstance(value, float):
        return ["f", float.hex(float(value))]
    if isinstance(value, complex):
        return ["c", float.hex(value.real), float.hex(value.imag)]
    if isinstance(value, str):
        return ["s", str.__str__(value)]
    if isinstance(value, (bytes, bytearray)):
        return ["b" if isinstance(value, bytes) else "ba", bytes(value).decode("latin-1")]
    if isinstance(value, decimal.Decimal):
        return ["D", str(value)]
    if isinstance(value, fractions.Fraction):
        return ["Q", hex(value.numerator), hex(value.denominator)]
    if isinstance(value, range):
        return ["r", hex(value.start), hex(value.stop), hex(value.step)]
    if isinstance(value, re.Match):
        return ["m", encode((value.group(0), *value.groups()), handles, down), value.start(), value.end()]
    if isinstance(value, datetime.timedelta):
        return ["td", value.days, value.seconds, value.microseconds]
    for kind, tag in ((datetime.datetime, "dt"), (datetime.date, "da"), (datetime.time, "ti")):
        if isinstance(value, kind):
            return [tag, kind.isoformat(value)]
    for kind, tag in ((collections.Counter, "C"), (collections.OrderedDict, "o"), (collections.defaultdict, "dd"),
                      (dict, "d")):
        if isinstance(value, kind):
            pairs = [[encode(k, handles, down), encode(v, handles, down)] for k, v in dict.items(value)]
            if tag == "dd":  # a factory of the candidate's own (a lambda) crosses as none: equality is the same
                factory = value.default_factory
                name = None if factory is None else getattr(factory, "__name__", None)
                return [tag, name if getattr(builtins, str(name), None) is factory else None, pairs]
            return [tag, pairs]
    for kind, tag in ((list, "l"), (tuple, "t")):
        if isinstance(value, kind):
            compact = _compact(value)
            if compact:
                return [tag + compact, list(value)]
    for kind, tag in ((list, "l"), (tuple, "t"), (set, "S"), (frozenset, "F"), (collections.deque, "q"),
                      (type({}.keys()), "dk"), (type({}.values()), "dv"), (type({}.items()), "di")):
        if isinstance(value, kind):
            items = [encode(v, handles, down) for v in value]
            return ["q", items, value.maxlen] if tag == "q" else [tag, items]
    if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):
        if handles is None:
            raise AnswerRefused("an iterator")
        handles.append(value)
        return ["it", len(handles) - 1]
    raise AnswerRefused(f"a {type(value).__name__!s:.60}")


def _compact(items):
    """'i', 's' or 'f' when every item is a small int, a str, or a finite float (JSON holds them as they are)."""
    import math

    kinds = {type(x) for x in items}
    if kinds == {int} and all(-(1 << 53) < x < (1 << 53) for x in items):
        return "i"
    if kinds == {str}:
        return "s"
    if kinds == {float} and all(math.isfinite(x) for x in items):
        return "f"
    return ""


def decode(node, remote=None, depth=0):
    """The value of a JSON tree from `encode`, built from built-in types only (an iterator as a RemoteIterator
    over `remote`, where given); AnswerRefused where the tree is not one `encode` could have made (the other
    process may send anything)."""
    import collections
    import datetime
    import decimal
    import fractions

    if depth > MAX_DEPTH + 1:
        raise AnswerRefused("a value nested too deep")
    down = depth + 1
    try:
        tag, *rest = node
        if type(tag) is not str:
            raise ValueError
        if tag in ("N", "T", "F") and not rest:
            return {"N": None, "T": True, "F": False}[tag]
        if tag in ("li", "ti", "ls", "ts", "lf", "tf"):
            items = _list(rest)
            if any(type(x) is not {"i": int, "s": str, "f": float}[tag[1]] for x in items):
                raise ValueError
            return (list if tag[0] == "l" else tuple)(items)
        if tag in ("l", "t", "S", "F", "dk", "dv"):
            items = [decode(v, remote, down) for v in _list(rest)]
            if tag == "dk":
                return dict.fromkeys(items).keys()
            if tag == "dv":
                return dict(enumerate(items)).values()
            return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
        if tag == "di":
            items = [decode(v, remote, down) for v in _list(rest)]
            if any(type(x) is not tuple or len(x) != 2 for x in items):
                raise ValueError
            return dict(items).items()
        if tag == "it" and len(rest) == 1 and type(rest[0]) is int and remote is not None:
            return RemoteIterator(remote, rest[0])
        if tag == "td" and len(rest) == 3 and all(type(x) is int for x in rest):
            return datetime.timedelta(*rest)
        if tag in ("dt", "da", "ti") and len(rest) == 1:
            kind = {"dt": datetime.datetime, "da": datetime.date, "ti": datetime.time}[tag]
            return kind.fromisoformat(_text(rest[0]))
        if tag in ("d", "C", "o"):
            pairs = [(decode(k, remote, down), decode(v, remote, down)) for k, v in _list(rest)]
            mapping = {"d": dict, "C": collections.Counter, "o": collections.OrderedDict}[tag]()
            mapping.update(dict(pairs) if tag == "C" else pairs)  # a Counter adds counts given as pairs
            return mapping
        if tag == "dd":
            name, pairs = rest
            factory = None if name is None else getattr(builtins, _text(name))
            if factory is not None and not isinstance(factory, type):
                raise ValueError
            return collections.defaultdict(factory, [(decode(k, remote, down), decode(v, remote, down))
                                                     for k, v in _list([pairs])])
        if tag == "q":
            items, maxlen = rest
            if maxlen is not None and type(maxlen) is not int:
                raise ValueError
            return collections.deque([decode(v, remote, down) for v in _list([items])], maxlen)
        (first, *more) = rest
        if tag == "i" and not more:
            return int(_text(first), 16)
        if tag == "f" and not more:
            return float.fromhex(_text(first))
        if tag == "c" and len(more) == 1:
            return complex(float.fromhex(_text(first)), float.fromhex(_text(more[0])))
        if tag == "s" and not more:
            return _text(first)
        if tag in ("b", "ba") and not more:
            return (bytes if tag == "b" else bytearray)(_text(first).encode("latin-1"))
        if tag == "D" and not more:
            return decimal.Decimal(_text(first))
        if tag == "Q" and len(more) == 1:
            return fractions.Fraction(int(_text(first), 16), int(_text(more[0]), 16))
        if tag == "r" and len(more) == 2:
            return range(*(int(_text(x), 16) for x in (first, *more)))
        if tag == "m" and len(more) == 2 and all(type(x) is int for x in more):
            groups = decode(first, remote, down)
            if type(groups) is not tuple or not groups:
                raise ValueError
            return Matched(groups, *more)
    except (ValueError, TypeError, AttributeError, KeyError, decimal.InvalidOperation, ZeroDivisionError):
        pass
    raise AnswerRefused("a malformed value")


def _list(rest):
    if len(rest) != 1 or type(rest[0]) is not list:
        raise ValueError
    return rest[0]


def _text(value):
    if type(value) is not str:
        raise ValueError
    return value


class Matched:
    """A regular-expression match the candidate answered with: true, with its groups' texts and its span."""

    def __init__(self, groups, start, end):
        self._groups, self._span = groups, (start, end)

    def group(self, *indices):
        if any(type(i) is not int or not 0 <= i < len(self._groups) for i in indices):
            raise IndexError("no such group")
        found = tuple(self._groups[i] for i in (indices or (0,)))
        return found[0] if len(found) == 1 else found

    def groups(self, default=None):
        return tuple(default if g is None else g for g in self._groups[1:])

    def span(self, index=0):
        if index != 0:
            raise IndexError("only the whole match's span crosses from the candidate's process")
        return self._span

    def start(self, index=0):
        return self.span(index)[0]

    def end(self, index=0):
        return self.span(index)[1]

    def __getitem__(self, index):
        return self.group(index)

    def __bool__(self):
        return True

    def __repr__(self):
        return f"<match span={self._span}, match={self._groups[0]!r}>"


# -- messages between the processes: a length, then JSON ---------------------------------------------------

def send(fd, message):
    data = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
    data = len(data).to_bytes(8, "big") + data
    while data:
        data = data[os.write(fd, data):]


def receive(fd):
    """The next message, or None at the end of the pipe; AnswerRefused for one too large or not JSON."""
    head = _read_exactly(fd, 8)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_MESSAGE:
        raise AnswerRefused(f"a message of {size:,} bytes (at most {MAX_MESSAGE:,})")
    data = _read_exactly(fd, size)
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8", "surrogatepass"))
    except ValueError:
        raise AnswerRefused("a message that is not JSON") from None


def _read_exactly(fd, size):
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class RemoteIterator:
    """An iterator the candidate answered with: each item is asked for in its process when the tests need it."""

    def __init__(self, remote, handle):
        self._remote, self._handle = remote, handle

    def __iter__(self):
        return self

    def __next__(self):
        return self._remote.next(self._handle)
