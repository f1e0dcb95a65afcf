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


def topic_queries(n, seed=0, *, gappy_rm=False, repeated=0):
    """Two alternating topics; on each a different RM ("alpha" on algebra, "beta" on geometry) finds the right one
    of 4 answers and the other is noise: a global ranker must weigh both alike, the neighbours tell which to trust.
    `gappy_rm`: a third RM of noise, "gamma", that skips every tenth question; `repeated`: the last ones repeat the
    texts of the first ones."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        topic, right = i % 2, int(rng.integers(0, 4))
        cands = []
        for c in range(4):
            good, noise = float(rng.normal() + (2.5 if c == right else 0.0)), float(rng.normal())
            scores = {"alpha": good, "beta": noise} if topic == 0 else {"alpha": noise, "beta": good}
            if gappy_rm and i % 10 != 3:
                scores["gamma"] = float(rng.normal())
            cands.append(Candidate(text=f"q{i} answer {c}", correct=c == right, scores=scores))
        text = ("algebra " if topic == 0 else "geometry ") + f"problem {i % (n - repeated)}"
        out.append(Query(f"t{i}", text, tuple(cands), domain="math"))
    return out
