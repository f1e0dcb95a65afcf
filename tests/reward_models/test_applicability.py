"""RM applicability: a query outside an RM's domains is skipped (missing score, recorded, counted); a query of its
domains without the fields it needs is a data error. Then mixed-domain pools, selection and the report."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.data.contract import save_queries
from morkit.question_pool.pool import PoolConfig, build_pool
from morkit.question_pool.report import write_report
from morkit.reward_models.applicability import ALL, Applicability
from morkit.reward_models.catalog import REWARD_MODELS, applicability_of
from morkit.reward_models.rules.consensus import MathConsensus
from morkit.reward_models.rules.code_tests import CodeTests
from morkit.reward_models.scoring import fill_missing_scores, score_queries, skip_counts
from morkit.selection.coverage import covered_rows
from morkit.selection.learned_method import stored_fits, with_stored_learned
from morkit.selection.router import Router

CODE = Applicability(frozenset({"code"}), ("tests", "stdio_tests"))


def _q(qid, domain=None, tests=None, texts=("The answer is 4.", "The answer is 5."), **extra):
    return Query(qid, f"question {qid}", tuple(Candidate(t) for t in texts), domain=domain, tests=tests, extra=extra)


def test_the_skip_rule():
    assert CODE.skip_reason(_q("m", "math"), "code-tests") == "code-tests scores code queries, not 'math' ones"
    assert CODE.skip_reason(_q("c", "code", tests="assert True"), "code-tests") is None
    assert CODE.check(_q("s", "code", stdio_tests=[{"input": "", "output": "1"}]), "code-tests") is None
    # no domain: the fields decide, and a query without them is skipped, not an error
    assert CODE.check(_q("n", None), "code-tests") == "no tests or stdio_tests and no domain"
    assert CODE.check(_q("t", None, tests="assert True"), "code-tests") is None
    # the RM's own domain without its fields: a data error naming the query, not a skip
    assert CODE.skip_reason(_q("bad", "code", tests="  "), "code-tests") is None
    with pytest.raises(InputError, match=r"query 'bad' \(domain 'code'\) has no tests or stdio_tests"):
        CODE.check(_q("bad", "code", tests="  "), "code-tests")
    # a required field without domains: present or skipped
    needs_reference = Applicability(fields=("reference",))
    assert needs_reference.check(_q("r", "math"), "ref-rm") == "no reference"
    assert needs_reference.describe() == "all domains; needs reference" and ALL.describe() == "all"
    assert ALL.check(_q("x", "anything"), "any") is None


def test_rms_declare_what_they_apply_to(capsys):
    assert applicability_of("code-tests") == CODE and applicability_of(CodeTests()) == CODE
    assert applicability_of("math-consensus").domains == {"math", "choice"}
    assert applicability_of("smollm2-orm") == ALL and applicability_of("some-table") == ALL
    REWARD_MODELS.register("test-code-judge", MathConsensus, "a code-only rule", kind="rule",
                           applies={"domains": ["code"]})
    try:
        assert applicability_of("test-code-judge") == Applicability(frozenset({"code"}))
        assert main(["rms"]) == 0
        out = capsys.readouterr().out
        assert "APPLIES TO" in out and "code; needs tests or stdio_tests" in out
        assert main(["rms", "math-consensus", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["applies_to"] == "choice, math"
    finally:
        REWARD_MODELS.unregister("test-code-judge")
    with pytest.raises(InputError, match="applicability"):
        Applicability.of({"domain": "code"})


class CountingRM:
    name, kind = "counting", "orm"

    def __init__(self):
        self.pairs = 0

    def score(self, pairs):
        from morkit.core.types import Score

        self.pairs += len(pairs)
        return [Score(float(len(a))) for _, a in pairs]


def test_scoring_skips_what_does_not_apply_and_fails_on_data_errors():
    math = _q("m", "math", texts=("The answer is 4.", "It is 4.", "The answer is 5."))
    math = replace(math, candidates=tuple(Candidate(c.text, scores={"code-tests": 0.5})  # a stale score
                                          for c in math.candidates))
    code = _q("c", "code", tests="assert f() == 1", texts=("def f():\n    return 1\n", "def f():\n    return 2\n"))
    loose = _q("n", None, texts=("x = 1",))
    scored = score_queries([math, code, loose], [CodeTests(), MathConsensus()])
    by_id = {q.id: q for q in scored}
    assert [c.scores for c in by_id["m"].candidates] == [{"math-consensus": 2 / 3}] * 2 + [{"math-consensus": 1 / 3}]
    assert by_id["m"].extra["skipped_rms"] == {"code-tests": "code-tests scores code queries, not 'math' ones"}
    assert [c.scores for c in by_id["c"].candidates] == [{"code-tests": 1.0}, {"code-tests": 0.0}]
    assert set(by_id["c"].extra["skipped_rms"]) == {"math-consensus"}
    assert "code-tests" in by_id["n"].extra["skipped_rms"] and "math-consensus" in by_id["n"].candidates[0].scores
    assert skip_counts(scored) == {"code-tests": 2, "math-consensus": 1}
    # rescoring where it now applies clears the record
    again = score_queries([replace(by_id["c"], domain="math")], [MathConsensus()])
    assert "skipped_rms" not in again[0].extra
    # a code query without tests fails the run before any RM scores anything, also when RMs fill gaps one by one
    counting = CountingRM()
    broken = _q("broken", "code")
    with pytest.raises(InputError, match="query 'broken'"):
        score_queries([math, broken], [counting, CodeTests()])
    with pytest.raises(InputError, match="query 'broken'"):
        fill_missing_scores([math, broken], [["counting", "code-tests"]] * 2,
                            {"counting": counting, "code-tests": CodeTests()})
    assert counting.pairs == 0


def test_score_cli_counts_skips_and_names_a_broken_query(tmp_path, capsys):
    good = tmp_path / "mixed.jsonl"
    save_queries(good, [_q("m1", "math"), _q("m2", "math"),
                        _q("c1", "code", tests="assert f() == 1", texts=("def f():\n    return 1\n",))])
    out = tmp_path / "out.jsonl"
    assert main(["score", str(good), "-o", str(out), "--rm", "code-tests", "--rm", "math-consensus"]) == 0
    err = capsys.readouterr().err
    assert "not applicable, scores missing: code-tests on 2 queries; math-consensus on 1 queries" in err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["skipped_rms"]["code-tests"].startswith("code-tests scores code queries")
    bad = tmp_path / "bad.jsonl"
    save_queries(bad, [_q("m1", "math"), _q("c2", "code")])
    target = tmp_path / "never.jsonl"
    assert main(["score", str(bad), "-o", str(target), "--rm", "code-tests"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "query 'c2' (domain 'code') has no tests" in err and "Traceback" not in err
    assert not target.exists()


def _labelled(qid, domain, scores, question):
    """Four answers, the first right; `scores`: RM -> four values."""
    return Query(qid, question, tuple(Candidate(f"answer {i} of {qid}", correct=i == 0,
                                                scores={k: v[i] for k, v in scores.items()}) for i in range(4)),
                 domain=domain, tests="assert True" if domain == "code" else None)


def _mixed_pool_queries(n=30, seed=0):
    """math-consensus ranks math right (and carries stale, inverted scores on code, which must be ignored);
    code-tests ranks code right; `probe`, a table RM on both, is noise."""
    rng = np.random.default_rng(seed)
    right, wrong = [1.0, 0.0, 0.2, 0.1], [0.0, 1.0, 0.2, 0.1]
    out = []
    for i in range(n):
        out.append(_labelled(f"math-{i}", "math", {"math-consensus": right, "probe": rng.random(4).tolist()},
                             f"arithmetic word problem {i}"))
        out.append(_labelled(f"code-{i}", "code", {"code-tests": right, "math-consensus": wrong,
                                                    "probe": rng.random(4).tolist()}, f"write a python function {i}"))
    return out


@pytest.fixture(scope="module")
def mixed_pool():
    from fakes.embedder import HashEmbedder

    pool = build_pool(_mixed_pool_queries(), HashEmbedder(), rm_names=("math-consensus", "code-tests", "probe"),
                      config=PoolConfig(max_members=2))
    return with_stored_learned(pool)


def test_a_mixed_pool_leaves_out_what_does_not_apply(mixed_pool):
    pool = mixed_pool
    assert pool.meta["not_applicable"] == {"math-consensus": {"code": 30}, "code-tests": {"math": 30}}
    assert pool.meta["missing_scores"] == {"math-consensus": 0, "code-tests": 0, "probe": 0}
    col = pool.rm_names.index("math-consensus")
    code_rows = [i for i, q in enumerate(pool.questions) if q.domain == "code"]
    assert np.isnan(pool.scores[code_rows, :, col]).all()  # the stale scores were left out
    singles = {row["ensemble"].name: row for row in pool.ensemble_table()[:3]}
    assert singles["math-consensus"]["mean_prr"] == 1.0 and singles["math-consensus"]["questions"] == 30
    assert pool.meta["applies"]["code-tests"] == {"domains": ["code"], "fields": ["tests", "stdio_tests"]}
    assert pool.meta["applies"]["probe"] == {"domains": None, "fields": []}
    # a fit learns from the questions its RMs cover, found before sampling: a small domain keeps all of its own
    code_rows = covered_rows(pool, ("code-tests", "probe"), sample=40)
    assert len(code_rows) == 30 and all(pool.questions[r].domain == "code" for r in code_rows)
    assert len(covered_rows(pool, ("probe",), sample=40)) == 40
    # one learned fit per RM set a query can use; none over all three (no question has all of them)
    assert "learned" not in pool.meta
    assert sorted(tuple(f["components"][0]["spec"]["members"]) for f in stored_fits(pool)) == [
        ("code-tests", "probe"), ("math-consensus", "probe")]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["learned", "pres", "stacker"])
def test_selection_routes_each_domain_to_the_rms_that_apply(mixed_pool, method):
    router = Router(mixed_pool, method, k=20, embedder=_embedder())
    texts = tuple(f"new answer {i}" for i in range(4))
    math = Query("new-math", "arithmetic word problem 99", tuple(
        Candidate(t, scores={"math-consensus": s, "probe": p}) for t, s, p in
        zip(texts, [0.0, 0.1, 1.0, 0.2], [0.9, 0.1, 0.2, 0.3])), domain="math")
    code = Query("new-code", "write a python function 99", tuple(
        Candidate(t, scores={"code-tests": s, "probe": p}) for t, s, p in
        zip(texts, [0.0, 1.0, 0.0, 0.0], [0.9, 0.1, 0.2, 0.3])), domain="code", tests="assert True")
    rank_math, rank_code = router.route([math])[0], router.route([code])[0]
    assert "code-tests" not in rank_math.selection.choice.ensemble.members and rank_math.best_index == 2
    assert "math-consensus" not in rank_code.selection.choice.ensemble.members and rank_code.best_index == 1
    out = rank_code.selection.to_json()["skipped"]
    assert out["missing_rms"] == ["math-consensus"]
    assert out["why"]["math-consensus"] == ("not applicable: math-consensus scores choice, math queries, "
                                            "not 'code' ones")
    assert rank_math.to_json()["skipped_rms"] == {
        "code-tests": "not applicable: code-tests scores code queries, not 'math' ones"}


def test_a_query_no_pool_rm_applies_to_ties_instead_of_failing_the_run(mixed_pool):
    from fakes.embedder import HashEmbedder

    pool = build_pool(_mixed_pool_queries(), HashEmbedder(), rm_names=("math-consensus", "code-tests"))
    router = Router(pool, k=10, embedder=HashEmbedder(), abstain_below=0.5)
    prose = Query("essay", "write a poem", tuple(Candidate(f"poem {i}") for i in range(3)), domain="instruction")
    ranking = router.rank(prose, router.select(prose))
    out = ranking.to_json()
    assert out["ensemble"]["members"] == [] and out["tied"] == [0, 1, 2] and out["abstain"] is True
    assert out["confidence"] is None and out["fallback"].startswith("no pool RM applies")
    assert out["method"] == "none (no pool RM applies to this query)"  # what chose: nothing, and why
    assert set(out["skipped_rms"]) == {"math-consensus", "code-tests"}
    json.dumps(out, allow_nan=False)
    # a gap that running or scoring would fill is still an error, not a tie
    unscored = Query("m", "arithmetic", (Candidate(None, scores={"other": 1.0}),) * 2, domain="math")
    with pytest.raises(InputError, match="math-consensus: no score on every candidate"):
        router.select(unscored)


def _embedder():
    from fakes.embedder import HashEmbedder

    return HashEmbedder()


@pytest.mark.slow
def test_the_report_marks_rms_that_do_not_apply(mixed_pool, tmp_path):
    from morkit.selection.report import selection_section

    html = write_report(mixed_pool, tmp_path / "r.html", sections=[selection_section(mixed_pool, k=10)]).read_text()
    assert "Not applicable</dt><dd>code-tests: math (30); math-consensus: code (30)" in html
    assert html.count('<td class="name">n/a</td>') == 2  # math-consensus x code, code-tests x math
    assert "2 learned selectors are stored" in html and "selector over" in html


@pytest.mark.slow
def test_a_mixed_pool_builds_and_ranks_from_the_cli(tmp_path, capsys):
    """Math and code validation queries, labelled from their reference and tests, scored for real by the rules
    that apply to each (the sandbox runs the code), pooled; then `rank` on new mixed queries runs the same rules
    where they apply and routes each query to its own."""
    def math(qid, answers, reference):
        return Query(qid, f"What is {qid}?", tuple(Candidate(f"The answer is {a}.") for a in answers),
                     domain="math", reference=reference)

    def code(qid, good, bad):
        body = "def f():\n    return {}\n"
        return Query(qid, f"Write f returning {good} ({qid}).",
                     tuple(Candidate(body.format(v)) for v in (good, bad, bad)), domain="code",
                     tests=f"assert f() == {good}")

    val = [math(f"m{i}", [i, i, i + 1, i + 2], str(i)) for i in range(6)] + [code(f"c{i}", i, i + 1) for i in range(4)]
    save_queries(tmp_path / "val.jsonl", val)
    pool = tmp_path / "pool"
    assert main(["pool", "build", str(tmp_path / "val.jsonl"), "--rm", "math-consensus", "--rm", "code-tests",
                 "-o", str(pool), "--device", "cpu", "-q"]) == 0
    assert main(["pool", "info", str(pool)]) == 0
    assert "not applicable (no score, by design): code-tests on math (6); math-consensus on code (4)" in \
        capsys.readouterr().out
    new = [math("m9", [7, 7, 8], None), code("c9", 9, 3)]
    new = [replace(q, reference=None) for q in new]
    save_queries(tmp_path / "new.jsonl", new)
    out = tmp_path / "ranked.jsonl"
    assert main(["rank", "--pool", str(pool), str(tmp_path / "new.jsonl"), "-o", str(out)]) == 0
    ranked = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert ranked["m9"]["ensemble"]["members"] == ["math-consensus"] and ranked["m9"]["best_index"] in (0, 1)
    assert ranked["c9"]["ensemble"]["members"] == ["code-tests"] and ranked["c9"]["best_index"] == 0
    assert ranked["c9"]["skipped_rms"]["math-consensus"].startswith("not applicable")


def test_one_source_decides_which_rms_apply_for_scoring_pools_and_routing(caplog):
    from morkit.question_pool.rows import rm_rules

    stored = {"math-consensus": {"domains": ["code"], "fields": []}, "gone-rm": {"domains": ["code"], "fields": []}}
    # a registered RM: its spec now, even where a pool stored an older rule (which is logged as stale)
    with caplog.at_level("WARNING"):
        rules = dict(zip(["math-consensus", "gone-rm", "table"], rm_rules(["math-consensus", "gone-rm", "table"], stored)))
    assert rules["math-consensus"] == applicability_of("math-consensus") == applicability_of(MathConsensus())
    assert "the pool was built when it applied to code" in caplog.text
    # an RM not registered here: the rule the pool stored; a table with no stored rule: every query
    assert rules["gone-rm"] == applicability_of("gone-rm", stored["gone-rm"]) == Applicability(frozenset({"code"}))
    assert rules["table"] == ALL
    # scoring's skip plan reads the same rule as the pool rows and the router
    query = _q("m", "math")
    assert (rules["math-consensus"].skip_reason(query, "math-consensus") is None
            and score_queries([query], [MathConsensus()])[0].candidates[0].scores["math-consensus"] is not None)


def test_adding_to_a_pool_built_under_an_older_rule_is_refused():
    from fakes.embedder import HashEmbedder

    from morkit.question_pool.pool import add_questions

    pool = build_pool(_mixed_pool_queries(6), HashEmbedder(), rm_names=("math-consensus", "probe"),
                      config=PoolConfig(max_members=1))
    stale = replace(pool, meta={**pool.meta, "applies": {**pool.meta["applies"],
                                                         "math-consensus": {"domains": ["math"], "fields": []}}})
    more = [_labelled("math-new", "math", {"math-consensus": [1.0, 0.0, 0.2, 0.1], "probe": [0.1] * 4}, "another sum")]
    with pytest.raises(InputError, match="math-consensus now applies to choice, math, but the pool was built when it "
                                         "applied to math: rebuild the pool"):
        add_questions(stale, more, HashEmbedder())
    assert len(add_questions(pool, more, HashEmbedder())) == len(pool) + 1  # the same rule: added
