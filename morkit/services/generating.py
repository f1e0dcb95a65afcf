"""Candidates from agents: every agent answers every question, `n` samples each, resumably (`OUT.partial`), the
first step of the CTTS-MM flow. An answer is reused only under the `generation.key` it would be asked under now;
docs: Scoring and backends, generating candidates.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from morkit.core import checks
from morkit.core.errors import InputError, LLMError
from morkit.core.types import Candidate, Query
from morkit.llm.agents import (
    AgentsConfig,
    AgentSpec,
    LLMPool,
    agent_conversation,
    question_asked,
)
from morkit.llm.base import Completion, SamplingParams, sample_count

ANSWER_NEUTRAL = ("name", "api_key_env", "timeout", "retries", "concurrency", "cost")
"""AgentSpec fields that cannot change an answer (what it is called, its credentials, how long and how often
to try, how many calls at once, its price), left out of `answer_key`; every other field is in it."""

GENERATE_NEUTRAL = ("chunk", "progress")
"""GenerateOptions fields that cannot change an answer (how many questions per call, the progress bar)."""


@dataclass(frozen=True)
class GenerateOptions:
    """`n` samples per agent and question (default: each agent's own `n` from agents.toml); `chunk`
    conversations per call to an agent's LLM (also the resume granularity).

    Args:
        n: Samples per agent and question (1 to MAX_SAMPLES); None keeps each agent's own `n`.
        chunk: Conversations per call to an agent's LLM; each finished chunk goes to the resume log.
        progress: Show a progress bar.

    Raises:
        InputError: `n` or `chunk` is out of range.
    """

    n: int | None = None
    chunk: int = 16
    progress: bool = False

    def __post_init__(self) -> None:
        checks.optional(sample_count, self.n, "GenerateOptions.n")
        checks.positive_int(self.chunk, "GenerateOptions.chunk")


@dataclass(frozen=True)
class GenerateReport:
    """What a run did: questions and agents, candidates made now and found in the resume log, failures, tokens."""

    questions: int
    agents: int
    generated: int
    resumed: int
    failed: int
    tokens: int
    seconds: float


def generate(queries: Sequence[Query], agents: AgentsConfig, output: str | os.PathLike,
             options: GenerateOptions = GenerateOptions(), llms: LLMPool | None = None,
             earlier: Sequence[Query] = ()) -> GenerateReport:
    """Write `queries` to `output` with every agent's new candidates appended after their own (docs: Scoring and
    backends, generating candidates). `earlier`: an earlier output of the same agents; its answers count as done,
    like the resume log's.

    Args:
        queries: The questions to answer (their existing candidates are kept first).
        agents: The agents and their sampling (`load_agents`).
        output: The contract JSONL to write; `OUTPUT.partial` logs finished answers so a rerun resumes.
        options: Samples per question, chunk size, progress bar.
        llms: The pool that builds each agent's LLM once; None makes a new one.
        earlier: An earlier output of the same agents; answers made under the same key are reused.

    Returns:
        A GenerateReport: questions, agents, candidates generated now and resumed, failed, tokens and seconds.

    Raises:
        InputError: `output` cannot be written.
    """
    from tqdm import tqdm

    from morkit.data.contract import save_queries
    from morkit.data.jsonl import encoded_line, output_file_problem

    problem = output_file_problem(output)
    if problem:
        raise InputError(problem, path=str(output))
    llms = llms or LLMPool()
    log = Path(str(output) + ".partial")
    from morkit.data.jsonl import logged_records

    sampling = {spec.name: spec.params if options.n is None else replace(spec.params, n=options.n)
                for spec in agents.agents}
    keys = {(q.id, spec.name): key for spec in agents.agents
            for q, key in zip(queries, _answer_keys(spec, sampling[spec.name], queries))}
    earlier_records = (record for query in earlier for record in _log_records(query))
    done = {**_done(earlier_records, keys), **_done(logged_records(log), keys)}
    resumed = sum(len(c) for c in done.values())
    jobs = [(spec, [q for q in queries if (q.id, spec.name) not in done]) for spec in agents.agents]
    total = sum(len(todo) for _, todo in jobs)
    generated = failed = tokens = 0
    start = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)  # as the atomic write of the output would: `-o new/out.jsonl`
    with open(log, "ab") as out, tqdm(total=total, desc="generate", unit="question", disable=not options.progress,
                                       leave=False) as bar:
        for spec, todo in jobs:
            params = sampling[spec.name]
            for chunk in _chunks(todo, options.chunk):
                for query, candidates, used in _ask(llms, spec, params, chunk, keys):
                    out.write(encoded_line({"id": query.id, "agent": spec.name, "candidates": candidates},
                                           str(log), len(done) + 1))
                    done[(query.id, spec.name)] = candidates
                    generated += len(candidates)
                    failed += sum("error" in c for c in candidates)
                    tokens += used
                out.flush()
                bar.update(len(chunk))
                bar.set_postfix_str(f"{tokens / max(time.perf_counter() - start, 1e-9):.0f} tok/s")
    finished = [replace(q, candidates=q.candidates + tuple(
        _candidate(c) for spec in agents.agents for c in done.get((q.id, spec.name), ()))) for q in queries]
    save_queries(output, finished)
    log.unlink(missing_ok=True)
    return GenerateReport(len(queries), len(agents.agents), generated, resumed, failed, tokens,
                          time.perf_counter() - start)


_KEYED_WHEN_SET = {"reasoning_effort": None, "presence_penalty": 0.0, "user": None}
"""Fields added after keys were first written, with their unset values: they count in a key only when set."""


def answer_key(spec: AgentSpec, params: SamplingParams, query: Query) -> str:
    """The key of `spec`'s answers to `query` under `params`: a hash of the conversation asked and of every
    AgentSpec field but ANSWER_NEUTRAL (backend, model, endpoint, system prompt, user template), with the
    sampling used but its deadline."""
    return next(_answer_keys(spec, params, [query]))


def _answer_keys(spec: AgentSpec, params: SamplingParams, queries: Sequence[Query]) -> Iterator[str]:
    settings = {k: v for k, v in asdict(spec).items() if k not in ANSWER_NEUTRAL and not _unset(k, v)}
    # fields added after keys were first written count only when set, so older answers keep their keys
    settings["params"] = {k: v for k, v in asdict(params).items() if k != "timeout_s" and not _unset(k, v)}
    how = json.dumps(settings, sort_keys=True, default=str)
    for query in queries:
        asked = json.dumps(agent_conversation(spec, question_asked(query)), sort_keys=True)
        yield hashlib.sha256(f"{how}\n{asked}".encode()).hexdigest()[:16]


def _unset(key: str, value: Any) -> bool:
    return key in _KEYED_WHEN_SET and value == _KEYED_WHEN_SET[key]


def _ask(llms: LLMPool, spec: AgentSpec, params: SamplingParams, chunk: Sequence[Query],
         keys: dict[tuple[str, str], str]) -> Iterator[tuple[Query, list[dict[str, Any]], int]]:
    """Each question of the chunk with its candidates (as contract records) and the tokens they used."""
    conversations = [agent_conversation(spec, question_asked(q)) for q in chunk]
    started = time.perf_counter()
    try:
        results: Sequence[Any] = llms.llm(spec).chat(conversations, params)
    except LLMError as exc:  # a partial failure keeps its successes; anything else fails the whole chunk
        results = getattr(exc, "results", None) or [exc] * len(chunk)
    except (OSError, RuntimeError) as exc:
        results = [exc] * len(chunk)
    seconds = round((time.perf_counter() - started) / max(len(chunk), 1), 3)  # this question's share of the call
    sampling = {"n": params.n, "temperature": params.temperature, "top_p": params.top_p,
                "max_tokens": params.max_tokens, "seed": params.seed,
                "presence_penalty": params.presence_penalty}
    for query, result in zip(chunk, results):
        key = keys[(query.id, spec.name)]
        if isinstance(result, Completion):
            per_sample = round(result.completion_tokens / max(len(result.texts), 1), 1)
            candidates = [{"text": _unicode(text), "agent": spec.name, "generation": {
                "key": key, "sampling": sampling, "finish_reason": reason, "prompt_tokens": result.prompt_tokens,
                "completion_tokens": per_sample, "seconds": seconds}}
                for text, reason in zip(result.texts, result.finish_reasons)]
            yield query, candidates, result.prompt_tokens + result.completion_tokens
        else:
            reason = getattr(result, "reason", None) or f"{type(result).__name__}: {result}"
            yield query, [{"text": "", "agent": spec.name, "error": _unicode(" ".join(str(reason).split())[:500]),
                           "generation": {"key": key, "sampling": sampling, "seconds": seconds}}] * params.n, 0


def _unicode(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate (a server may send "\\ud800") becomes U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _candidate(record: dict[str, Any]) -> Candidate:
    extra = {k: v for k, v in record.items() if k not in ("text", "agent")}
    return Candidate(text=record["text"], agent=record["agent"], extra=extra)


def _log_records(query: Query) -> Iterator[dict[str, Any]]:
    """A query's candidates as resume-log records, one per agent (the inverse of `_candidate`)."""
    for agent in dict.fromkeys(c.agent for c in query.candidates):
        yield {"id": query.id, "agent": agent, "candidates": [{"text": c.text, "agent": c.agent, **c.extra}
                                                              for c in query.candidates if c.agent == agent]}


def _done(records: Iterable[Any], keys: dict[tuple[str, str], str]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(question id, agent) -> candidate records made under the key that pair has now (`keys`). Dropped, so a
    rerun asks again: malformed records, failed requests, and answers made under another key or none."""
    done: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        try:
            pair = (str(record["id"]), str(record["agent"]))
            candidates = list(record["candidates"])
            if pair not in keys or any("error" in c or _key_of(c) != keys[pair] for c in candidates):
                continue
            done[pair] = candidates
        except (KeyError, TypeError, AttributeError):
            continue
    return done


def _key_of(candidate: dict[str, Any]) -> str | None:
    generation = candidate.get("generation")
    return generation.get("key") if isinstance(generation, dict) else None


def _chunks(items: Sequence[Query], size: int) -> Iterator[Sequence[Query]]:
    for start in range(0, len(items), size):
        yield items[start: start + size]

