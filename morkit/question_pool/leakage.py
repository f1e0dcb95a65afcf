"""Signs that a pool holds an RM's own training questions: an RM far ahead of every other on the pool.

A sign, never a proof (a much better RM shows it too); the rule and its thresholds are in docs/pools.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from morkit.question_pool.prr import best_of_n_matrix, mixed_questions, top_answers
from morkit.question_pool.rows import sample_rows


class ScoredPool(Protocol):
    """What the evidence reads of a pool (morkit.question_pool.pool.QuestionPool has it)."""

    rm_names: Sequence[str]
    scores: np.ndarray
    correct: np.ndarray
    valid: np.ndarray
    dense: bool

    def __len__(self) -> int: ...

LEAD = 0.15
"""A warning needs the RM's best-of-n accuracy at least this far (15 points) above the runner-up RM's."""
Z = 3.0
"""... and the paired per-question difference to the runner-up at least this many standard errors above 0 ..."""
MIN_SHARED = 30
"""... over at least this many mixed questions both RMs score. LEAD, Z and MIN_SHARED were fixed a priori,
before looking at any data set, and were not tuned on one: they ask for a lead that is both large and clear."""
MIN_ALONE = 10
"""`accuracy_alone` is NaN on fewer questions where the RM's pick goes against the others'."""
CHUNK = 4096
"""Pool rows read at a time."""
SAMPLE = 20_000
"""An on-the-fly pool is read on a seeded sample of this many rows (`sample_rows(len(pool), SAMPLE, seed=0)`)."""


@dataclass(frozen=True)
class Paired:
    """One RM's best-of-n hit minus another's, per question, over the mixed questions both score."""

    questions: int
    mean: float
    std_error: float  # NaN under two questions

    @property
    def z(self) -> float:
        """The mean difference in standard errors (inf for a constant positive difference)."""
        if self.questions < 2 or not math.isfinite(self.std_error):
            return float("nan")
        if self.std_error == 0:
            return math.copysign(math.inf, self.mean) if self.mean else 0.0
        return self.mean / self.std_error


@dataclass(frozen=True)
class RMEvidence:
    """How one RM does on the pool's mixed questions it scores, and how often its pick is the others'.

    Each field is defined in docs/pools.md ("Leakage warnings"); `versus` is the paired difference to each
    other RM, `sampled` (rows read, pool rows) when a sample was read."""

    questions: int
    accuracy: float
    agreement: float
    accuracy_alone: float
    alone: int
    versus: Mapping[str, Paired]
    sampled: tuple[int, int] | None = None


def _top_share(scores: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(Q, N, R): each RM's pick as a distribution over candidates, tied top scores sharing it evenly."""
    top = top_answers(scores, valid[:, :, None] & ~np.isnan(scores))
    with np.errstate(invalid="ignore", divide="ignore"):
        return top / top.sum(axis=1, keepdims=True)


class _Sums:
    """Running sums over chunks of rows."""

    def __init__(self, rms: int) -> None:
        self.questions = np.zeros(rms, dtype=np.int64)
        self.hits = np.zeros(rms)
        self.agree = np.zeros(rms)
        self.agree_pairs = np.zeros(rms, dtype=np.int64)
        self.alone = np.zeros(rms, dtype=np.int64)
        self.alone_hits = np.zeros(rms)
        self.shared = np.zeros((rms, rms), dtype=np.int64)
        self.diff = np.zeros((rms, rms))
        self.diff2 = np.zeros((rms, rms))

    def add(self, scores: np.ndarray, correct: np.ndarray, valid: np.ndarray) -> None:
        scores = np.asarray(scores, dtype=np.float64)
        correct, valid = np.asarray(correct, dtype=bool), np.asarray(valid, dtype=bool)
        if scores.shape[1] == 0:  # no candidate columns: no mixed question
            return
        hits = best_of_n_matrix(scores, correct, valid)  # (Q, R), NaN where a valid candidate lacks a score
        defined = mixed_questions(correct, valid)[:, None] & np.isfinite(hits)
        hits = np.where(defined, hits, 0.0)
        share = np.nan_to_num(_top_share(scores, valid))
        agree = np.matmul(share.transpose(0, 2, 1), share)  # (Q, R, R): chance both RMs pick the same answer
        both = defined[:, :, None] & defined[:, None, :]
        both &= ~np.eye(defined.shape[1], dtype=bool)[None]
        agree = np.where(both, agree, 0.0)
        self.questions += defined.sum(axis=0)
        self.hits += hits.sum(axis=0)
        self.agree += agree.sum(axis=(0, 2))
        pairs = both.sum(axis=2)  # (Q, R): other RMs scoring the question too
        self.agree_pairs += pairs.sum(axis=0)
        alone = (pairs > 0) & (agree.sum(axis=2) < 0.5 * pairs)
        self.alone += alone.sum(axis=0)
        self.alone_hits += np.where(alone, hits, 0.0).sum(axis=0)
        diff = np.where(both, hits[:, :, None] - hits[:, None, :], 0.0)
        self.shared += both.sum(axis=0)
        self.diff += diff.sum(axis=0)
        self.diff2 += (diff * diff).sum(axis=0)

    def paired(self, r: int, s: int) -> Paired:
        n = int(self.shared[r, s])
        if n == 0:
            return Paired(0, float("nan"), float("nan"))
        mean = self.diff[r, s] / n
        if n < 2:
            return Paired(n, float(mean), float("nan"))
        variance = max(self.diff2[r, s] - n * mean * mean, 0.0) / (n - 1)
        return Paired(n, float(mean), float(math.sqrt(variance / n)))


def _ratio(total: float, count: int) -> float:
    return float(total / count) if count else float("nan")


def evidence_from_arrays(scores: Any, correct: Any, valid: Any, rm_names: Sequence[str], *,
                         rows: np.ndarray | None = None, min_alone: int = MIN_ALONE) -> dict[str, RMEvidence]:
    """`rm_evidence` on (Q, N, R) scores and (Q, N) correct / valid arrays (memory-mapped ones are read
    CHUNK rows at a time), over all rows or the sorted `rows` given."""
    size = len(scores) if rows is None else len(rows)
    sums = _Sums(len(rm_names))
    for start in range(0, size, CHUNK):
        pick = slice(start, min(start + CHUNK, size)) if rows is None else rows[start : start + CHUNK]
        sums.add(scores[pick], correct[pick], valid[pick])
    sampled = None if rows is None or len(rows) == len(scores) else (len(rows), len(scores))
    out = {}
    for r, name in enumerate(rm_names):
        alone = int(sums.alone[r])
        out[name] = RMEvidence(
            questions=int(sums.questions[r]), accuracy=_ratio(sums.hits[r], int(sums.questions[r])),
            agreement=_ratio(sums.agree[r], int(sums.agree_pairs[r])),
            accuracy_alone=_ratio(sums.alone_hits[r], alone) if alone >= min_alone else float("nan"), alone=alone,
            versus={other: sums.paired(r, s) for s, other in enumerate(rm_names) if s != r}, sampled=sampled)
    return out


def rm_evidence(pool: ScoredPool, *, min_alone: int = MIN_ALONE) -> dict[str, RMEvidence]:
    """Per pool RM: its accuracy, agreement with the others and accuracy when alone, on the mixed questions it
    scores; an on-the-fly pool is read on a seeded sample of SAMPLE rows."""
    rows = None if pool.dense else sample_rows(len(pool), SAMPLE, seed=0)
    return evidence_from_arrays(pool.scores, pool.correct, pool.valid, pool.rm_names, rows=rows,
                                min_alone=min_alone)


def _far_ahead(name: str, evidence: Mapping[str, RMEvidence]) -> tuple[str, Paired] | None:
    """(runner-up, paired difference to it) when `name` leads every other RM by LEAD, Z and MIN_SHARED."""
    mine = evidence[name]
    others = [o for o in evidence if o != name and math.isfinite(evidence[o].accuracy)]
    if not others or not math.isfinite(mine.accuracy):
        return None
    runner = max(others, key=lambda o: evidence[o].accuracy)
    paired = mine.versus.get(runner)
    if paired is None or paired.questions < MIN_SHARED:
        return None
    lead = mine.accuracy - evidence[runner].accuracy
    if lead < LEAD - 1e-12 or not paired.z >= Z:
        return None
    return runner, paired


def leak_warnings(source: ScoredPool | Mapping[str, RMEvidence]) -> list[str]:
    """One sentence per RM far ahead of every other on the pool (a pool, or its `rm_evidence`)."""
    evidence = source if isinstance(source, Mapping) else rm_evidence(source)
    notes = []
    for name, mine in evidence.items():
        found = _far_ahead(name, evidence)
        if found is None:
            continue
        runner, paired = found
        alone = (f"{mine.accuracy_alone:.2f} on the {mine.alone} questions where its pick goes against the others'"
                 if math.isfinite(mine.accuracy_alone) else
                 f"too few questions where its pick goes against the others' ({mine.alone}) to measure it alone")
        sample = f" (a seeded sample of {mine.sampled[0]:,} of {mine.sampled[1]:,} questions)" if mine.sampled else ""
        notes.append(f"{name} is far ahead of every other RM on this pool{sample}: best-of-n {mine.accuracy:.2f} "
                     f"against {evidence[runner].accuracy:.2f} for the runner-up {runner} ({paired.z:.1f} standard "
                     f"errors over {paired.questions} shared questions), {alone}; this is the pattern a pool holding "
                     f"the RM's own training questions leaves, so check that none of the pool's questions were "
                     f"used to train {name} (a genuinely better RM shows it too)")
    return notes
