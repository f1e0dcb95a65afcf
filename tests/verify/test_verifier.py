"""Verifiers: the MoR ensemble over real rule RMs and the score cache, an LLM critic, and both combined."""

from __future__ import annotations

import pytest

from morkit.core.errors import InputError
from morkit.core.types import Score
from morkit.llm.base import ScriptedLLM
from morkit.question_pool.ensembles import Ensemble, Normalizer
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.rules.consensus import MathConsensus
from morkit.verify.combined import CombinedVerifier
from morkit.verify.critic import LLMVerifier, parse_llm_score
from morkit.verify.mor import MoRVerifier


class LengthRM:
    """A pair RM for arithmetic checks: longer answers score higher; counts the pairs it saw."""

    name = "length"
    kind = "orm"

    def __init__(self):
        self.seen = 0

    def score(self, pairs):
        self.seen += len(pairs)
        return [Score(float(len(a))) for _, a in pairs]


def test_mor_verifier_combines_members_as_the_pool_did(tmp_path):
    length = LengthRM()
    normalizer = Normalizer("zscore", {"length": 10.0, "math-consensus": 0.5}, {"length": 5.0, "math-consensus": 0.25})
    ensemble = Ensemble(("length", "math-consensus"), (0.5, 2.0), "linear")
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        verifier = MoRVerifier(ensemble, "pool-zscore", normalizer, {"length": length, "math-consensus": MathConsensus()},
                               cache=cache)
        context = ["The answer is 4", "so 4", "The answer is 5"]
        verdicts = verifier.verify("2+2?", ["It is 4. The answer is 4"], context=context)
        # length 24 -> (24-10)/5 = 2.8; consensus: 3 of 4 texts say 4 -> 0.75 -> (0.75-0.5)/0.25 = 1
        assert verdicts[0].score == pytest.approx(0.5 * 2.8 + 2.0 * 1.0)
        assert "length 24.000" in verdicts[0].feedback and "math-consensus 0.750" in verdicts[0].feedback
        assert length.seen == 4 and verifier.rm_calls == 4 + 4
        verifier.verify("2+2?", ["It is 4. The answer is 4"], context=context)
        assert length.seen == 4  # pair scores came from the cache; the consensus rule reran
        assert verifier.rm_calls == 8 + 4 and verifier.verify("2+2?", []) == []
    with pytest.raises(ValueError, match="no RM given"):
        MoRVerifier(ensemble, "pool-zscore", normalizer, {"length": length})


class NeverRM:
    """A pair RM that must not run (its member does not apply to the verified question)."""

    name = "code-tests"
    kind = "orm"

    def score(self, pairs):
        raise AssertionError("an RM that does not apply ran")


@pytest.mark.parametrize("members, stds, message", [
    (("length", "code-tests"), {"length": 5.0, "code-tests": 0.5},
     r"candidates lack scores of code-tests"),  # code-tests needs a code query with tests: its score stays missing
    (("length",), {"length": 1e-310, "code-tests": 0.5}, r"the ensemble length gives non-finite scores"),
])
def test_mor_verifier_refuses_a_missing_member_score_or_a_non_finite_score_as_a_router_does(members, stds, message):
    """The verifier fills and ranks on the Router's path, so its checks hold: no NaN or infinite verdicts."""
    normalizer = Normalizer("zscore", {"length": 10.0, "code-tests": 0.5}, stds)
    verifier = MoRVerifier(Ensemble(members, (1.0,) * len(members), "sum"), "pool-zscore", normalizer,
                           {"length": LengthRM(), "code-tests": NeverRM()})
    with pytest.raises(InputError, match=message):
        verifier.verify("Write f.", ["def f(): return 1", "def f(): return 2"])


def test_the_routed_querys_tests_reach_code_tests_in_the_verifier():
    """A code query's verifier sends its domain and tests with the question: the real code-tests rule runs the
    answers in its sandbox and the passing one scores higher."""
    from morkit.core.types import Query
    from morkit.reward_models.rules.code_tests import CodeTests

    routed = Query("c1", "Write f returning 1.", (), "code", tests="assert f() == 1")
    normalizer = Normalizer("zscore", {"code-tests": 0.5}, {"code-tests": 0.5})
    verifier = MoRVerifier(Ensemble(("code-tests",), (1.0,), "code-tests"), "pool-zscore", normalizer,
                           {"code-tests": CodeTests()}, routed=routed)
    good, bad = verifier.verify(routed.question, ["def f():\n    return 1", "def f():\n    return 2"])
    assert (good.score, bad.score) == (1.0, -1.0)


def test_an_mor_verifier_without_members_ties_every_answer_as_router_rank_does():
    """A selection with no member (no pool RM applies) scores every answer 0 in the verifier and in
    `ranked_candidates`, the routine `Router.rank` ranks with; no RM runs."""
    from morkit.core.types import Candidate, Query
    from morkit.selection.base import Choice
    from morkit.selection.mor import ranked_candidates

    normalizer = Normalizer("zscore", {"length": 10.0}, {"length": 5.0})
    none = Ensemble((), (), "none")
    verdicts = MoRVerifier(none, "pool-zscore", normalizer, {}).verify("q", ["a", "bb"])
    assert [v.score for v in verdicts] == [0.0, 0.0] and verdicts[0].feedback == "ensemble score 0.000 ()"
    query = Query("q", "q", (Candidate(text="a"), Candidate(text="bb")))
    picked, raw = ranked_candidates(query, Choice(none, "pool-zscore", 0.0), normalizer, "min", ("length",), ())
    assert picked.scores == (0.0, 0.0) and picked.tied == (0, 1) and raw.shape == (2, 0)


def test_llm_verifier_parses_scores_and_marks_unreadable_critiques():
    replies = iter(["Step 2 is wrong: 3*4 is 12. Score: 3/10", "Looks fine."])
    critic = LLMVerifier(ScriptedLLM(lambda conversation, i: next(replies)))
    a, b = critic.verify("q", ["x", "y"])
    assert a.score == 0.3 and "3*4 is 12" in a.feedback
    assert b.score == 0.5 and "no readable score" in b.feedback
    assert parse_llm_score("Score: 9/10 ... final Score: 2/10") == 0.2
    assert parse_llm_score("score = 12") == 1.0 and parse_llm_score("") is None


def test_combined_verifier_adds_the_weighted_critic_score():
    class Fixed:
        name = "fixed"
        rm_calls = 3

        def verify(self, question, answers, context=()):
            from morkit.core.types import Verdict

            return [Verdict(1.0, "ensemble score 1.000") for _ in answers]

    critic = LLMVerifier(ScriptedLLM(lambda conversation, i: "Correct. Score: 8/10"))
    (verdict,) = CombinedVerifier(Fixed(), critic, weight=2.0).verify("q", ["a"])
    assert verdict.score == pytest.approx(1.0 + 2 * 0.8)
    assert verdict.feedback.startswith("Correct.") and verdict.feedback.endswith("ensemble score 1.000")


def test_loops_charge_an_llm_critic_to_their_budget():
    from morkit.loops.base import Budget, MeteredLLM, Spend, metered_verifier

    critic = LLMVerifier(ScriptedLLM(lambda conversation, i: "Fine. Score: 6/10"))
    spend = Spend(Budget(max_calls=2))
    metered = metered_verifier(CombinedVerifier(_FixedMoR(), critic), spend)
    assert isinstance(metered.critic.llm, MeteredLLM) and critic.llm is not metered.critic.llm
    metered.verify("q", ["a", "b"])
    assert spend.calls == 2
    from morkit.loops.base import BudgetExhausted

    with pytest.raises(BudgetExhausted):
        metered.verify("q", ["c"])
    assert metered_verifier(None, spend) is None


class _FixedMoR:
    name = "fixed"

    def verify(self, question, answers, context=()):
        from morkit.core.types import Verdict

        return [Verdict(0.0) for _ in answers]


def test_only_verifiers_whose_scores_mean_the_same_in_every_call_say_so():
    """Loops compare scores across calls only when `scores_are_absolute`; otherwise they re-score in one call."""
    from morkit.verify.base import scores_are_absolute

    normalizer = Normalizer("zscore", {"length": 10.0, "math-consensus": 0.5}, {"length": 5.0, "math-consensus": 0.25})
    alone = Ensemble(("length",), (1.0,), "sum")
    with_consensus = Ensemble(("length", "math-consensus"), (1.0, 1.0), "sum")
    rms = {"length": LengthRM(), "math-consensus": MathConsensus()}
    critic = LLMVerifier(ScriptedLLM(lambda conversation, i: "Score: 5/10"))
    assert scores_are_absolute(MoRVerifier(alone, "pool-zscore", normalizer, rms))
    assert not scores_are_absolute(MoRVerifier(alone, "query-zscore", normalizer, rms))  # z-scores within the call
    assert not scores_are_absolute(MoRVerifier(with_consensus, "pool-zscore", normalizer, rms))  # reads siblings
    assert not scores_are_absolute(MoRVerifier(alone, "pool-zscore", normalizer, rms, scorer=object()))  # learned
    assert scores_are_absolute(critic) and not scores_are_absolute(object())
    assert scores_are_absolute(CombinedVerifier(MoRVerifier(alone, "pool-zscore", normalizer, rms), critic))
    assert not scores_are_absolute(CombinedVerifier(MoRVerifier(with_consensus, "pool-zscore", normalizer, rms), critic))


@pytest.mark.parametrize("user, message", [
    ("Problem: {question}\nSolution: {answer", "not a str.format template"),
    ("Problem: {question}", r"exactly \{question\} and \{answer\}, got \['question'\]"),
    ("{question} {answer} {hint}", r"got \['answer', 'hint', 'question'\]"),
    ("Solve {question} as {} did: {answer}", r"got \['', 'answer', 'question'\]"),
])
def test_the_critics_user_template_is_checked_when_made(user, message):
    """A stray brace or a missing `{answer}` fails at once, naming the field, not mid-loop (or silently)."""
    with pytest.raises(InputError, match=f"LLMVerifier.user .*{message}"):
        LLMVerifier(ScriptedLLM(lambda c, i: "Score: 5/10"), user=user)
    assert LLMVerifier(None, user="{{x}} {answer} for {question}").user  # doubled braces are literal
