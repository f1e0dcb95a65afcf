"""ScoringSession placement: RMs placed by the caller (a Ray Serve deployment's handle) score in place of ones
resolved here, and the session leaves them to their owner."""

from __future__ import annotations

from morkit.core.types import Candidate, Query, Score
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession


class Placed:
    """A handle placed elsewhere: scores an answer by its length and records the pairs it was sent."""

    name = "minilm-probe"
    resident_model = False

    def __init__(self):
        self.pairs = []
        self.closed = False

    def score(self, pairs):
        self.pairs += list(pairs)
        return [Score(float(len(answer))) for _, answer in pairs]

    def close(self):
        self.closed = True


def test_a_placed_handle_scores_instead_of_one_resolved_here_and_stays_open():
    placed = Placed()
    query = Query("q", "2+2?", (Candidate("4"), Candidate("five")))
    with ScoringSession(ScoringOptions(cache=None), placed={"minilm-probe": placed}) as session:
        assert session.handle("minilm-probe") is placed and session.get("minilm-probe") is placed
        assert session.handle("math-consensus") is not placed  # the others resolve here as ever
        filled = session.fill([query], [["minilm-probe"]])[0]
        assert session.loads == []  # nothing loaded here
    assert [c.scores["minilm-probe"] for c in filled.candidates] == [1.0, 4.0]
    assert placed.pairs == [("2+2?", "4"), ("2+2?", "five")] and not placed.closed


def test_a_session_places_nothing_by_default():
    with ScoringSession(ScoringOptions(cache=None)) as session:
        assert session.placed == {} and session.handle("minilm-probe").name == "minilm-probe"
