"""Agent pools from agents.toml: who answers (name, backend, model, sampling, prompt), and the aggregator.
Backends come from LLM_BACKENDS; an LLM is built when first used, one per (backend, model). A preset
(llm/presets.py) fills the sampling keys a file leaves unset; a named prompt sets system and user messages.
"""

from __future__ import annotations

import logging
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
from morkit.llm.base import LLM, SamplingParams, takes_presence_penalty
from morkit.llm.presets import AGENT_PRESETS, AGENT_PROMPTS, DEFAULT_AGENT_PRESET, fill, user_template

log = logging.getLogger(__name__)

_SAMPLING_KEYS = {"n", "temperature", "top_p", "max_tokens", "stop", "seed", "presence_penalty"}
_SPEC_KEYS = {"name", "backend", "model", "system", "base_url", "api_key_env", "timeout", "retries", "concurrency",
              "cost", "user"}
_PROMPT = "prompt"  # an agent's key (or [defaults]'): a name in AGENT_PROMPTS, for `system` and `user`
_OWN_TEXT = {"system", "user"}  # the keys a named prompt sets, and replaces
_TOP_KEYS = {"preset", "defaults", "agent", "aggregator"}


@dataclass(frozen=True)
class AgentSpec:
    """One agent (or the aggregator) of agents.toml: its backend and model, sampling, prompt and limits.
    `user` is the template of its user message (`{question}` where the question goes; None: the question
    as it is); a named prompt sets it with `system`."""

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
    user: str | None = None

    def __post_init__(self) -> None:
        checks.optional(checks.non_negative, self.cost, "cost")
        checks.positive(self.timeout, "timeout")
        checks.non_negative_int(self.retries, "retries")
        checks.positive_int(self.concurrency, "concurrency")
        checks.optional(checks.http_url, self.base_url, "base_url")  # before any call, not as every call's failure
        checks.optional(user_template, self.user, "user")


@dataclass(frozen=True)
class AgentsConfig:
    agents: tuple[AgentSpec, ...]
    aggregator: AgentSpec
    source: str = "<built in>"


def default_agents_path() -> Path:
    return Path(str(resources.files("morkit") / "resources" / "agents" / "local.toml"))


_TEXT_KEYS = {"name", "backend", "model", "system", "user", "base_url", "api_key_env", _PROMPT}


def _table(value: Any, where: str, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"{where} must be a table of keys, got {type(value).__name__}", path=path)
    return value


def _inherited(defaults: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """[defaults] as an agent inherits it: its own `prompt` replaces a default `system` and `user`, and its own
    `system` or `user` a default `prompt`."""
    if _PROMPT in own:
        return {k: v for k, v in defaults.items() if k not in _OWN_TEXT}
    if _OWN_TEXT & set(own):
        return {k: v for k, v in defaults.items() if k != _PROMPT}
    return dict(defaults)


def _checked(table: Any, where: str, path: str) -> Mapping[str, Any]:
    """One table of agents.toml (an agent's, `[defaults]`, `[aggregator]`) checked on its own, so that an error
    names the table that holds the key: its keys known, its texts text, its `prompt` a known name set without
    `system` or `user`."""
    table = _table(table, where, path)
    if "preset" in table:
        raise InputError(f"{where}: preset is a top-level key (preset = NAME before any table)", path=path)
    unknown = set(table) - _SAMPLING_KEYS - _SPEC_KEYS - {_PROMPT}
    if unknown:
        raise InputError(f"{where}: unknown keys {sorted(unknown)}", path=path)
    wrong = sorted(k for k in _TEXT_KEYS & set(table) if not isinstance(table[k], str))
    if wrong:
        raise InputError(f"{where}: {', '.join(wrong)} must be text", path=path)
    if _PROMPT in table:
        if _OWN_TEXT & set(table):
            raise InputError(f"{where}: set system and user (your own text) or prompt (a named one), not both",
                             path=path)
        _prompt_name(table[_PROMPT], f"{where}: prompt", path)
    return table


def _spec(table: Mapping[str, Any], defaults: Mapping[str, Any], where: str, path: str,
          preset: Mapping[str, Any], prompt: str | None = None) -> AgentSpec:
    """One agent's spec: its table over [defaults] (already `_checked`) over the preset's sampling; `prompt`
    (a flag's, already checked) replaces the file's `system`, `user` and `prompt`."""
    own = _checked(table, where, path)
    merged = {**_inherited(defaults, own), **own}
    if prompt is not None:
        merged = {**{k: v for k, v in merged.items() if k not in _OWN_TEXT}, _PROMPT: prompt}
    if _PROMPT in merged:
        chosen = AGENT_PROMPTS.load(merged.pop(_PROMPT))  # every name was checked with its table or flag
        merged.update({"system": chosen.system, "user": chosen.user})
    backend = merged.get("backend", "local")
    if backend not in LLM_BACKENDS:
        raise InputError(f"{where}: unknown backend {backend!r}; choose from {', '.join(LLM_BACKENDS.names())}",
                         path=path)
    try:
        sampling = {**preset, **{k: merged[k] for k in _SAMPLING_KEYS if k in merged}}
        if "stop" in sampling:
            sampling["stop"] = tuple(sampling["stop"])
        params = SamplingParams(**sampling)
        fields = {k: merged[k] for k in _SPEC_KEYS if k in merged}
        fields.setdefault("name", where)
        return AgentSpec(params=params, **fields)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}", path=path) from exc


def load_agents(path: str | os.PathLike | None = None, *, preset: str | None = None,
                prompt: str | None = None) -> AgentsConfig:
    """Parse an agents.toml (default: the packaged offline SmolLM2 pool); errors name the file and table.

    A sampling key comes from the agent's table (the aggregator's: `[aggregator]`), else `[defaults]`, else
    the preset (top-level `preset`, default `ctts-mm`: 0.7, 8,192 tokens, presence penalty 1.05).

    Args:
        path: The agents.toml file; None is the packaged one.
        preset: A name in AGENT_PRESETS, in place of the file's `preset` (`--agent-preset`).
        prompt: A name in AGENT_PROMPTS that every agent is asked with, in place of the file's `system`,
            `user` and `prompt` keys (`--agent-prompt`); the aggregator keeps its own.

    Returns:
        The agents (one per `[[agent]]` table, `[defaults]` merged in) and the aggregator; no LLM is built yet.

    Raises:
        InputError: The file cannot be read, has no agent, repeats an agent name, has an unknown top-level key,
            preset or prompt, or a table has an unknown key, backend or bad value, or both `prompt` and
            `system` or `user`.
    """
    path = str(path or default_agents_path())
    data = read_toml(path)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise InputError(f"unknown top-level keys {unknown}; known: {', '.join(sorted(_TOP_KEYS))}",
                         path=path)
    chosen = _preset(data.get("preset", DEFAULT_AGENT_PRESET) if preset is None else preset, path)
    if prompt is not None:
        _prompt_name(prompt, "prompt", path)
    defaults = _checked(data.get("defaults", {}), "[defaults]", path)
    tables = data.get("agent", [])
    if not isinstance(tables, list) or not tables:
        raise InputError("no [[agent]] tables: an agent pool needs at least one agent", path=path)
    agents = tuple(_spec(t, defaults, f"agent {_table(t, f'agent #{i + 1}', path).get('name', i)!r}", path,
                         chosen, prompt) for i, t in enumerate(tables))
    names = [a.name for a in agents]
    if len(set(names)) != len(names):
        raise InputError(f"agent names must be unique, got {names}", path=path)
    own = _table(data.get("aggregator", {}), "[aggregator]", path)
    if {_PROMPT, "user"} & set(own):
        raise InputError("[aggregator]: prompt and user are an agent's keys; the aggregator's prompt is "
                         "--aggregator-prompt, its text `system`", path=path)
    inherited = {k: v for k, v in defaults.items() if k not in {_PROMPT, *_OWN_TEXT}}  # its text: its own `system`
    aggregator = _spec({"name": "aggregator", **own}, inherited, "aggregator", path, chosen)
    return AgentsConfig(agents, aggregator, path)


def _preset(name: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(name, str):
        raise InputError(f"preset must be text, got {checks.shown(name)}", path=path)
    try:
        return AGENT_PRESETS.load(name).sampling
    except InputError as exc:
        raise InputError(f"preset: {exc}", path=path) from None


def _prompt_name(name: str, what: str, path: str) -> None:
    """Check a prompt's name once, where it is given (a table's `prompt`, `--agent-prompt`)."""
    try:
        AGENT_PROMPTS.load(name)
    except InputError as exc:
        raise InputError(f"{what}: {exc}", path=path) from None


@dataclass
class LLMPool:
    """Builds each (backend, model, endpoint) LLM once and hands it to every agent that names it."""

    _built: dict = field(default_factory=dict)
    _warned: set = field(default_factory=set)  # the agents told their presence penalty is not applied

    def llm(self, spec: AgentSpec) -> LLM:
        key = (spec.backend, spec.model, spec.base_url)
        if key not in self._built:
            self._built[key] = LLM_BACKENDS.load(spec.backend)(spec)
        llm = self._built[key]
        if spec.params.presence_penalty and spec.name not in self._warned and not takes_presence_penalty(llm):
            self._warned.add(spec.name)  # once per agent, whether or not another agent built its LLM
            log.warning("LLM backend %r does not take a presence penalty: %s's %g is not applied",
                        spec.backend, spec.name, spec.params.presence_penalty)
        return llm


@dataclass(frozen=True)
class AgentAnswer:
    agent: str
    text: str


def question_asked(query: Query) -> str:
    """What agents and the aggregator are shown for a query: its `prompt` (a benchmark's template filled
    in) when it has one, else its question. Reward models always score against the question."""
    return str(query.extra.get("prompt") or query.question)


def agent_conversation(spec: AgentSpec, question: str) -> list[dict[str, str]]:
    """The conversation an agent is asked: its system prompt, if any, then the question, in its user template
    (`spec.user`) when it has one."""
    asked = question if spec.user is None else fill(spec.user, question)
    return ([{"role": "system", "content": spec.system}] if spec.system else []) + [
        {"role": "user", "content": asked}]


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
