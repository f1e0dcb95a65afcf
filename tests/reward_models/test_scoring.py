"""score_queries with fake pair RMs (no model loads) and table RMs from cached input scores."""

from __future__ import annotations

import math

import pytest

from morkit.core.errors import InputError, ScoreError
from morkit.core.types import Candidate, Query, Score
from morkit.data.contract import parse_query, query_to_json
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.scoring import score_queries
from morkit.reward_models.rules.table import TableRewardModel, table_names


class FakeRM:
    """Pair RM: score = number of characters of the answer / 100; records every call."""

    kind = "orm"

    def __init__(self, name="fake", fail_on_call=None, nan_for=None, truncate_over=None, extra_scores=0):
        self.name = name
        self.calls: list[list[tuple[str, str]]] = []
        self.fail_on_call = fail_on_call
        self.nan_for = nan_for
        self.truncate_over = truncate_over
        self.extra_scores = extra_scores

    @property
    def pairs_seen(self):
        return [p for call in self.calls for p in call]

    def score(self, pairs):
        self.calls.append(list(pairs))
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise RuntimeError("model crashed")
        out = []
        for _, answer in pairs:
            if answer == self.nan_for:
                out.append(Score(float("nan")))
            else:
                cut = self.truncate_over is not None and len(answer) > self.truncate_over
                out.append(Score(len(answer) / 100, truncated=cut))
        return out + [Score(0.0)] * self.extra_scores


def q(qid, question, *texts, **kw):
    return Query(qid, question, tuple(Candidate(text=t) for t in texts), **kw)


def sample():
    return [
        q("q1", "What is 1+1?", "2", "two", "It is 2."),
        q("q2", "Name a colour", "red", "2", "blue-green"),
        q("q3", "What is 1+1?", "two", "three!"),  # same question text as q1: ("What is 1+1?", "two") repeats
    ]


def test_adds_scores_by_name_and_keeps_existing():
    queries = [Query("a", "Q", (Candidate(text="xyz", scores={"old": 0.5}, extra={"k": 1}),))]
    rm = FakeRM()
    (out,) = score_queries(queries, [rm])
    c = out.candidates[0]
    assert c.scores == {"old": 0.5, "fake": 0.03}
    assert c.extra == {"k": 1}
    assert queries[0].candidates[0].scores == {"old": 0.5}  # input left untouched
    assert out.id == "a" and out.question == "Q"


def test_values_follow_candidates_and_duplicates_scored_once():
    rm = FakeRM()
    out = score_queries(sample(), [rm], chunk=64)
    for query in out:
        assert [c.scores["fake"] for c in query.candidates] == [len(c.text) / 100 for c in query.candidates]
    seen = rm.pairs_seen
    assert len(seen) == len(set(seen)) == 7  # 8 candidates, one (question, answer) repeated
    assert ("What is 1+1?", "two") in seen
    assert ("Name a colour", "2") in seen and ("What is 1+1?", "2") in seen  # same answer, other question
    assert len(rm.calls) == 1


def test_chunks_keep_a_question_together_and_are_bounded():
    rm = FakeRM()
    score_queries(sample(), [rm], chunk=3)
    assert [len(c) for c in rm.calls] == [3, 3, 1]
    questions = [q for q, _ in rm.pairs_seen]
    assert questions == sorted(questions)  # a question's candidates are neighbours (prefix reuse)
    for question in set(questions):  # and shortest answer first within a question
        lengths = [len(a) for q, a in rm.pairs_seen if q == question]
        assert lengths == sorted(lengths)


def test_two_rms_and_step_scores():
    class StepRM(FakeRM):
        kind = "prm"

        def score(self, pairs):
            self.calls.append(list(pairs))
            return [Score(0.5, steps=(1.0, 0.5)) for _ in pairs]

    out = score_queries(sample(), [FakeRM("a"), StepRM("b")])
    c = out[1].candidates[2]
    assert c.scores == {"a": 0.1, "b": (1.0, 0.5)}
    assert query_to_json(out[1])["candidates"][2]["scores"] == {"a": 0.1, "b": [1.0, 0.5]}


def test_second_run_with_cache_makes_no_calls(tmp_path):
    path = tmp_path / "c.sqlite"
    first_rm = FakeRM()
    with ScoreCache(path) as cache:
        first = score_queries(sample(), [first_rm], cache=cache, chunk=2)
        assert cache.misses == 7 and cache.hits == 0
    assert len(first_rm.pairs_seen) == 7
    second_rm = FakeRM()
    with ScoreCache(path) as cache:
        second = score_queries(sample(), [second_rm], cache=cache, chunk=2)
        assert cache.hits == 7 and cache.misses == 0
    assert second_rm.calls == []
    assert second == first


def test_cache_key_attribute_separates_rms(tmp_path):
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        score_queries(sample(), [FakeRM()], cache=cache)
        other = FakeRM()
        other.cache_key = "fake@v2"
        score_queries(sample(), [other], cache=cache)
        assert len(other.pairs_seen) == 7


def test_truncated_flag_listed_and_cached(tmp_path):
    path = tmp_path / "c.sqlite"
    with ScoreCache(path) as cache:
        out = score_queries(sample(), [FakeRM(truncate_over=5)], cache=cache)
    with ScoreCache(path) as cache:
        again = score_queries(sample(), [FakeRM()], cache=cache)
    for result in (out, again):
        flags = [c.extra.get("truncated") for c in result[1].candidates]
        assert flags == [None, None, ["fake"]]
    assert query_to_json(again[1])["candidates"][2]["truncated"] == ["fake"]


def test_nan_score_names_query():
    rm = FakeRM(nan_for="blue-green")
    with pytest.raises(ScoreError) as err:
        score_queries(sample(), [rm])
    assert "'q2'" in str(err.value)
    assert "'fake'" in str(err.value)


def test_nan_step_score_is_an_error():
    class BadSteps(FakeRM):
        def score(self, pairs):
            return [Score(0.5, steps=(0.5, float("inf"))) for _ in pairs]

    with pytest.raises(ScoreError, match="'q1'"):
        score_queries(sample()[:1], [BadSteps()])


def test_nan_is_not_cached(tmp_path):
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        with pytest.raises(ScoreError):
            score_queries(sample(), [FakeRM(nan_for="2")], cache=cache, chunk=100)
        assert cache.get_many("fake", [("What is 1+1?", "2")]) == [None]


def test_too_few_scores_is_an_error():
    class Short(FakeRM):
        def score(self, pairs):
            return super().score(pairs)[:-1]

    with pytest.raises(ScoreError, match="returned"):
        score_queries(sample(), [Short()])


def test_too_many_scores_is_an_error():
    with pytest.raises(ScoreError, match="returned"):
        score_queries(sample(), [FakeRM(extra_scores=1)])


def test_failure_keeps_finished_chunks_in_cache(tmp_path):
    path = tmp_path / "c.sqlite"
    rm = FakeRM(fail_on_call=3)
    with ScoreCache(path) as cache:
        with pytest.raises(RuntimeError, match="crashed"):
            score_queries(sample(), [rm], cache=cache, chunk=2)
    done = rm.calls[0] + rm.calls[1]
    assert len(done) == 4
    with ScoreCache(path) as cache:
        assert cache.get_many("fake", done) == [Score(len(a) / 100) for _, a in done]
        assert cache.get_many("fake", rm.calls[2]) == [None] * len(rm.calls[2])
    resumed = FakeRM()
    with ScoreCache(path) as cache:
        out = score_queries(sample(), [resumed], cache=cache, chunk=2)
    assert len(resumed.pairs_seen) == 3  # 7 distinct pairs, 4 already cached
    assert set(rm.calls[2]) <= set(resumed.pairs_seen)
    assert not set(resumed.pairs_seen) & set(done)
    assert out == score_queries(sample(), [FakeRM()])


def test_candidate_without_text_and_pair_rm():
    queries = [sample()[0], Query("no-text", "Q", (Candidate(text="a"), Candidate(text=None, scores={"t": 1.0})))]
    rm = FakeRM()
    with pytest.raises(InputError) as err:
        score_queries(queries, [rm])
    assert "'no-text'" in str(err.value) and "candidate 1" in str(err.value)
    assert rm.calls == []


# ---- table RMs --------------------------------------------------------------------------------------

def table_query():
    return parse_query({
        "id": "t1", "question": "Q",
        "candidates": [
            {"scores": {"orm": 0.25, "prm": [0.9, 0.5, 0.8]}},
            {"scores": {"orm": 2, "prm": [0.5]}},
            {"text": "x", "scores": {"orm": 0.75, "prm": [0.2, 0.4]}},
        ],
    })


@pytest.mark.parametrize("rule, expected", [
    ("min", [0.5, 0.5, 0.2]),
    ("last", [0.8, 0.5, 0.4]),
    ("mean", [(0.9 + 0.5 + 0.8) / 3, 0.5, 0.3]),
    ("prod", [0.9 * 0.5 * 0.8, 0.5, 0.08]),
])
def test_table_prm_reductions(rule, expected):
    rm = TableRewardModel("prm", rule)
    scores = rm.score_query(table_query())
    assert [s.value for s in scores] == pytest.approx(expected)
    assert [s.steps for s in scores] == [(0.9, 0.5, 0.8), (0.5,), (0.2, 0.4)]


def test_table_orm_values_are_floats():
    scores = TableRewardModel("orm").score_query(table_query())
    assert [s.value for s in scores] == [0.25, 2.0, 0.75]
    assert all(isinstance(s.value, float) and s.steps is None for s in scores)


def test_table_unknown_reduction_rejected_early():
    with pytest.raises(ValueError, match="step reduction must be one of"):
        TableRewardModel("prm", "median")


def test_table_rm_through_score_queries(tmp_path):
    queries = [table_query()]
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        out = score_queries(queries, [TableRewardModel("orm"), TableRewardModel("prm", "last")], cache=cache)
        assert cache.hits == cache.misses == 0  # table scores never touch the cache
    assert [c.scores for c in out[0].candidates] == [c.scores for c in queries[0].candidates]


def test_table_missing_score_names_query():
    query = parse_query({"id": "gap", "question": "Q",
                         "candidates": [{"scores": {"orm": 0.1}}, {"scores": {"other": 0.2}}]})
    with pytest.raises(InputError) as err:
        score_queries([query], [TableRewardModel("orm")])
    assert "'gap'" in str(err.value) and "candidate 1" in str(err.value) and "'orm'" in str(err.value)


def test_table_rm_refuses_pairs():
    with pytest.raises(InputError, match="table"):
        TableRewardModel("orm").score([("q", "a")])


def test_table_names_first_seen_order():
    queries = [table_query(), parse_query({"id": "b", "question": "Q", "candidates": [{"scores": {"z": 1, "orm": 1}}]})]
    assert table_names(queries) == ["orm", "prm", "z"]


def test_empty_inputs():
    assert score_queries([], [FakeRM()]) == []
    assert math.isfinite(score_queries(sample(), [FakeRM()])[0].candidates[0].scores["fake"])


def test_a_score_is_served_only_under_the_truncation_it_was_made_under(tmp_path):
    from morkit.reward_models.truncation import Truncation

    path = tmp_path / "c.sqlite"
    first = FakeRM(truncate_over=5)
    first.truncation = Truncation(256, "right")
    with ScoreCache(path) as cache:
        score_queries(sample(), [first], cache=cache)
        same = FakeRM(truncate_over=5)
        same.truncation = Truncation(256, "right")
        score_queries(sample(), [same], cache=cache)
        assert same.calls == []  # the same truncation: every score holds
        middle = FakeRM(truncate_over=5)
        middle.truncation = Truncation(256, "middle")
        score_queries(sample(), [middle], cache=cache)
        # the truncation is part of the RM's cache key: every pair is scored again under another policy
        assert len(middle.pairs_seen) == 7
        shorter = FakeRM(truncate_over=5)
        shorter.truncation = Truncation(128, "middle")
        score_queries(sample(), [shorter], cache=cache)
        assert len(shorter.pairs_seen) == 7  # nor under another limit


def test_in_process_engines_a_user_registers_are_resident_one_at_a_time():
    # a `vllm`-family RM (the user's own engine, built in this process) is a model: loading the next one first
    # releases it, and its scores are keyed by its registered name
    import morkit
    from morkit.reward_models.catalog import REWARD_MODELS

    events = []

    class Engine:
        name = "whatever-the-engine-calls-itself"

        def __init__(self, tag):
            self.tag = tag
            events.append(f"load {tag}")

        def score(self, pairs):
            return [Score(float(len(a))) for _, a in pairs]

        def close(self):
            events.append(f"close {self.tag}")

    for tag in "AB":
        REWARD_MODELS.register(f"test-engine-{tag}", lambda tag=tag: Engine(tag), "a user's engine", runs="vllm")
    try:
        scored = morkit.score([Query("q", "2+2?", (Candidate("4"), Candidate("five")))], ["test-engine-A", "test-engine-B"])
    finally:
        for tag in "AB":
            REWARD_MODELS.unregister(f"test-engine-{tag}")
    assert events == ["load A", "close A", "load B", "close B"]
    assert [c.scores for c in scored[0].candidates] == [{"test-engine-A": 1.0, "test-engine-B": 1.0},
                                                         {"test-engine-A": 4.0, "test-engine-B": 4.0}]
