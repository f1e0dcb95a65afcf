"""The reward models morkit knows, in REWARD_MODELS: one RMCard per RM (what it is and needs) and its target, the
family that builds a model RM (named by its card too) or the factory of a plain-code RM. Listing and checking
availability import no model code; `resolve_rm` gives an RM's handle where the options place it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from morkit.core.errors import MorkitError
from morkit.core.registry import Entry, Registry
from morkit.reward_models.applicability import ALL, Applicability
from morkit.reward_models.card import RMCard
from morkit.reward_models.unit_cost import RMCost, cost_json, cost_of_card
from morkit.reward_models.ctts import CTTS_CARDS
from morkit.reward_models.embedded.cards import EMBEDDED_CARDS
from morkit.reward_models.family import settle_family
from morkit.reward_models.handles import RMHandle, build
from morkit.reward_models.identity import cache_key as _cache_key, truncation_part
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.placement import place
from morkit.reward_models.timing import read_ledger
from morkit.reward_models.weights import bf16_gib


def _entry(card: RMCard, summary: str, target: Any = None) -> Entry:
    """The registry entry of `card`: a model card names its family, which becomes its target; plain code gives
    `target` (its factory)."""
    return Entry(card.name, target, summary, spec=card)


REWARD_MODELS = Registry("reward model", spec_type=RMCard, settle=settle_family, entries=[
    *(_entry(card, card.description) for card in EMBEDDED_CARDS),
    _entry(RMCard(name="math-consensus", kind="rule", runs="python", packages=("math_verify",), needs="math-verify",
                  applies=Applicability(frozenset({"math", "choice"})),
                  cost=RMCost(cpu_seconds=2.9e-5, source="measured by bench/rule_costs.py: CPU seconds per candidate, "
                                                         "median of 5 repeats over 3,000 gsm8k_model_solutions "
                                                         "candidates")),
           "share of the query's candidates whose final answer is equivalent to this one",
           "morkit.reward_models.rules.consensus:MathConsensus"),
    _entry(RMCard(name="code-tests", kind="rule", runs="sandbox",
                  version="5",  # the grader's; why each version came is on the docs page Reward models
                  needs="the query's `tests`; a POSIX OS for the sandbox",
                  applies=Applicability(frozenset({"code"}), ("tests", "stdio_tests")),
                  cost=RMCost(cpu_seconds=0.137, source="measured by bench/rule_costs.py: CPU seconds per candidate "
                                                        "(its sandboxed processes included), median of 5 repeats over "
                                                        "300 humaneval_davinci_samples candidates")),
           "1 if the candidate passes the query's tests in a sandboxed subprocess, else 0",
           "morkit.reward_models.rules.code_tests:CodeTests"),
    *(_entry(card, f"{card.model_id}: {card.description}") for card in CTTS_CARDS),
    _entry(RMCard(name="vllm", kind="orm|prm", runs="vllm", packages=("vllm",), options=("model_dir",),
                  needs="vllm; options model_dir=DIR, kind=classify|token_classify|step, name=..."),
           "any pooling model (classifier, token RM or PRM) in an offline vLLM engine",
           "morkit.reward_models.backends.vllm_engine:VLLMRewardModel"),
    _entry(RMCard(name="remote", kind="orm|prm", runs="remote", options=("name", "urls", "model"),
                  needs="running servers; options name=..., urls=[...], model=..., task=classify|token_classify|step"),
           "reward model behind one or more `vllm serve --runner pooling` servers (/pooling)",
           "morkit.reward_models.backends.servers:RemoteRewardModel"),
])
"""Every reward model by name, with its RMCard (kind, how it runs, window, weights); `morkit rms` lists them. Add
yours with `REWARD_MODELS.register(name, target, summary, kind=..., runs=...)`: plain code's target is its factory;
a model of a new architecture (`runs="transformers"`) gives its family as the target, written only there (its card's
`family` is set from it; docs: Extending morkit)."""


def missing(entry: Entry, options: Mapping[str, Any] | None = None) -> str | None:
    """Why the RM cannot run here (None = it can): an absent package, trained head or weights.

    Weights are looked for in the default places unless `options` give an explicit `path`."""
    found = entry.spec.absent(options)
    return found[1] if found else None


@dataclass(frozen=True)
class RMStatus:
    """What `morkit rms` and `morkit.list_rms()` report about one registered RM: its card and entry, and what is
    found here (whether it can run, its window, and the seconds per pair scoring runs measured)."""

    entry: Entry
    missing: str | None  # None = can run here (given its required options)
    missing_what: str | None = None  # "packages", "head" or "weights"
    context: str | None = None  # a model RM's default window and where it comes from
    context_tokens: int | None = None  # that window, where it can be read here
    measured: tuple[Any, ...] = ()  # its timing.Measurement per placement and device, latest first

    @property
    def card(self) -> RMCard:
        return self.entry.spec

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def available(self) -> bool:
        return self.missing is None

    @property
    def cost(self) -> RMCost | None:
        """What scoring one candidate costs, from its card (None: given by the user, --cost or a cost file)."""
        return cost_of_card(self.card)

    @property
    def gpu_gib(self) -> float | None:
        """Its weights alone in bf16, where it has downloadable weights."""
        return round(bf16_gib(self.card.n_params), 1) if self.card.n_params else None

    def to_json(self) -> dict[str, Any]:
        card = self.card
        return {"name": self.name, "kind": card.kind, "runs": card.runs, "summary": self.entry.summary,
                "needs": card.needs, "target": self.entry.target_path, "available": self.available,
                "missing": self.missing, "required_options": list(card.options), "gpu_gib": self.gpu_gib,
                "model_id": card.model_id, "applies_to": card.applies.describe(),
                "applies": dict(card.applies.to_json()),
                "context": self.context, "context_tokens": self.context_tokens, "cost": cost_json(self.card),
                "measured": [m.to_json() for m in self.measured]}


def rm_status(entry: Entry, measured: Sequence[Any] | None = None) -> RMStatus:
    """Registered RM `entry`'s status here: what it lacks (loading nothing), its window and its measured seconds
    per pair.

    Args:
        entry: The registry entry.
        measured: Timing measurements to pick its own from (timing.read_ledger); None reads the ledger.

    Returns:
        The status.
    """
    what, why = entry.spec.absent() or (None, None)
    mine = sorted((m for m in (read_ledger() if measured is None else measured) if m.name == entry.name),
                  key=lambda m: m.updated, reverse=True)
    return RMStatus(entry, why, what, *_context(entry.spec), measured=tuple(mine))


def _max_positions(card: RMCard) -> int | None:
    """`max_position_embeddings` from the config of a card's weights, where they are found here."""
    from morkit.reward_models.card import max_positions
    from morkit.reward_models.weights import locate_weights

    try:
        return max_positions(locate_weights(card.model_id, required=("config.json",)))
    except (MorkitError, OSError, ValueError):
        return None


def _context(card: RMCard) -> tuple[str | None, int | None]:
    """(how the card's default window is set, the window where known here); (None, None) for a non-model RM."""
    if card.window:
        return card.describe_context(None), card.window
    if card.model_id:
        positions = _max_positions(card)
        return card.describe_context(positions), card.context_window(positions) if positions else None
    return None, None


def list_rms() -> list[RMStatus]:
    """Every registered RM with what it needs and whether it can run here; loads no model.

    Returns:
        One RMStatus per entry of REWARD_MODELS, in registration order (`missing` is None where it can run here).
    """
    measured = read_ledger()
    return [rm_status(entry, measured) for entry in REWARD_MODELS]


def load_rm(rm: str, /, **options: Any) -> Any:
    """Build the RM registered as `rm` with `options` (e.g. `load_rm("remote", name=..., urls=[...], model=...)`).

    Args:
        rm: A name registered in REWARD_MODELS.
        **options: Keyword arguments passed to the RM's factory; those its card lists in `options` are required.

    Returns:
        The loaded RM: an object with `score(pairs)` (the RewardModel protocol).

    Raises:
        UnknownName: `rm` is not registered (an InputError listing the known names).
        InputError: A required option is left out.
        UnavailableError: A package, trained head or the weights it needs are absent here.
    """
    return build(REWARD_MODELS.get(rm), **options)


def resolve_rm(name: str, options: ScoringOptions = ScoringOptions(), residency: Any = None) -> RMHandle:
    """The one resolve step: registered RM `name`'s handle on the placement `options` pick. Nothing loads
    yet; the handle knows the RM's kind, cache key, truncation and memory need (morkit.reward_models.handles).

    Args:
        name: A name registered in REWARD_MODELS.
        options: The scoring options; `placement` (and the RM's card) pick where it runs, the rest shape loading.
        residency: The Residency that loads the model and decides what stays in memory (a ScoringSession shares
            one between its handles); None gives the handle its own, which keeps the model until `close`.

    Returns:
        The RM's handle; `handle.score(pairs)` loads the model on first use.

    Raises:
        UnknownName: `name` is not registered (an InputError listing the known names).
    """
    return place(REWARD_MODELS.get(name), options, residency)


def applicability_of(rm: str | Any, stored: Any = None) -> Applicability:
    """The queries an RM scores, from one source for scoring, pool building and routing alike: an RM object's
    own `applies`, else its registered card's, else the rule a pool `stored` for it (an RM not registered in
    this process), else every query (a table of cached scores)."""
    own = getattr(rm, "applies", None)
    if own is not None:
        return Applicability.of(own)
    name = rm if isinstance(rm, str) else getattr(rm, "name", None)
    if name in REWARD_MODELS:
        return REWARD_MODELS.get(name).spec.applies
    return Applicability.of(stored) if stored is not None else ALL


def relative_scores(name: str) -> bool:
    """Whether registered RM `name` scores an answer against its siblings (`relative_scores`, as math-consensus
    does): then a lone answer's score is the same whatever it says. False for a name not registered here."""
    if name not in REWARD_MODELS:
        return False
    try:
        return bool(getattr(REWARD_MODELS.load(name), "relative_scores", False))
    except Exception:  # noqa: BLE001 - its code cannot be imported here, so it cannot run here either
        return False


def identity_of(rm: str | Any) -> str:
    """The key an RM's scores are cached under (identity.cache_key), the one accessor scoring and the pipeline use:
    a handle's own; a built RM's from what it loaded where it says (`identity_facts()`: head hash, weights folder,
    engine, dtype, device map, truncation), else its card's; a registered name's from its card alone; an RM not
    registered by its name and those facts.

    Args:
        rm: A registered name, a handle, or a built RM (an object with `name`).

    Returns:
        The key (identity.cache_key).
    """
    name = rm if isinstance(rm, str) else rm.name
    card = REWARD_MODELS.get(name).spec if name in REWARD_MODELS else None
    if isinstance(rm, str):
        return _cache_key(name, card)
    own = getattr(rm, "cache_key", None)
    if own is not None:
        return str(own)
    facts = getattr(rm, "identity_facts", None)
    if facts is not None:
        return _cache_key(name, card, **facts())
    return _cache_key(name, card, truncation=truncation_part(getattr(rm, "truncation", None)))
