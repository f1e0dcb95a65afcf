"""The instruction grader: IFEval's strict and loose checks (lm-eval's), offline, on hand-made and shared data."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from morkit.core.errors import UnavailableError
from morkit.core.types import Query
from morkit.question_pool import ifeval
from morkit.question_pool.graders import GRADERS, Grade, grader_name


def _query(*instructions: tuple[str, dict]) -> Query:
    return Query("q", "?", (), domain="instruction",
                 extra={"instruction_id_list": [i for i, _ in instructions], "kwargs": [k for _, k in instructions]})


def _grade(query: Query, texts: list[str | None], loose: bool = False) -> list[Grade]:
    return GRADERS.load("instruction")(loose=loose).grade(query, texts)


def test_an_instruction_query_gets_the_instruction_grader():
    assert grader_name(_query(("punctuation:no_comma", {}))) == "instruction"
    assert GRADERS.load("instruction")().name == "instruction"


@pytest.mark.parametrize("instruction, kwargs, follows, breaks", [
    ("punctuation:no_comma", {}, "No commas here. None at all.", "Well, here is one."),
    ("change_case:english_lowercase", {}, "all of this is lowercase.", "This starts with a capital."),
    ("length_constraints:number_words", {"relation": "at least", "num_words": 5},
     "one two three four five six", "only three words"),
    ("length_constraints:number_words", {"relation": "less than", "num_words": 5}, "only three words",
     "one two three four five six"),
    ("detectable_format:json_format", {}, '```json\n{"a": 1, "b": [2, 3]}\n```', '{"a": 1,'),
    ("keywords:existence", {"keywords": ["ink", "memoirs"]}, "Her memoirs, in ink.", "Her memoirs, in pencil."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], at [address].",
     "Dear [name], at home."),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Done. Any other questions?",
     "Any other questions? Done."),
])
def test_strict_grades_follow_and_break(instruction, kwargs, follows, breaks):
    assert _grade(_query((instruction, kwargs)), [follows, breaks]) == [Grade(True), Grade(False)]


def test_every_instruction_must_be_followed():
    query = _query(("punctuation:no_comma", {}), ("change_case:english_lowercase", {}))
    grades = _grade(query, ["no commas and lowercase", "no commas but Capitals", "lowercase, with a comma"])
    assert [g.correct for g in grades] == [True, False, False]
    assert all(g.reason is None for g in grades)


def test_loose_forgives_a_first_line_and_asterisks_that_strict_does_not():
    query = _query(("punctuation:no_comma", {}))
    preamble = "Sure, here it is:\nno commas in the answer itself"
    assert _grade(query, [preamble]) == [Grade(False)]
    assert _grade(query, [preamble], loose=True) == [Grade(True)]
    ending = _query(("startend:end_checker", {"end_phrase": "Is there anything else I can help with?"}))
    bold = "Here you are. **Is there anything else I can help with?**"
    assert _grade(ending, [bold]) == [Grade(False)]
    assert _grade(ending, [bold], loose=True) == [Grade(True)]
    assert _grade(query, ["Commas, everywhere,\nand, here, too"], loose=True) == [Grade(False)]


def test_instruction_results_give_both_verdicts_and_the_four_figures():
    query = _query(("punctuation:no_comma", {}), ("change_case:english_lowercase", {}))
    texts = ["Sure, here:\nthe answer is written in english, with a comma", "Hi:\nall of this is written in english"]
    results = ifeval.instruction_results(query, texts)
    assert [[(r.strict, r.loose) for r in rs] for rs in results] == [[(False, False), (False, True)],
                                                                     [(True, True), (False, True)]]
    scores = ifeval.ifeval_scores(results)
    assert scores == {"prompt_strict": 0.0, "instruction_strict": 0.25, "prompt_loose": 0.5, "instruction_loose": 0.75}
    assert ifeval.ifeval_scores([]) == dict.fromkeys(scores, 0.0)


def test_an_empty_text_is_false_with_a_reason():
    assert _grade(_query(("punctuation:no_comma", {})), [None, "", "  \n "]) == [Grade(False, "empty response")] * 3


def test_an_unknown_instruction_or_bad_kwargs_is_reported_not_raised():
    unknown = _query(("punctuation:no_comma", {}), ("punctuation:no_semicolon", {}))
    assert _grade(unknown, ["fine"]) == [Grade(False, "unknown instruction 'punctuation:no_semicolon'")]
    relation = _grade(_query(("length_constraints:number_words", {"relation": "more than", "num_words": 3})), ["a b"])
    assert relation[0].correct is False and relation[0].reason.startswith("bad kwargs")
    # A checker given no letter, or a non-letter (IFEval's own data asks for '#'), would draw a random one.
    for kwargs in ({"let_relation": "at least", "let_frequency": 1}, {"let_relation": "at least", "letter": "#",
                                                                     "let_frequency": 1}):
        grade = _grade(_query(("keywords:letter_frequency", kwargs)), ["# a #"])[0]
        assert grade.correct is False and "['letter']" in grade.reason and "random" in grade.reason
    assert _grade(_query(("keywords:letter_frequency", {"let_relation": "at least", "letter": "a",
                                                        "let_frequency": 1})), ["a"]) == [Grade(True)]
    assert _grade(Query("q", "?", (), domain="instruction"), ["x"])[0].reason == "the query has no IFEval instructions"
    mismatched = Query("q", "?", (), extra={"instruction_id_list": ["punctuation:no_comma"], "kwargs": []})
    assert _grade(mismatched, ["x"])[0].reason == "instruction_id_list and kwargs differ in length"


def test_a_checker_that_raises_is_a_reason_not_a_crash(monkeypatch):
    cls = ifeval.checkers()["punctuation:no_comma"]
    monkeypatch.setattr(cls, "check_following", lambda self, value: 1 / 0)
    assert _grade(_query(("punctuation:no_comma", {})), ["x"]) == [
        Grade(False, "checker error: ZeroDivisionError: division by zero")]


def test_nltk_punkt_is_the_trained_english_model_offline():
    query = _query(("length_constraints:number_sentences", {"relation": "less than", "num_sentences": 3}))
    # Two sentences for a trained Punkt (Dr., Mr., p.m. and Jan. are abbreviations); six for an untrained one.
    assert _grade(query, ["Dr. Smith met Mr. Jones at 5 p.m. on Jan. 3. They talked."]) == [Grade(True)]
    capitals = _query(("change_case:capital_word_frequency", {"capital_relation": "at least", "capital_frequency": 2}))
    assert _grade(capitals, ["It is VERY IMPORTANT.", "It is VERY important."]) == [Grade(True), Grade(False)]


def test_grading_leaves_the_global_random_stream_alone():
    random.seed(7)
    expected = random.random()
    random.seed(7)
    hash_letter = {"let_relation": "at least", "letter": "#", "let_frequency": 1}
    _grade(_query(("keywords:letter_frequency", hash_letter)), ["x"])
    assert random.random() == expected


def test_the_shared_gpt4_responses_grade_the_same_every_time(data_dir):
    from morkit.data.datasets import load_spec

    queries = load_spec("ifeval_gpt4:20", data_dir)
    assert len(queries) == 20 and all(len(q.candidates) == 1 for q in queries)
    strict, loose = GRADERS.load("instruction")(), GRADERS.load("instruction")(loose=True)
    first = [strict.grade(q, [c.text for c in q.candidates])[0] for q in queries]
    assert [strict.grade(q, [c.text for c in q.candidates])[0] for q in reversed(queries)] == first[::-1]
    relaxed = [loose.grade(q, [c.text for c in q.candidates])[0] for q in queries]
    assert sum(g.correct for g in first) == 11 and sum(g.correct for g in relaxed) == 13
    assert all(s.correct <= r.correct for s, r in zip(first, relaxed))
    assert [q.id for q, g in zip(queries, first) if g.reason] == ["ifeval-1122"]  # its letter is '#'


def test_the_checkers_are_imported_on_first_use_only():
    code = ("import sys, morkit.question_pool.ifeval; "
            "print(sorted({'lm_eval', 'nltk', 'langdetect'} & set(sys.modules)))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_without_the_checkers_the_error_names_the_extra(monkeypatch):
    ifeval.checkers.cache_clear()
    monkeypatch.setitem(sys.modules, "lm_eval.tasks.ifeval", None)
    try:
        with pytest.raises(UnavailableError, match=r"pip install morkit\[ifeval\]"):
            _grade(_query(("punctuation:no_comma", {})), ["x"])
    finally:
        ifeval.checkers.cache_clear()
