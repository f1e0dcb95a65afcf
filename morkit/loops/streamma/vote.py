"""Stream x N: a majority vote over the final answers of N independent replicas of the whole system.

Answers are grouped by the query kind's answer key; ties and abstentions: docs/loops/streamma.md."""

from __future__ import annotations

from typing import Any, Sequence

from morkit.core.grading import key_groups
from morkit.question_pool.graders import answer_keys


def majority(answers: Sequence[str], kind: str | None = None) -> tuple[int, list[dict[str, Any]]]:
    """The winning replica's index and the tally: one row per group (key, replicas, votes), largest first."""
    keys = answer_keys(answers, kind)
    groups = key_groups(keys)
    tally = [{"key": str(keys[members[0]]), "replicas": members, "votes": len(members)} for members in groups]
    return (groups[0][0] if groups else 0), tally
