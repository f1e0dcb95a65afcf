"""The harness inside the sandbox: `python -I -S -B -c <sandbox_codec.py + this file> /work/main.py FDS MARK`.
Without FDS main.py runs as a program; with them it is module `solution`, called by tests run as `__main__` in a
second process, which counts the checks that ran."""

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
MAX_EXCEPTION_CLASSES = 200  # exception classes of the candidate's that the tests get a class of their own for
SOLUTION_DIR = "/.solution"  # holds solution.py, a link to main.py (made by the launcher): on the candidate's
# sys.path only, so the children it starts with multiprocessing's "spawn" or "forkserver" can import `solution`
COUNTED, ENTERED = "__morkit_checked__", "__morkit_entered__"  # the counting calls added to the tests' code
NO_CHECK = "morkit-sandbox: no test check ran (no assert passed and no unittest test ran): nothing was tested"


class CandidateError(Exception):
    """The candidate raised an exception that derives from no built-in Exception (SystemExit, say)."""


class TestsFailed(Exception):
    """The harness's own verdict on tests that ran to their end: unittest reported failures."""


class CaughtOnly(type):
    """The metaclass of the tests' classes for the candidate's exception classes: the tests catch them, test
    `isinstance` and `issubclass` with them, but cannot call them (a candidate whose function under test is an
    exception class would hand the tests a truthy object of no value)."""

    def __call__(cls, *args, **kwargs):
        raise TypeError(f"morkit-sandbox: {cls.__name__} is an exception class of the candidate's: the tests can "
                        "catch it, not make one")


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
    sys.path.append(SOLUTION_DIR)
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        if "unittest" in source:
            _keep_unittest_main_from_exiting(module)
        exec(compile(source, path, "exec"), module.__dict__)
    except BaseException as exc:  # noqa: BLE001 - reported to the tests, which then fail
        send(answers, ["failed", "".join(traceback.format_exception(exc))[-4000:]])
        _flush_and_exit(1)
    exports, classes = _exports(module.__dict__)
    send(answers, ["loaded", exports])
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
            reply = _raised(exc, traceback.format_exception(exc), classes)
        send(answers, reply)


def _keep_unittest_main_from_exiting(module):
    """A candidate's own `unittest.main()` at module level runs its TestCases and returns, never exits: the
    module is imported, not run as a program, and its own tests are not what grades it."""
    import unittest

    program = unittest.main

    def main(*args, **kwargs):
        kwargs.pop("module", None)
        kwargs.update(exit=False, argv=[sys.argv[0]])
        return program(module, *args[1:], **kwargs)

    unittest.main = main


def _raised(exc, lines, classes):
    """An exception as a reply: the first built-in class it derives from, its arguments (or its text), and the
    number of the nearest exception class of the candidate's own the tests have a class for (or None)."""
    kind = next(c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c)
    try:
        args = encode(tuple(exc.args) if exc.args else (str(exc)[:4000],) if str(exc) else ())
    except (AnswerRefused, RecursionError, TypeError):
        args = encode((str(exc)[:4000],))
    own = next((number for c in type(exc).__mro__ for number, known in enumerate(classes) if known is c), None)
    return ["raised", kind, args, "".join(lines)[-4000:], own]


def _exports(namespace):
    """What the candidate defines at module level, for the tests, and its exception classes: name -> ["call"],
    ["module", name], ["value", tree] (plain values only, none larger than MAX_EXPORTED_ITEMS; iterators and files
    stay) or ["exception", number, bases] (its class's number and direct bases: built-in names or numbers)."""
    import types

    exports, classes = {}, []
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        try:
            if _exception_class(value) and len(classes) < MAX_EXCEPTION_CLASSES:
                if not any(known is value for known in classes):
                    classes.append(value)
                exports[name] = ["exception", next(n for n, known in enumerate(classes) if known is value)]
            elif isinstance(value, types.ModuleType):
                exports[name] = ["module", str(getattr(value, "__name__", ""))]
            elif callable(value):
                exports[name] = ["call"]
            elif not (hasattr(value, "__len__") and len(value) > MAX_EXPORTED_ITEMS):
                exports[name] = ["value", encode(value)]
        except Exception:  # noqa: BLE001 - what cannot cross stays with the candidate
            pass
    for name, export in list(exports.items()):
        if export[0] == "exception":
            try:
                export.append(_exception_bases(classes[export[1]], classes))
            except Exception:  # noqa: BLE001 - a class whose bases cannot be read stays with the candidate
                del exports[name]
    return exports, classes


def _exception_class(value):
    return isinstance(value, type) and issubclass(value, Exception)


def _exception_bases(cls, classes):
    """A class's direct bases the tests can rebuild: the candidate's exported ones by number, built-in ones by
    name; none of those: the first built-in class it derives from."""
    bases = []
    for base in cls.__bases__:
        number = next((n for n, known in enumerate(classes) if known is base), None)
        if number is not None:
            bases.append(number)
        elif getattr(builtins, base.__name__, None) is base and _exception_class(base):
            bases.append(base.__name__)
    return bases or [next(c.__name__ for c in cls.__mro__ if getattr(builtins, c.__name__, None) is c)]


def _flush_and_exit(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - the candidate's own streams
            pass
    os._exit(code)


# -- the tests' process ---------------------------------------------------------------------------------------

def run_tests(path, fds):
    """Fork the candidate's process first (so it never holds the token or the tests), then run the tests and
    report `token:checks` once they reached their end; none ran: exit 1 all the same."""
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
        given = f.read()
    checks = Checks()
    try:
        tests, helpers = _given_code(given)
        code = compile(_counting(tests), "<tests>", "exec")
        setup = compile(helpers, "<prompt>", "exec")
        link = Link(requests_w, answers_r)
        namespace = _tests_namespace(receive(answers_r), link)
        checks.run(code, setup, namespace, "unittest" in tests)
    except BaseException as exc:  # noqa: BLE001 - any exception fails the tests
        import traceback

        os.close(report)
        if isinstance(exc, TestsFailed):
            print(exc, file=sys.stderr)
            _end(child, requests_w, 1)
        shown = exc.__traceback__  # from the tests' (or the prompt's) own line on; only this process's classes here
        while shown is not None and shown.tb_frame.f_code.co_filename not in ("<tests>", "<prompt>"):
            shown = shown.tb_next
        BaseException.with_traceback(exc, shown)
        traceback.print_exception(exc)
        _end(child, requests_w, 1)
    os.write(report, token + b":%d" % checks.count)
    os.close(report)
    if not checks.count:
        print(NO_CHECK, file=sys.stderr)
    _end(child, requests_w, 0 if checks.count else 1)


def _given_code(given):
    """(test code, the prompt's helpers) from what morkit wrote: a JSON object of the two texts."""
    import json

    code = json.loads(given)
    if not (isinstance(code, dict) and isinstance(code.get("tests"), str) and isinstance(code.get("helpers"), str)):
        raise RuntimeError("morkit-sandbox: the test code did not arrive")
    return code["tests"], code["helpers"]


def _counting(tests):
    """The tests' syntax tree with a counting call after each check: an assert (one of a constant checks nothing),
    an `if ...: raise ...` (no else), a `try` that expects an exception (its body or its `else` ends in a raise);
    and a call marking each top-level `def test*` as run at its start."""
    import ast

    def raises(statements):
        last = statements[-1] if statements else None
        return isinstance(last, ast.Raise) or (isinstance(last, ast.Assert) and isinstance(last.test, ast.Constant)
                                               and not last.test.value)

    class Count(ast.NodeTransformer):
        def visit_Assert(self, node):
            return node if isinstance(node.test, ast.Constant) else [node, _call(node, COUNTED)]

        def visit_If(self, node):
            self.generic_visit(node)
            if node.orelse or not all(isinstance(s, ast.Raise) for s in node.body):
                return node
            return [node, _call(node, COUNTED)]

        def visit_Try(self, node):
            self.generic_visit(node)
            expects = node.handlers and (raises(node.body) or node.orelse and all(isinstance(s, ast.Raise)
                                                                                  for s in node.orelse))
            return [node, _call(node, COUNTED)] if expects else node

    tree = Count().visit(ast.parse(tests, "<tests>"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            documented = isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
            node.body.insert(int(documented), _call(node.body[0], ENTERED, node.name))
    return ast.fix_missing_locations(tree)


def _call(where, name, *args):
    import ast

    call = ast.Call(ast.Name(name, ast.Load()), [ast.Constant(a) for a in args], [])
    return ast.copy_location(ast.Expr(call), where)


class Checks:
    """What ran of the tests, counted in their own process (the candidate's cannot reach it): the checks of
    `_counting` that passed, and each unittest test that ran and was not skipped."""

    def __init__(self):
        self.count = 0
        self.entered = set()  # top-level test functions that started
        self.cases = set()  # TestCase classes some runner ran
        self.results = []  # the unittest results those runs went to

    def checked(self):
        self.count += 1

    def run(self, code, setup, namespace, uses_unittest):
        """The prompt's helpers, then the tests as `__main__` (a `sys.exit(0)` in them is their end); then what
        no one ran: the TestCase classes they define, their top-level `test*` functions that take no argument."""
        namespace[COUNTED] = self.checked
        namespace[ENTERED] = self.entered.add
        if uses_unittest:
            self._hook_unittest(namespace)
        exec(setup, namespace)
        _share_with_solution(namespace)
        try:
            exec(code, namespace)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
        if "unittest" in sys.modules:
            if not uses_unittest:  # reached without its name in the tests (an import by another name): count it now
                self._hook_unittest(namespace)
            self.run_cases(namespace)
        for name, value in list(namespace.items()):
            if _uncalled_test(name, value, self.entered):
                self.entered.add(name)
                value()
        failed = [r for r in self.results if not r.wasSuccessful()]
        if failed:
            failures = sum(len(r.failures) for r in failed)
            errors = sum(len(r.errors) + len(r.unexpectedSuccesses) for r in failed)
            raise TestsFailed(f"morkit-sandbox: unittest: {failures} failures, {errors} errors (the runner's report "
                              "is above)")

    def _hook_unittest(self, namespace):
        """Count every TestCase's run, whoever runs it; `unittest.main(...)` runs the tests' classes, never exits."""
        import types
        import unittest

        checks, original = self, unittest.TestCase.run

        def run(case, result=None):
            result = case.defaultTestResult() if result is None else result
            if not any(r is result for r in checks.results):
                checks.results.append(result)
            checks.cases.add(type(case))
            skipped = len(result.skipped)
            try:
                return original(case, result)
            finally:
                checks.count += len(result.skipped) == skipped

        def main(*args, verbosity=1, **kwargs):
            return types.SimpleNamespace(result=checks.run_cases(namespace, verbosity))

        unittest.TestCase.run = run
        unittest.main = sys.modules["unittest.main"].main = main

    def run_cases(self, namespace, verbosity=1):
        """Run the TestCase classes the tests define that no runner ran yet; their result."""
        import unittest

        classes = [v for v in list(namespace.values()) if isinstance(v, type) and issubclass(v, unittest.TestCase)
                   and v.__module__ == "__main__" and v not in self.cases]
        if not classes:
            return unittest.TestResult()
        suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in classes)
        verbosity = verbosity if type(verbosity) is int else 1
        return unittest.TextTestRunner(stream=sys.stderr, verbosity=verbosity).run(suite)


def _uncalled_test(name, value, entered):
    """A top-level `test*` function of the tests' own that never started and takes no argument (as pytest would
    collect it; generators and coroutines are left out)."""
    import types

    if not (name.startswith("test") and isinstance(value, types.FunctionType) and value.__name__ == name
            and value.__qualname__ == name and value.__code__.co_filename == "<tests>" and name not in entered):
        return False
    code = value.__code__
    return (code.co_argcount == len(value.__defaults__ or ()) and not code.co_flags & 0x2A0
            and code.co_kwonlyargcount == len(value.__kwdefaults__ or {}))


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
    """The tests' globals, module `__main__`: this process's own built-ins, then the candidate's names: its
    functions behind proxies, its exception classes as classes of this process's own (same names, same built-in
    and own bases), its values decoded, the common standard modules it bound imported here. A name that shadows a
    built-in is left out, so the tests keep the real one."""
    import types

    if not (isinstance(loaded, list) and len(loaded) == 2 and loaded[0] in ("loaded", "failed")):
        raise RuntimeError("morkit-sandbox: the candidate exited before the tests ran")
    if loaded[0] == "failed" or not isinstance(loaded[1], dict):
        raise RuntimeError(f"morkit-sandbox: the candidate failed before the tests ran:\n{str(loaded[1])[-4000:]}")
    main = types.ModuleType("__main__")
    namespace = main.__dict__
    namespace["__builtins__"] = builtins
    link.classes = _exception_classes(loaded[1])
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
        elif export[0] == "exception" and len(export) == 3 and link.classes.get(export[1]) is not None:
            namespace[name] = link.classes[export[1]]
    sys.modules["__main__"] = main
    return namespace


def _share_with_solution(namespace):
    """Module `solution` for `from solution import f` in the tests: the candidate's names, then the prompt's."""
    import types

    solution = types.ModuleType(CANDIDATE)
    solution.__dict__.update({k: v for k, v in namespace.items() if not k.startswith("__")})
    sys.modules[CANDIDATE] = solution


def _exception_classes(exports):
    """number -> a class made here for each exception class the candidate exported (named as it first named it,
    deriving from the built-in and exported classes it derives from), or None where that cannot be made."""
    specs = {}
    for name, export in exports.items():
        if (isinstance(export, list) and len(export) == 3 and export[0] == "exception" and type(export[1]) is int
                and isinstance(export[2], list) and isinstance(name, str) and name.isidentifier()
                and not name.startswith("__") and len(specs) < MAX_EXCEPTION_CLASSES):
            specs.setdefault(export[1], (name, export[2]))
    made = {}

    def make(number, path):
        if number in made or number not in specs or number in path:
            return made.get(number)
        name, bases = specs[number]
        found = []
        for base in bases:
            cls = make(base, path | {number}) if type(base) is int else getattr(builtins, base, None) \
                if type(base) is str else None
            if not (isinstance(cls, type) and issubclass(cls, Exception)):
                made[number] = None
                return None
            found.append(cls)
        try:
            made[number] = CaughtOnly(name, tuple(found), {"__module__": CANDIDATE}) if found else None
        except TypeError:  # bases that cannot be combined
            made[number] = None
        return made[number]

    for number in specs:
        make(number, frozenset())
    return made


class Link:
    """The tests' side of the pipes: calls of the candidate's functions and `next` of its iterators."""

    def __init__(self, requests, answers):
        self.requests, self.answers = requests, answers
        self.classes = {}  # number -> this process's class for an exception class of the candidate's

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
        if reply[0] == "raised" and len(reply) == 5 and isinstance(reply[1], str) and isinstance(reply[3], str):
            own = self.classes.get(reply[4]) if type(reply[4]) is int else None
            raise _rebuilt(reply[1], decode(reply[2]), reply[3], own)
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


def _rebuilt(kind, args, where, own=None):
    """The candidate's exception as one of this process's own: the class made here for its own exception class
    (`own`), else the built-in class it derives from, with its arguments; one deriving from no built-in Exception
    is a CandidateError."""
    cls = own if own is not None else getattr(builtins, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = CandidateError
    try:
        exc = type.__call__(cls, *args) if isinstance(args, tuple) else type.__call__(cls, str(args))
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
