"""ACS's aggregators (llm, vote, best) on real ACS runs, their registry and flags, and strict grading both ways."""

from __future__ import annotations

import json

import pytest
from fakes.search import TableVerifier, aggregating_llm

from morkit.cli import main
from morkit.core.errors import InputError, UnknownName
from morkit.core.grading import is_correct
from morkit.core.types import Candidate, Query
from morkit.llm.agents import AgentAnswer, AgentsConfig, AgentSpec
from morkit.llm.base import ScriptedLLM
from morkit.question_pool.ensembles import Ensemble, Normalizer
from morkit.reward_models.rules.consensus import MathConsensus
from morkit.search.aggregate import Aggregator
from morkit.search.aggregators import AGGREGATORS
from morkit.search.methods import SEARCH_METHODS, SearchOptions, SearchSetup
from morkit.search.voting import (
    BestAggregator,
    VoteAggregator,
    answer_keys,
    vote_weights,
)
from morkit.verify.mor import MoRVerifier


def never_called() -> Aggregator:
    """An LLM aggregator whose LLM fails the test if anything asks it."""
    return Aggregator(ScriptedLLM(lambda conversation, i: pytest.fail("the LLM was called")))


def acs_with(aggregator: str, verifier, top_k: int = 2, kind: str | None = "math", llm: Aggregator | None = None):
    """ACS as `morkit search` builds it: through SEARCH_METHODS, with the aggregator named in SearchOptions."""
    agents = AgentsConfig((AgentSpec("a"),), AgentSpec("aggregator"))
    setup = SearchSetup(verifier, llm or never_called(), agents, SearchOptions(top_k=top_k, aggregator=aggregator),
                        kind=kind)
    return SEARCH_METHODS.load("acs")(setup)


# Four answers: "12" twice with middling scores, "7" once on top, "9" at the bottom.
VOTERS = [AgentAnswer("a", "so the total is 12"), AgentAnswer("b", "The answer is 7"),
          AgentAnswer("c", "The answer is 12."), AgentAnswer("d", "The answer is 9")]
VOTE_SCORES = {"so the total is 12": 0.2, "The answer is 7": 0.5, "The answer is 12.": 0.3, "The answer is 9": -2.0}


def test_vote_weighs_agreement_by_score_and_returns_the_best_scored_member():
    texts, scores = [a.text for a in VOTERS], [VOTE_SCORES[a.text] for a in VOTERS]
    # weights e^0.2 + e^0.3 = 2.57 for "12" against e^0.5 = 1.65 for "7": agreement wins the close call
    assert VoteAggregator().aggregate("q", texts, scores) == "The answer is 12."
    assert BestAggregator().aggregate("q", texts, scores) == "The answer is 7"
    # a clear gap lets the top answer outweigh the pair; shifting every score changes nothing
    clear = [0.2, 3.0, 0.3, -2.0]
    assert VoteAggregator().aggregate("q", texts, clear) == "The answer is 7"
    assert VoteAggregator().aggregate("q", texts, [s - 100 for s in scores]) == "The answer is 12."
    assert VoteAggregator(temperature=0.01).aggregate("q", texts, scores) == "The answer is 7"
    weights = vote_weights([-5.0, -5.0, -5.0])
    assert weights == pytest.approx([1 / 3] * 3)  # equal scores: a plain majority vote
    # nothing to group by: the top-scoring answer
    assert VoteAggregator().aggregate("q", ["", "no idea"], [0.1, 0.4]) == "no idea"


def test_vote_groups_by_the_query_kind():
    fenced = "Here:\n```python\ndef f(x):\n    return x + 1\n```"
    plain = "def f(x):   \n\n    return x + 1\n"
    other = "def f(x):\n    return x - 1\n"
    keys = answer_keys([fenced, plain, other], "code")
    assert keys[0] == keys[1] != keys[2]
    assert VoteAggregator(kind="code").aggregate("q", [other, fenced, plain], [0.5, 0.1, 0.2]) == plain
    letters = answer_keys(["The answer is (B)", "\\boxed{B}", "Answer: C"], "choice")
    assert letters == ["B", "B", "C"]
    # math: final answers grouped by value, not text
    assert answer_keys(["so 1/2", "The answer is 0.5", "#### 3"]) == [0, 0, 1]


def test_picking_aggregators_need_one_score_per_answer():
    for aggregator in (VoteAggregator(), BestAggregator()):
        with pytest.raises(InputError, match="picks by the verifier's scores"):
            aggregator.aggregate("q", ["a", "b"])
        with pytest.raises(InputError, match="one score per answer"):
            aggregator.aggregate_many("q", [["a", "b"]], [[0.1]])
    with pytest.raises(InputError, match="temperature"):
        VoteAggregator(temperature=0)


def test_acs_with_best_and_vote_makes_no_llm_call_and_returns_the_verifiers_pick():
    verifier = TableVerifier(VOTE_SCORES)
    best = acs_with("best", verifier).run("q", VOTERS)
    assert best.answer == "The answer is 7" and best.llm_calls == 0 and best.extra["aggregator"] == "best"
    # initial set = top-2 (7, 12.), one greedy step that cannot beat the verifier's top answer, residual
    assert [s.step for s in best.trace] == ["answers", "initial", "greedy", "residual"]
    assert not best.trace[2].accepted and not best.trace[3].accepted
    assert best.rm_calls > 0 and all(s.llm_calls == 0 and s.llm_tokens == 0 for s in best.trace)
    vote2 = acs_with("vote", verifier).run("q", VOTERS)
    assert vote2.answer == "The answer is 7" and vote2.llm_calls == 0  # k=2: the vote of {7, 12.} is 7
    # k = every answer: the initial answer is the weighted vote over all four, whatever it scores
    vote4 = acs_with("vote", verifier, top_k=4).run("q", VOTERS)
    assert vote4.answer == "The answer is 12." and vote4.llm_calls == 0 and vote4.extra["aggregator"] == "vote"
    assert [s.step for s in vote4.trace] == ["answers", "initial", "stop", "residual"]
    # identical texts are scored once per verify call
    assert all(len(set(answers)) == len(answers) for answers, _ in verifier.calls)


def test_acs_with_llm_is_the_default_and_calls_the_llm():
    assert SearchOptions().aggregator == "llm"
    llm = Aggregator(aggregating_llm())
    result = acs_with("llm", TableVerifier(VOTE_SCORES), llm=llm).run("q", VOTERS)
    assert result.llm_calls == llm.calls > 0 and result.extra["aggregator"] == "llm"
    assert result.answer.startswith("agg(")


def test_picking_aggregators_over_a_real_mor_verifier():
    """math-consensus as the MoR verifier: the vote and the top answer agree with the consensus, and a set's
    context keeps every copy of a repeated answer (each copy is a vote)."""
    normalizer = Normalizer("zscore", {"math-consensus": 0.5}, {"math-consensus": 0.25})
    verifier = MoRVerifier(Ensemble(("math-consensus",), (1.0,), "linear"), "pool-zscore", normalizer,
                           {"math-consensus": MathConsensus()})
    answers = [AgentAnswer("a", "The answer is 4"), AgentAnswer("b", "The answer is 4"),
               AgentAnswer("c", "The answer is 5")]
    texts = [a.text for a in answers]
    first = verifier.verify("2+2?", texts, context=texts)
    again = verifier.verify("2+2?", ["The answer is 4"], context=texts)
    assert again[0].score == pytest.approx(first[0].score)  # 2 of 3 in both calls
    for name in ("vote", "best"):
        result = acs_with(name, verifier).run("2+2?", answers)
        assert result.answer == "The answer is 4" and result.llm_calls == 0


def test_unknown_aggregator_is_one_line_naming_the_known_ones(tmp_path, capsys):
    with pytest.raises(UnknownName, match=r"^unknown aggregator 'nope'; known: best, llm, vote$"):
        SearchOptions(aggregator="nope")
    assert AGGREGATORS.names() == ["llm", "vote", "best"]
    with pytest.raises(SystemExit) as exc:
        main(["search", "in.jsonl", "--pool", "p", "-o", "o", "--aggregator", "nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--aggregator" in err and all(n in err for n in ("llm", "vote", "best"))
    config = tmp_path / "run.toml"
    config.write_text('aggregator = "nope"\n[[benchmark]]\nname = "x"\ndata = "gsm8k_test"\n')
    assert main(["pipeline", str(config), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"morkit: error: {config}: unknown aggregator 'nope'; known: best, llm, vote"


def test_search_help_lists_the_aggregators(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--aggregator {llm,vote,best}" in out and "no LLM call" in out and "--strict-grading" in out


def test_pipeline_config_sets_the_aggregator_and_grading(tmp_path):
    from morkit.services.pipeline.config import load_pipeline_config

    config = tmp_path / "run.toml"
    body = '[[benchmark]]\nname = "x"\ndata = "gsm8k_test"\n'
    config.write_text(body)
    # the pipeline grades strictly
    assert load_pipeline_config(config).search_options == SearchOptions(strict_grading=True)
    config.write_text('aggregator = "vote"\nstrict_grading = false\n' + body)
    options = load_pipeline_config(config).search_options
    assert options.aggregator == "vote" and options.strict_grading is False
    config.write_text('strict_grading = "yes"\n' + body)
    with pytest.raises(InputError, match="strict_grading must be true or false"):
        load_pipeline_config(config)


@pytest.mark.parametrize("text, lenient, strict", [
    ("so the total is 18", True, False),
    ("The answer is 18.", True, True),
    ("Adding up gives \\boxed{18}", True, True),
    ("6 + 12 = 18\n#### 18", True, True),
    ("Final answer: 18", True, True),
    ("The answer is 17, since 18 - 1 = 17", False, False),
])
def test_strict_grading_needs_a_stated_final_answer(text, lenient, strict):
    assert is_correct(text, "18") is lenient
    assert is_correct(text, "18", strict=True) is strict


def test_search_records_grade_both_ways():
    from morkit.search.base import SearchResult
    from morkit.search.run import QueryRun

    class Picked:
        def to_json(self):
            return {"ensemble": {"members": ["math-consensus"]}}

    query = Query("q1", "6 + 12?", (), domain="math", reference="18")
    results = {"acs": SearchResult("acs", "so the total is 18", 1.0, ())}
    lenient = QueryRun(query, Picked(), (), 0, (), results).to_json()
    strict = QueryRun(query, Picked(), (), 0, (), results, strict=True).to_json()
    assert lenient["results"]["acs"]["correct"] is True and strict["results"]["acs"]["correct"] is False


def test_pipeline_evaluation_grades_both_ways():
    from morkit.services.pipeline.evaluate import evaluate_benchmark

    # labels as the (strict) label stage wrote them: the unstated "18" is wrong
    candidates = (Candidate("so the total is 18", agent="a", correct=False),
                  Candidate("The answer is 17", agent="b", correct=False))
    test = [Query("q1", "6 + 12?", candidates, domain="math", reference="18")]
    searches = {"q1": {"results": {"acs": {"answer": "so the total is 18"}}, "ensemble": {"members": []}}}

    def accuracy(strict: bool) -> dict[str, float]:
        report = evaluate_benchmark("b", test, test, [], "min", {}, {}, searches, ["acs"], strict).to_json()
        return {m["method"]: m["accuracy"] for m in report["methods"]}

    assert accuracy(True)["ACS"] == 0.0 and accuracy(True)["oracle (pass@N)"] == 0.0
    assert accuracy(False)["ACS"] == 1.0 and accuracy(False)["oracle (pass@N)"] == 1.0


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory, data_dir):
    """A math-consensus pool on 12 GSM8K questions (the real MiniLM embedder)."""
    from morkit.data.datasets import gsm8k_model_solutions
    from morkit.reward_models.options import ScoringOptions
    from morkit.services.pools import build_pool

    path = tmp_path_factory.mktemp("pool") / "pool"
    build_pool(gsm8k_model_solutions(data_dir)[:12], ["math-consensus"],
               options=ScoringOptions(device="cpu", progress=False)).save(path)
    return path


def test_search_cli_vote_and_strict_grading(tmp_path, small_pool):
    query = {"id": "q1", "question": "Tom has 6 apples and buys 12 more. How many apples does he have?",
             "reference": "18", "domain": "math",
             "candidates": [{"text": "He has 18 apples in total"}, {"text": "so 6 + 12 = 18"},
                            {"text": "The answer is 17."}]}
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps(query) + "\n")
    records = {}
    for strict in (False, True):
        out = tmp_path / f"out-{strict}.jsonl"
        args = ["search", str(queries), "--pool", str(small_pool), "-o", str(out), "--aggregator", "vote",
                "--method", "acs", "--method", "best-of-n", "--selection", "pres", "-q", "--device", "cpu",
                "--no-cache"] + (["--strict-grading"] if strict else [])
        assert main(args) == 0
        records[strict] = json.loads(out.read_text())["results"]
    for strict, results in records.items():
        acs = results["acs"]
        assert acs["llm_calls"] == 0 and acs["aggregator"] == "vote" and acs["rm_calls"] > 0
        assert acs["answer"] in ("He has 18 apples in total", "so 6 + 12 = 18")  # the consensus answer, unstated
        assert acs["correct"] is (not strict) and results["best-of-n"]["correct"] is (not strict)
