"""The scoring service behind `morkit serve` and the TRL reward: a Router's select -> fill -> rank over micro-batches
(with a cascade, twice for the queries it escalates). One `RoutingEngine` keeps every RM the pool may run resident,
with one score cache; a bad query fails only its own job.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from morkit.core.types import Query
from morkit.question_pool.embed import embedder_memory
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.catalog import REWARD_MODELS, relative_scores
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.selection.cascade import Cascade
from morkit.selection.chooser import Selection
from morkit.selection.methods import SelectOptions
from morkit.selection.router import Ranking, Router, runnable_rms
from morkit.runtime.symbolic import SymbolicWorker
from morkit.services.routing import router_for
from morkit.services.serving.protocol import group_responses, reward_reply

log = logging.getLogger(__name__)

Job = tuple[Query, ...]
Reads = Callable[[int, Query, Selection], Sequence[str]]
"""The RMs a phase fills for row i, its query and its selection there."""
FILL_PART = 256
"""Candidates scored between two checks of the jobs' deadlines (a query is never split; a model still batches
its own way within a part)."""


def _parts(rows: Iterable[int], queries: Sequence[Query | None]) -> Iterator[list[int]]:
    """`rows` in order, cut into runs of about FILL_PART candidates (at least one query each)."""
    part: list[int] = []
    size = 0
    for i in rows:
        if part and size + len(queries[i].candidates) > FILL_PART:  # type: ignore[union-attr]
            yield part
            part, size = [], 0
        part.append(i)
        size += len(queries[i].candidates)  # type: ignore[union-attr]
    if part:
        yield part


class RoutingEngine:
    """A Router's select, fill and rank over micro-batches of jobs, with resident RMs and one shared score cache:
    each job within its deadline, a failure failing its job alone, math answers compared in a process that can be
    ended. Building one checks that the RMs fit in memory, then loads the pool's embedder and every runnable RM.

    Args:
        pool: The question pool that routes queries.
        select: How ensembles are chosen (the `fixed` method with `rms`: always the pool's ensemble of those RMs,
            and only they load; a `cascade`: its two routes, fitted now, and only its RMs load; a `budget`: the
            Router's); with `allow_run`, the registered pool RMs that can run here are loaded.
        scoring: How the RMs load and run (progress bars are off); its `cache` is the shared score cache.
        embedder: The embedder for questions (it must be the pool's); None loads the pool's own.
        handles: RM name -> a handle placed elsewhere (an RMHandle whose `score(pairs)` calls it, e.g. a Ray Serve
            deployment's), used instead of loading that RM here.

    Raises:
        InputError: The pool is empty, `embedder` is not the pool's, or `select.rms` is not an ensemble of the pool.
        UnavailableError: The RMs and embedder do not fit in memory, or one cannot load here.
    """

    def __init__(self, pool: QuestionPool, select: SelectOptions = SelectOptions(),
                 scoring: ScoringOptions = ScoringOptions(), *, embedder: Any = None,
                 handles: Mapping[str, Any] | None = None):
        self.pool = pool
        self.scoring = scoring
        self.fixed = select.rms
        self.budget = select.budget
        scope = select.rm_scope
        runnable = runnable_rms(pool) if select.allow_run else []
        names = [n for n in runnable if scope is None or n in scope]
        self.session = ScoringSession(replace(scoring, progress=False), keep_all=True, placed=handles)
        self.symbolic = SymbolicWorker()  # no process until it is started
        try:
            beside = {} if embedder is not None else {f"embedder {pool.embedder}": embedder_memory(pool.embedder)}
            self.session.check_fit(names, beside)  # before the embedder or any RM loads
            routes = router_for(pool, select, device=scoring.device, embedder=embedder, session=self.session)
            self.cascade: Cascade | None = routes if isinstance(routes, Cascade) else None
            self.router: Router = routes.cheap if isinstance(routes, Cascade) else routes  # the first phase's
            self.router.embedder  # loaded now: a server is ready before its first request
            self.method = routes.method_name  # what chooses (learned fits made now): /health never fits
            self.models = self.session.keep_resident(names)  # each built once, resident for the engine's life
            if any(relative_scores(n) for n in names):  # a rule comparing answers (math-consensus): ready it now
                self.symbolic.start(wait_s=60.0)
        except BaseException:
            self.session.close()
            self.symbolic.close()
            raise
        self._kinds: dict[str, bool] = {}

    @property
    def cache(self) -> Any:
        return self.session.cache

    def health(self) -> dict[str, Any]:
        """What `/health` reports.

        Returns:
            `status`, the pool's question count, the method, the fixed ensemble (or None), the resident RMs
            and the pool's RMs; `budget` (its cap and cost weight) and `cascade` (Cascade.describe) where set.
        """
        out = {"status": "ok", "questions": len(self.pool), "method": self.method,
               "fixed_ensemble": list(self.fixed) or None, "resident_rms": list(self.models),
               "pool_rms": list(self.pool.rm_names)}
        if self.budget is not None:
            out["budget"] = self.budget.to_json()
        if self.cascade is not None:
            out["cascade"] = self.cascade.describe()
        return out

    # ------------------------------------------------------------------------------------------ batches
    def run(self, jobs: Sequence[Job]) -> list[list[Ranking] | Exception]:
        """Rankings for every job of a micro-batch, or the exception that failed that job alone; a job is dropped at
        its own deadline (`core.budget` parts) in every phase while the others go on. Math answers are compared
        symbolically within the SERVER_SYMBOLIC_* bounds of `core.grading`, in a process that can be ended (the
        server and the TRL reward alike).

        Args:
            jobs: The micro-batch: each job a tuple of queries from one request.

        Returns:
            Per job, in order: one Ranking per query, or the exception that failed that job.
        """
        from morkit.core import budget

        bound = budget.current()
        deadlines = bound.parts if len(bound.parts) == len(jobs) else (bound.deadline,) * len(jobs)
        return self._run(jobs, tuple(deadlines))

    def _run(self, jobs: Sequence[Job], deadlines: tuple[float | None, ...]) -> list[list[Ranking] | Exception]:
        """`Router.route`'s select, fill and rank (`Cascade.route`'s, with a cascade), phase by phase over the jobs
        rather than one call: route knows no jobs, and here a job that failed or passed its deadline leaves the
        phases after it, each question is embedded alone, and the fill goes in parts with its failures found job by
        job (`_fill`)."""
        from morkit.core.budget import DeadlinePassed, passed

        flat = [(j, q) for j, job in enumerate(jobs) for q in job]
        owners = [j for j, _ in flat]
        failed: dict[int, Exception] = {}

        def live(j: int) -> bool:
            """Whether job j is still wanted; one whose deadline has passed fails now (its caller has gone)."""
            if j in failed:
                return False
            if passed(deadlines[j]):
                failed[j] = DeadlinePassed("the request ran past its deadline (--timeout) in the engine")
                return False
            return True

        vectors: dict[str, Any] = {}
        try:  # one question per call: a padded batch would round a query's vector by its batch-mates
            for j, query in flat:
                if live(j) and query.question not in vectors:
                    vectors[query.question] = self.router.embedder.encode([query.question])
        except Exception as exc:  # noqa: BLE001 - nothing can be routed without embeddings
            return [failed.get(j, exc) for j in range(len(jobs))]
        phase = (vectors, owners, deadlines, live, failed)
        cascade = self.cascade
        if cascade is None:
            done = self._phase(self.router, dict(enumerate(q for _, q in flat)),
                               lambda i, q, s: s.choice.ensemble.members, *phase)
            final = {i: ranking for i, (_, _, ranking) in done.items()}
        else:
            done = self._phase(cascade.cheap, dict(enumerate(q for _, q in flat)),
                               lambda i, q, s: cascade.cheap_reads(q, s), *phase)
            final = self._isolated(done, owners, failed, lambda i, q, s, r: cascade.decide(q, s, r))
            up = {i: done[i][0] for i in done if i not in final and live(owners[i])}
            cheap = {i: done[i][1] for i in up}
            raised = self._phase(cascade.escalated, up, lambda i, q, s: cascade.escalated_reads(q, cheap[i], s),
                                 *phase)
            final.update(self._isolated(raised, owners, failed, lambda i, q, s, r: cascade.finish(q, cheap[i], s, r)))
        out: dict[int, list[Ranking]] = defaultdict(list)
        for i in sorted(final):
            if owners[i] not in failed:
                out[owners[i]].append(final[i])
        return [failed[j] if j in failed else out[j] for j in range(len(jobs))]

    def _phase(self, router: Router, queries: dict[int, Query], reads: Reads, vectors: dict[str, Any],
               owners: list[int], deadlines: tuple[float | None, ...], live: Callable[[int], bool],
               failed: dict[int, Exception]) -> dict[int, tuple[Query, Selection, Ranking]]:
        """One route's select, fill and rank over some rows (row -> query) of the micro-batch: each query selected
        alone (its question's vector), `reads` filled (`_fill`), ranked; a failure fails its job, which leaves the
        phase. Returns row -> (the filled query, its selection, its ranking) for the rows of the jobs still live."""
        selections: dict[int, Selection] = {}
        for i, query in queries.items():
            if live(owners[i]):
                try:
                    selections[i] = router.select_many([query], vectors=vectors[query.question])[0]
                except Exception as exc:  # noqa: BLE001 - fails this job only
                    failed[owners[i]] = exc
        rows = [i for i in queries if live(owners[i])]
        wanted = []
        for i in rows:
            try:
                wanted.append(tuple(reads(i, queries[i], selections[i])))
            except Exception as exc:  # noqa: BLE001
                failed[owners[i]] = exc
                wanted.append(())
        scored = self._fill([queries[i] for i in rows], wanted, [owners[i] for i in rows], deadlines, live, failed)
        out: dict[int, tuple[Query, Selection, Ranking]] = {}
        for i, query in zip(rows, scored):
            if query is None or not live(owners[i]):
                continue
            try:
                out[i] = (query, selections[i], router.rank(query, selections[i]))
            except Exception as exc:  # noqa: BLE001
                failed[owners[i]] = exc
        return out

    @staticmethod
    def _isolated(done: dict[int, tuple[Query, Selection, Ranking]], owners: list[int],
                  failed: dict[int, Exception], step: Callable[[int, Query, Selection, Ranking], Ranking | None]
                  ) -> dict[int, Ranking]:
        """`step` over a phase's rows, a failure failing its job alone: row -> the ranking it gives (None: none)."""
        out: dict[int, Ranking] = {}
        for i, (query, selection, ranking) in done.items():
            if owners[i] in failed:
                continue
            try:
                result = step(i, query, selection, ranking)
            except Exception as exc:  # noqa: BLE001
                failed[owners[i]] = exc
                continue
            if result is not None:
                out[i] = result
        return out

    def _fill(self, queries: list[Query], members: list[tuple[str, ...]], owners: list[int],
              deadlines: tuple[float | None, ...], live: Callable[[int], bool],
              failed: dict[int, Exception]) -> list[Query | None]:
        """Queries with the `members` wanted for each filled, in parts of about FILL_PART candidates with every
        job's deadline checked between them. Members scored by pairs run across jobs (one batch for a model);
        members scored query by query (math-consensus, code-tests) run job by job, each job within its own
        deadline and symbolic budget. A failure fails its job alone (found by retrying job by job)."""
        from morkit.core.budget import SymbolicBudget
        from morkit.core.grading import SERVER_SYMBOLIC_PAIR_S, SERVER_SYMBOLIC_QUERY_S

        by_query = [tuple(m for m in ms if self._per_query(m)) for ms in members]
        by_pairs = [tuple(m for m in ms if not self._per_query(m)) for ms in members]
        out: list[Query | None] = list(queries)
        for part in _parts(range(len(queries)), queries):
            self._fill_part(out, [i for i in part if live(owners[i])], by_pairs, owners, deadlines, failed, None)
        jobs: dict[int, list[int]] = defaultdict(list)
        for i, job in enumerate(owners):
            jobs[job].append(i)
        for job, rows in jobs.items():
            if not any(by_query[i] for i in rows):
                continue
            total = SERVER_SYMBOLIC_QUERY_S * sum(bool(by_query[i]) for i in rows)
            if deadlines[job] is not None:
                total = min(total, (deadlines[job] - time.monotonic()) / 2)
            symbolic = SymbolicBudget(self.symbolic.compare, SERVER_SYMBOLIC_PAIR_S, total)
            for part in _parts(rows, queries):
                if not live(job):
                    break
                self._fill_part(out, part, by_query, owners, deadlines, failed, symbolic)
        return [None if owners[i] in failed else query for i, query in enumerate(out)]

    def _fill_part(self, out: list[Query | None], part: list[int], wanted: list[tuple[str, ...]], owners: list[int],
                   deadlines: tuple[float | None, ...], failed: dict[int, Exception], symbolic: Any) -> None:
        """Fill `wanted` in the queries `part` of `out` under the latest deadline of their jobs; on a failure,
        retried job by job to isolate it (past every deadline: all of them fail)."""
        from morkit.core import budget
        from morkit.core.grading import SERVER_SYMBOLIC_CLASSES

        part = [i for i in part if owners[i] not in failed and out[i] is not None]
        if not any(wanted[i] for i in part):
            return
        jobs = list(dict.fromkeys(owners[i] for i in part))
        try:
            with budget.work_bounded(budget.latest(deadlines[j] for j in jobs), SERVER_SYMBOLIC_CLASSES,
                                     symbolic=symbolic):
                done = self.session.fill([out[i] for i in part], [wanted[i] for i in part])
        except budget.DeadlinePassed as exc:  # the latest of them has passed, so all have
            failed.update((j, exc) for j in jobs)
            return
        except Exception as exc:  # noqa: BLE001 - find the job(s) at fault
            if len(jobs) == 1:
                failed[jobs[0]] = exc
                return
            for job in jobs:
                self._fill_part(out, [i for i in part if owners[i] == job], wanted, owners, deadlines, failed,
                                symbolic)
            return
        for i, query in zip(part, done):
            out[i] = query

    def _per_query(self, name: str) -> bool:
        """Whether pool RM `name` scores a query at a time (a rule that reads the whole query), not pairs."""
        if name not in self._kinds:
            try:
                self._kinds[name] = name in REWARD_MODELS and hasattr(self.session.get(name), "score_query")
            except Exception:  # noqa: BLE001 - an RM that cannot be built fails where it is scored, as before
                self._kinds[name] = False
        return self._kinds[name]

    # ---------------------------------------------------------------------------------------- in process
    def rank(self, queries: Sequence[Query]) -> list[Ranking]:
        """Rankings of `queries` (one job); the same JSON as `morkit rank` gives, line by line.

        Args:
            queries: The queries whose candidates to rank.

        Returns:
            One Ranking per query, in order.

        Raises:
            Exception: Whatever failed the job (e.g. an InputError for a query the pool cannot route).
        """
        result = self.run([tuple(queries)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def rewards(self, prompts: Sequence[str], responses: Sequence[str],
                references: Sequence[str | None] | None = None) -> dict[str, list[float]]:
        """OpenRLHF's reply for (prompt, response) items: responses grouped by prompt, routed and scored.

        Args:
            prompts: Each item's prompt; items with the same prompt form one query.
            responses: Each item's response, aligned with `prompts`.
            references: Each item's reference answer (or None); a group takes its first one given.

        Returns:
            `{"rewards": [...], "scores": [...]}`: each item's MoR score, and the same scaled to [0, 1] within
            its prompt's group (all 0 where the group is flat).
        """
        job = group_responses(prompts, responses, references)
        rankings = self.rank(job.queries)
        return reward_reply(job, [r.scores for r in rankings])

    def close(self) -> None:
        """Release the resident RMs, the score cache and the symbolic comparison process."""
        self.session.close()
        self.symbolic.close()
