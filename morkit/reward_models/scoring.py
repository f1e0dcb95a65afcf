"""Score every candidate of many queries with many RMs: cache first, then batched model calls, each chunk cached as
soon as it is scored. Which RMs apply to which queries is settled before the first one runs, so a data error
fails the run before any model loads.
"""

from __future__ import annotations

import logging
import math
from contextlib import closing
from dataclasses import replace
from typing import Any, Iterable, Iterator, Sequence

from morkit.core import budget
from morkit.core.errors import InputError, PartialScoreError, ScoreError
from morkit.core.types import Query, Score
from morkit.reward_models.applicability import SKIPPED_KEY, recorded_skips
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.catalog import applicability_of

log = logging.getLogger(__name__)


def _rm_key(rm: Any) -> str:
    return getattr(rm, "cache_key", rm.name)


def _fit(rm: Any) -> str | None:
    """The truncation an RM's scores are made under (`policy@limit`), which the cache keeps beside them."""
    truncation = getattr(rm, "truncation", None)
    return truncation.signature if truncation is not None else None


def _check(rm: Any, score: Score, qid: str) -> Score:
    values = [score.value] + list(score.steps or ())
    if not all(math.isfinite(v) for v in values):
        raise ScoreError(f"reward model {rm.name!r} returned a non-finite score {score.value!r} for query {qid!r}")
    return score


def _bar(enabled: bool, desc: str, **kwargs: Any) -> Any:
    """A transient progress bar on stderr (a no-op when disabled)."""
    from tqdm import tqdm

    return tqdm(desc=desc, disable=not enabled, leave=False, **kwargs)


def _batches(rm: Any, todo: list[tuple[str, str]], chunk: int) -> Iterator[tuple[list, list]]:
    """(pairs, scores) per finished batch: the RM's own stream where it has one (`score_batches`, e.g. on a
    Ray cluster, in any order), else one `rm.score` call per chunk. A PartialScoreError leaves here with
    the `pairs` its `scores` are aligned with."""
    if hasattr(rm, "score_batches"):
        yield from rm.score_batches(todo, chunk)
        return
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        try:
            raw = rm.score(part)
        except PartialScoreError as err:
            err.pairs = part
            raise
        yield part, raw


def _score_pairs(rm: Any, queries: Sequence[Query], cache: ScoreCache | None, chunk: int,
                 progress: bool) -> dict[tuple[str, str], Score]:
    owner: dict[tuple[str, str], str] = {}
    for query in queries:
        for i, candidate in enumerate(query.candidates):
            if candidate.text is None:
                raise InputError(f"query {query.id!r} candidate {i} has no text, which {rm.name!r} needs")
            owner.setdefault((query.question, candidate.text), query.id)
    pairs = list(owner)
    known: dict[tuple[str, str], Score] = {}
    fit = _fit(rm)
    if cache is not None:
        for pair, hit in zip(pairs, cache.get_many(_rm_key(rm), pairs, fit)):
            if hit is not None:
                known[pair] = hit
    # A question's candidates stay together (in one chunk where they fit), so the RM can compute their
    # shared prompt prefix once; the RM sorts each chunk by length for its own batches.
    todo = sorted((p for p in pairs if p not in known), key=lambda p: (p[0], len(p[1])))
    with _bar(progress, rm.name, total=len(pairs), unit="pair") as bar:
        bar.update(len(known))
        try:
            with closing(_batches(rm, todo, chunk)) as stream:  # closed at once on failure: stops a Ray run
                for part, raw in stream:
                    if len(raw) != len(part):
                        raise ScoreError(f"reward model {rm.name!r} returned {len(raw)} scores for "
                                         f"{len(part)} pairs")
                    scores = [_check(rm, s, owner[p]) for p, s in zip(part, raw)]
                    if cache is not None:
                        cache.put_many(_rm_key(rm), part, scores, fit)
                    known.update(zip(part, scores))
                    bar.update(len(part))
                    budget.current().check()  # a caller's deadline (the server's engine): no chunk past it
        except PartialScoreError as err:  # keep what was scored before failing the run
            done = [(p, s) for p, s in zip(getattr(err, "pairs", ()), err.scores) if s is not None]
            if cache is not None and done:
                cache.put_many(_rm_key(rm), [p for p, _ in done], [_check(rm, s, owner[p]) for p, s in done], fit)
            raise
    return known


def _score_query_rm(rm: Any, query: Query, cache: ScoreCache | None) -> list[Score]:
    context = rm.cache_context(query) if cache is not None else None
    texts = [c.text or "" for c in query.candidates]
    if context is not None:
        hits = cache.get_many(_rm_key(rm), [(context, t) for t in texts])
        if all(h is not None for h in hits):
            return hits  # type: ignore[return-value]
    raw = rm.score_query(query)
    if len(raw) != len(texts):
        raise ScoreError(f"reward model {rm.name!r} returned {len(raw)} scores for query {query.id!r} "
                         f"with {len(texts)} candidates")
    scores = [_check(rm, s, query.id) for s in raw]
    if context is not None:
        cache.put_many(_rm_key(rm), [(context, t) for t in texts], scores)
    return scores


def skip_plan(rms: Sequence[Any], queries: Sequence[Query]) -> dict[str, list[str | None]]:
    """RM name -> per query, why the RM does not apply to it (None: it does); a query with a data error for
    some RM (a code query without tests under code-tests) raises an InputError naming it."""
    plan = {}
    for rm in rms:
        rule = applicability_of(rm)
        plan[rm.name] = [rule.check(q, rm.name) for q in queries]
    return plan


def score_queries(queries: Sequence[Query], rms: Sequence[Any], *, cache: ScoreCache | None = None,
                  chunk: int = 64, progress: bool = False) -> list[Query]:
    """Return the queries with each RM's score added to every candidate's `scores` (by RM name). An RM that does not
    apply to a query leaves its score missing (a stale one removed) and the reason under `skipped_rms`; a cut answer
    is listed under the candidate's `truncated` key."""
    plan = skip_plan(rms, queries)
    per_rm: dict[str, list[list[Score] | None]] = {}
    for rm in rms:
        todo = [q for q, why in zip(queries, plan[rm.name]) if why is None]
        if hasattr(rm, "score_query"):
            done = iter([_score_query_rm(rm, q, cache) for q in _bar(progress, rm.name, iterable=todo, unit="query")])
        else:
            known = _score_pairs(rm, todo, cache, chunk, progress)
            done = iter([[known[(q.question, c.text)] for c in q.candidates] for q in todo])
        per_rm[rm.name] = [next(done) if why is None else None for why in plan[rm.name]]
        _log_skips(rm.name, queries, plan[rm.name])
    for name, table in per_rm.items():
        cut = sum(s.truncated for row in table if row is not None for s in row)
        questions = sum(bool((s.extra or {}).get("question_cut")) for row in table if row is not None for s in row)
        also = f" ({questions} newly scored with their question cut too, keeping its end)" if questions else ""
        if cut:
            log.warning("%s: %d answers were too long and were cut before scoring%s; they are listed under each "
                        "candidate's `truncated` key", name, cut, also)
    return [_with_scores(query, qi, per_rm, plan) for qi, query in enumerate(queries)]


def _with_scores(query: Query, qi: int, per_rm: dict[str, list[list[Score] | None]],
                 plan: dict[str, list[str | None]]) -> Query:
    """The query with row `qi` of every RM's scores on its candidates and its `skipped_rms` record updated."""
    skips = recorded_skips(query)
    candidates = []
    for ci, candidate in enumerate(query.candidates):
        scores = dict(candidate.scores)
        extra = dict(candidate.extra)
        for name, table in per_rm.items():
            row = table[qi]
            if row is None:
                scores.pop(name, None)
                continue
            score = row[ci]
            scores[name] = score.steps if score.steps is not None else score.value
            if score.truncated:
                extra["truncated"] = sorted(set(extra.get("truncated", [])) | {name})
        candidates.append(replace(candidate, scores=scores, extra=extra))
    for name in per_rm:
        why = plan[name][qi]
        if why is None:
            skips.pop(name, None)
        else:
            skips[name] = why
    extra = {k: v for k, v in query.extra.items() if k != SKIPPED_KEY}
    if skips:
        extra[SKIPPED_KEY] = skips
    return replace(query, candidates=tuple(candidates), extra=extra)


def _log_skips(name: str, queries: Sequence[Query], reasons: Sequence[str | None]) -> None:
    skipped = [(q.id, why) for q, why in zip(queries, reasons) if why is not None]
    if not skipped:
        return
    qid, why = skipped[0]
    level = logging.WARNING if len(skipped) == len(queries) else logging.INFO
    log.log(level, "%s does not apply to %d of %d queries (e.g. %r: %s); their %s scores are missing and the "
            "reason is under each query's `skipped_rms`", name, len(skipped), len(queries), qid, why, name)


def skip_counts(queries: Sequence[Query]) -> dict[str, int]:
    """RM name -> how many of the queries record it under `skipped_rms` (it did not apply to them)."""
    counts: dict[str, int] = {}
    for query in queries:
        for name in recorded_skips(query):
            counts[name] = counts.get(name, 0) + 1
    return counts


def lacks_scores(query: Query, name: str) -> bool:
    """Whether some candidate of the query has no cached score of RM `name`, which applies to the query."""
    return (any(name not in c.scores for c in query.candidates)
            and applicability_of(name).skip_reason(query, name) is None)


def fill_missing_scores(queries: Sequence[Query], wanted: Sequence[Iterable[str]], rms: Any, *,
                        cache: ScoreCache | None = None, chunk: int = 64, progress: bool = False) -> list[Query]:
    """Run each wanted RM on the queries that want it and lack its scores; other queries are left as they are.

    `wanted[i]` names the RMs query i needs; `rms[name]` gives the built RM (e.g. a ScoringSession)."""
    out = list(queries)
    rows: dict[str, list[int]] = {}
    for i, (query, names) in enumerate(zip(queries, wanted)):
        for name in names:
            if lacks_scores(query, name):
                rows.setdefault(name, []).append(i)
    for name, indices in rows.items():  # every data error before the first RM runs
        skip_plan([rms[name]], [queries[i] for i in indices])
    for name, indices in rows.items():
        scored = score_queries([out[i] for i in indices], [rms[name]], cache=cache, chunk=chunk, progress=progress)
        for i, query in zip(indices, scored):
            out[i] = query
    return out
