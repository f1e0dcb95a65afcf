"""Rule verifiers: math consensus by hand-computed values, code tests against real HumanEval verdicts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.reward_models.base import EMPTY_ANSWER_SCORE, QueryRewardModel, RewardModel
from morkit.reward_models.rules.consensus import MathConsensus
from morkit.reward_models.rules.code_tests import CodeTests, humaneval_program
from morkit.runtime.sandbox import SandboxLimits

DATA = Path(os.environ.get("MORKIT_DATA_DIR") or Path(__file__).resolve().parents[3] / "shared" / "data")
HUMANEVAL = DATA / "humaneval_davinci_samples" / "humaneval_py_davinci_200.tasks_lt130.jsonl"


def _query(texts, **kw) -> Query:
    return Query(id="q1", question="What is 1/2 + 1/2 * 1?", candidates=tuple(Candidate(t) for t in texts), **kw)


def test_protocols_and_kind():
    for rm in (MathConsensus(), CodeTests()):
        assert isinstance(rm, QueryRewardModel) and isinstance(rm, RewardModel) and rm.kind == "rule"


def test_math_consensus_by_hand():
    texts = [
        r"so it is \boxed{1}",        # class {1}: 1, 1.0, 2/2 -> 3 of 6
        "Adding gives 1.0\nA: 1.0",
        "The answer is 2/2.",
        r"\boxed{\frac{1}{2}}",       # class {1/2}: 1/2, 0.5 -> 2 of 6
        "#### 0.5",
        "I cannot say.",              # no answer -> 0
    ]
    q = _query(texts, reference="0.5")  # the reference must be ignored
    assert [s.value for s in MathConsensus().score_query(q)] == pytest.approx([3 / 6, 3 / 6, 3 / 6, 2 / 6, 2 / 6, 0.0])
    assert MathConsensus().cache_context(q) is None


def test_math_consensus_empty_answers_and_denominator():
    q = _query(["", "   ", None, "A: 7", "A: 7.0"])
    assert [s.value for s in MathConsensus().score_query(q)] == pytest.approx(
        [EMPTY_ANSWER_SCORE] * 3 + [2 / 5, 2 / 5])


def test_math_consensus_pairs_group_by_question():
    pairs = [("q1", "A: 3"), ("q2", "A: 3"), ("q1", "A: 3"), ("q1", "A: 4"), ("q2", "A: 5")]
    assert [s.value for s in MathConsensus().score(pairs)] == pytest.approx([2 / 3, 1 / 2, 2 / 3, 1 / 3, 1 / 2])


def test_code_tests_needs_tests():
    q = _query(["def f(): return 1"])
    with pytest.raises(InputError, match="q1"):
        CodeTests().score_query(q)
    with pytest.raises(InputError, match="score_query"):
        CodeTests().score([("q", "def f(): pass")])


def test_code_tests_cache_context_is_what_decides_a_score_and_nothing_else():
    from dataclasses import replace

    rm = CodeTests()
    tests = "assert add(2, 3) == 5"
    q = _query(["def add(a, b):\n    return a + b"], tests=tests)
    assert json.loads(rm.cache_context(q)) == {"question": q.question, "tests": tests, "stdio_tests": None,
                                               "entry_point": None}
    named = replace(q, extra={**q.extra, "entry_point": "add"})
    assert json.loads(rm.cache_context(named))["entry_point"] == "add"
    changed = [replace(q, question=q.question + " (again)"), named, replace(named, extra={"entry_point": "sub"}),
               replace(q, tests=tests + "\nassert add(0, 0) == 0")]
    contexts = [rm.cache_context(q)] + [rm.cache_context(c) for c in changed]
    assert len(set(contexts)) == len(contexts)  # each change is a cache miss
    assert rm.cache_context(replace(q, id="another id")) == rm.cache_context(q)  # the id decides nothing


@pytest.mark.slow
def test_code_tests_small_query():
    tests = "assert add(2, 3) == 5"
    q = _query(["def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b", "", "while True: pass"],
               tests=tests)
    rm = CodeTests(limits=SandboxLimits(wall_seconds=2))
    results = rm.run_tests(q)
    assert [r.status for r in results] == ["passed", "failed", "failed", "timeout"]
    assert [s.value for s in rm.score_query(q)] == [1.0, 0.0, EMPTY_ANSWER_SCORE, 0.0]


@pytest.mark.parametrize("exit_early", ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "quit()"])
def test_code_tests_and_labels_fail_a_candidate_that_exits_before_the_tests(exit_early):
    from morkit.question_pool.labels import fill_labels

    q = _query(["def add(a, b):\n    return a - b\n" + exit_early, "def add(a, b):\n    return a + b"],
               tests="assert add(2, 3) == 5")
    assert [s.value for s in CodeTests(limits=SandboxLimits(wall_seconds=3)).score_query(q)] == [0.0, 1.0]
    labelled, report = fill_labels([q])
    assert [c.correct for c in labelled[0].candidates] == [False, True] and report.by_tests == 2


def _humaneval_problems(task_ids):
    if not HUMANEVAL.exists():
        pytest.skip(f"shared data file missing: {HUMANEVAL}")
    with HUMANEVAL.open(encoding="utf-8") as f:
        rows = {r["task_id"]: r for r in map(json.loads, f)}
    return [rows[t] for t in task_ids]


@pytest.mark.slow
def test_code_tests_match_recorded_humaneval_verdicts():
    problems = _humaneval_problems(["HumanEval/0", "HumanEval/1", "HumanEval/9"])
    rm = CodeTests(limits=SandboxLimits(wall_seconds=5, cpu_seconds=5))
    checked = 0
    for row in problems:
        ok = [i for i, s in enumerate(row["status"]) if s == "OK"][:5]
        bad = [i for i, s in enumerate(row["status"]) if s in ("Exception", "SyntaxError")][:5]
        picked = ok + bad
        assert len(ok) == 5 and len(bad) == 5
        q = Query(id=row["task_id"], question=row["prompt"], tests=row["tests"],
                  candidates=tuple(Candidate(humaneval_program(row["prompt"], row["completions"][i])) for i in picked))
        scores = [s.value for s in rm.score_query(q)]
        assert scores == [float(row["passed"][i]) for i in picked], row["task_id"]
        checked += len(picked)
    assert checked == 30


def test_the_program_is_the_last_fenced_block_that_defines_something():
    from morkit.core.grading import program_text

    program = "def add(a, b):\n    return a + b\n"
    assert program_text(f"Here:\n```python\n{program}```\nUse it:\n```python\nprint(add(1, 2))\n```\n") == program
    script = "print(int(input()) * 2)\n"
    assert program_text(f"```python\n{script}```\nSample:\n```\n3\n```\n") == script
    assert program_text("```\n1\n```\n```\n2\n```") == "2\n" and program_text(program) == program


def test_a_stdin_program_followed_by_its_sample_still_passes():
    answer = "```python\nprint(int(input()) * 2)\n```\nFor the sample:\n```\n3\n```\nit prints 6."
    q = Query("double", "Read n, print 2n.", (Candidate(answer),), domain="code",
              extra={"stdio_tests": [{"input": "3\n", "output": "6\n"}, {"input": "5\n", "output": "10\n"}]})
    result = CodeTests(limits=SandboxLimits(wall_seconds=5)).run_tests(q)[0]
    assert result.passed and result.checks == 2, result


def test_the_prompts_code_is_read_in_every_form_and_its_function_under_test_left_out():
    from morkit.reward_models.rules.prompt_code import function_under_test, prompt_code, prompt_helpers

    code = ("import math\nimport numpy as np\nSCALE = 2\n\n"
            "def helper(x: np.ndarray) -> float:\n    return math.sqrt(x)\n\n"
            "def todo(x):\n    \"\"\"To write.\"\"\"\n\ndef solve(x):\n    return helper(x) * SCALE\n")
    indented = "".join(f"   {line}\n" if line else "\n" for line in code.split("\n"))
    unfinished = code.replace("    return helper(x) * SCALE\n", "")  # solve's header only: it does not parse
    fence_in_docstring = code.replace('"""To write."""', '"""To write:\n    ```python\n    todo(1)\n    ```\n    """')
    forms = [code, f"Make solve faster.\n```python\n{code}```\nKeep helper as it is.", f"Fix solve:\n\n{code}",
             f"1. Fix solve:\n\n   ```python\n{indented}   ```\n2. Keep helper.", unfinished,
             fence_in_docstring]
    for question in forms:
        code = prompt_code(question)
        assert function_under_test(code) == ("solve" if question == unfinished else "todo")  # the last stub
        helpers = prompt_helpers(code, function_under_test(code, called=["solve", "print"]))  # what the tests call
        assert "def helper(x):" in helpers and "SCALE = 2" in helpers, helpers
        assert "def solve" not in helpers and "def todo" not in helpers and "except ImportError" in helpers
        assert "def solve" in prompt_helpers(question, under_test="helper") or question == unfinished
    assert prompt_helpers("Write a function that adds two numbers.") == ""


def test_code_tests_cache_key_names_the_grading_that_counts_checks():
    from morkit.reward_models.catalog import identity_of

    assert identity_of(CodeTests()) == identity_of("code-tests") == "code-tests@5"  # its registered version
