"""The pipeline's config file (TOML): benchmarks and their splits, agents, pool RMs, scoring and search.

`load_pipeline_config` checks what the file says, `check_config` what it names, before stage one (docs/pipeline.md).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from morkit.core import checks
from morkit.core.errors import InputError, UnavailableError
from morkit.data.toml import read_toml
from morkit.llm.base import sample_count
from morkit.question_pool.pool import PoolConfig
from morkit.reward_models.options import FLAGS as SCORING_FLAGS
from morkit.reward_models.options import DEFAULT_CACHE, ScoringOptions
from morkit.search.methods import SEARCH_METHODS, SearchOptions


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: where its questions come from and how many go to each split (None: all)."""

    name: str
    data: str | None = None
    validation: int | None = None
    test: int | None = None
    validation_data: str | None = None
    test_data: str | None = None


@dataclass(frozen=True)
class PipelineConfig:
    source: str
    workdir: Path
    benchmarks: tuple[Benchmark, ...]
    agents: str | None = None
    n: int | None = None  # None: each agent's own n from agents.toml
    rms: tuple[str, ...] = ("smollm2-orm",)
    search: tuple[str, ...] = ("acs",)
    search_options: SearchOptions = SearchOptions(strict_grading=True)
    seed: int = 0
    embedder: str | None = None
    scoring: ScoringOptions = ScoringOptions()
    pool: PoolConfig = PoolConfig()
    raw: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


_TOP_KEYS = {"workdir", "agents", "n", "rms", "search", "aggregator", "strict_grading", "seed", "scoring", "pool",
             "benchmark"}
_BENCHMARK_KEYS = {f for f in Benchmark.__dataclass_fields__}
_POOL_KEYS = {f for f in PoolConfig.__dataclass_fields__} - {"index"} | {"embedder"}
_SCORING_KEYS = set(SCORING_FLAGS) - {"progress"}  # flat, as the CLI flags: ScoringOptions.from_flags nests them
SEED_BITS = 63
"""A seed is a signed 64-bit whole number, as every seeded library takes."""


def _keys(table: Any, allowed: set[str], where: str, path: str) -> Mapping[str, Any]:
    if not isinstance(table, Mapping):
        raise InputError(f"{where} must be a table of keys, got {type(table).__name__}", path=path)
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise InputError(f"{where}: unknown keys {unknown}; known: {', '.join(sorted(allowed))}", path=path)
    return table


def _checked(check: Any, value: Any, where: str, path: str) -> Any:
    """`check(value, where)` (a `core.checks` check), its error naming the config file; None stays None."""
    try:
        return checks.optional(check, value, where)
    except InputError as exc:
        raise InputError(str(exc), path=path) from None


def _count(value: Any, where: str, path: str) -> int | None:
    return _checked(checks.positive_int, value, where, path)


def _names(value: Any, where: str, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InputError(f"{where} must be a list of names", path=path)
    return tuple(value)


def _benchmark(table: Any, i: int, base: Path, path: str) -> Benchmark:
    where = f"[[benchmark]] #{i + 1}"
    table = _keys(table, _BENCHMARK_KEYS, where, path)
    name = table.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise InputError(f"{where}: name must be a non-empty text without '/'", path=path)
    where = f"benchmark {name!r}"
    sources = {k: table.get(k) for k in ("data", "validation_data", "test_data")}
    for key, value in sources.items():
        if value is not None and not (isinstance(value, str) and value):
            raise InputError(f"{where}: {key} must be a data set name or a file path", path=path)
    if sources["data"] is None and not (sources["validation_data"] and sources["test_data"]):
        raise InputError(f"{where}: give `data`, or both `validation_data` and `test_data`", path=path)

    def located(spec: str | None) -> str | None:
        looks_like_file = spec is not None and (spec.endswith((".jsonl", ".json")) or os.sep in spec)
        return str(base / spec) if looks_like_file and not os.path.isabs(spec) else spec

    return Benchmark(name, located(sources["data"]), _count(table.get("validation"), f"{where}: validation", path),
                     _count(table.get("test"), f"{where}: test", path), located(sources["validation_data"]),
                     located(sources["test_data"]))


def load_pipeline_config(path: str | os.PathLike) -> PipelineConfig:
    """Parse and check a pipeline TOML file; every error names the file and the key.

    Args:
        path: The pipeline TOML file; relative paths in it (workdir, agents, data files) are read from its folder.

    Returns:
        The checked PipelineConfig (benchmarks, agents, RMs, search, pool and scoring settings, seed).

    Raises:
        InputError: The file cannot be read, or a key is unknown, missing or invalid (the message names it).
    """
    path = str(path)
    raw = read_toml(path)
    _keys(raw, _TOP_KEYS, "the config", path)
    base = Path(path).resolve().parent
    tables = raw.get("benchmark", [])
    if not isinstance(tables, list) or not tables:
        raise InputError("no [[benchmark]] tables: name at least one benchmark", path=path)
    benchmarks = tuple(_benchmark(t, i, base, path) for i, t in enumerate(tables))
    names = [b.name for b in benchmarks]
    if len(set(names)) != len(names):
        raise InputError(f"benchmark names must be unique, got {names}", path=path)
    workdir = raw.get("workdir", Path(path).stem)
    if not isinstance(workdir, str) or not workdir:
        raise InputError("workdir must be a folder path", path=path)
    agents = raw.get("agents")
    if agents is not None and not (isinstance(agents, str) and agents):
        raise InputError("agents must be the path of an agents.toml", path=path)
    if agents is not None and not (base / agents).is_file():
        raise InputError(f"agents: no such file: {base / agents}", path=path)
    rms = _names(raw.get("rms", ["smollm2-orm"]), "rms", path)
    if not rms:
        raise InputError("rms must name at least one reward model", path=path)
    search = _names(raw.get("search", ["acs"]), "search", path) if raw.get("search") != [] else ()
    for method in search:
        if method not in SEARCH_METHODS:
            raise InputError(f"search: unknown method {method!r}; choose from {', '.join(SEARCH_METHODS.names())}",
                             path=path)
    strict = raw.get("strict_grading", True)
    if not isinstance(strict, bool):
        raise InputError(f"strict_grading must be true or false, got {strict!r}", path=path)
    aggregator = raw.get("aggregator", SearchOptions.aggregator)
    if not isinstance(aggregator, str):
        raise InputError(f"aggregator must be a name, got {aggregator!r}", path=path)
    try:
        search_options = SearchOptions(aggregator=aggregator, strict_grading=strict)
    except InputError as exc:
        raise InputError(str(exc), path=path) from None
    pool_table = dict(_keys(raw.get("pool", {}), _POOL_KEYS, "[pool]", path))
    embedder = pool_table.pop("embedder", None)
    if embedder is not None and not (isinstance(embedder, str) and embedder):
        raise InputError(f"[pool] embedder must be a model name or path, got {checks.shown(embedder)}", path=path)
    try:
        if "weightings" in pool_table:
            pool_table["weightings"] = tuple(_names(pool_table["weightings"], "[pool] weightings", path))
        pool = PoolConfig(**pool_table)
    except (TypeError, ValueError) as exc:
        raise InputError(f"[pool] {exc}", path=path) from exc
    scoring_table = dict(_keys(raw.get("scoring", {}), _SCORING_KEYS, "[scoring]", path))
    try:
        if "urls" in scoring_table:
            scoring_table["urls"] = _names(scoring_table["urls"], "[scoring] urls", path)
        scoring = ScoringOptions.from_flags(**scoring_table)
    except (TypeError, ValueError) as exc:
        raise InputError(f"[scoring] {exc}", path=path) from exc
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not -2 ** SEED_BITS <= seed < 2 ** SEED_BITS:
        raise InputError(f"seed must be a whole number of at most 64 bits, got {checks.shown(seed)}", path=path)
    return PipelineConfig(
        source=path, workdir=(base / workdir).resolve(), benchmarks=benchmarks,
        agents=str(base / agents) if agents else None, n=_checked(sample_count, raw.get("n"), "n", path), rms=rms,
        search=search,
        search_options=search_options, seed=seed, embedder=embedder,
        scoring=scoring, pool=pool, raw={**raw, "benchmark": [asdict(b) for b in benchmarks]})


def check_config(config: PipelineConfig) -> None:
    """What the config names, checked before the first stage so that nothing is spent on a run that would fail:
    every RM registered, the scoring device known here, the score cache writable, the pool's embedder there to
    load (question_pool.embed.check_embedder, no weights read), the agents file a valid agent pool. Errors name
    the config file and key (the agents file's own, its file, agent and field)."""
    from morkit.llm.agents import load_agents
    from morkit.question_pool.embed import check_embedder
    from morkit.reward_models.cache import cache_problem
    from morkit.services.scoring import check_rm_names

    _checked(sample_count, config.n, "n", config.source)  # a PipelineConfig made in Python skips load_pipeline_config
    texts = {"device": config.scoring.device, "cache": config.scoring.cache,  # fields ScoringOptions takes as given
             "device_map": config.scoring.transformers.device_map}
    for key, value in texts.items():
        if value is not None and value is not DEFAULT_CACHE and not (isinstance(value, (str, os.PathLike))
                                                                     and str(value)):
            raise InputError(f"[scoring] {key} must be text, got {checks.shown(value)}", path=config.source)
    try:
        check_rm_names(config.rms, ())  # the questions carry no scores: every RM must be registered
    except InputError as exc:
        raise InputError(f"rms: {exc}", path=config.source) from None
    if config.scoring.device is not None:
        from morkit.runtime.device import resolve_device

        try:
            resolve_device(config.scoring.device)
        except InputError as exc:
            raise InputError(f"[scoring] device: {exc}", path=config.source) from None
        except UnavailableError as exc:
            raise UnavailableError(f"{config.source}: [scoring] device: {exc}") from None
    problem = config.scoring.cache not in (None, DEFAULT_CACHE) and cache_problem(config.scoring.cache)
    if problem:
        raise InputError(f"[scoring] cache {config.scoring.cache}: {problem}", path=config.source)
    try:
        check_embedder(config.embedder)
    except InputError as exc:
        raise InputError(f"[pool] embedder: {exc}", path=config.source) from None
    except UnavailableError as exc:
        raise UnavailableError(f"{config.source}: [pool] embedder: {exc}") from None
    load_agents(config.agents)
