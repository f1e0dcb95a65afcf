"""ACS as CTTS-MM specifies it: Algorithm A's passes, the step limit of 8, PRES's gamma reading, the
aggregator's sampling (appendix: temperature 0.7, 8,192 tokens) and prompt (Figure J)."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from fakes.queries import scored_query as _query
from fakes.search import TableVerifier, aggregating_llm

from morkit.core.errors import InputError, LLMError
from morkit.core.types import Verdict
from morkit.llm.agents import AgentAnswer, load_agents
from morkit.llm.base import Completion
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.search.acs import ACS
from morkit.search.aggregate import MOA_SYSTEM, Aggregator
from morkit.search.methods import SearchOptions
from morkit.selection.base import Neighbours
from morkit.selection.pres import PRES

ABCD = [AgentAnswer(f"agent {t}", t) for t in "abcd"]


def run(table, answers=ABCD, **options):
    """ACS with the scripted aggregator (its text names the set: agg(a|b|d)) and a verifier scoring by table."""
    return ACS(TableVerifier(table), Aggregator(aggregating_llm()), k=2, residual=False, **options).run("q", answers)


def greedy(result):
    return [(s.tried, s.accepted, s.note.split(":")[0]) for s in result.trace if s.step == "greedy"]


# ------------------------------------------------------------------------------------- item 6
def test_algorithm_a_repeats_passes_until_a_pass_improves_nothing():
    """The issue's sets: {a,b}=1, {a,b,c}=0.5, {a,b,d}=2, {a,b,c,d}=3. One pass keeps d only; Algorithm A's
    second pass adds c, as the argmax rule does."""
    table = {"a": 0.9, "b": 0.8, "c": 0.5, "d": 0.1,
             "agg(a|b)": 1.0, "agg(a|b|c)": 0.5, "agg(a|b|d)": 2.0, "agg(a|b|c|d)": 3.0}
    for order in ({}, {"order": "scores"}):  # c is tried before d either way
        first = run(table, step="first", **order)
        assert (first.answer, first.score, first.extra["members"]) == ("agg(a|b|c|d)", 3.0, [0, 1, 3, 2])
        assert greedy(first) == [(((2, 0.5),), False, "pass 1"), (((3, 2.0),), True, "pass 1"),
                                 (((2, 3.0),), True, "pass 2")]
        assert first.trace[-1].note == "every answer is in the set" and first.llm_calls == 1 + 2 + 1
    assert run(table).answer == "agg(a|b|c|d)"  # argmax: d, then c


def test_a_pass_tries_answers_in_answer_order_and_stops_when_it_improves_nothing():
    """Algorithm A iterates A_0 - S: the answers' own order. Here c (listed first, scored lower) and d each
    improve on {a,b} but not together, so the order decides; `order="scores"` tries d first."""
    table = {"a": 0.9, "b": 0.8, "c": 0.1, "d": 0.5,
             "agg(a|b)": 1.0, "agg(a|b|c)": 2.0, "agg(a|b|d)": 2.5, "agg(a|b|c|d)": 1.5}
    by_answers = run(table, step="first")
    assert by_answers.answer == "agg(a|b|c)"
    assert greedy(by_answers) == [(((2, 2.0),), True, "pass 1"), (((3, 1.5),), False, "pass 1"),
                                  (((3, 1.5),), False, "pass 2")]  # pass 2 retries d, which pass 1 left out
    assert by_answers.trace[-1].note == "pass 2 improved nothing"
    assert run(table, step="first", order="scores").answer == "agg(a|b|d)"
    with pytest.raises(InputError, match="ACS order"):
        run(table, order="random")
    with pytest.raises(InputError, match="acs_order"):
        SearchOptions(acs_order="random")


def test_a_failed_aggregation_in_a_pass_ends_the_search_with_the_current_answer():
    table = {"a": 0.9, "b": 0.8, "c": 0.5, "d": 0.1, "agg(a|b)": 1.0, "agg(a|b|d)": 2.0}
    acs = ACS(TableVerifier(table), Aggregator(aggregating_llm(fail_on="agg(a|b|c)")), k=2, residual=False,
              step="first")
    result = acs.run("q", ABCD)
    assert result.answer == "agg(a|b)" and result.trace[-1].step == "error"


# ------------------------------------------------------------------------------------- item 7
class SetVerifier:
    """Scores an aggregate by the set it names (`rule(members)`), an agent answer by its index (higher first)."""

    name = "sets"
    rm_calls = 0

    def __init__(self, rule):
        self.rule = rule

    def verify(self, question, answers, context=()):
        def score(text):
            found = re.fullmatch(r"agg\((.*)\)", text)
            return self.rule(set(found.group(1).split("|"))) if found else -int(text[1:])
        return [Verdict(float(score(a))) for a in answers]


TWELVE = [AgentAnswer(f"agent {i}", f"x{i:02d}") for i in range(12)]  # x00 and x01 score highest


def test_the_step_limit_defaults_to_the_papers_8_rounds_under_argmax():
    """Appendix D.2: 'the number of aggregating is set to 8'. Every addition improves here, so only the
    limit stops argmax: 8 rounds add 8 of the 10 remaining answers."""
    assert ACS(None, None).max_steps == 8 and SearchOptions().max_steps == 8
    result = ACS(SetVerifier(len), Aggregator(aggregating_llm()), residual=False).run("q", TWELVE)
    assert len(result.extra["members"]) == 2 + 8 and result.trace[-1].note == "step limit (8) reached"
    unlimited = ACS(SetVerifier(len), Aggregator(aggregating_llm()), residual=False, max_steps=None)
    assert len(unlimited.run("q", TWELVE).extra["members"]) == 12


def test_under_first_the_limit_counts_passes_as_algorithm_as_T():
    """A set scores its size only when its additions are the top-numbered answers (x11, x10, ...), so
    each pass keeps exactly one answer: 8 passes keep x11..x04."""
    def suffix(members):
        added = sorted(int(m[1:]) for m in members - {"x00", "x01"})
        return len(members) if added == list(range(12 - len(added), 12)) else 0

    result = ACS(SetVerifier(suffix), Aggregator(aggregating_llm()), residual=False, step="first").run("q", TWELVE)
    assert sorted(result.extra["members"]) == [0, 1] + list(range(4, 12))
    assert result.trace[-1].note == "step limit (8) reached"
    assert {s.note.split(":")[0] for s in result.trace if s.step == "greedy"} == {f"pass {i}" for i in range(1, 9)}


def test_the_cli_limit_defaults_to_8_and_0_lifts_it(monkeypatch, tmp_path):
    import morkit.services.searching as searching
    from morkit.cli import main

    monkeypatch.chdir(tmp_path)
    seen = {}
    monkeypatch.setattr(searching, "run_search", lambda *a, options, **k: seen.setdefault("o", []).append(options)
                        or [])
    monkeypatch.setattr("morkit.question_pool.pool.load_pool", lambda path: None)
    monkeypatch.setattr("morkit.data.contract.load_queries", lambda path: [])
    for extra in ([], ["--max-steps", "0"], ["--max-steps", "3", "--acs-order", "scores"]):
        assert main(["search", "q.jsonl", "--pool", "p", "-o", "out.jsonl", *extra]) == 0
    assert [(o.max_steps, o.acs_order) for o in seen["o"]] == [(8, "answers"), (None, "answers"), (3, "scores")]


def test_pres_gamma_prefers_the_fewest_members_within_gamma_of_the_best(hash_embedder):
    """Each single RM misranks one wrong answer of W; their sum misranks none, so its PRR beats theirs by a
    factor W / (W - 1): within gamma = 0.95 for W = 21, outside it for W = 19."""
    def pool_of(wrong):
        queries = []
        for i in range(6):
            a = [1.5, 2.0] + [0.01 * j for j in range(wrong - 1)]
            b = [1.5] + [0.01 * j for j in range(wrong - 1)] + [2.0]
            queries.append(_query(f"q{i}", {"a": a, "b": b}, [True] + [False] * wrong))
        return build_pool(queries, hash_embedder, config=PoolConfig(max_members=2))

    def chosen(pool, **options):
        rows = np.arange(6)
        neighbours = Neighbours(rows, tuple(pool.questions[r].id for r in rows), np.ones(6, dtype=np.float32))
        return PRES(pool, **options).choose(neighbours, frozenset(pool.rm_names))

    near, far = pool_of(21), pool_of(19)
    assert len(chosen(near).ensemble.members) == 2  # the paper's argmax: the pair
    tolerant = chosen(near, gamma=0.95)
    assert tolerant.ensemble.members == ("a",) and tolerant.details["gamma"] == 0.95
    assert chosen(near).score * 0.95 <= tolerant.score < chosen(near).score
    assert len(chosen(far, gamma=0.95).ensemble.members) == 2
    with pytest.raises(InputError, match="PRES gamma"):
        chosen(near, gamma=1.5)


# ------------------------------------------------------------------------------------- item 8
class RecordingLLM:
    """Replies 'x' and keeps every (conversation, params) it was sent."""

    def __init__(self):
        self.sent = []

    def chat(self, conversations, params):
        self.sent += [(c, params) for c in conversations]
        return [Completion(("x",)) for _ in conversations]


def test_the_aggregator_samples_at_the_papers_settings(tmp_path):
    llm = RecordingLLM()
    Aggregator(llm).aggregate("q", ["1", "2"])
    params = llm.sent[0][1]
    assert (params.temperature, params.max_tokens, params.presence_penalty) == (0.7, 8192, 1.05)
    path = tmp_path / "agents.toml"
    path.write_text('[[agent]]\nname = "x"\n')
    assert (load_agents(path).aggregator.params.temperature, load_agents(path).aggregator.params.max_tokens) == (
        0.7, 8192)
    path.write_text('[defaults]\nmax_tokens = 100\n[[agent]]\nname = "x"\n[aggregator]\ntemperature = 0.2\n')
    set_here = load_agents(path).aggregator.params
    assert (set_here.temperature, set_here.max_tokens) == (0.2, 100)  # a file's own values win
    packaged = load_agents().aggregator.params  # SmolLM2 on CPU: the paper's temperature, a short limit
    assert (packaged.temperature, packaged.max_tokens) == (0.7, 128)


def test_the_default_aggregator_prompt_is_figure_js(paper_text):
    """Figure J: MoA's system prompt with the numbered responses; the user's message 'Question: {question}.'"""
    paper = paper_text("ctts-mm")  # the text breaks the prompt with line numbers ("open-source 1373 models")
    assert '"You have been provided with a set of responses from various open-source' in paper
    assert "highest standards of accuracy and reliability." in paper and "Responses from models:" in paper
    llm = RecordingLLM()
    Aggregator(llm).aggregate(" What is 2+2? ", ["4", " 5 "])
    Aggregator(llm, prompt="moa").aggregate("What is 2+2?", ["4"])
    (ctts, _), (moa, _) = llm.sent
    assert ctts == [{"role": "system", "content": MOA_SYSTEM + "\n1. 4\n2. 5"},
                    {"role": "user", "content": "Question: What is 2+2?."}]
    assert MOA_SYSTEM.startswith("You have been provided with a set of responses from various open-source models")
    assert MOA_SYSTEM.endswith("highest standards of accuracy and reliability.\n\nResponses from models:")
    assert moa[1]["content"] == "What is 2+2?"  # MoA's own layout keeps the bare question


# ------------------------------------------------------------------------------- absolute scores
def test_an_absolute_verifier_scores_each_aggregate_alone_against_the_stored_score():
    """Algorithm A compares MOR(temp_ans) with the stored current_best_score. A verifier whose scores are
    absolute is asked for the new aggregates only; any other one rescores the current answer with them."""
    table = {"a": 0.9, "b": 0.8, "c": 0.5, "d": 0.1,
             "agg(a|b)": 1.0, "agg(a|b|c)": 0.5, "agg(a|b|d)": 2.0, "agg(a|b|c|d)": 3.0}

    class Absolute(TableVerifier):
        absolute_scores = True

    for verifier, asked in ((Absolute(table), [["agg(a|b|c)", "agg(a|b|d)"], ["agg(a|b|c|d)"]]),
                            (TableVerifier(table), [["agg(a|b|c)", "agg(a|b|d)", "agg(a|b)"],
                                                    ["agg(a|b|c|d)", "agg(a|b|d)"]])):
        result = ACS(verifier, Aggregator(aggregating_llm()), residual=False).run("q", ABCD)
        assert result.answer == "agg(a|b|c|d)"
        assert [answers for answers, _ in verifier.calls[2:]] == asked  # after the answers and the initial set


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
