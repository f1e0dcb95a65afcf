"""GPQA's CSV and LiveCodeBench's JSONL read in their public formats, graded by choice letter and by stdin/stdout tests.

Neither data set is in the shared data, so each test writes small files in the release's exact format."""

from __future__ import annotations

import base64
import csv
import json
import logging
import os
import pickle
import zlib

import pytest

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.data.datasets import load_spec
from morkit.question_pool.graders import GRADERS, grader_name
from morkit.reward_models.rules.code_tests import CodeTests, stdio_output_matches
from morkit.runtime.sandbox import SandboxLimits

GPQA_HEADER = ["Pre-Revision Question", "Pre-Revision Correct Answer", "Question", "Correct Answer",
               "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3", "Explanation", "Record ID",
               "High-level domain", "Subdomain"]


def _gpqa_row(i: int, question: str | None = None) -> dict[str, str]:
    return {"Pre-Revision Question": "old", "Pre-Revision Correct Answer": "old", "Explanation": "because",
            "Question": question or f"Question {i}: which is right?", "Correct Answer": f"right {i}",
            "Incorrect Answer 1": f"wrong {i}a", "Incorrect Answer 2": f"wrong {i}b",
            "Incorrect Answer 3": f"wrong {i}c", "Record ID": f"rec{i:04d}XyZ",
            "High-level domain": "Physics", "Subdomain": "Optics"}


def _write_gpqa(data_dir, rows, name="gpqa_diamond.csv", header=GPQA_HEADER):
    folder = data_dir / "gpqa"
    folder.mkdir(exist_ok=True)
    with open(folder / name, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return folder / name


def test_gpqa_options_are_shuffled_per_record_and_the_reference_letter_names_the_correct_answer(tmp_path):
    tricky = 'A "quoted" question, with commas,\nand a second line?'
    _write_gpqa(tmp_path, [_gpqa_row(i, tricky if i == 3 else None) for i in range(12)])
    queries = load_spec("gpqa", data_dir=tmp_path)
    assert [q.id for q in queries] == [f"gpqa-rec{i:04d}XyZ" for i in range(12)]
    for i, q in enumerate(queries):
        options = dict(line[1:].split(") ", 1) for line in q.question.splitlines() if line[:1] == "(")
        assert sorted(options.values()) == sorted([f"right {i}", f"wrong {i}a", f"wrong {i}b", f"wrong {i}c"])
        assert options[q.reference] == f"right {i}" and f"({q.reference}) right {i}" in q.extra["prompt"]
        assert q.domain == "choice" and grader_name(q) == "choice" and not q.candidates
        assert q.extra["subdomain"] == "Optics" and "The answer is (X)" in q.extra["prompt"]
    assert queries[3].question.startswith(tricky + "\n\n(A) ")
    assert len({q.reference for q in queries}) > 1  # not always the first option
    assert load_spec("gpqa", data_dir=tmp_path) == queries  # the same order on every load
    grades = GRADERS.load("choice")().grade(queries[0], [f"... so The answer is ({queries[0].reference}).",
                                                         "The answer is (Z)."])
    assert [g.correct for g in grades] == [True, False]


def test_gpqa_main_reads_its_own_file(tmp_path):
    _write_gpqa(tmp_path, [_gpqa_row(1)], name="gpqa_main.csv")
    assert [q.id for q in load_spec("gpqa_main", data_dir=tmp_path)] == ["gpqa-rec0001XyZ"]
    with pytest.raises(InputError, match=r"data set 'gpqa' is not here \(no .*gpqa_diamond.csv\): GPQA is gated"):
        load_spec("gpqa", data_dir=tmp_path)


def test_a_gpqa_file_of_the_wrong_format_names_the_file_and_line(tmp_path):
    path = _write_gpqa(tmp_path, [_gpqa_row(1)], header=[c for c in GPQA_HEADER if c != "Record ID"])
    with pytest.raises(InputError, match=rf"^{path}:1: .*lacks 'Record ID'") as info:
        load_spec("gpqa", data_dir=tmp_path)
    assert "\n" not in str(info.value)
    rows = [_gpqa_row(1, "two\nlines"), _gpqa_row(2), {**_gpqa_row(3), "Incorrect Answer 2": " "}]
    _write_gpqa(tmp_path, rows)  # header on line 1, row 1 on lines 2-3, row 2 on 4, row 3 on 5
    with pytest.raises(InputError, match=rf"^{path}:5: unexpected row shape .*empty"):
        load_spec("gpqa", data_dir=tmp_path)
    with open(path, "a", encoding="utf-8") as f:
        f.write("only,three,fields\n")
    with pytest.raises(InputError, match=rf"^{path}:5: "):  # the first bad row is named
        load_spec("gpqa", data_dir=tmp_path)
    _write_gpqa(tmp_path, rows[:2])
    with open(path, "a", encoding="utf-8") as f:
        f.write("only,three,fields\n")
    with pytest.raises(InputError, match=rf"^{path}:5: a record of 3 fields under a header of 11"):
        load_spec("gpqa", data_dir=tmp_path)
    path.write_text('{"question": "a JSONL line, not the CSV"}\n')
    with pytest.raises(InputError, match=rf"^{path}:1: not the expected CSV"):
        load_spec("gpqa", data_dir=tmp_path)


# --- LiveCodeBench -----------------------------------------------------------------------------------------

SUM_PROBLEM = "Read N, then N integers on one line; print their sum, then their maximum."
SOLUTION = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs))\nprint(max(xs))\n"


def _compressed(value) -> str:
    """How the release stores large private tests: base64(zlib(pickle(JSON string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


def _lcb_row(qid: str, public: list, private, *, platform="atcoder", starter="", metadata="{}",
             content=SUM_PROBLEM) -> dict:
    return {"question_title": f"Problem {qid}", "question_content": content, "platform": platform,
            "question_id": qid, "contest_id": "abc300", "contest_date": "2024-05-04T00:00:00",
            "starter_code": starter, "difficulty": "easy", "public_test_cases": json.dumps(public),
            "private_test_cases": private if isinstance(private, str) else json.dumps(private),
            "metadata": metadata}


def _stdin_test(numbers: list[int]) -> dict:
    return {"input": f"{len(numbers)}\n{' '.join(map(str, numbers))}\n",
            "output": f"{sum(numbers)}\n{max(numbers)}\n", "testtype": "stdin"}


def _write_lcb(data_dir, files: dict[str, list[dict]]):
    folder = data_dir / "livecodebench"
    folder.mkdir(exist_ok=True)
    for name, rows in files.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def _lcb_data(tmp_path):
    private = [_stdin_test([5, -2, 9]), _stdin_test(list(range(1, 2001)))]
    leetcode = _lcb_row("2999", [{"input": "[1, 2]\n3", "output": "[0, 1]", "testtype": "functional"}], [],
                        platform="leetcode", starter="class Solution:\n    def twoSum(self, nums, target):\n",
                        metadata='{"func_name": "twoSum"}')
    return _write_lcb(tmp_path, {
        "test.jsonl": [_lcb_row("abc300_a", [_stdin_test([1, 2, 3])], _compressed(json.dumps(private))), leetcode],
        "test2.jsonl": [_lcb_row("abc301_b", [_stdin_test([7])], [_stdin_test([4, 4])])],
        "other.jsonl": [{"not": "a test file"}]})  # only test*.jsonl files are read


def test_livecodebench_stdin_problems_load_with_all_their_tests_and_call_based_ones_are_counted(tmp_path, caplog):
    _lcb_data(tmp_path)
    with caplog.at_level(logging.WARNING, logger="morkit.data.benchmarks"):
        queries = load_spec("livecodebench", data_dir=tmp_path)
    assert [q.id for q in queries] == ["lcb-abc300_a", "lcb-abc301_b"]  # test.jsonl before test2.jsonl
    assert "skipped 1 of 3 problems, the call-based ones" in caplog.text
    first = queries[0]
    assert [t["input"].split("\n")[0] for t in first.extra["stdio_tests"]] == ["3", "3", "2000"]  # public first
    assert first.extra["stdio_tests"][2]["output"] == "2001000\n2000\n"  # from the compressed private blob
    assert first.domain == "code" and grader_name(first) == "code" and first.tests is None
    assert first.question == SUM_PROBLEM and SUM_PROBLEM in first.extra["prompt"]
    assert "standard input" in first.extra["prompt"] and "```python" in first.extra["prompt"]
    assert first.extra["platform"] == "atcoder" and first.extra["difficulty"] == "easy"


def test_the_code_grader_runs_stdin_stdout_tests(tmp_path):
    query = load_spec("livecodebench", data_dir=_lcb_data(tmp_path).parent)[0]
    answers = {
        "correct, fenced": f"Here:\n```python\n{SOLUTION}```\n",
        "trailing spaces and blank lines": SOLUTION.replace("print(sum(xs))", "print(sum(xs), end='   \\n')")
        + "print()\nprint('  ')\n",
        "exits 0 early, after printing": SOLUTION + "import sys\nsys.exit(0)\nprint('unreached')\n",
        "wrong output": SOLUTION.replace("max(xs)", "min(xs)"),
        "crashes": "n = int(input())\nraise RuntimeError('boom')\n",
        "crashes after the right output": SOLUTION + "raise SystemExit(1)\n",
        "prints nothing": "pass\n",
        "a line too many": SOLUTION + "print(0)\n",
    }
    grades = GRADERS.load("code")().grade(query, list(answers.values()))
    assert {name: g.correct for name, g in zip(answers, grades)} == {
        name: name in ("correct, fenced", "trailing spaces and blank lines", "exits 0 early, after printing")
        for name in answers}
    assert all(g.reason is None for g in grades)
    rm = CodeTests()  # the code-tests RM agrees with the grader on the same programs
    programs = Query(query.id, query.question, (Candidate(SOLUTION), Candidate(answers["wrong output"])),
                     extra=query.extra)
    assert [s.value for s in rm.score_query(programs)] == [1.0, 0.0]


@pytest.mark.slow
def test_stdin_stdout_tests_stop_at_the_first_failure_and_keep_limits_per_test():
    tests = [{"input": "2\n", "output": "4\n"}, {"input": "3\n", "output": "9\n"}, {"input": "1\n", "output": "1\n"}]
    query = Query("sq", "square it", (Candidate("x = int(input())\nprint(x * x)"),
                                      Candidate("x = int(input())\nprint(x + x)"),
                                      Candidate("x = int(input())\nwhile x == 3: pass\nprint(x * x)"),
                                      Candidate("")), extra={"stdio_tests": tests})
    results = CodeTests(limits=SandboxLimits(wall_seconds=1.5, cpu_seconds=5)).run_tests(query)
    assert [r.status for r in results] == ["passed", "failed", "timeout", "failed"]
    assert results[1].stderr.endswith("stdin/stdout test 2 of 3: wrong output")  # 2 + 2 == 2 * 2, not 3 + 3
    assert results[2].stderr.endswith("test 2 of 3: the program did not exit 0")  # its own wall limit, then stop
    big = "\n".join(map(str, range(60_000))) + "\n"  # ~350 KB, far over the default 64 KiB output cap
    query = Query("big", "count", (Candidate("print('\\n'.join(map(str, range(int(input())))))"),),
                  extra={"stdio_tests": [{"input": "60000", "output": big}]})
    assert CodeTests().run_tests(query)[0].passed


def test_code_tests_cache_context_holds_the_test_code_and_the_stdio_tests():
    from morkit.reward_models.catalog import identity_of

    rm = CodeTests()
    code_only = Query("c", "add", (), tests="assert add(1, 2) == 3")
    both = Query("c", "add", (), tests="assert add(1, 2) == 3", extra={"stdio_tests": [{"input": "1", "output": "2"}]})
    assert rm.cache_context(both) != rm.cache_context(code_only) == rm.cache_context(Query("d", "add", (),
                                                                                           tests=code_only.tests))
    assert json.loads(rm.cache_context(both)) == {"question": "add", "tests": code_only.tests, "entry_point": None,
                                                  "stdio_tests": [{"input": "1", "output": "2"}]}
    for other in (Query("c", "add two numbers", (), tests=code_only.tests),
                  Query("c", "add", (), tests=code_only.tests, extra={"entry_point": "add"})):
        assert rm.cache_context(other) != rm.cache_context(code_only)  # the question text, the entry point
    assert identity_of(rm) == "code-tests@5"  # the tests run as __main__ and pass only with a check run
    for bad in ([], [{"input": 1, "output": "2"}], "1 -> 2", [{"input": "1"}]):
        with pytest.raises(InputError, match="'c': 'stdio_tests' must be"):
            rm.cache_context(Query("c", "add", (), extra={"stdio_tests": bad}))
    with pytest.raises(InputError, match="has no tests"):
        rm.cache_context(Query("c", "add", ()))


@pytest.mark.parametrize("output, expected, same", [
    ("3\n", "3", True), ("3   \n\n\n", "3\n", True), ("  3\n", "3\n", True), ("\n\n1 2\n", "1 2\n", True),
    ("1.0 2\n", "1 2.00\n", True), ("1 2\r\n3\r\n", "1 2\n3\n", True), ("", "\n", True),
    ("1  2\n", "1 2\n", True), ("1e3\n", "1000\n", True), ("nan\n", "nan\n", True),
    ("a  b\n", "a b\n", False), ("1 2 \n", "1\n2\n", False), ("Yes\n", "YES\n", False), ("4\n", "3\n", False),
    ("3\n\n4\n", "3\n4\n", False), ("NaN 1\n", "NaN 1.0\n", False), ("sNaN\n", "x\n", False),
])
def test_output_comparison_is_livecodebench_s(output, expected, same):
    """Lines stripped at both ends, outer blank lines dropped, numbers equal as Decimals (grade_stdio)."""
    assert stdio_output_matches(output, expected) is same


def test_a_malicious_pickle_in_the_test_data_is_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    folder = _write_lcb(tmp_path, {"test.jsonl": [
        _lcb_row("ok_1", [_stdin_test([1])], [_stdin_test([2])]),
        _lcb_row("evil_2", [_stdin_test([1])], base64.b64encode(zlib.compress(pickle.dumps(Exploit()))).decode())]})
    with pytest.raises(InputError) as info:
        load_spec("livecodebench", data_dir=tmp_path)
    message = str(info.value)
    assert message.startswith(f"{folder / 'test.jsonl'}:2: ") and "\n" not in message
    assert "refused to load" in message and "system" in message
    assert not marker.exists()


@pytest.mark.parametrize("row, why", [
    ({"question_id": "x"}, "KeyError"),
    ({**_lcb_row("x", [_stdin_test([1])], []), "public_test_cases": "[{\"input\": 1}]"}, "not a list of"),
    ({**_lcb_row("x", [_stdin_test([1])], []), "private_test_cases": "bm90IHpsaWI="}, "neither JSON nor base64"),
    ({**_lcb_row("x", [{**_stdin_test([1]), "testtype": "other"}], [])}, "tests of types"),
    ({**_lcb_row("x", [_stdin_test([1])], []), "private_test_cases": _compressed([1, 2])}, "holds a list"),
])
def test_a_livecodebench_file_of_the_wrong_format_names_the_file_and_line(tmp_path, row, why):
    folder = _write_lcb(tmp_path, {"test.jsonl": [_lcb_row("fine", [_stdin_test([1])], []), row]})
    with pytest.raises(InputError, match=rf"^{folder / 'test.jsonl'}:2: unexpected row shape .*{why}"):
        load_spec("livecodebench", data_dir=tmp_path)


def test_livecodebench_needs_its_files_and_unique_ids(tmp_path):
    (tmp_path / "livecodebench").mkdir()
    with pytest.raises(InputError, match=r"data set 'livecodebench' is not here \(no .*livecodebench/test\*\.jsonl\)"):
        load_spec("livecodebench", data_dir=tmp_path)
    folder = _write_lcb(tmp_path, {"test.jsonl": [_lcb_row("a", [_stdin_test([1])], [])],
                                   "test2.jsonl": [_lcb_row("a", [_stdin_test([1])], [])]})
    with pytest.raises(InputError, match=rf"^{folder / 'test2.jsonl'}:1: .*'a' was already loaded"):
        load_spec("livecodebench", data_dir=tmp_path)


def test_code_tests_runs_a_fenced_answers_last_code_block_as_the_grader_does():
    fenced = "Here is my solution:\n```python\ndef add(a, b):\n    return a + b\n```\nIt adds."
    query = Query("c", "add", (Candidate(fenced), Candidate("def add(a, b):\n    return a - b")),
                  tests="assert add(1, 2) == 3")
    assert [s.value for s in CodeTests().score_query(query)] == [1.0, 0.0]
