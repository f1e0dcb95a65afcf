"""The per-query selection methods, in SELECTION_METHODS: name -> factory(pool, **options) -> SelectionMethod
(`choose(neighbours, available) -> Choice`); metadata `singles_only`, `neighbourhoods` (the NEIGHBOURHOODS it reads),
`rms` (it takes its ensemble's RMs: `fixed`), `budget` (`choose` takes a CostLimit). Adding one: docs/selection.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.registry import Entry, Registry
from morkit.selection.budget import Budget, CostOptions, limiting
from morkit.selection.cascade_options import CascadeOptions

DEFAULT_METHOD = "learned"
NEIGHBOURHOODS = ("all", "valid")
"""Which k pool questions a query reads (morkit.selection.neighbourhood): "all", the k nearest; "valid", the k
nearest with both a correct and a wrong answer (the paper's valid questions: PRR is defined on them only)."""
DEFAULT_NEIGHBOURHOOD = "all"
"""The default neighbourhood; docs/selection.md ("Which k questions") has the measurement behind it."""
WHOLE_POOL = ("all",)
"""The learned selector's: its local features were fitted on each question's nearest pool questions of all."""


def check_method(method: str, singles_only: bool = False, neighbourhood: str = DEFAULT_NEIGHBOURHOOD,
                 rms: Sequence[str] = (), *, budget: bool = False) -> Entry:
    """The registered method; `singles_only`, the `neighbourhood`, `rms` and a `budget` must be options it has, and
    a method that takes RMs (`fixed`) must be given some."""
    entry = SELECTION_METHODS.get(method)
    if budget and not entry.meta.get("budget"):
        raise InputError(f"a budget (--budget, --cost-weight) does not apply to {method!r}; it is an option of "
                         + ", ".join(e.name for e in SELECTION_METHODS if e.meta.get("budget")))
    if bool(rms) != bool(entry.meta.get("rms")):
        takers = ", ".join(e.name for e in SELECTION_METHODS if e.meta.get("rms"))
        raise InputError(f"the {method!r} method needs the RMs of its ensemble (--rm NAME)" if not rms else
                         f"--rm (the RMs of a fixed ensemble) does not apply to {method!r}; it is an option of "
                         f"{takers}")
    if singles_only and not entry.meta.get("singles_only"):
        raise InputError(f"singles-only does not apply to {method!r}; it is an option of "
                         + ", ".join(e.name for e in SELECTION_METHODS if e.meta.get("singles_only")))
    checks.one_of(neighbourhood, NEIGHBOURHOODS, "neighbourhood")
    if neighbourhood not in entry.meta.get("neighbourhoods", WHOLE_POOL):
        takers = ", ".join(e.name for e in SELECTION_METHODS
                           if neighbourhood in e.meta.get("neighbourhoods", WHOLE_POOL))
        raise InputError(f"neighbourhood {neighbourhood!r} does not apply to {method!r} (its features were fitted "
                         f"on the nearest pool questions of all); it is an option of {takers}")
    return entry

SELECTION_METHODS = Registry("selection method", [
    Entry("learned", "morkit.selection.learned_method:Learned",
          "a candidate ranker over rich RM features (per-query z-scores, ranks, top/tie flags, PRM step "
          "reductions, agreement); learner and features chosen by cross-validation on the pool",
          {"singles_only": False, "neighbourhoods": WHOLE_POOL, "budget": True}),
    Entry("stacker", "morkit.selection.learned_method:stacker",
          "the learned selector restricted to the former stacker's settings: a conditional logit over one "
          "z-scored score per RM (query or pool z-score and penalty chosen by cross-validation)",
          {"singles_only": False, "neighbourhoods": WHOLE_POOL}),
    Entry("pres", "morkit.selection.pres:pres",
          "the CTTS-MM rule: the ensemble with the highest similarity-weighted PRR over the k nearest pool questions",
          {"singles_only": True, "neighbourhoods": NEIGHBOURHOODS, "budget": True}),
    Entry("pres-top1", "morkit.selection.pres:pres_top1",
          "the PRES rule on each neighbour's best-of-n hit instead of PRR",
          {"singles_only": True, "neighbourhoods": NEIGHBOURHOODS, "budget": True}),
    Entry("fixed", "morkit.selection.fixed:FixedEnsemble",
          "one ensemble for every query: the pool's best-weighted ensemble of exactly the RMs given (--rm)",
          {"singles_only": False, "neighbourhoods": NEIGHBOURHOODS, "rms": True}),
])
"""Per-query selection methods by name (the learned selector, PRES, a fixed ensemble, ...); `Router(pool, name)`
builds one."""


@dataclass(frozen=True)
class SelectOptions:
    """How ensembles are chosen: the method, neighbours per query and which ones, PRES over single RMs only,
    whether registered pool RMs may run on candidates that have text but no cached scores, the confidence
    below which a ranking is marked `abstain` (None: no mark), the RMs of the `fixed` method's ensemble, the
    budget each query's pick must fit, and where RM costs come from beyond the pool's stored table.

    Args:
        method: A name registered in SELECTION_METHODS.
        k: Pool neighbours per query (positive).
        neighbourhood: Which k, one of NEIGHBOURHOODS: "all" (the k nearest pool questions) or "valid" (the k
            nearest with a correct and a wrong answer; an option of PRES methods).
        singles_only: Choose among single RMs only (an option of PRES methods).
        allow_run: Registered pool RMs may run on candidates that have text but no cached scores.
        abstain_below: A confidence in [0, 1] below which a ranking is marked `abstain`; None marks nothing.
        rms: The pool RMs of the ensemble the `fixed` method gives every query (`--rm`); empty for the others.
        budget: A per-query cost cap and cost weight (morkit.selection.budget.Budget; methods with "budget" in their
            metadata: learned, pres, pres-top1); None: no budget, selection as without costs.
        costs: Cost files and costs per RM that update the pool's stored table (they price every ranking).
        cascade: Rank with a cascade (morkit.selection.cascade): the learned selector over its cheap RMs, escalated
            to its cheap and expensive ones where unsure; None: no cascade. It is the learned selector's own: not
            with another method, `rms` or a budget.

    Raises:
        InputError: The method is unknown or lacks `singles_only`, the `neighbourhood`, `rms` or a budget,
            `fixed` has no `rms`, `k` is not positive, `abstain_below` is outside [0, 1], or a cascade is given
            beside another method than the learned selector, `rms` or a budget.
    """

    method: str = DEFAULT_METHOD
    k: int = 100
    neighbourhood: str = DEFAULT_NEIGHBOURHOOD
    singles_only: bool = False
    allow_run: bool = True
    abstain_below: float | None = None
    rms: tuple[str, ...] = ()
    budget: Budget | None = None
    costs: CostOptions = field(default_factory=CostOptions)
    cascade: CascadeOptions | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rms", tuple(self.rms))
        object.__setattr__(self, "budget", limiting(self.budget))  # one that limits nothing is no budget
        if self.cascade is not None:
            method = self.method != DEFAULT_METHOD and not self.rms  # --rm alone selects `fixed`
            beside = [flag for flag, given in (("--rm (a fixed ensemble)", bool(self.rms)),
                                               (f"--method {self.method}", method),
                                               ("--budget/--cost-weight", self.budget is not None)) if given]
            if beside:
                raise InputError("--cascade ranks with the learned selector's two routes: not with "
                                 + " or ".join(beside))
        check_method(self.method, self.singles_only, self.neighbourhood, self.rms,  # an unknown one names the known
                     budget=self.budget is not None)
        checks.positive_int(self.k, "k")
        if self.abstain_below is not None and not 0.0 <= self.abstain_below <= 1.0:
            raise InputError(f"abstain_below must be a probability in [0, 1], not {self.abstain_below!r}")

    @property
    def rm_scope(self) -> tuple[str, ...] | None:
        """The only pool RMs these options may read (a fixed ensemble's, a cascade's); None: any pool RM."""
        if self.rms:
            return self.rms
        return self.cascade.members if self.cascade is not None else None
