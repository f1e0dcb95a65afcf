"""Stream x N: a majority vote over the final answers of N independent replicas of the whole system.

The paper's Stream x N / Serial x N (N in {1, 4, 16}) vote the replicas' final answers. Answers are grouped
by final-answer equivalence (`morkit.search.voting.answer_keys`: math equivalence, or the query kind's own
key) and each replica counts once (equal weights: `VoteAggregator` with equal scores). The largest group
wins; a tie goes to the group that appeared first, and its first replica's answer is returned. Replicas
with no stated answer abstain; when all abstain the first replica wins.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from morkit.search.voting import VoteAggregator, answer_keys


def majority(answers: Sequence[str], kind: str | None = None) -> tuple[int, list[dict[str, Any]]]:
    """The winning replica's index and the tally: one row per group (key, replicas, votes), largest first."""
    keys = answer_keys(answers, kind)
    winner = VoteAggregator(kind).pick(answers, [0.0] * len(answers))
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        if key is not None:
            groups.setdefault(key, []).append(i)
    tally = [{"key": str(key), "replicas": members, "votes": len(members)} for key, members in groups.items()]
    tally.sort(key=lambda row: -row["votes"])
    return winner, tally
