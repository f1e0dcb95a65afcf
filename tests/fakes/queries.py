"""Small hand-made queries with given scores and labels, shared by the selection and search tests."""

from __future__ import annotations

from morkit.core.types import Candidate, Query


def scored_query(qid, scores, labels=None, question=None, text=True):
    """A query whose candidates i carry scores[rm][i] and labels[i] ("answer i" texts unless text=False)."""
    n = len(next(iter(scores.values())))
    labels = labels or [None] * n
    return Query(qid, question or f"question {qid}", tuple(
        Candidate(text=f"answer {i}" if text else None, correct=labels[i], scores={k: v[i] for k, v in scores.items()})
        for i in range(n)))
