"""The scoring service behind `morkit serve` and the TRL reward: route each query to its ensemble, fill scores, rank.

One `RoutingEngine` keeps every RM the pool may run resident, with one score cache; a bad query fails only its own job.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import replace
from typing import Any, Mapping, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.question_pool.pool import QuestionPool
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.selection.base import Choice, Neighbours
from morkit.selection.methods import SelectOptions
from morkit.selection.selector import Ranking, Selection
from morkit.services.routing import Routing, make_selector, runnable_rms
from morkit.services.serving.classify import Standalone, standalone_reward
from morkit.services.serving.protocol import group_responses, reward_reply

log = logging.getLogger(__name__)

Job = tuple[Query, ...]


class FixedEnsemble:
    """A 'selection method' that always picks one ensemble of the pool: `--rm A [--rm B ...]`.

    Of the pool's ensembles with exactly these members, the one with the best pool-wide mean PRR (the
    weighting the pool found best for them); its weights apply to pool-normalised scores, as in routing."""

    name = "fixed"

    def __init__(self, pool: QuestionPool, members: Sequence[str]):
        unknown = [m for m in members if m not in pool.rm_names]
        if unknown:
            raise InputError(f"--rm {unknown[0]}: not an RM of this pool; its RMs: {', '.join(pool.rm_names)}")
        wanted = set(members)
        rows = [r for r in pool.ensemble_table() if set(r["ensemble"].members) == wanted]
        if not rows:
            raise InputError(f"the pool has no ensemble of exactly {', '.join(members)} (it combines up to "
                             f"{pool.config.max_members} of its RMs)")
        best = max(rows, key=lambda r: r["mean_prr"] if math.isfinite(r["mean_prr"]) else -math.inf)
        self.ensemble = best["ensemble"]
        self.score = float(best["mean_prr"]) if math.isfinite(best["mean_prr"]) else 0.0

    def choose(self, neighbours: Neighbours, available: frozenset[str]) -> Choice:
        lacking = [m for m in self.ensemble.members if m not in available]
        if lacking:
            raise LookupError(f"the fixed ensemble needs {', '.join(lacking)}, which this query's candidates "
                              "neither carry under 'scores' nor can be scored by here")
        return Choice(self.ensemble, "pool-zscore", self.score, (), {"criterion": "fixed (pool mean PRR)"})


class PlacedSession(ScoringSession):
    """A scoring session in which some RMs are handles placed by the caller (e.g. Ray Serve deployments)."""

    def __init__(self, options: ScoringOptions, placed: Mapping[str, Any], **kwargs: Any):
        super().__init__(options, **kwargs)
        self.placed = dict(placed)

    def handle(self, name: str) -> Any:
        return self.placed[name] if name in self.placed else super().handle(name)


class RoutingEngine:
    """Routed (or fixed-ensemble) MoR scoring with resident RMs and one shared score cache; `handles`: RMs
    placed elsewhere (name -> an RMHandle whose `score(pairs)` calls them), used instead of loading them here."""

    def __init__(self, pool: QuestionPool, select: SelectOptions = SelectOptions(),
                 scoring: ScoringOptions = ScoringOptions(), *, rms: Sequence[str] = (), embedder: Any = None,
                 handles: Mapping[str, Any] | None = None):
        self.pool = pool
        self.scoring = scoring
        self.fixed = tuple(rms)
        fixed = FixedEnsemble(pool, self.fixed) if self.fixed else None
        runnable = runnable_rms(pool) if select.allow_run else []
        names = [n for n in runnable if not self.fixed or n in self.fixed]
        self.session = PlacedSession(replace(scoring, progress=False), handles or {}, keep_all=True)
        try:
            self.session.check_fit(names)  # before the embedder or any RM loads
            selector = make_selector(pool, select, scoring.device, embedder)
            selector.embedder  # loaded now: a server is ready before its first request
            if fixed is not None:
                selector.use(fixed, fixed.name)
            self.models = self.session.keep_resident(names)  # each built once, resident for the engine's life
        except BaseException:
            self.session.close()
            raise
        self.routing = Routing(selector, self.session)

    @property
    def selector(self) -> Any:
        return self.routing.selector

    @property
    def cache(self) -> Any:
        return self.session.cache

    @property
    def method(self) -> str:
        return self.selector.method_name

    def health(self) -> dict[str, Any]:
        return {"status": "ok", "questions": len(self.pool), "method": self.method,
                "fixed_ensemble": list(self.fixed) or None, "resident_rms": list(self.models),
                "pool_rms": list(self.pool.rm_names)}

    # ------------------------------------------------------------------------------------------ batches
    def run(self, jobs: Sequence[Job]) -> list[list[Ranking] | Exception]:
        """Rankings for every job of a micro-batch, or the exception that failed that job alone. Math answers
        are compared symbolically with at most SERVER_SYMBOLIC_CLASSES classes each (the server and the TRL
        reward alike), within any deadline the caller set (`core.budget`)."""
        from morkit.core import budget
        from morkit.core.grading import SERVER_SYMBOLIC_CLASSES

        with budget.work_bounded(budget.current().deadline, SERVER_SYMBOLIC_CLASSES):
            return self._run(jobs)

    def _run(self, jobs: Sequence[Job]) -> list[list[Ranking] | Exception]:
        flat = [(j, q) for j, job in enumerate(jobs) for q in job]
        failed: dict[int, Exception] = {}
        selections: list[Selection | None] = [None] * len(flat)
        try:  # one question per call: a padded batch would round a query's vector by its batch-mates
            vectors = [self.selector.embedder.encode([q.question]) for _, q in flat]
        except Exception as exc:  # noqa: BLE001 - nothing can be routed without embeddings
            return [exc] * len(jobs)
        for i, (j, query) in enumerate(flat):
            if j not in failed:
                try:
                    selections[i] = self.routing.select([query], vectors=vectors[i])[0]
                except Exception as exc:  # noqa: BLE001 - fails this job only
                    failed[j] = exc
        live = [i for i, (j, _) in enumerate(flat) if j not in failed]
        scored = self._fill([flat[i][1] for i in live], [selections[i] for i in live],
                            [flat[i][0] for i in live], failed)
        out: dict[int, list[Ranking]] = defaultdict(list)
        for i, query in zip(live, scored):
            j = flat[i][0]
            if j in failed or query is None:
                continue
            try:
                out[j].append(self._alone(query, selections[i]) if isinstance(jobs[j], Standalone)
                              else self.routing.rank(query, selections[i]))
            except Exception as exc:  # noqa: BLE001
                failed[j] = exc
        return [failed[j] if j in failed else out[j] for j in range(len(jobs))]

    def _alone(self, query: Query, selection: Selection) -> Ranking:
        """A Standalone job's query: its one response's reward under the pool's standardisation (/classify)."""
        return Ranking(selection, (standalone_reward(self.pool, query, selection.choice),), 0, (0,))

    def _fill(self, queries: list[Query], selections: list[Any], owners: list[int],
              failed: dict[int, Exception]) -> list[Query | None]:
        """Queries with their chosen members' scores filled; on a failure, retried job by job to isolate it."""
        try:
            return self.routing.fill(queries, selections)
        except Exception as exc:  # noqa: BLE001 - find the job(s) at fault
            if len(set(owners)) <= 1:
                failed.update((o, exc) for o in owners)
                return [None] * len(queries)
        out: list[Query | None] = [None] * len(queries)
        for job in dict.fromkeys(owners):
            rows = [i for i, o in enumerate(owners) if o == job]
            try:
                done = self.routing.fill([queries[i] for i in rows], [selections[i] for i in rows])
            except Exception as exc:  # noqa: BLE001
                failed[job] = exc
                continue
            for i, query in zip(rows, done):
                out[i] = query
        return out

    # ---------------------------------------------------------------------------------------- in process
    def rank(self, queries: Sequence[Query]) -> list[Ranking]:
        """Rankings of `queries` (one job); the same JSON as `morkit rank` gives, line by line."""
        result = self.run([tuple(queries)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def rewards(self, prompts: Sequence[str], responses: Sequence[str],
                references: Sequence[str | None] | None = None) -> dict[str, list[float]]:
        """OpenRLHF's reply for (prompt, response) items: responses grouped by prompt, routed and scored."""
        job = group_responses(prompts, responses, references)
        rankings = self.rank(job.queries)
        return reward_reply(job, [r.scores for r in rankings])

    def close(self) -> None:
        """Release the resident RMs and the score cache."""
        self.session.close()
