"""The harness inside the sandbox: `python -I -S -B -c <this file's text> /work/main.py FDS MARK`.

Standard library only: the launcher hands this file's text to a fresh interpreter in the sandbox, where
morkit is not importable. FDS picks how /work/main.py runs:

- none: as a program (`__main__`), reading its input on stdin;
- TOKEN,REPORT,TESTS: as the candidate of the assert-style tests read from TESTS, in two processes. The
  harness forks before it reads anything: the child imports the candidate as module `solution` (never
  `__main__`, so its `if __name__ == "__main__":` block does not run) and answers calls of its functions;
  the parent, which the candidate's code never runs in, reads the per-run token and the tests, runs the
  tests in its own untouched interpreter with the candidate's functions behind proxies, and writes the
  token on REPORT only once the tests ran to their end.

Between the two, only data crosses, as JSON trees of tagged plain values (`encode`, `decode`): a
function's arguments one way, its answer (or the exception it raised) and its arguments as it left them
the other. The parent rebuilds each answer from built-in types only, so no object of the candidate's,
no `__eq__` that always agrees and no patched module or built-in reaches the tests.
"""

import builtins
import json
import os
import sys

CANDIDATE = "solution"
MAX_MESSAGE = 64 << 20  # bytes of one message between the processes; a larger answer is refused
MAX_DEPTH = 200  # nesting of one value
# names a candidate may bind to a module, which the tests then import themselves (never these)
UNSAFE_MODULES = frozenset({"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "webbrowser"})


class AnswerRefused(TypeError):
    """A value that cannot cross between the processes (what the tests pass, or what the candidate answers)."""


class CandidateError(Exception):
    """The candidate raised an exception that is not one of Python's built-in ones (its type's name and message)."""


def _install_site_builtins():
    """-S skips `site`, which is also what defines exit(), quit() and help(); LLM code calls them."""
    import _sitebuiltins

    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    builtins.help = _sitebuiltins._Helper()


# -- the codec: plain values as JSON trees [tag, ...] ------------------------------------------------------

def encode(value, depth=0):
    """`value` as a JSON tree, by its built-in base type (a subclass crosses as its plain value); raises
    AnswerRefused for anything else (functions, objects of other classes)."""
    import collections
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
        return ["m", encode(value.group(0), down), value.start(), value.end()]
    for kind, tag in ((collections.Counter, "C"), (collections.OrderedDict, "o"), (collections.defaultdict, "dd"),
                      (dict, "d")):
        if isinstance(value, kind):
            pairs = [[encode(k, down), encode(v, down)] for k, v in dict.items(value)]
            if tag == "dd":
                factory = value.default_factory
                name = None if factory is None else getattr(factory, "__name__", None)
                if factory is not None and getattr(builtins, str(name), None) is not factory:
                    raise AnswerRefused("a defaultdict whose factory is not a built-in")
                return [tag, name, pairs]
            return [tag, pairs]
    for kind, tag in ((list, "l"), (tuple, "t"), (set, "S"), (frozenset, "F"), (collections.deque, "q")):
        if isinstance(value, kind):
            items = [encode(v, down) for v in value]
            return ["q", items, value.maxlen] if tag == "q" else [tag, items]
    if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):  # a generator, map, zip, ...
        return ["it", [encode(v, down) for v in value]]
    raise AnswerRefused(f"a {type(value).__name__!s:.60}")


def decode(node, depth=0):
    """The value of a JSON tree from `encode`, built from built-in types only; AnswerRefused where the tree
    is not one `encode` could have made (the other process may send anything)."""
    import collections
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
        if tag in ("l", "t", "S", "F", "it"):
            items = [decode(v, down) for v in _list(rest)]
            return {"l": list, "t": tuple, "S": set, "F": frozenset, "it": iter}[tag](items)
        if tag in ("d", "C", "o"):
            pairs = [(decode(k, down), decode(v, down)) for k, v in _list(rest)]
            mapping = {"d": dict, "C": collections.Counter, "o": collections.OrderedDict}[tag]()
            mapping.update(dict(pairs) if tag == "C" else pairs)  # a Counter adds counts given as pairs
            return mapping
        if tag == "dd":
            name, pairs = rest
            factory = None if name is None else getattr(builtins, _text(name))
            if factory is not None and not isinstance(factory, type):
                raise ValueError
            return collections.defaultdict(factory, [(decode(k, down), decode(v, down)) for k, v in _list([pairs])])
        if tag == "q":
            items, maxlen = rest
            if maxlen is not None and type(maxlen) is not int:
                raise ValueError
            return collections.deque([decode(v, down) for v in _list([items])], maxlen)
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
            return Matched(decode(first, down), *more)
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
    """A regular-expression match the candidate answered with: true, with its text and span."""

    def __init__(self, text, start, end):
        self._text, self._span = text, (start, end)

    def group(self, index=0):
        if index != 0:
            raise IndexError("only the whole match crosses from the candidate's process")
        return self._text

    def span(self, index=0):
        self.group(index)
        return self._span

    def start(self, index=0):
        return self.span(index)[0]

    def end(self, index=0):
        return self.span(index)[1]

    def __bool__(self):
        return True

    def __repr__(self):
        return f"<match span={self._span}, match={self._text!r}>"


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


# -- the candidate's process ----------------------------------------------------------------------------------

def serve_candidate(path, requests, answers):
    """Import the candidate as `solution`, say what it defines, then answer calls until the tests are done."""
    import traceback
    import types

    module = types.ModuleType(CANDIDATE)
    module.__file__ = path
    sys.modules[CANDIDATE] = module
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException as exc:  # noqa: BLE001 - reported to the tests, which then fail
        send(answers, ["failed", "".join(traceback.format_exception(exc))[-4000:]])
        _flush_and_exit(1)
    send(answers, ["loaded", _exports(module.__dict__)])
    while True:
        message = receive(requests)
        if message is None:
            _flush_and_exit(0)
        _, name, args, kwargs = message
        args, kwargs = decode(args), decode(kwargs)
        try:
            value = module.__dict__[name](*args, **kwargs)
            reply = ["ok", encode(value), encode(args), encode(kwargs)]
        except AnswerRefused as exc:
            reply = ["refused", f"{name}() answered {exc}, which is not made of plain built-in values"]
        except BaseException as exc:  # noqa: BLE001 - raised again on the tests' side
            where = "".join(traceback.format_exception(exc))[-4000:]
            reply = ["raised", type(exc).__name__, str(exc)[:4000], where]
        send(answers, reply)


def _exports(namespace):
    """What the candidate defines at module level, for the tests: name -> ["call"], ["module", name] or
    ["value", tree]; values that cannot cross are left out."""
    import types

    exports = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, types.ModuleType):
            exports[name] = ["module", str(getattr(value, "__name__", ""))]
        elif callable(value):
            exports[name] = ["call"]
        else:
            try:
                exports[name] = ["value", encode(value)]
            except (AnswerRefused, RecursionError):
                pass
    return exports


def _flush_and_exit(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - the candidate's own streams
            pass
    os._exit(code)


# -- the tests' process ---------------------------------------------------------------------------------------

def run_tests(path, fds):
    """Fork the candidate's process first (so it never holds the token or the tests), then run the tests."""
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no process of this uid reads our memory or fds
    token_fd, report, tests_fd = fds
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    child = os.fork()
    if child == 0:
        for fd in (token_fd, report, tests_fd, requests_w, answers_r):
            os.close(fd)
        serve_candidate(path, requests_r, answers_w)
    for fd in (requests_r, answers_w):
        os.close(fd)
    token = os.read(token_fd, 64)
    os.close(token_fd)
    with os.fdopen(tests_fd, "r", encoding="utf-8") as f:
        tests = f.read()
    try:
        code = compile(tests, "<tests>", "exec")
        namespace = _tests_namespace(receive(answers_r), requests_w, answers_r)
        exec(code, namespace)
    except BaseException as exc:  # noqa: BLE001 - any exception fails the tests
        import traceback

        os.close(report)
        if exc.__traceback__ is not None:  # shown from the tests' own line on (only this process's classes here)
            BaseException.with_traceback(exc, exc.__traceback__.tb_next)
        traceback.print_exception(exc)
        _end(child, requests_w, 1)
    os.write(report, token)
    os.close(report)
    _end(child, requests_w, 0)


def _end(child, requests, code):
    """Let the candidate's process see the end of its calls and flush its output (a second at most), then exit."""
    import select
    import signal

    os.close(requests)
    try:
        pidfd = os.pidfd_open(child)
        select.select([pidfd], [], [], 1.0)
        os.kill(child, signal.SIGKILL)
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _tests_namespace(loaded, requests, answers):
    """The tests' globals: this process's own built-ins, then the candidate's names: its functions behind
    proxies, its modules imported here, its values decoded. A name that shadows a built-in is left out, so
    the tests keep the real one."""
    if not (isinstance(loaded, list) and loaded and loaded[0] in ("loaded", "failed")):
        raise RuntimeError("morkit-sandbox: the candidate exited before the tests ran")
    if loaded[0] == "failed" or not isinstance(loaded[1], dict):
        raise RuntimeError(f"morkit-sandbox: the candidate failed before the tests ran:\n{str(loaded[1])[-4000:]}")
    namespace = {"__builtins__": builtins, "__name__": "__tests__"}
    for name, (kind, *detail) in loaded[1].items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__") or hasattr(builtins, name):
            continue
        if kind == "call":
            namespace[name] = _proxy(name, requests, answers)
        elif kind == "value":
            namespace[name] = decode(detail[0])
        elif kind == "module" and _safe_module(detail[0]):
            try:
                namespace[name] = __import__(detail[0], fromlist=["_"])
            except ImportError:
                pass
    return namespace


def _safe_module(name):
    return isinstance(name, str) and name.partition(".")[0] in sys.stdlib_module_names - UNSAFE_MODULES


def _proxy(name, requests, answers):
    """Call the candidate's `name` in its process; its answer comes back as plain values, and the lists,
    dicts and sets passed to it take the contents it left them with."""

    def proxy(*args, **kwargs):
        try:
            sent = [encode(args), encode(kwargs)]
        except AnswerRefused as exc:
            raise AnswerRefused(f"morkit-sandbox: the tests pass {name}() {exc}, which cannot cross to the "
                                "candidate's process") from None
        send(requests, ["call", name, *sent])
        reply = receive(answers)
        if not isinstance(reply, list) or not reply:
            raise RuntimeError(f"morkit-sandbox: the candidate's process ended during {name}()")
        if reply[0] == "ok" and len(reply) == 4:
            value = decode(reply[1])
            _update(args, decode(reply[2]))
            _update(kwargs, decode(reply[3]))
            return value
        if reply[0] == "raised" and len(reply) == 4 and all(isinstance(x, str) for x in reply[1:]):
            raise _rebuilt(*reply[1:])
        raise AnswerRefused(f"morkit-sandbox: {str(reply[1:])[:400]}")

    proxy.__name__ = proxy.__qualname__ = name
    return proxy


def _update(sent, returned):
    """Give each list, dict, set and bytearray the tests passed the contents the candidate left it with."""
    pairs = zip(sent, returned) if isinstance(sent, tuple) else ((sent[k], returned.get(k)) for k in sent)
    for before, after in pairs:
        if type(before) is type(after) and type(before) in (list, bytearray):
            before[:] = after
        elif type(before) is type(after) and type(before) in (dict, set):
            before.clear()
            before.update(after)


def _rebuilt(kind, message, where):
    """The candidate's exception as one of this process's own: the built-in of that name, else CandidateError."""
    cls = getattr(builtins, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls, message = CandidateError, f"{kind}: {message}"
    try:
        exc = cls(message)
    except Exception:  # noqa: BLE001 - a built-in that takes other arguments (UnicodeDecodeError)
        exc = CandidateError(f"{kind}: {message}")
    exc.add_note(f"in the candidate's process:\n{where}")
    return exc


def main():
    path, fds = sys.argv[1], [int(fd) for fd in sys.argv[2].split(",") if fd]
    sys.argv = [path]
    _install_site_builtins()
    if len(fds) == 3:
        run_tests(path, fds)
    else:
        import runpy

        runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main()
