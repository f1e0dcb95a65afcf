"""The harness inside the sandbox: `python -I -S -B -c <this file's text> /work/main.py FDS MARK`.

Standard library only: the launcher hands this file's text to a fresh interpreter in the sandbox, where
morkit is not importable. FDS picks how /work/main.py runs:

- none: as a program (`__main__`), reading its input on stdin;
- TOKEN,REPORT: as a program that must run to its end; the per-run token read from TOKEN goes out on
  REPORT only once its last line ran;
- TOKEN,REPORT,TESTS: as the candidate of the assert-style tests read from TESTS. The candidate is module
  `solution` (never `__main__`, so its `if __name__ == "__main__":` block does not run). The tests run on
  a thread of their own, in a namespace of their own: the built-ins and common standard modules as they
  were before the candidate ran, and the candidate's names, its functions behind proxies that run them
  on the main thread and accept only answers made of plain built-in values. The token goes out once the
  tests ran to their end.

From before the candidate's first line, an audit hook (`Guard`) refuses the ways a program could read or
rewrite the tests that call it: on the thread that runs the tests, trace and profile hooks and frames
(a stack there leads to the tests); on every thread, other threads' frames, gc's object lists, ctypes,
hand-made code objects, new code for a function, new audit hooks, and changes to classes that existed
before it. On the main thread, where the candidate's functions and signal handlers run, frames and
trace hooks are allowed: its stack holds nothing of the tests'.
"""

import _sitebuiltins
import _thread
import builtins
import os
import sys

# -S skips `site`, which is also what defines exit(), quit() and help(); LLM code calls them.
builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
builtins.help = _sitebuiltins._Helper()

CANDIDATE = "solution"
# the tests get these as they were before the candidate ran; other modules are shared with it
PRISTINE_MODULES = ("math", "cmath", "re", "string", "itertools", "functools", "collections", "heapq", "bisect",
                    "random", "decimal", "copy", "operator", "typing")
# refused on every thread: ways to reach another thread's frames or any object, or to read raw memory
DENIED_EVENTS = frozenset({"sys._current_frames", "sys._current_exceptions", "sys._settraceallthreads",
                           "sys._setprofileallthreads", "sys.addaudithook", "sys.monitoring.register_callback",
                           "gc.get_objects", "gc.get_referrers", "gc.get_referents", "code.__new__"})
# refused on the thread that runs the tests: its frames lead to them (elsewhere frames lead nowhere near them)
TESTS_THREAD_DENIED = frozenset({"sys.settrace", "sys.setprofile", "sys._getframe"})
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})


class AccessDenied(AttributeError, ValueError):
    """What the guard raises: an AttributeError and a ValueError both, so that the standard library's own
    fallbacks for a missing frame (namedtuple, logging, typing, enum) still work."""


class AnswerRefused(TypeError):
    """A candidate's function returned something other than plain built-in values."""


class Guard:
    """The audit hook, made on the thread that runs the tests. Only that thread holds it (never the
    candidate's stack); it opens once the verdict is out and the token gone, to print a failure's traceback."""

    def __init__(self):
        self.open = False
        self.old_types = _live_type_ids()
        self.tests_thread = _thread.get_ident()

    def __call__(self, event, args):
        if self.open:
            return
        if event in DENIED_EVENTS or event.startswith("ctypes.") or (
                event in ("object.__setattr__", "object.__delattr__") and (
                args[1] == "__code__" or id(args[0]) in self.old_types)) or (
                _thread.get_ident() == self.tests_thread and (event in TESTS_THREAD_DENIED or (
                    event == "object.__getattr__" and args[1] in FRAME_ATTRIBUTES))):
            raise AccessDenied(f"morkit-sandbox: {event} is not allowed while tests run")


def _live_type_ids():
    """The ids of every class alive now (each kept alive by its module, so no id is reused)."""
    seen, todo = {id(object)}, [object]
    while todo:
        for sub in type.__subclasses__(todo.pop()):
            if id(sub) not in seen:
                seen.add(id(sub))
                todo.append(sub)
    return frozenset(seen)


def _start_report(fds, guard):
    """Read the token and start the thread that writes it once `done` is released (the program's own run)."""
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no process of this uid reads our memory
    token = os.read(fds[0], 64)
    os.close(fds[0])
    done, written = _thread.allocate_lock(), _thread.allocate_lock()
    done.acquire()
    written.acquire()
    _thread.start_new_thread(_report, (fds[1], token, done, written))
    sys.addaudithook(guard)
    return done.release, written.acquire


def _report(fd, token, done, written):
    done.acquire()
    os.write(fd, token)
    written.release()


def run_program(path, fds):
    """main.py as `__main__`; with fds, the token goes out only after its last line ran.

    The program runs on the main thread from C: a deque drains a map that calls run_path, then
    done.release, then waits until the token is written, so no frame of its stack holds the lock."""
    import runpy

    if not fds:
        runpy.run_path(path, run_name="__main__")
        return
    import collections
    import functools
    import operator

    collections.deque(map(operator.call, [functools.partial(runpy.run_path, path, run_name="__main__"),
                                          *_start_report(fds, Guard())]), 0)


class Calls:
    """Hands the tests thread's calls of candidate functions to the main thread, one at a time."""

    def __init__(self):
        self.asked, self.answered = _thread.allocate_lock(), _thread.allocate_lock()
        self.asked.acquire()
        self.answered.acquire()
        self.job = self.result = None

    def call(self, fn, args, kwargs):
        self.job = (fn, args, kwargs)
        self.asked.release()
        self.answered.acquire()
        (ok, value), self.result = self.result, None
        if ok:
            return value
        raise value

    def finish(self):
        self.job = None
        self.asked.release()

    def serve(self):
        """On the main thread: run the calls asked for until finish()."""
        while True:
            self.asked.acquire()
            job, self.job = self.job, None
            if job is None:
                return
            fn, args, kwargs = job
            try:
                self.result = (True, fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - raised again on the tests thread
                self.result = (False, exc)
            self.answered.release()


class Handoff:
    """What the main thread and the tests thread share: nothing the candidate could use (no token, no tests,
    not the guard), since a signal handler's frame shows the candidate the main thread's stack."""

    def __init__(self):
        self.ready, self.loaded = _thread.allocate_lock(), _thread.allocate_lock()
        self.ready.acquire()
        self.loaded.acquire()
        self.calls = Calls()
        self.namespace = self.failure = None
        self.exit_code = 1


def run_tests(path, fds):
    """The candidate at `path` as module `solution` on the main thread; the tests on their own thread."""
    import types

    handoff = Handoff()
    _thread.start_new_thread(_tests_thread, (fds, handoff, _thread.get_ident()))
    handoff.ready.acquire()  # the token and tests are read, their fds closed, the pristine state kept, the guard on
    module = types.ModuleType(CANDIDATE)
    module.__file__ = path
    sys.modules[CANDIDATE] = module
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException as exc:  # noqa: BLE001 - reported by the tests thread
        handoff.failure = exc
    handoff.namespace = module.__dict__
    handoff.loaded.release()
    handoff.calls.serve()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - the candidate's own streams
            pass
    os._exit(handoff.exit_code)


def _tests_thread(fds, handoff, main_thread):
    """Read the tests, keep the pristine state, turn the guard on, wait for the candidate, run the tests."""
    token, report, failure, guard = b"", fds[1], None, None
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no process of this uid reads our memory
        token = os.read(fds[0], 64)
        os.close(fds[0])
        with os.fdopen(fds[2], "r", encoding="utf-8") as f:
            code = compile(f.read(), "<tests>", "exec")
        pristine = Pristine()
        guard = Guard()
        sys.addaudithook(guard)
    except BaseException as exc:  # noqa: BLE001 - tests that cannot be read or compiled fail the run
        failure = exc
    handoff.ready.release()
    handoff.loaded.acquire()
    failure = failure or handoff.failure
    if failure is None:
        try:
            exec(code, pristine.namespace(handoff.namespace, handoff.calls, main_thread))
        except BaseException as exc:  # noqa: BLE001 - any exception fails the tests
            failure = exc.with_traceback(exc.__traceback__.tb_next)  # from the tests' own line on
    if failure is None:
        os.write(report, token)
        handoff.exit_code = 0
    os.close(report)
    del token
    try:
        if failure is not None:
            if guard is not None:
                guard.open = True  # the token is gone: the traceback may read frames now
            import traceback

            traceback.print_exception(failure)
    except BaseException:  # noqa: BLE001 - an exception of the candidate's that cannot be shown
        pass
    finally:
        handoff.calls.finish()


class Pristine:
    """Built-ins and standard modules as they were before the candidate ran, for the tests' namespace."""

    def __init__(self):
        import collections
        import decimal
        import importlib.util
        import re
        import types

        self.module_type = types.ModuleType
        self.modules = {name: self._fresh(importlib.util, name) for name in PRISTINE_MODULES}
        self.builtins = dict(builtins.__dict__)
        self.real_import = builtins.__import__
        plain = frozenset(map(id, (type(None), bool, int, float, complex, str, bytes, range, decimal.Decimal,
                                   re.Match)))
        sequences = frozenset(map(id, (list, tuple, set, frozenset, collections.deque)))
        mappings = frozenset(map(id, (dict, collections.OrderedDict, collections.Counter)))
        self.check = _answer_check(plain, sequences, mappings, collections.defaultdict)

    def _fresh(self, util, name):
        """A copy of module `name` for the tests alone. One written in Python is run anew, so its classes are
        its own and no patch of the candidate's reaches them; one built in C (nothing of it patchable but
        its namespace) is a module over a copy of its namespace, taking what it lacks from the real one."""
        real = __import__(name)
        spec = util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            module = util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        module = self.module_type(name)
        module.__dict__.update(real.__dict__)
        module.__dict__["__getattr__"] = lambda attr: getattr(real, attr)
        return module

    def importer(self, name, globals=None, locals=None, fromlist=(), level=0):
        """The tests' __import__: a pristine module for those kept, else the ordinary import."""
        found = self.real_import(name, globals, locals, fromlist, level)
        top = name.partition(".")[0]
        if level == 0 and top in self.modules and not (fromlist and "." in name):
            return self.modules[top]
        return found

    def namespace(self, candidate, calls, main_thread):
        """The tests' globals: fresh built-ins, then the candidate's names (functions behind proxies); a
        candidate name that shadows a built-in is left out, so the tests keep the real one."""
        own = dict(self.builtins, __import__=self.importer)
        namespace = {"__builtins__": own, "__name__": "__tests__"}
        for name, value in list(candidate.items()):
            if name.startswith("__") or name in own:
                continue
            if type(value) is self.module_type and value.__dict__.get("__name__") in self.modules:
                value = self.modules[value.__dict__["__name__"]]
            elif callable(value) and not issubclass(type(value), type):
                value = _proxy(name, value, calls, main_thread, self.check)
            namespace[name] = value
        return namespace


def _proxy(name, fn, calls, main_thread, check):
    """Call the candidate's `fn` on the main thread (where its signal handlers run, far from the tests'
    frames) and refuse an answer not made of plain built-in values. Its closure holds nothing mutable
    of the harness's, should the tests hand it to the candidate."""

    def proxy(*args, **kwargs):
        if _thread.get_ident() == main_thread:  # called back by the candidate itself
            value = fn(*args, **kwargs)
        else:
            value = calls.call(fn, args, kwargs)
        check(name, value)
        return value

    proxy.__name__ = proxy.__qualname__ = name
    return proxy


def _answer_check(plain, sequences, mappings, defaultdict):
    """check(name, value): raise AnswerRefused unless `value` is plain built-in values all the way down
    (exact classes, compared by identity, so no class of the candidate's can pass for one)."""
    factories = plain | sequences

    def check(name, value):
        seen, todo = set(), [value]
        while todo:
            item = todo.pop()
            kind = type(item)
            if id(kind) in plain or id(item) in seen:
                continue
            if id(kind) in sequences:
                seen.add(id(item))
                todo.extend(item)
            elif id(kind) in mappings or (kind is defaultdict and (
                    item.default_factory is None or id(item.default_factory) in factories)):
                seen.add(id(item))
                todo.extend(dict.keys(item))
                todo.extend(dict.values(item))
            else:
                raise AnswerRefused(f"morkit-sandbox: {name}() returned a {kind.__name__!s:.60}, not an answer "
                                    "made of built-in values")

    return check


def main():
    path, fds = sys.argv[1], [int(fd) for fd in sys.argv[2].split(",") if fd]
    sys.argv = [path]
    if len(fds) == 3:
        run_tests(path, fds)
    else:
        run_program(path, fds)


if __name__ == "__main__":
    main()
