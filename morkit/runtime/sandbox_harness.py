"""The harness inside the sandbox: `python -I -S -B -c <sandbox_codec.py + this file> /work/main.py FDS MARK`.

Without FDS main.py runs as a program; with them it is module `solution`, called by tests in a second process."""

import builtins
import os
import sys

# The launcher runs this text after sandbox_codec.py's, which defines encode, decode, send, receive and
# AnswerRefused here (morkit cannot be imported in the sandbox).

CANDIDATE = "solution"
# modules the tests import themselves where the candidate bound one of these names (never any other: an
# import can run code, and the candidate's files lie in /work)
SHARED_MODULES = frozenset({"abc", "array", "bisect", "calendar", "cmath", "collections", "collections.abc", "copy",
                            "dataclasses", "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq",
                            "itertools", "json", "math", "numbers", "operator", "os", "os.path", "random", "re",
                            "statistics", "string", "struct", "sys", "textwrap", "time", "typing", "unicodedata"})
MAX_EXPORTED_ITEMS = 10_000  # a module-level container larger than this is not handed to the tests


class CandidateError(Exception):
    """The candidate raised an exception that derives from no built-in Exception (SystemExit, say)."""


def _install_site_builtins():
    """-S skips `site`, which is also what defines exit(), quit() and help(); LLM code calls them."""
    import _sitebuiltins

    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    builtins.help = _sitebuiltins._Helper()


# -- the candidate's process ----------------------------------------------------------------------------------

def serve_candidate(path, requests, answers):
    """Import the candidate as `solution`, say what it defines, then answer the tests' calls (and the `next`
    of iterators it answered with) until they are done."""
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
    handles = []  # iterators answered so far, by number
    while True:
        message = receive(requests)
        if message is None:
            _flush_and_exit(0)
        try:
            if message[0] == "next":
                reply = ["ok", encode(next(handles[message[1]]), handles)]
            else:
                _, name, args, kwargs = message
                args, kwargs = decode(args), decode(kwargs)
                value = module.__dict__[name](*args, **kwargs)
                reply = ["ok", encode(value, handles), encode(args), encode(kwargs)]
        except AnswerRefused as exc:
            reply = ["refused", f"an answer of {exc}, which is not made of plain built-in values"]
        except StopIteration:
            reply = ["stop"]
        except BaseException as exc:  # noqa: BLE001 - raised again on the tests' side
            reply = _raised(exc, traceback.format_exception(exc))
        send(answers, reply)


def _raised(exc, lines):
    """An exception as a reply: the first built-in class it derives from, its arguments (or its text)."""
    kind = next(c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c)
    try:
        args = encode(tuple(exc.args) if exc.args else (str(exc)[:4000],) if str(exc) else ())
    except (AnswerRefused, RecursionError, TypeError):
        args = encode((str(exc)[:4000],))
    return ["raised", kind, args, "".join(lines)[-4000:]]


def _exports(namespace):
    """What the candidate defines at module level, for the tests: name -> ["call"], ["module", name] or
    ["value", tree] (plain values only, none larger than MAX_EXPORTED_ITEMS; iterators and files stay)."""
    import types

    exports = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        try:
            if isinstance(value, types.ModuleType):
                exports[name] = ["module", str(getattr(value, "__name__", ""))]
            elif callable(value):
                exports[name] = ["call"]
            elif not (hasattr(value, "__len__") and len(value) > MAX_EXPORTED_ITEMS):
                exports[name] = ["value", encode(value)]
        except Exception:  # noqa: BLE001 - what cannot cross stays with the candidate
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
        namespace = _tests_namespace(receive(answers_r), Link(requests_w, answers_r))
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


def _tests_namespace(loaded, link):
    """The tests' globals: this process's own built-ins, then the candidate's names: its functions behind
    proxies, its values decoded, the common standard modules it bound imported here; also module `solution`.
    A name that shadows a built-in is left out, so the tests keep the real one."""
    import types

    if not (isinstance(loaded, list) and len(loaded) == 2 and loaded[0] in ("loaded", "failed")):
        raise RuntimeError("morkit-sandbox: the candidate exited before the tests ran")
    if loaded[0] == "failed" or not isinstance(loaded[1], dict):
        raise RuntimeError(f"morkit-sandbox: the candidate failed before the tests ran:\n{str(loaded[1])[-4000:]}")
    namespace = {"__builtins__": builtins, "__name__": "__tests__"}
    for name, export in loaded[1].items():
        if not (isinstance(name, str) and name.isidentifier() and not name.startswith("__")
                and not hasattr(builtins, name) and isinstance(export, list) and export):
            continue
        if export == ["call"]:
            namespace[name] = link.proxy(name)
        elif export[0] == "value" and len(export) == 2:
            namespace[name] = decode(export[1])
        elif export[0] == "module" and len(export) == 2 and export[1] in SHARED_MODULES:
            namespace[name] = __import__(export[1], fromlist=["_"])
    solution = types.ModuleType(CANDIDATE)  # `from solution import f` in the tests
    solution.__dict__.update({k: v for k, v in namespace.items() if not k.startswith("__")})
    sys.modules[CANDIDATE] = solution
    return namespace


class Link:
    """The tests' side of the pipes: calls of the candidate's functions and `next` of its iterators."""

    def __init__(self, requests, answers):
        self.requests, self.answers = requests, answers

    def proxy(self, name):
        """The candidate's `name`, called in its process: the answer comes back as plain values, and the
        lists, dicts and sets passed to it take the contents it left them with."""
        link = self

        def proxy(*args, **kwargs):
            try:
                sent = [encode(args), encode(kwargs)]
            except AnswerRefused as exc:
                raise AnswerRefused(f"morkit-sandbox: the tests pass {name}() {exc}, which cannot cross to the "
                                    "candidate's process") from None
            value, args_after, kwargs_after = link.ask(["call", name, *sent], f"{name}()", 4)
            _update(args, decode(args_after))
            _update(kwargs, decode(kwargs_after))
            return value

        proxy.__name__ = proxy.__qualname__ = name
        return proxy

    def next(self, handle):
        return self.ask(["next", handle], "next()", 2)[0]

    def ask(self, message, what, size):
        """Send `message`; the decoded answer and the other parts of an "ok" reply of `size` parts, else the
        candidate's exception raised here (StopIteration at an iterator's end)."""
        send(self.requests, message)
        reply = receive(self.answers)
        if not isinstance(reply, list) or not reply:
            raise RuntimeError(f"morkit-sandbox: the candidate's process ended during {what}")
        if reply[0] == "ok" and len(reply) == size:
            return decode(reply[1], self), *reply[2:]
        stop = reply == ["stop"] or (reply[0] == "raised" and reply[1:2] in (["StopIteration"],
                                                                             ["StopAsyncIteration"]))
        if stop and message[0] == "next" and reply == ["stop"]:
            raise StopIteration
        if stop:  # from a call, it would end the tests' own map() or generator quietly (as PEP 479 says)
            raise RuntimeError(f"morkit-sandbox: {what} raised StopIteration")
        if reply[0] == "raised" and len(reply) == 4 and isinstance(reply[1], str) and isinstance(reply[3], str):
            raise _rebuilt(reply[1], decode(reply[2]), reply[3])
        raise AnswerRefused(f"morkit-sandbox: {what}: {str(reply[1:])[:400]}")


def _update(sent, returned):
    """Give each list, dict, set and bytearray the tests passed the contents the candidate left it with."""
    pairs = zip(sent, returned) if isinstance(sent, tuple) else ((sent[k], returned.get(k)) for k in sent)
    for before, after in pairs:
        if type(before) is type(after) and type(before) in (list, bytearray):
            before[:] = after
        elif type(before) is type(after) and type(before) in (dict, set):
            before.clear()
            before.update(after)


def _rebuilt(kind, args, where):
    """The candidate's exception as one of this process's own: the built-in class it derives from, with its
    arguments; one deriving from no built-in Exception is a CandidateError."""
    cls = getattr(builtins, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = CandidateError
    try:
        exc = cls(*args) if isinstance(args, tuple) else cls(str(args))
    except Exception:  # noqa: BLE001 - arguments that class does not take
        exc = CandidateError(*args) if isinstance(args, tuple) else CandidateError(str(args))
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
