"""Score every candidate of many queries with many RMs: cache first, then batched model calls, each chunk cached as
soon as it is scored. Which RMs apply to which queries is settled before the first one runs, so a data error
fails the run before any model loads; the seconds an RM spends on the pairs it computes go to the timing ledger.
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
from morkit.reward_models.catalog import REWARD_MODELS, applicability_of, identity_of
from morkit.reward_models.timing import Meter, record

log = logging.getLogger(__name__)


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


def timed_as(rm: Any) -> tuple[str, str] | None:
    """(placement, device) an RM's seconds per pair are recorded under; None where its name does not say what ran:
    an RM not registered (a table of cached scores, a user's object), or a bare client whose model is an option."""
    if rm.name not in REWARD_MODELS:
        return None
    card = REWARD_MODELS.get(rm.name).spec
    if card.options:
        return None
    if not card.loads_model:
        return "python", "cpu"  # a rule: plain code in this process (its sandboxed children included)
    device = getattr(rm, "measured_device", None)
    return getattr(rm, "placement", "transformers"), device() if device is not None else ""


class RMRun:
    """One RM over a list of queries: which of them it applies to (settled before any RM runs), the key its scores
    are cached under (catalog.identity_of; None without a cache), the one place it reads and writes the cache, and
    the time it spends on the pairs it computes (recorded in the timing ledger when it is done).

    Args:
        rm: The RM (a handle, a built rule, any object with `score(pairs)` or `score_query(query)`).
        reasons: Per query of the run, why the RM skips it, or None where it applies.
        cache: The score cache, or None.
    """

    def __init__(self, rm: Any, reasons: Sequence[str | None], cache: ScoreCache | None):
        self.rm, self.name, self.reasons = rm, rm.name, list(reasons)
        self.key = identity_of(rm) if cache is not None else None  # worked out only where a cache is read
        self.cache = cache
        self.meter = Meter()

    @classmethod
    def planned(cls, rm: Any, queries: Sequence[Query], cache: ScoreCache | None) -> "RMRun":
        """The run of `rm` over `queries`, each query's applicability checked now (a data error is an InputError)."""
        rule = applicability_of(rm)
        return cls(rm, [rule.check(q, rm.name) for q in queries], cache)

    def _checked(self, scores: Sequence[Score], qids: Sequence[str]) -> list[Score]:
        """The scores, each finite (else a ScoreError naming the RM and the query)."""
        for score, qid in zip(scores, qids):
            if not all(math.isfinite(v) for v in (score.value, *(score.steps or ()))):
                raise ScoreError(f"reward model {self.name!r} returned a non-finite score {score.value!r} for query "
                                 f"{qid!r}")
        return list(scores)

    def scores(self, queries: Sequence[Query], chunk: int, progress: bool) -> list[list[Score] | None]:
        """Per query, every candidate's score (None where the RM does not apply): cache first, then the RM, each
        chunk (or query) cached as soon as it is scored, what a PartialScoreError kept cached before it leaves;
        no chunk starts past the caller's deadline (core.budget). The seconds spent computing pairs are recorded
        when it is done (`record_timing`), also after a failure."""
        try:
            return self._scores(queries, chunk, progress)
        finally:
            self.record_timing()

    def record_timing(self) -> None:
        """Add what this run measured to the timing ledger (never raises: a failure logs a warning). A run with
        the score cache off (`--no-cache`, `ScoringOptions.cache` None) writes nothing to morkit's cache folder, so
        it records nothing either."""
        if not self.meter.pairs or self.cache is None:
            return
        try:
            where = timed_as(self.rm)
        except Exception as exc:  # noqa: BLE001 - a measurement must never fail the run that made it
            log.warning("could not tell where %s ran, so its seconds per pair are not recorded: %s", self.name, exc)
            return
        if where is not None:
            record(self.name, *where, self.meter)

    def _scores(self, queries: Sequence[Query], chunk: int, progress: bool) -> list[list[Score] | None]:
        todo = [q for q, why in zip(queries, self.reasons) if why is None]
        cache, rm = self.cache, self.rm
        if hasattr(rm, "score_query"):  # the whole query decides (tests, siblings): keyed by its cache_context
            done = []
            for query in _bar(progress, self.name, iterable=todo, unit="query"):
                context = rm.cache_context(query) if cache is not None else None
                pairs = [(context, c.text or "") for c in query.candidates]
                hits = cache.get_many(self.key, pairs) if context is not None else [None]
                if any(h is None for h in hits):
                    with self.meter.timing(len(pairs)):
                        hits = rm.score_query(query)
                    if len(hits) != len(pairs):
                        raise ScoreError(f"reward model {self.name!r} returned {len(hits)} scores for query "
                                         f"{query.id!r} with {len(pairs)} candidates")
                    hits = self._checked(hits, [query.id] * len(pairs))
                    if context is not None:
                        cache.put_many(self.key, pairs, hits)
                done.append(hits)
        else:
            known = self._pairs(todo, chunk, progress)
            done = [[known[(q.question, c.text)] for c in q.candidates] for q in todo]
        rows = iter(done)
        return [next(rows) if why is None else None for why in self.reasons]

    def _pairs(self, queries: Sequence[Query], chunk: int, progress: bool) -> dict[tuple[str, str], Score]:
        """Each distinct (question, answer) of the queries scored once: cache first, then the RM in chunks that keep
        a question's candidates together (the RM computes their shared prefix once)."""
        owner: dict[tuple[str, str], str] = {}
        for query in queries:
            for i, candidate in enumerate(query.candidates):
                if candidate.text is None:
                    raise InputError(f"query {query.id!r} candidate {i} has no text, which {self.name!r} needs")
                owner.setdefault((query.question, candidate.text), query.id)
        pairs, cache = list(owner), self.cache
        hits = cache.get_many(self.key, pairs) if cache is not None else [None] * len(pairs)
        known = {p: h for p, h in zip(pairs, hits) if h is not None}
        todo = sorted((p for p in pairs if p not in known), key=lambda p: (p[0], len(p[1])))
        streams = hasattr(self.rm, "score_batches")  # on a cluster, whose first batch waits for replicas to load
        if todo and not streams and hasattr(self.rm, "load_now"):
            self.rm.load_now()  # its loading is not timed as scoring
        with _bar(progress, self.name, total=len(pairs), unit="pair") as bar:
            bar.update(len(known))
            try:
                batches = self.meter.timed(_batches(self.rm, todo, chunk), skip_first=streams)
                with closing(batches) as stream:  # closed at once on failure: stops a Ray run
                    for part, raw in stream:
                        if len(raw) != len(part):
                            raise ScoreError(f"reward model {self.name!r} returned {len(raw)} scores for "
                                             f"{len(part)} pairs")
                        known.update(zip(part, self._checked(raw, [owner[p] for p in part])))
                        if cache is not None:
                            cache.put_many(self.key, part, [known[p] for p in part])
                        bar.update(len(part))
                        budget.current().check()  # a caller's deadline (the server's engine): no chunk past it
            except PartialScoreError as err:  # keep what was scored before failing the run
                done = [(p, s) for p, s in zip(getattr(err, "pairs", ()), err.scores) if s is not None]
                if cache is not None and done:
                    cache.put_many(self.key, [p for p, _ in done],
                                   self._checked([s for _, s in done], [owner[p] for p, _ in done]))
                raise
        return known


def score_queries(queries: Sequence[Query], rms: Sequence[Any], *, cache: ScoreCache | None = None,
                  chunk: int = 64, progress: bool = False) -> list[Query]:
    """Return the queries with each RM's score added to every candidate's `scores` (by RM name). An RM that does not
    apply to a query leaves its score missing (a stale one removed) and the reason under `skipped_rms`; a cut answer
    is listed under the candidate's `truncated` key."""
    runs = [RMRun.planned(rm, queries, cache) for rm in rms]  # every data error before the first RM runs
    return _scored(queries, runs, chunk, progress)


def _scored(queries: Sequence[Query], runs: Sequence[RMRun], chunk: int, progress: bool) -> list[Query]:
    """The queries with every run's scores and skip records on them, after each run's log lines."""
    per_rm: dict[str, list[list[Score] | None]] = {}
    for run in runs:
        per_rm[run.name] = run.scores(queries, chunk, progress)
        _log_skips(run.name, queries, run.reasons)
    plan = {run.name: run.reasons for run in runs}
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

    `wanted[i]` names the RMs query i needs; `rms[name]` gives the built RM (e.g. a ScoringSession). Each RM's
    applicability is read once, and every data error is raised before the first RM runs."""
    rows: dict[str, list[int]] = {}
    rules: dict[str, Any] = {}
    for i, (query, names) in enumerate(zip(queries, wanted)):
        for name in names:
            if name not in rules:
                rules[name] = applicability_of(name)
            rule = rules[name]
            if any(name not in c.scores for c in query.candidates) and rule.check(query, name) is None:
                rows.setdefault(name, []).append(i)
    runs = {name: RMRun(rms[name], [None] * len(rows[name]), cache) for name in rows}  # all built before any runs
    out = list(queries)
    for name, run in runs.items():
        for i, query in zip(rows[name], _scored([out[i] for i in rows[name]], [run], chunk, progress)):
            out[i] = query
    return out
