"""The `fixed` selection method: every query gets one ensemble of the pool (`--rm A --rm B`), whatever its
neighbours; a server or a ranking that must score with chosen RMs, not routed ones."""

from __future__ import annotations

import math
from typing import Sequence

from morkit.core.errors import InputError
from morkit.question_pool.pool import QuestionPool
from morkit.selection.base import Choice, CostLimit, Neighbours


class FixedEnsemble:
    """Always picks the pool's ensemble of exactly `rms`: of the pool's ensembles with these members, the one with
    the best pool-wide mean PRR (the weighting the pool found best for them); its weights apply to pool-normalised
    scores, as in routing.

    Args:
        pool: The question pool.
        rms: The ensemble's pool RMs (at least one).

    Raises:
        InputError: `rms` is empty, names an RM the pool lacks, or the pool has no ensemble of exactly these RMs.
    """

    name = "fixed"

    def __init__(self, pool: QuestionPool, rms: Sequence[str] = ()):
        if not rms:
            raise InputError("the fixed method needs its ensemble's RMs: --rm NAME (SelectOptions(rms=...))")
        unknown = [m for m in rms if m not in pool.rm_names]
        if unknown:
            raise InputError(f"--rm {unknown[0]}: not an RM of this pool; its RMs: {', '.join(pool.rm_names)}")
        wanted = set(rms)
        rows = [r for r in pool.ensemble_table() if set(r["ensemble"].members) == wanted]
        if not rows:
            raise InputError(f"the pool has no ensemble of exactly {', '.join(rms)} (it combines up to "
                             f"{pool.config.max_members} of its RMs)")
        best = max(rows, key=lambda r: r["mean_prr"] if math.isfinite(r["mean_prr"]) else -math.inf)
        self.ensemble = best["ensemble"]
        self.score = float(best["mean_prr"]) if math.isfinite(best["mean_prr"]) else 0.0

    def choose(self, neighbours: Neighbours, available: frozenset[str], limit: CostLimit | None = None) -> Choice:
        """The fixed ensemble, when the query can use every member.

        Args:
            neighbours: The query's pool neighbours (not read).
            available: The pool RMs the query can use.
            limit: None: a fixed ensemble takes no budget (SelectOptions refuses one first).

        Returns:
            The Choice of the fixed ensemble, with its pool mean PRR as the criterion.

        Raises:
            LookupError: The query cannot use a member.
            ValueError: A cost limit is given.
        """
        if limit is not None:
            raise ValueError("the fixed method takes no budget: its ensemble is the same whatever it costs")
        lacking = [m for m in self.ensemble.members if m not in available]
        if lacking:
            raise LookupError(f"the fixed ensemble needs {', '.join(lacking)}, which this query's candidates "
                              "neither carry under 'scores' nor can be scored by here")
        return Choice(self.ensemble, "pool-zscore", self.score, (), {"criterion": "fixed (pool mean PRR)"})
