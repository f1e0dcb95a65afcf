"""ScoringSession: one scoring run's RMs and score cache, and the one way every service fills in scores. Model RMs
load when first needed, one at a time, unless the session keeps them all resident (`keep_all=True`, a server).
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

from morkit.core.errors import UnknownRewardModel
from morkit.core.types import Query
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.catalog import REWARD_MODELS, resolve_rm
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.handles import PlainHandle, RMHandle
from morkit.reward_models.residency import Residency, check_fits
from morkit.reward_models.rules.table import TableRewardModel, table_names
from morkit.reward_models.scoring import fill_missing_scores, score_queries


def check_rm_names(names: Sequence[str | Any], queries: Sequence[Query]) -> None:
    """Every RM name must be registered or cached under `scores` in the queries; an unknown one lists the known."""
    known = set(REWARD_MODELS.names()) | set(table_names(queries))
    for name in names:
        if isinstance(name, str) and name not in known:
            raise UnknownRewardModel(name, sorted(known))


class ScoringSession:
    """The RMs and score cache of one scoring run (docs page Scoring and backends, how a scoring run goes); a context
    manager.

    Args:
        options: How RMs load and how the run goes; its `cache` is opened when `cache` is not given.
        cache: An open ScoreCache to share (left open on close), or a cache file path to open (closed on close);
            None uses `options.cache`.
        keep_all: Keep every loaded model resident (a server) instead of one at a time.
        placed: RM name -> a handle placed by the caller (e.g. a Ray Serve deployment's), used instead of
            resolving that RM here; left open on close (the caller placed it).
    """

    def __init__(self, options: ScoringOptions = ScoringOptions(), *,
                 cache: ScoreCache | str | os.PathLike | None = None, keep_all: bool = False,
                 placed: Mapping[str, RMHandle] | None = None):
        self.options = options
        self.residency = Residency(keep_all)
        self.placed = dict(placed or {})
        self._handles: dict[str, RMHandle] = {}
        self._owns_cache = not isinstance(cache, ScoreCache)
        if isinstance(cache, ScoreCache):
            self.cache: ScoreCache | None = cache
        else:
            self.cache = ScoreCache(cache) if cache is not None else options.open_cache()

    # ------------------------------------------------------------------------------------------ the RMs
    def handle(self, name: str) -> RMHandle:
        """Registered RM `name`'s handle in this session (resolved once).

        Args:
            name: A name registered in REWARD_MODELS.

        Returns:
            The caller's placed handle, else one on the placement the session's options pick, in its residency;
                nothing loads yet.

        Raises:
            UnknownName: `name` is not registered.
        """
        if name in self.placed:
            return self.placed[name]
        if name not in self._handles:
            self._handles[name] = resolve_rm(name, self.options, self.residency)
        return self._handles[name]

    def get(self, name: str) -> Any:
        """What scores as registered RM `name`: a model RM's handle (it loads through the session), or the built
        rule / plain RM itself.

        Args:
            name: A name registered in REWARD_MODELS.

        Returns:
            An object with `score(pairs)` (or `score_query(query)` for RMs that need the whole query).
        """
        handle = self.handle(name)
        return handle.scorer() if isinstance(handle, PlainHandle) else handle

    __getitem__ = get

    def rms(self, rms: Sequence[str | Any], queries: Sequence[Query] = ()) -> list[Any]:
        """Scorers for `rms`: registered names, names found only in the queries' cached scores (table RMs),
        or RM objects as they are.

        Args:
            rms: Registered RM names, names cached under the candidates' `scores` in `queries`, or RM objects.
            queries: The queries whose cached scores make table RMs of unregistered names.

        Returns:
            One scorer per entry of `rms`, in order.

        Raises:
            UnknownRewardModel: A name is neither registered nor cached in `queries` (an InputError).
        """
        check_rm_names(rms, queries)

        def built(rm: str | Any) -> Any:
            if not isinstance(rm, str):
                return rm
            return self.get(rm) if rm in REWARD_MODELS else TableRewardModel(rm, self.options.reduction)

        return [built(rm) for rm in rms]

    def check_fit(self, names: Sequence[str], beside: Mapping[str, Any] | None = None) -> None:
        """Refuse (UnavailableError) when the RMs `names`, with the models `beside` them (name -> MemoryNeed, such
        as a server's embedder), cannot all be in memory at once (residency.check_fits).

        Args:
            names: Registered RM names to check together.
            beside: Other models that stay in memory with them: name -> MemoryNeed (None where unknown).

        Raises:
            UnavailableError: They do not all fit in the free memory of their devices.
        """
        check_fits([self.handle(n) for n in names], beside, self.options)

    def keep_resident(self, names: Sequence[str]) -> dict[str, Any]:
        """Load every one of `names` now and keep it (a server): one fit check for all of them together first.

        Args:
            names: Registered RM names.

        Returns:
            RM name -> its loaded model (for a rule or plain RM, the built RM).

        Raises:
            UnavailableError: They do not all fit in memory together.
        """
        handles = [self.handle(n) for n in names]
        check_fits(handles)
        return {h.name: (h.residency.hold(h) if h.resident_model else self.get(h.name)) for h in handles}

    def release(self) -> None:
        """Release the loaded models now (the next RM that must score loads again); the cache stays open."""
        self.residency.release_all()

    @property
    def loads(self) -> list[str]:
        return self.residency.loads

    @property
    def resident(self) -> str | None:
        """The model loaded last, if any is loaded."""
        return next(reversed(self.residency.loaded), None)

    # ------------------------------------------------------------------------------------------ scoring
    def score(self, queries: Sequence[Query], rms: Sequence[str | Any]) -> list[Query]:
        """The queries with every RM's score on every candidate it applies to (cache first).

        Args:
            queries: The queries to score.
            rms: Registered RM names, names cached in the queries' `scores` (table RMs), or RM objects.

        Returns:
            New queries whose candidates' `scores` hold each RM's score under its name; an RM that does not apply
            to a query leaves it unscored and says why under the query's `skipped_rms`.
        """
        return score_queries(queries, self.rms(rms, queries), cache=self.cache, chunk=self.options.chunk,
                             progress=self.options.progress)

    def fill(self, queries: Sequence[Query], wanted: Sequence[Iterable[str]]) -> list[Query]:
        """The queries with the scores each lacks of the RMs it wants (`wanted[i]` for query i) filled in.

        Args:
            queries: The queries.
            wanted: For each query, the registered RM names it needs.

        Returns:
            The queries in order; those that lacked a wanted RM's scores are replaced by scored copies.
        """
        return fill_missing_scores(queries, wanted, self, cache=self.cache, chunk=self.options.chunk,
                                   progress=self.options.progress)

    # ------------------------------------------------------------------------------------------ the end
    def close(self) -> None:
        """Release every model and every RM built for this run, and close the cache the session opened."""
        self.residency.release_all()
        for handle in self._handles.values():
            if not handle.resident_model:
                handle.close()
        self._handles.clear()
        if self._owns_cache and self.cache is not None:
            self.cache.close()
            self.cache = None

    def __enter__(self) -> "ScoringSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
