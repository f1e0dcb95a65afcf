"""Agent pools from agents.toml: who answers (name, backend, model, sampling, system prompt), and the aggregator.
Backends come from LLM_BACKENDS; an LLM is built when first used, one per (backend, model).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from morkit.core import checks
from morkit.core.errors import InputError, LLMError
from morkit.core.types import Query
from morkit.data.toml import read_toml
from morkit.llm.backends import LLM_BACKENDS
from morkit.llm.base import LLM, SamplingParams

_SAMPLING_KEYS = {"n", "temperature", "top_p", "max_tokens", "stop", "seed"}
_SPEC_KEYS = {"name", "backend", "model", "system", "base_url", "api_key_env", "timeout", "retries", "concurrency",
              "cost"}


@dataclass(frozen=True)
class AgentSpec:
    name: str
    backend: str = "local"
    model: str = "smollm2"
    params: SamplingParams = SamplingParams()
    system: str | None = None
    base_url: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout: float = 120.0
    retries: int = 2
    concurrency: int = 8
    cost: float | None = None  # price per 1,000 tokens (prompt + generated), for cost-aware choice (ATLAS-MM)

    def __post_init__(self) -> None:
        checks.optional(checks.non_negative, self.cost, "cost")
        checks.positive(self.timeout, "timeout")
        checks.non_negative_int(self.retries, "retries")
        checks.positive_int(self.concurrency, "concurrency")
        checks.optional(checks.http_url, self.base_url, "base_url")  # before any call, not as every call's failure


@dataclass(frozen=True)
class AgentsConfig:
    agents: tuple[AgentSpec, ...]
    aggregator: AgentSpec
    source: str = "<built in>"


def default_agents_path() -> Path:
    return Path(str(resources.files("morkit") / "resources" / "agents" / "local.toml"))


_TEXT_KEYS = {"name", "backend", "model", "system", "base_url", "api_key_env"}

AGGREGATOR_SAMPLING = {"temperature": 0.7, "max_tokens": 8192}
"""CTTS-MM's inference settings (appendix: temperature 0.7, 8,192 output tokens): the aggregator's sampling
where neither its [aggregator] table nor [defaults] sets it."""


def _table(value: Any, where: str, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"{where} must be a table of keys, got {type(value).__name__}", path=path)
    return value


def _spec(table: Mapping[str, Any], defaults: Mapping[str, Any], where: str, path: str) -> AgentSpec:
    merged = {**defaults, **_table(table, where, path)}
    unknown = set(merged) - _SAMPLING_KEYS - _SPEC_KEYS
    if unknown:
        raise InputError(f"{where}: unknown keys {sorted(unknown)}", path=path)
    wrong = sorted(k for k in _TEXT_KEYS & set(merged) if not isinstance(merged[k], str))
    if wrong:
        raise InputError(f"{where}: {', '.join(wrong)} must be text", path=path)
    backend = merged.get("backend", "local")
    if backend not in LLM_BACKENDS:
        raise InputError(f"{where}: unknown backend {backend!r}; choose from {', '.join(LLM_BACKENDS.names())}",
                         path=path)
    try:
        sampling = {k: merged[k] for k in _SAMPLING_KEYS if k in merged}
        if "stop" in sampling:
            sampling["stop"] = tuple(sampling["stop"])
        params = SamplingParams(**sampling)
        fields = {k: merged[k] for k in _SPEC_KEYS if k in merged}
        fields.setdefault("name", where)
        return AgentSpec(params=params, **fields)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}", path=path) from exc


def load_agents(path: str | os.PathLike | None = None) -> AgentsConfig:
    """Parse an agents.toml (default: the packaged offline SmolLM2 pool); errors name the file and table.

    Args:
        path: The agents.toml file; None is the packaged one.

    Returns:
        The agents (one per `[[agent]]` table, `[defaults]` merged in) and the aggregator; no LLM is built yet.

    Raises:
        InputError: The file cannot be read, has no agent, repeats an agent name, or a table has an unknown key,
            backend or bad value.
    """
    path = str(path or default_agents_path())
    data = read_toml(path)
    defaults = _table(data.get("defaults", {}), "[defaults]", path)
    tables = data.get("agent", [])
    if not isinstance(tables, list) or not tables:
        raise InputError("no [[agent]] tables: an agent pool needs at least one agent", path=path)
    agents = tuple(_spec(t, defaults, f"agent {_table(t, f'agent #{i + 1}', path).get('name', i)!r}", path)
                   for i, t in enumerate(tables))
    names = [a.name for a in agents]
    if len(set(names)) != len(names):
        raise InputError(f"agent names must be unique, got {names}", path=path)
    aggregator = _spec({"name": "aggregator", **_table(data.get("aggregator", {}), "[aggregator]", path)},
                       {**AGGREGATOR_SAMPLING, **defaults}, "aggregator", path)
    return AgentsConfig(agents, aggregator, path)


@dataclass
class LLMPool:
    """Builds each (backend, model, endpoint) LLM once and hands it to every agent that names it."""

    _built: dict = field(default_factory=dict)

    def llm(self, spec: AgentSpec) -> LLM:
        key = (spec.backend, spec.model, spec.base_url)
        if key not in self._built:
            self._built[key] = LLM_BACKENDS.load(spec.backend)(spec)
        return self._built[key]


@dataclass(frozen=True)
class AgentAnswer:
    agent: str
    text: str


def question_asked(query: Query) -> str:
    """What agents and the aggregator are shown for a query: its `prompt` (a benchmark's template filled
    in) when it has one, else its question. Reward models always score against the question."""
    return str(query.extra.get("prompt") or query.question)


def agent_conversation(spec: AgentSpec, question: str) -> list[dict[str, str]]:
    """The conversation an agent is asked: its system prompt, if any, then the question."""
    return ([{"role": "system", "content": spec.system}] if spec.system else []) + [
        {"role": "user", "content": question}]


def generate_answers(config: AgentsConfig, question: str, llms: LLMPool) -> tuple[list[AgentAnswer], list[str]]:
    """Every agent's samples for the question; an agent that fails is reported, and the others go on."""
    answers, failures = [], []
    for spec in config.agents:
        try:
            completion = llms.llm(spec).chat([agent_conversation(spec, question)], spec.params)[0]
        except (LLMError, OSError, RuntimeError) as exc:
            failures.append(f"{spec.name}: {exc}")
            continue
        answers.extend(AgentAnswer(spec.name, text.strip()) for text in completion.texts)
    return answers, failures
