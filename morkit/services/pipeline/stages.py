"""The CTTS-MM flow as resumable stages: split, generate, label, score, pool, then the same on test, rank, search.

Each stage writes one output and records its key in run.json; a rerun keeps every stage whose key is unchanged.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.reward_models.options import DEFAULT_CACHE
from morkit.services.pipeline.config import Benchmark, PipelineConfig, check_config
from morkit.services.pipeline.keys import (
    digest,
    embedder_version,
    file_digest,
    rm_versions,
    scoring_key,
    settings,
)

SPLITS = ("validation", "test")


@dataclass
class Run:
    """A pipeline run in its workdir: stage keys and timings live in run.json (rewritten after each stage)."""

    config: PipelineConfig
    progress: bool = False
    log: Callable[[str], None] = lambda message: None

    def __post_init__(self) -> None:
        self.workdir = self.config.workdir
        self.record_path = self.workdir / "run.json"
        self.record: dict[str, Any] = {"stages": {}}
        self.visited: list[str] = []  # the stages of this run, in order
        if self.record_path.exists():
            try:
                record = json.loads(self.record_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise InputError(f"not a morkit pipeline record ({exc}); use another workdir",
                                 path=str(self.record_path)) from exc
            if not (isinstance(record, dict) and isinstance(record.get("stages"), dict)):
                raise InputError("not a morkit pipeline record; use another workdir", path=str(self.record_path))
            self.record = record

    def path(self, name: str) -> Path:
        return self.workdir / name

    def stage(self, name: str, key: str, output: Path, work: Callable[[], dict[str, Any] | None]) -> str:
        """Run `work` unless `output` exists under `key` and is complete; returns the key (a later stage's input).

        A stage that was interrupted under another key leaves a resume log (`output.partial`) made
        with other inputs: it is removed first, so nothing from the old inputs comes back."""
        self.visited.append(name)
        done = self.record["stages"].get(name, {})
        if done.get("key") == key and output.exists() and not done.get("incomplete"):
            self.log(f"{name}: done before ({done.get('seconds', 0):.1f}s), kept")
            return key
        if done.get("running") != key:
            Path(str(output) + ".partial").unlink(missing_ok=True)
        self.record["stages"][name] = {**done, "running": key}
        self._save_record()
        self.log(f"{name}: running")
        start = time.perf_counter()
        facts = work() or {}
        seconds = round(time.perf_counter() - start, 3)
        self.record["stages"][name] = {"key": key, "seconds": seconds, "output": output.name, **facts}
        self._save_record()
        self.log(f"{name}: {seconds:.1f}s")
        return key

    def _save_record(self) -> None:
        from morkit.data.jsonl import atomic_path, json_safe

        with atomic_path(self.record_path) as tmp:
            tmp.write_text(json.dumps(json_safe(self.record), indent=1) + "\n", encoding="utf-8")

    def facts(self, name: str) -> dict[str, Any]:
        return self.record["stages"].get(name, {})


def _load(spec: str, source: str | None) -> list[Query]:
    """Questions of a registered data set ('NAME' or 'NAME:N') or a JSONL file (whose lines may leave
    `candidates` out), without candidates."""
    from morkit.data.contract import load_queries
    from morkit.data.datasets import DATASETS, load_spec

    if spec.partition(":")[0] in DATASETS:
        loaded = load_spec(spec)
    elif Path(spec).is_file():
        loaded = load_queries(spec, bare=True)
    else:
        raise InputError(f"{spec!r} is neither a registered data set ({', '.join(DATASETS.names())}) nor a file",
                         path=source)
    return [replace(q, candidates=()) for q in loaded]


def _drawn(queries: list[Query], seed: int, name: str) -> list[Query]:
    from morkit.data.datasets import shuffled_order

    return [queries[i] for i in shuffled_order(f"{seed}:{name}", len(queries))]


def split_benchmark(benchmark: Benchmark, seed: int, source: str | None = None) -> dict[str, list[Query]]:
    """The benchmark's validation and test questions (disjoint when both come from `data`), tagged with its name."""
    tag = (lambda qs: [replace(q, extra={**q.extra, "benchmark": benchmark.name}) for q in qs])
    if benchmark.data is not None:
        drawn = _drawn(_load(benchmark.data, source), seed, benchmark.name)
        n_val = benchmark.validation if benchmark.validation is not None else len(drawn) // 2
        n_test = benchmark.test if benchmark.test is not None else len(drawn) - n_val
        if n_val + n_test > len(drawn):
            raise InputError(f"benchmark {benchmark.name!r}: validation {n_val} + test {n_test} questions, but "
                             f"{benchmark.data} has {len(drawn)}", path=source)
        return {"validation": tag(drawn[:n_val]), "test": tag(drawn[n_val: n_val + n_test])}
    out = {}
    for split, spec, count in (("validation", benchmark.validation_data, benchmark.validation),
                               ("test", benchmark.test_data, benchmark.test)):
        out[split] = tag(_drawn(_load(spec, source), seed, benchmark.name)[:count])
    return out


def _split_all(config: PipelineConfig) -> dict[str, list[Query]]:
    splits: dict[str, list[Query]] = {s: [] for s in SPLITS}
    for benchmark in config.benchmarks:
        for split, queries in split_benchmark(benchmark, config.seed, config.source).items():
            splits[split].extend(queries)
    for split, queries in splits.items():
        ids = [q.id for q in queries]
        if len(set(ids)) != len(ids):
            raise InputError(f"the {split} split has duplicate question ids (two benchmarks share ids?)",
                             path=config.source)
    overlap = {q.id for q in splits["validation"]} & {q.id for q in splits["test"]}
    if overlap:
        raise InputError(f"{len(overlap)} questions are in both splits, e.g. {sorted(overlap)[0]!r}",
                         path=config.source)
    return splits


def run_pipeline(config: PipelineConfig, *, progress: bool = False,
                 log: Callable[[str], None] = lambda message: None) -> dict[str, Any]:
    """Run (or resume) every stage and write report.json and report.html; returns the report.

    The config is checked whole and the benchmarks split first: a config that would fail costs no LLM
    call and writes no file.

    Args:
        config: The pipeline config (`load_pipeline_config`); its workdir holds every stage's output.
        progress: Show progress bars.
        log: Called with a one-line message as stages run or are reused.

    Returns:
        The report (as written to report.json): per benchmark, each method's accuracy and costs on the test
        split, and the stage timings.

    Raises:
        InputError: The config fails its checks (an unregistered RM, a bad agents file, ...) or the workdir is a
            file.
    """
    from morkit.data.contract import save_queries
    from morkit.llm.agents import default_agents_path
    from morkit.services.pipeline.evaluate import evaluate
    from morkit.services.pipeline.report import write_reports

    if config.workdir.exists() and not config.workdir.is_dir():
        raise InputError("the workdir is a file, not a folder", path=str(config.workdir))
    check_config(config)
    splits = _split_all(config)  # cheap, so always redone: an edited data file reaches every later stage
    run = Run(config, progress, log)
    config.workdir.mkdir(parents=True, exist_ok=True)
    scoring = replace(config.scoring, progress=progress,
                      cache=(None if config.scoring.cache is DEFAULT_CACHE else config.scoring.cache)
                      or config.workdir / "scores.sqlite")  # the run's own cache unless named: scores survive a crash
    agents_key = file_digest(config.agents or default_agents_path())
    for split, queries in splits.items():
        save_queries(run.path(f"{split}.questions.jsonl"), queries)
    run.record["stages"]["split"] = {split: len(queries) for split, queries in splits.items()}
    run.visited.append("split")
    keys = {}
    for split in SPLITS:
        questions = file_digest(run.path(f"{split}.questions.jsonl"))
        keys[split] = _candidates(run, split, questions, agents_key, scoring)
    pool_key = run.stage("pool", digest(keys["validation"], settings(config.pool),
                                        embedder_version(config.embedder)),
                         run.path("pool") / "pool.json", lambda: _build_pool(run, scoring))
    rank_key = digest(pool_key, keys["test"])
    run.stage("rank", rank_key, run.path("test.ranked.jsonl"), lambda: _rank(run, scoring))
    if config.search:
        run.stage("search", digest(rank_key, config.search, agents_key, settings(config.search_options)),
                  run.path("test.search.jsonl"), lambda: _search(run, scoring))
    report = evaluate(run)
    write_reports(run, report)
    return report


def _candidates(run: Run, split: str, key: str, agents_key: str, scoring: Any) -> str:
    """generate -> label -> score for one split (`key`: its questions); returns the key of its scored file.

    Failed generations (empty text with an `error`) stay in the generated file, where a rerun asks
    for them again, and are left out from labelling on: they are counted, not graded or scored."""
    from morkit.data.contract import load_queries, save_queries
    from morkit.llm.agents import load_agents
    from morkit.question_pool.labels import fill_labels
    from morkit.services.generating import GENERATE_NEUTRAL, GenerateOptions, generate

    config = run.config
    options = GenerateOptions(n=config.n, progress=run.progress)
    generated = run.path(f"{split}.generated.jsonl")

    def generate_stage() -> dict[str, Any]:
        queries = load_queries(run.path(f"{split}.questions.jsonl"))
        report = generate(queries, load_agents(config.agents), generated, options,  # an earlier answer is reused
                          earlier=load_queries(generated) if generated.exists() else ())  # only under its key
        return {"candidates": report.generated + report.resumed, "failed": report.failed,
                "tokens": report.tokens, "incomplete": report.failed > 0}  # a rerun asks the failed ones again

    def label_stage() -> dict[str, Any]:
        queries = load_queries(generated)
        failed = sum("error" in c.extra for q in queries for c in q.candidates)
        answered = [replace(q, candidates=tuple(c for c in q.candidates if "error" not in c.extra)) for q in queries]
        labelled, report = fill_labels(answered, progress=run.progress)
        save_queries(run.path(f"{split}.labelled.jsonl"), labelled)
        return {"labels": report.__dict__, "failed_generations": failed}

    def score_stage() -> dict[str, Any]:
        from morkit.reward_models.session import ScoringSession
        from morkit.services.scoring import ensure_scores

        queries = load_queries(run.path(f"{split}.labelled.jsonl"))
        before = run.facts(f"{split}.score")
        measured = before.get("rm_seconds", {}) if before.get("labelled") == key else {}
        rm_seconds = {}
        with ScoringSession(scoring) as session:
            for name in config.rms:  # one RM at a time, timed, so each method's cost can count its own RMs
                start = time.perf_counter()
                queries = ensure_scores(queries, [name], scoring, session)
                session.release()  # its model goes before the next RM's clock starts
                # an RM scored on an earlier run of these candidates comes from the cache now: keep its real time
                rm_seconds[name] = max(round(time.perf_counter() - start, 3), float(measured.get(name, 0.0)))
        save_queries(run.path(f"{split}.scored.jsonl"), queries)
        return {"rm_seconds": rm_seconds, "labelled": key}

    key = run.stage(f"{split}.generate", digest(key, split, agents_key, settings(options, GENERATE_NEUTRAL)),
                    generated, generate_stage)
    key = digest(key, file_digest(generated))  # a retried failure that now answers changes what follows
    key = run.stage(f"{split}.label", digest(key, rm_versions(["code-tests"])),  # code labels grade through it
                    run.path(f"{split}.labelled.jsonl"), label_stage)
    return run.stage(f"{split}.score", digest(key, config.rms, rm_versions(config.rms), scoring_key(scoring)),
                     run.path(f"{split}.scored.jsonl"), score_stage)


def _build_pool(run: Run, scoring: Any) -> dict[str, Any]:
    from morkit.data.contract import load_queries
    from morkit.services.pools import build_pool

    queries = load_queries(run.path("validation.scored.jsonl"))
    pool = build_pool(queries, list(run.config.rms), config=run.config.pool, embedder=run.config.embedder,
                      options=scoring, provenance={"pipeline": run.config.source})
    pool.save(run.path("pool"))
    return {"questions": len(pool)}


def _rank(run: Run, scoring: Any) -> dict[str, Any]:
    from morkit.data.contract import load_queries
    from morkit.data.jsonl import write_jsonl
    from morkit.question_pool.pool import load_pool
    from morkit.services.routing import rank

    queries = _answered(load_queries(run.path("test.scored.jsonl")))
    rankings = rank(queries, load_pool(run.path("pool")), scoring=scoring)
    write_jsonl(run.path("test.ranked.jsonl"), [r.to_json() for r in rankings])
    return {"queries": len(rankings)}


def _search(run: Run, scoring: Any) -> dict[str, Any]:
    from morkit.data.contract import load_queries
    from morkit.question_pool.pool import load_pool
    from morkit.services.searching import run_search

    queries = _answered(load_queries(run.path("test.scored.jsonl")))
    records = run_search(queries, load_pool(run.path("pool")), agents=run.config.agents,
                         methods=list(run.config.search), options=run.config.search_options, scoring=scoring,
                         output=run.path("test.search.jsonl"))
    return {"queries": len(records)}


def _answered(queries: Sequence[Query]) -> list[Query]:
    """Queries with at least one candidate (failed generations were left out at labelling); rank and search
    see the same ones."""
    return [q for q in queries if q.candidates]
