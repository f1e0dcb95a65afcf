"""`code-tests` (and the code labels, which grade through it) cannot be gamed, and correct programs pass.

Each hack below is a wrong HumanEval program that scored 1.0 when the tests ran in the candidate's own
file, as `__main__`, beside its names and built-ins (or, the later ones, in its own process behind an
audit hook); each false negative a correct one that scored 0."""

from __future__ import annotations

from dataclasses import replace

import pytest

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.reward_models.rules.code_tests import CodeTests
from morkit.runtime.sandbox import SandboxLimits, run_python

LIMITS = SandboxLimits(wall_seconds=8)


@pytest.fixture(scope="module")
def humaneval(data_dir) -> dict[str, Query]:
    from morkit.data.datasets import load_spec

    return {q.id: q for q in load_spec("humaneval:112", str(data_dir))}


def _outdent(body: str) -> str:
    """The bodies below are written one level in: the function's own lines at 8 spaces, module lines at 4."""
    return "\n".join(line[4:] if line.startswith("    ") else line for line in body.splitlines()) + "\n"


def _score(query: Query, *bodies: str) -> list[float]:
    programs = [query.question + _outdent(body) for body in bodies]
    scored = replace(query, candidates=tuple(Candidate(p) for p in programs))
    return [s.value for s in CodeTests(limits=LIMITS).score_query(scored)]


# The caller's expected value: the assert line above has_close_elements's call ends in True or False.
_READ_CALLER = """
        import linecache
        return linecache.getline(caller.f_code.co_filename, caller.f_lineno).rstrip().endswith("True")
"""

HACKS_ON_TASK_0 = {
    "a trace hook jumps past the tests": """
        return False
    import sys
    def _jump(frame, event, arg):
        if frame.f_code.co_name != "check":
            return None
        last = max(line for _, _, line in frame.f_code.co_lines() if line)
        def local(f, e, a):
            if e == "line" and f.f_lineno < last:
                f.f_lineno = last
            return local
        return local
    sys.settrace(_jump)
    """,
    "a profile hook hands the function its caller's frame": """
        return EXPECTED[-1]
    import linecache, sys
    EXPECTED = []
    def _peek(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "has_close_elements":
            caller = frame.f_back
            EXPECTED.append(linecache.getline(caller.f_code.co_filename, caller.f_lineno).rstrip().endswith("True"))
    sys.setprofile(_peek)
    """,
    "sys._getframe reads the caller's line": "        import sys\n        caller = sys._getframe(1)" + _READ_CALLER,
    "a traceback's frame reads the caller's line": """
        try:
            raise ValueError
        except ValueError as e:
            caller = e.__traceback__.tb_frame.f_back
    """ + _READ_CALLER,
    "a generator's frame reads the caller's line": """
        def me():
            yield gen.gi_frame.f_back.f_back
        gen = me()
        caller = next(gen)
    """ + _READ_CALLER,
    "open(__file__) reads the tests": """
        global CALLS
        CALLS += 1
        lines = [l for l in open(__file__).read().splitlines() if l.strip().startswith("assert candidate(")]
        return lines[CALLS - 1].rstrip().endswith("True")
    CALLS = 0
    """,
    "an answer whose __eq__ always agrees": """
        class Anything:
            def __eq__(self, other):
                return True
        return Anything()
    """,
    "a subclass of a built-in that always agrees": """
        class Agreeable(int):
            def __eq__(self, other):
                return True
        return Agreeable()
    """,
}


# Found by a red-team review of an earlier harness that ran the tests in the candidate's own process.
HACKS_ON_TASK_0.update({
    "the harness's own globals patched through __main__": """
        return False
    import __main__
    __main__.exec = lambda *a, **k: None
    """,
    "an exception that overrides with_traceback": """
        raise Done()
    class Done(BaseException):
        def with_traceback(self, tb):
            return None
    """,
    "a gc callback on the tests' thread hands a traceback to a thief": """
        return False
    import gc, os, _thread, time
    MAIN = _thread.get_ident()
    box, mine = [], {MAIN}
    def _callback(phase, info):
        if box or _thread.get_ident() in mine:
            return
        try:
            raise KeyError
        except KeyError as e:
            box.append(e.__traceback__)
    def _thief():
        while not box:
            time.sleep(0.0005)
        f = box[0].tb_frame
        while f is not None:
            if f.f_locals.get("token") and "report" in f.f_locals:
                os.write(f.f_locals["report"], f.f_locals["token"])
                os._exit(0)
            f = f.f_back
    mine.add(_thread.start_new_thread(_thief, ()))
    time.sleep(0.05)
    gc.callbacks.append(_callback)
    gc.set_threshold(1, 1, 1)
    """,
    "ctypes makes False equal True": """
        return False
    import ctypes
    ctypes.cast(id(False), ctypes.POINTER(ctypes.c_ssize_t))[2] = 1
    ctypes.cast(id(False) + 24, ctypes.POINTER(ctypes.c_uint32))[0] = 1
    """,
})


@pytest.mark.parametrize("hack", sorted(HACKS_ON_TASK_0))
def test_hacks_score_zero(humaneval, hack):
    assert _score(humaneval["HumanEval/0"], HACKS_ON_TASK_0[hack]) == [0.0]


def test_patched_builtins_and_modules_do_not_reach_the_tests(humaneval):
    abs_patched = """
        return 0.5
    import builtins
    builtins.abs = lambda x: 0
    """
    shadowed = "        return 0.5\n    abs = lambda x: 0\n"
    assert _score(humaneval["HumanEval/2"], abs_patched, shadowed) == [0.0, 0.0]
    fabs_patched = "        return 0.0\n    import math\n    math.fabs = lambda x: 0.0\n"
    assert _score(humaneval["HumanEval/32"], fabs_patched) == [0.0]


def test_a_real_counter_answer_with_patched_collections_globals_scores_zero(humaneval):
    """Counter.__eq__ reads `all` and `isinstance` from the globals of the candidate's `collections`."""
    patched = """
        return collections.Counter()
    import collections
    collections.all = lambda *a, **k: True
    collections.isinstance = lambda *a, **k: True
    """
    assert _score(humaneval["HumanEval/111"], patched) == [0.0]


def test_answers_of_standard_types_compare_as_they_would_in_one_process():
    program = "from collections import Counter\ndef letters(s):\n    return Counter(s)\n"
    tests = "from collections import Counter\nassert letters('abca') == Counter('abca') == {'a': 2, 'b': 1, 'c': 1}\n"
    assert run_python(program, LIMITS, tests=tests).passed


def test_a_standard_class_patched_by_the_candidate_does_not_reach_the_tests():
    program = "import collections\ncollections.Counter.__eq__ = lambda self, other: True\ndef letters():\n    return 'zz'\n"
    result = run_python(program, LIMITS, tests="from collections import Counter\nassert Counter(letters()) == Counter('ab')\n")
    assert not result.passed and "AssertionError" in result.stderr, result


def test_an_audit_hook_of_the_candidates_never_sees_the_tests_code():
    """The `exec` of the tests raises an audit event whose argument is their code object, constants and all."""
    program = ("import sys\nsys.addaudithook(lambda event, args: print('saw', event) if '<tests>' in repr(args) else 0)\n"
               "def f():\n    return 1\n")
    result = run_python(program, LIMITS, tests="assert f() == 1\n")
    assert result.passed and "saw" not in result.stdout, result


CORRECT_ON_TASK_0 = {
    "multiprocessing.Pool": """
        from multiprocessing import Pool
        pairs = [(a, b) for i, a in enumerate(numbers) for b in numbers[i + 1:]]
        with Pool(2) as pool:
            gaps = pool.map(_gap, pairs)
        return any(g < threshold for g in gaps)
    def _gap(pair):
        return abs(pair[0] - pair[1])
    """,
    "a Process and a Queue": """
        from multiprocessing import Process, Queue
        queue = Queue()
        worker = Process(target=_close, args=(numbers, threshold, queue))
        worker.start()
        found = queue.get()
        worker.join()
        return found
    def _close(numbers, threshold, queue):
        queue.put(any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:]))
    """,
    "a ProcessPoolExecutor": """
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=2) as pool:
            return any(pool.map(_close_to_any, [(a, numbers[i + 1:], threshold) for i, a in enumerate(numbers)]))
    def _close_to_any(job):
        a, rest, threshold = job
        return any(abs(a - b) < threshold for b in rest)
    """,
    "doctest.testmod() and traceback.print_exc()": """
        import traceback
        try:
            return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
        except Exception:
            traceback.print_exc()
            raise
    import doctest
    doctest.testmod()
    """,
    "a main block that reads stdin": """
        return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
    if __name__ == "__main__":
        values = [float(x) for x in input().split()]
        print(has_close_elements(values, float(input())))
    """,
    "a main block that exits": """
        return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
    def main():
        print(has_close_elements([1.0, 1.05], 0.1))
        return 0
    if __name__ == "__main__":
        import sys
        sys.exit(main())
    """,
}


@pytest.mark.parametrize("program", sorted(CORRECT_ON_TASK_0))
def test_correct_programs_score_one(humaneval, program):
    assert _score(humaneval["HumanEval/0"], CORRECT_ON_TASK_0[program]) == [1.0]


def test_code_labels_grade_through_the_same_harness(humaneval):
    from morkit.question_pool.graders import GRADERS

    query = humaneval["HumanEval/0"]
    right = query.question + _outdent(CORRECT_ON_TASK_0["a main block that exits"])
    hack = query.question + _outdent(HACKS_ON_TASK_0["an answer whose __eq__ always agrees"])
    assert [g.correct for g in GRADERS.load("code")().grade(query, [right, hack])] == [True, False]


def test_the_tests_read_no_file_and_the_failure_names_their_line():
    program = "import os\ndef f():\n    return sorted(os.listdir('.'))\n"
    result = run_python(program, LIMITS, tests="assert f() == ['main.py']\nassert f() == []\n")
    assert not result.passed and 'File "<tests>", line 2' in result.stderr, result.stderr


def test_a_module_named_by_the_candidate_never_runs_in_the_tests_process(humaneval):
    """A second red-team round: a module object named `unittest.__main__` made the tests' process import it,
    which ran test discovery over /work, where the candidate had written code that sent the token."""
    payload = """
        return False
    import types
    open("test_zz.py", "w").write("import os, sys\\nos._exit(0)\\n")
    helper = types.ModuleType("unittest.__main__")
    """
    assert _score(humaneval["HumanEval/0"], payload) == [0.0]


ROUND_TRIPS = {
    "an endless generator, taken item by item": (
        "def fib():\n    a, b = 0, 1\n    while True:\n        yield a\n        a, b = b, a + b\n",
        "g = fib()\nassert [next(g) for _ in range(6)] == [0, 1, 1, 2, 3, 5]\n"),
    "an exception of a class deriving from a built-in one, with its arguments": (
        "import statistics\nclass BadInput(ValueError):\n    pass\n"
        "def mean(xs):\n    return statistics.mean(xs)\ndef check(x):\n    raise BadInput('no', x)\n"
        "def look(d):\n    return d['x']\n",
        "try:\n    mean([])\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError\n"
        "try:\n    check(3)\nexcept ValueError as e:\n    assert e.args == ('no', 3)\n"
        "try:\n    look({})\nexcept KeyError as e:\n    assert e.args[0] == 'x'\n"),
    "module-level iterators and files stay with the candidate": (
        "import itertools\nids = itertools.count()\nit = iter([1, 2, 3])\nwith open(__file__) as fh:\n"
        "    src = fh.read()\ndef first():\n    return next(it)\n",
        "assert first() == 1 and first() == 2\n"),
    "from solution import, dict views, dates and in-place changes": (
        "import datetime\ndef keys(d):\n    return d.keys()\ndef later(day):\n    return day + datetime.timedelta(1)\n"
        "def grow(xs):\n    xs.append(1)\n",
        "import datetime\nfrom solution import keys\nassert keys({'a': 1}) == {'a'}\n"
        "assert later(datetime.date(2024, 2, 28)) == datetime.date(2024, 2, 29)\n"
        "xs = []\ngrow(xs)\nassert xs == [1]\n"),
}


ROUND_TRIPS.update({
    "a defaultdict of a lambda, an exception's own text, a match's groups": (
        "import collections, re\nclass Oops(ValueError):\n    def __str__(self):\n        return 'oops'\n"
        "def counts(s):\n    d = collections.defaultdict(lambda: 0)\n    for c in s:\n        d[c] += 1\n    return d\n"
        "def fail():\n    raise Oops()\ndef date(s):\n    return re.search(r'(\\d+)-(\\d+)', s)\n",
        "assert counts('aab') == {'a': 2, 'b': 1}\n"
        "try:\n    fail()\nexcept ValueError as e:\n    assert str(e) == 'oops'\n"
        "m = date('on 12-25')\nassert m.group(1) == '12' and m.groups() == ('12', '25') and m.group() == '12-25'\n"),
})


@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_what_crosses_between_the_processes_behaves_as_in_one(case):
    program, tests = ROUND_TRIPS[case]
    result = run_python(program, LIMITS, tests=tests)
    assert result.passed, result.stderr[-1500:]


def test_a_third_round_stop_iteration_and_redefined_prompt_helpers_score_zero(humaneval):
    """A StopIteration from a call ended the tests' own map() quietly; a prompt's finished helper (HumanEval/38's
    encode_cyclic, which the tests use to check decode_cyclic) was the candidate's to redefine."""
    stop = run_python("def f(x):\n    raise StopIteration\n", LIMITS,
                      tests="assert all(map(lambda c: f(c[0]) == c[1], [(1, 2), (2, 4)]))\n")
    assert not stop.passed and "raised StopIteration" in stop.stderr
    identity = """
        return s
    def encode_cyclic(s):
        return s
    """
    query = humaneval["HumanEval/38"]
    assert _score(query, identity) == [0.0]
    right = query.question + "    return encode_cyclic(encode_cyclic(s))\n"
    assert [s.value for s in CodeTests(limits=LIMITS).score_query(replace(query, candidates=(Candidate(right),)))] == [1.0]



# A fourth round: the grader trusted what the prompt or the test file arranged. Each case below scored a wrong
# program 1.0 (or a right one 0.0) before tests ran as `__main__`, checks were counted and the function under test
# was always the candidate's.

RIGHT_ADD, WRONG_ADD = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"


def _add_scores(tests: str, question: str = "Write add(a, b).", answers=(RIGHT_ADD, WRONG_ADD), **extra) -> list[float]:
    query = Query("add", question, tuple(Candidate(a) for a in answers), domain="code", tests=tests, extra=extra)
    return [s.value for s in CodeTests(limits=LIMITS).score_query(query)]


_UNITTEST_CASE = ("import unittest\nclass TestAdd(unittest.TestCase):\n    def test_add(self):\n"
                  "        self.assertEqual(add(2, 3), 5)\n")

TESTS_THAT_RAN_NOTHING = {
    "HumanEval's check(add) behind the main guard": "def check(candidate):\n    assert candidate(2, 3) == 5\n\n"
                                                    "if __name__ == '__main__':\n    check(add)\n",
    "unittest.main() behind the main guard": _UNITTEST_CASE + "if __name__ == '__main__':\n    unittest.main()\n",
    "unittest.main(exit=False) with no guard": _UNITTEST_CASE + "unittest.main(exit=False)\n",
    "unittest.main() with no guard": _UNITTEST_CASE + "unittest.main()\n",
    "a TestCase no one runs": _UNITTEST_CASE,
    "a pytest-style function no one calls": "def test_add():\n    assert add(2, 3) == 5\n",
    "a TextTestRunner whose result is not read": _UNITTEST_CASE + "unittest.TextTestRunner().run("
                                                 "unittest.defaultTestLoader.loadTestsFromTestCase(TestAdd))\n",
}


@pytest.mark.parametrize("case", sorted(TESTS_THAT_RAN_NOTHING))
def test_tests_that_never_ran_now_run_and_grade_the_candidate(case):
    assert _add_scores(TESTS_THAT_RAN_NOTHING[case]) == [1.0, 0.0]


@pytest.mark.parametrize("tests", ["def check(candidate):\n    assert candidate(2, 3) == 5\n", "print('no checks')\n",
                                   "assert True\n", "def test_add(x):\n    assert add(x, 0) == x\n"])
def test_test_code_that_runs_no_check_fails_and_says_so(tests):
    query = Query("add", "Write add(a, b).", (Candidate(RIGHT_ADD),), domain="code", tests=tests)
    result = CodeTests(limits=LIMITS).run_tests(query)[0]
    assert result.status == "failed" and result.checks == 0 and "no test check ran" in result.stderr, result


def test_the_entry_point_completes_humaneval_tests_as_its_harness_does():
    """HumanEval's own harness appends `check(<entry_point>)` to tests that only define check(candidate)."""
    tests = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n"
    assert _add_scores(tests, entry_point="add") == [1.0, 0.0]
    query = Query("add", "q", (Candidate(RIGHT_ADD),), domain="code", tests=tests, extra={"entry_point": "add"})
    assert CodeTests(limits=LIMITS).run_tests(query)[0].checks == 2
    with pytest.raises(InputError, match="entry_point"):
        _add_scores(tests, entry_point="add(1)")


def _fenced(prompt: str) -> str:
    return f"Make this code correct and fast. Reply in one ```python block.\n\n```python\n{prompt}```\n"


def _led(prompt: str) -> str:
    return "Complete the following Python code. Reply with the complete program in one ```python block.\n\n" + prompt


PROMPT_FORMS = {"plain": lambda p: p, "fenced in an instruction": _fenced, "after an instruction line": _led}


@pytest.mark.parametrize("form", sorted(PROMPT_FORMS))
def test_the_function_under_test_is_always_the_candidates(form):
    finished = "def add(a, b):\n    return sum([a, b])\n"  # "make this faster": the prompt's own add is right
    stub = 'def add(a, b):\n    """Return a + b."""\n    return a + b\n'
    buggy, todo = "def add(a, b):\n    return a - b\n", "def add(a, b):\n    return 0  # TODO\n"
    for prompt in (finished, stub, buggy, todo):
        assert _add_scores("assert add(2, 3) == 5\n", PROMPT_FORMS[form](prompt)) == [1.0, 0.0], prompt


def test_the_function_under_test_is_the_candidates_when_the_prompt_defines_more_after_it():
    """With no entry point and no check(...), the function under test is not simply the prompt's last one: a usage
    example or a test the prompt shows after it must not make the prompt's own function replace the candidate's."""
    main_after = "Make add faster.\n\ndef add(a, b):\n    return sum([a, b])\n\n\ndef main():\n    print(add(1, 2))\n"
    test_after = ("Make add faster.\n\n```python\ndef add(a, b):\n    return sum([a, b])\n```\n\nIt must pass:\n\n"
                  "```python\ndef test_add():\n    assert add(1, 2) == 3\n```\n")
    helper_first = "def double(x):\n    return 2 * x\n\n\ndef add(a, b):\n    ...\n"  # the stub is the one to write
    for prompt in (main_after, test_after, helper_first):
        assert _add_scores("assert add(1, 2) == 3\nassert add(5, 7) == 12\n", prompt) == [1.0, 0.0], prompt
    wrong = "def add(a, b):\n    return 0\n"
    assert _add_scores("assert add(1, 2) == 3\nassert add(5, 7) == 12\n", main_after, answers=(wrong,)) == [0.0]


def test_a_prompt_of_many_bad_lines_is_read_within_a_bound():
    import time

    from morkit.reward_models.rules.prompt_code import prompt_code

    hostile = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(2500)) + ")\n" * 400
    started = time.perf_counter()
    code = prompt_code(hostile)
    assert time.perf_counter() - started < 10  # about a second; dropping line by line took minutes under load
    assert isinstance(code.functions, tuple)


def test_the_program_is_the_block_that_defines_the_function_under_test():
    answer = ("```python\ndef add(a, b):\n    return a + b\n```\n\nAnd its test:\n\n"
              "```python\ndef test_add():\n    assert add(1, 2) == 3\n```\n")
    query = Query("add", "Write add(a, b).", (Candidate(answer),), domain="code", tests="assert add(2, 3) == 5\n",
                  extra={"entry_point": "add"})
    assert [s.value for s in CodeTests(limits=LIMITS).score_query(query)] == [1.0]


@pytest.fixture(scope="module")
def humaneval_references(data_dir) -> dict[str, str]:
    import gzip
    import json

    with gzip.open(data_dir / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        return {row["task_id"]: row["prompt"] + row["canonical_solution"] for row in map(json.loads, f)}


REDEFINED_HELPERS = {
    "HumanEval/32": "def poly(xs, x):\n    return 0.0\ndef find_zero(xs):\n    return 0.0\n",
    "HumanEval/38": "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n",
    "HumanEval/50": "def encode_shift(s):\n    return s\ndef decode_shift(s):\n    return s\n",
}


@pytest.mark.parametrize("form", sorted(PROMPT_FORMS))
def test_the_prompts_finished_helpers_stay_the_prompts_in_every_form(humaneval, humaneval_references, form):
    for task, hack in REDEFINED_HELPERS.items():
        query = humaneval[task]
        asked = replace(query, question=PROMPT_FORMS[form](query.question))
        fenced_reference = f"```python\n{humaneval_references[task]}```\nIt passes the examples."
        scored = replace(asked, candidates=(Candidate(hack), Candidate(fenced_reference)))
        assert [s.value for s in CodeTests(limits=LIMITS).score_query(scored)] == [0.0, 1.0], task


def test_correct_programs_the_harness_used_to_fail_score_one():
    numpy_prompt = 'import numpy as np\n\ndef add(a: np.ndarray, b):\n    """Add a and b."""\n'
    assert _add_scores("assert add(2, 3) == 5\n", numpy_prompt) == [1.0, 0.0]
    usage = "```python\n{}```\nUse it like this:\n```python\nprint(add(1, 2))\n```\n"
    answers = (usage.format(RIGHT_ADD), usage.format(WRONG_ADD))
    assert _add_scores("assert add(2, 3) == 5\n", answers=answers) == [1.0, 0.0]
    own_tests = RIGHT_ADD + _UNITTEST_CASE.replace("(2, 3), 5", "(1, 1), 2") + "unittest.main()\n"
    assert _add_scores("assert add(2, 3) == 5\n", answers=(own_tests,)) == [1.0]


def test_a_custom_exception_is_caught_by_its_name_and_carries_no_code():
    program = ("class InvalidInput(ValueError):\n    pass\n"
               "class Negative(InvalidInput):\n    def __eq__(self, other):\n        return True\n"
               "class Meta(type):\n    def __instancecheck__(cls, obj):\n        return True\n"
               "class Anything(Exception, metaclass=Meta):\n    pass\n"
               "def root(x):\n    if x < 0:\n        raise Negative('negative', x)\n    return x ** 0.5\n")
    tests = ("try:\n    root(-4)\nexcept InvalidInput as e:\n    assert e.args == ('negative', -4) and e != 5\n"
             "    assert isinstance(e, ValueError) and type(e).__name__ == 'Negative'\n"
             "else:\n    raise AssertionError\n"
             "assert root(4) == 2 and not isinstance(5, Anything) and issubclass(Negative, InvalidInput)\n")
    result = run_python(program, LIMITS, tests=tests)
    assert result.passed and result.checks == 4, result.stderr[-1500:]


def test_children_started_with_spawn_import_the_candidate(humaneval):
    spawned = """
        import multiprocessing
        pairs = [(a, b) for i, a in enumerate(numbers) for b in numbers[i + 1:]]
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            return any(g < threshold for g in pool.map(_gap, pairs))
    def _gap(pair):
        return abs(pair[0] - pair[1])
    """
    assert _score(humaneval["HumanEval/0"], spawned) == [1.0]


def test_an_exception_class_as_the_function_or_a_skip_from_the_candidate_scores_zero():
    """A class of the candidate's the tests call would hand them a truthy object; a unittest.SkipTest it raises
    would skip a failing test."""
    as_class = "class is_even(Exception):\n    pass\n"
    assert not run_python(as_class, LIMITS, tests="assert is_even(2) and is_even(4)\n").passed
    skipper = "import unittest\nfrom unittest import SkipTest\ndef add(a, b):\n    raise unittest.SkipTest('later')\n"
    tests = _UNITTEST_CASE + ("class TestMore(unittest.TestCase):\n    def test_zero(self):\n"
                              "        self.assertEqual(1, 1)\n")
    result = run_python(skipper, LIMITS, tests=tests)
    assert not result.passed and "1 errors" in result.stderr, result.stderr[-800:]
