"""Graders by domain, `morkit label`, and agreement with labels the data sets' authors recorded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from morkit.cli.main import main
from morkit.core.types import Candidate, Query
from morkit.data.contract import load_queries
from morkit.question_pool.graders import GRADERS, grader_name, stated_letter

DATA = Path(os.environ.get("MORKIT_DATA_DIR") or Path(__file__).resolve().parents[3] / "shared" / "data")


def _query(**kw) -> Query:
    return Query(id="q", question="?", candidates=(), **kw)


def test_a_query_gets_the_grader_of_its_domain_else_of_what_it_carries():
    assert grader_name(_query(domain="gpqa", reference="B")) == "choice"
    assert grader_name(_query(domain="math", reference="3")) == "math"
    assert grader_name(_query(tests="assert True")) == "code"
    assert grader_name(_query(extra={"stdio_tests": [{"input": "1", "output": "2"}]})) == "code"
    assert grader_name(_query(domain="code", extra={"stdio_tests": []})) == "code"
    assert grader_name(_query(reference="7")) == "math"
    assert grader_name(_query(domain="chat")) is None


def test_strict_math_needs_a_stated_answer_and_lenient_takes_the_last_number():
    q = _query(reference="#### 18")
    texts = ["So she makes 18 dollars.", "The answer is 18.", "\\boxed{18}", "#### 17", ""]
    strict = GRADERS.load("math")().grade(q, texts)
    assert [g.correct for g in strict] == [False, True, True, False, False]
    assert [g.reason for g in strict] == ["no stated final answer", None, None, None, "no stated final answer"]
    assert GRADERS.load("math")(strict=False).grade(q, texts[:1])[0].correct is True


def test_choice_reads_the_stated_letter():
    assert [stated_letter(t) for t in ["The answer is (C).", "Answer: b", "so \\boxed{D}", "A or B?"]] == \
        ["C", "B", "D", None]
    grades = GRADERS.load("choice")().grade(_query(domain="mcq", reference="(C)"), ["The answer is C", "It is A"])
    assert [(g.correct, g.reason) for g in grades] == [(True, None), (False, "no stated option letter")]


def test_label_verb_grades_only_what_lacks_a_label_and_records_why_it_could_not(tmp_path, capsys):
    rows = [{"id": "m", "question": "2*9?", "reference": "18", "candidates": [
                {"text": "The answer is 18."}, {"text": "I think 18"}, {"text": "The answer is 3", "correct": True}]},
            {"id": "c", "question": "add", "tests": "assert add(1, 2) == 3", "candidates": [
                {"text": "def add(a, b):\n    return a + b"}, {"text": "def add(a, b):\n    return 0"}]},
            {"id": "x", "question": "chat", "candidates": [{"text": "hi"}]}]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["label", str(inp), "-o", str(out), "-q"]) == 0
    got = {q.id: q for q in load_queries(out)}
    assert [c.correct for c in got["m"].candidates] == [True, False, True]  # the given label is kept
    assert got["m"].candidates[1].extra["label_reason"] == "no stated final answer"
    assert [c.correct for c in got["c"].candidates] == [True, False] and got["x"].candidates[0].correct is None
    assert "2 candidates graded by reference answer, 2 by tests (1 undecided" in capsys.readouterr().err


def _graded_against_recorded(spec: str, grader: str, per_query: int | None = None) -> list[tuple[bool, bool]]:
    """(the grader's verdict, the recorded label) for the first `per_query` candidates of each query."""
    from morkit.data.datasets import load_spec

    if not (DATA / spec.partition(":")[0]).exists():
        pytest.skip("shared data missing")
    grade = GRADERS.load(grader)().grade
    return [(g.correct, c.correct) for q in load_spec(spec, str(DATA))
            for c, g in zip(q.candidates[:per_query], grade(q, [c.text for c in q.candidates[:per_query]]))]


def test_math_grader_agrees_with_the_recorded_gsm8k_labels():
    pairs = _graded_against_recorded("gsm8k_model_solutions:300", "math")
    assert len(pairs) == 1200 and all(mine == recorded for mine, recorded in pairs)


@pytest.mark.slow
def test_code_grader_agrees_with_recorded_humaneval_verdicts():
    pairs = _graded_against_recorded("humaneval_davinci_samples:6", "code", per_query=10)
    assert len(pairs) == 60 and all(mine == recorded for mine, recorded in pairs)
    assert any(recorded for _, recorded in pairs) and not all(recorded for _, recorded in pairs)


def test_an_unknown_query_keeps_its_candidates_unlabelled():
    from morkit.question_pool.labels import fill_labels

    labelled, report = fill_labels([Query(id="z", question="?", candidates=(Candidate("x"),))])
    assert labelled[0].candidates[0].correct is None and report.no_source == 1


@pytest.mark.parametrize("name, count", [("math500", 500), ("aime24", 30), ("amc23", 40), ("humaneval", 164),
                                         ("mbpp", 427)])
def test_benchmark_loaders_give_bare_questions_with_a_prompt_and_a_grader(name, count):
    from morkit.data.datasets import load_spec

    if not DATA.exists():
        pytest.skip("shared data missing")
    queries = load_spec(name, str(DATA))
    assert len(queries) == count and len({q.id for q in queries}) == count
    assert all(not q.candidates and q.extra["prompt"] and grader_name(q) in ("math", "code") for q in queries)


def test_reference_solutions_pass_their_graders():
    """The benchmarks' own solutions, answered the way an agent would (fenced code, a boxed answer)."""
    import gzip

    from morkit.data.datasets import load_spec

    if not DATA.exists():
        pytest.skip("shared data missing")
    with gzip.open(DATA / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        canonical = {row["task_id"]: row["prompt"] + row["canonical_solution"] for row in map(json.loads, f)}
    mbpp = {f"mbpp-{row['task_id']}": row["code"]
            for row in json.loads((DATA / "mbpp_sanitized" / "sanitized-mbpp.json").read_text(encoding="utf-8"))}
    code = load_spec("humaneval:4", str(DATA)) + load_spec("mbpp:4", str(DATA))
    grader = GRADERS.load("code")()
    for query in code:
        solution = canonical.get(query.id) or mbpp[query.id]
        answers = [f"Here it is:\n```python\n{solution}\n```\n", "```python\ndef nothing():\n    pass\n```"]
        assert [g.correct for g in grader.grade(query, answers)] == [True, False], query.id
    math = load_spec("math500:5", str(DATA)) + load_spec("amc23:3", str(DATA))
    grades = [GRADERS.load("math")().grade(q, [f"... so the answer is \\boxed{{{q.reference}}}.", "no idea"])
              for q in math]
    assert [[g.correct for g in pair] for pair in grades] == [[True, False]] * len(math)
