"""Build phases on arrays: labelled queries -> padded member-score arrays, and PRR / best-of-n per ensemble.

These are the steps `build_pool` and `add_questions` share, public so a benchmark can time each one.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.ensembles import Ensemble, Normalizer, combine, weight_matrix
from morkit.question_pool.prr import best_of_n_matrix, prr_matrix
from morkit.reward_models.applicability import Applicability
from morkit.reward_models.base import reduce_steps
from morkit.reward_models.catalog import applicability_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolQuestion:
    id: str
    question: str
    domain: str
    n_candidates: int


class RowIds:
    """The ids of `questions` at `rows` (None: every row), each read only when asked for: an error names one, or a
    caller wants a few (no list of a million ids, no question text decoded where a table can read the id alone)."""

    def __init__(self, questions: Sequence[PoolQuestion], rows: Sequence[int] | None = None) -> None:
        self.questions, self.rows = questions, range(len(questions)) if rows is None else rows
        self._id_of = getattr(questions, "id_of", None)  # a QuestionTable's id-only read

    def __getitem__(self, i: Any) -> str:
        row = int(self.rows[i])
        return self._id_of(row) if self._id_of is not None else self.questions[row].id

    def __len__(self) -> int:
        return len(self.rows)


def nanmean_columns(values: np.ndarray) -> np.ndarray:
    """Column means ignoring NaN; an all-NaN column gives NaN without a warning."""
    values = np.asarray(values, dtype=np.float64)
    counts = (~np.isnan(values)).sum(axis=0)
    sums = np.nansum(values, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


@dataclass(frozen=True)
class PoolRows:
    """Queries turned into padded arrays, plus what was skipped and why."""

    questions: tuple[PoolQuestion, ...]
    scores: np.ndarray
    correct: np.ndarray
    valid: np.ndarray
    skipped: Mapping[str, list[str]]
    missing: Mapping[str, int]  # RM -> questions where some candidate lacks its score (the RM applies there)
    steps: np.ndarray | None = None  # (Q, N, P, len(STEP_REDUCTIONS)): the step RMs' scores under each reduction
    step_rms: tuple[str, ...] = ()  # the RMs with per-step scores (process RMs), in rm_names order
    not_applicable: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # RM -> domain -> questions
    applies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # RM -> the rule used (to_json)


STEP_REDUCTIONS = ("min", "mean", "last")
"""The reductions of a process RM's step scores kept beside the pool's own: the learned selector reads all three."""


def step_members(queries: Sequence[Query], rm_names: Sequence[str]) -> tuple[str, ...]:
    """The RMs that give some candidate per-step scores (a tuple), in rm_names order."""
    found = {name for q in queries for c in q.candidates for name, v in c.scores.items() if isinstance(v, tuple)}
    return tuple(name for name in rm_names if name in found)


def step_matrix(query: Query, step_rms: Sequence[str]) -> np.ndarray:
    """(N, P, len(STEP_REDUCTIONS)) reductions of each step RM's scores per candidate; a scalar score stands
    for every reduction; NaN where a score is missing."""
    out = np.full((len(query.candidates), len(step_rms), len(STEP_REDUCTIONS)), np.nan)
    for i, cand in enumerate(query.candidates):
        for p, name in enumerate(step_rms):
            value = cand.scores.get(name)
            if isinstance(value, tuple):
                out[i, p] = [reduce_steps(value, rule) for rule in STEP_REDUCTIONS] if value else np.nan
            elif value is not None:
                out[i, p] = float(value)
    return out


def rm_rules(rm_names: Sequence[str], stored: Mapping[str, Any] | None = None, *,
             adding: bool = False) -> list[Applicability]:
    """Each RM's applicability (as registered here, else as the pool `stored` it).

    An RM whose rule changed since the pool stored it makes the pool stale: routing logs a warning, and adding
    rows (`adding`) is refused, since one pool would then hold rows cut under two rules."""
    stored = stored or {}
    rules = [applicability_of(n, stored.get(n)) for n in rm_names]
    for name, rule in zip(rm_names, rules):
        if name in stored and Applicability.of(stored[name]) != rule:
            old = Applicability.of(stored[name]).describe()
            if adding:
                raise InputError(f"{name} now applies to {rule.describe()}, but the pool was built when it applied "
                                 f"to {old}: rebuild the pool (morkit pool build) rather than add to it")
            log.warning("%s now applies to %s, but the pool was built when it applied to %s; its evidence for %s "
                        "follows the old rule until the pool is rebuilt", name, rule.describe(), old, name)
    return rules


def pool_rows(queries: Sequence[Query], rm_names: Sequence[str], reduction: str, width: int = 0,
              step_rms: Sequence[str] | None = None, rules: Sequence[Applicability] | None = None) -> PoolRows:
    """Build phase 1: labelled queries with cached member scores -> padded (Q, N, R) arrays; the rest skipped.

    Scores of an RM on queries it does not apply to are left out and counted by domain (`rules`, default
    `rm_rules`); `step_rms` also get (Q, N, P, 3) arrays of their step scores under STEP_REDUCTIONS."""
    kept, skipped = [], {"unlabelled": [], "fewer_than_two_candidates": []}
    for query in queries:
        if len(query.candidates) < 2:
            skipped["fewer_than_two_candidates"].append(query.id)
        elif not query.labelled:
            skipped["unlabelled"].append(query.id)
        else:
            kept.append(query)
    for reason, ids in skipped.items():
        if ids:
            log.warning("skipped %d queries (%s), e.g. %s", len(ids), reason.replace("_", " "), ids[0])
    n = max([width] + [len(q.candidates) for q in kept])
    scores = np.full((len(kept), n, len(rm_names)), np.nan)
    correct = np.zeros((len(kept), n), dtype=bool)
    valid = np.zeros((len(kept), n), dtype=bool)
    missing = dict.fromkeys(rm_names, 0)
    not_applicable: dict[str, dict[str, int]] = {}
    rules = list(rm_rules(rm_names) if rules is None else rules)
    for qi, query in enumerate(kept):
        applies = [rule.skip_reason(query, name) is None for rule, name in zip(rules, rm_names)]
        for ci, cand in enumerate(query.candidates):
            valid[qi, ci] = True
            correct[qi, ci] = bool(cand.correct)
            for r, name in enumerate(rm_names):
                value = cand.scores.get(name)
                if value is not None and applies[r]:
                    scores[qi, ci, r] = reduce_steps(value, reduction) if isinstance(value, tuple) else value
        for r, name in enumerate(rm_names):
            if not applies[r]:
                domains = not_applicable.setdefault(name, {})
                domains[query.domain or "unknown"] = domains.get(query.domain or "unknown", 0) + 1
            else:
                missing[name] += int(np.isnan(scores[qi, : len(query.candidates), r]).any())
    for name, count in missing.items():
        if count:
            log.warning("%s lacks scores for some candidates of %d questions; ensembles with it get no PRR there",
                        name, count)
    step_rms = tuple(step_members(kept, rm_names) if step_rms is None else step_rms)
    steps = np.full((len(kept), n, len(step_rms), len(STEP_REDUCTIONS)), np.nan)
    if step_rms:
        for qi, query in enumerate(kept):
            steps[qi, : len(query.candidates)] = step_matrix(query, step_rms)
    questions = tuple(PoolQuestion(q.id, q.question, q.domain or "unknown", len(q.candidates)) for q in kept)
    return PoolRows(questions, scores, correct, valid, skipped, missing, steps, step_rms, not_applicable,
                    {name: rule.to_json() for name, rule in zip(rm_names, rules)})


def skipped_domains(rm_names: Sequence[str], domains: Sequence[str],
                    not_applicable: Mapping[str, Mapping[str, int]]) -> dict[str, set[str]]:
    """RM -> the domains it skipped on every question of (its scores there are missing by design), from the
    questions' `domains` and a pool's `not_applicable` counts."""
    sizes = Counter(domains)
    return {name: {d for d, n in not_applicable.get(name, {}).items() if 0 < sizes.get(d, 0) <= n}
            for name in rm_names}


def added_counts(old: Mapping[str, Mapping[str, int]], new: Mapping[str, Mapping[str, int]]) -> dict:
    """Two {RM: {domain: questions}} tables summed (a pool's not-applicable counts after `pool add`)."""
    out = {name: dict(domains) for name, domains in old.items()}
    for name, domains in new.items():
        for domain, count in domains.items():
            out.setdefault(name, {})[domain] = out.get(name, {}).get(domain, 0) + count
    return out


def ensemble_statistics(scores: np.ndarray, correct: np.ndarray, valid: np.ndarray, normalizer: Normalizer,
                        rm_names: Sequence[str], ensembles: Sequence[Ensemble], *, chunk: int | None = None,
                        progress: bool = False, ids: Sequence[str] | None = None, best_of_n: bool = True
                        ) -> tuple[np.ndarray, np.ndarray | None]:
    """(PRR, best-of-n), each (Q, E) float32, from raw member scores (`best_of_n=False`: None for the latter);
    chunks keep temporaries near 4M values. A score that overflows when normalised or combined is an InputError
    naming the question (by `ids`, else row) and the RM or ensemble."""
    from tqdm import tqdm

    def question(row: int) -> str:
        return repr(ids[row]) if ids is not None else f"row {row}"

    chunk = chunk or max(1, 4_000_000 // max(1, scores.shape[1] * len(ensembles)))
    weights = weight_matrix(ensembles, rm_names)
    prr = np.empty((len(scores), len(ensembles)), dtype=np.float32)
    top1 = np.empty_like(prr) if best_of_n else None
    for start in tqdm(range(0, len(scores), chunk), desc="PRR", unit="chunk", disable=not progress, leave=False):
        part = slice(start, start + chunk)
        normalised = normalizer.apply(rm_names, np.asarray(scores[part]))  # per chunk: no copy of all the scores
        overflow = np.argwhere(np.isinf(normalised))
        if len(overflow):
            q, c, r = overflow[0]
            raise InputError(f"question {question(start + q)}: {rm_names[r]} scores candidate {c} "
                             f"{scores[start + q, c, r]:g}, too large for the pool's {normalizer.kind} normaliser "
                             f"(shift {normalizer.shift[rm_names[r]]:g}, scale {normalizer.scale[rm_names[r]]:g}); "
                             "rescale that RM's scores")
        with np.errstate(over="ignore", invalid="ignore"):
            combined = combine(normalised, weights)
        overflow = np.argwhere(np.isinf(combined))
        if len(overflow):
            q, _, e = overflow[0]
            raise InputError(f"question {question(start + q)}: the scores of ensemble {ensembles[e].name} overflow "
                             "(its members' scores are too large to add up); rescale those RMs' scores")
        prr[part] = prr_matrix(combined, correct[part], valid[part])
        if top1 is not None:
            top1[part] = best_of_n_matrix(combined, correct[part], valid[part])
    return prr, top1


MEANS_SAMPLE = 20_000
"""Questions sampled (seeded) to estimate each ensemble's mean PRR and best-of-n in an on-the-fly pool."""


def sample_rows(size: int, sample: int, seed: int = 0) -> np.ndarray:
    """A seeded sample of `sample` of `size` rows, in row order (all rows when there are no more)."""
    if size <= sample:
        return np.arange(size)
    return np.sort(np.random.default_rng(seed).choice(size, size=sample, replace=False))


def sampled_means(rows: PoolRows, rm_names: Sequence[str], normalizer: Normalizer, ensembles: Sequence[Ensemble],
                  sample: int = MEANS_SAMPLE, progress: bool = False) -> dict[str, Any]:
    """Each ensemble's mean PRR and best-of-n (and the questions defining them) over a seeded sample of rows:
    what an on-the-fly pool stores instead of its dense tables."""
    picks = sample_rows(len(rows.questions), sample)
    sums, counts = np.zeros((2, len(ensembles))), np.zeros((2, len(ensembles)), dtype=np.int64)
    for start in range(0, len(picks), 1000):  # sums by block: never the (sample, ensembles) tables at once
        block = picks[start : start + 1000]
        tables = ensemble_statistics(np.asarray(rows.scores[block]), np.asarray(rows.correct[block]),
                                     np.asarray(rows.valid[block]), normalizer, rm_names, ensembles,
                                     progress=progress, ids=RowIds(rows.questions, rows=block))
        for i, table in enumerate(tables):
            sums[i] += np.nansum(table, axis=0, dtype=np.float64)
            counts[i] += (~np.isnan(table)).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / counts, np.nan)
    finite_or_none = lambda values: [float(v) if np.isfinite(v) else None for v in values]  # noqa: E731 - JSON
    return {"sample": int(len(picks)), "mean_prr": finite_or_none(means[0]), "mean_top1": finite_or_none(means[1]),
            "questions": [int(c) for c in counts[0]]}
