"""Pieces the CLI verbs share: RM construction from names, the score cache, inputs, scoring options."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any, Sequence

from morkit.core.errors import InputError, UnknownRewardModel
from morkit.core.types import Query

DEFAULT_RMS = ("smollm2-orm",)


def _rm_options(args: argparse.Namespace) -> dict[str, Any]:
    from morkit.reward_models.hf import Batching, Truncation

    options: dict[str, Any] = {"batching": Batching(max_batch=args.batch_size)}
    if args.max_tokens:
        options["truncation"] = Truncation(max_tokens=args.max_tokens, policy=args.truncation)
    elif args.truncation != "right":
        options["truncation"] = Truncation(policy=args.truncation)
    if args.device:
        options["device"] = args.device
    return options


def build_rms(names: Sequence[str], table_names: Sequence[str], args: argparse.Namespace) -> list[Any]:
    """Registered RMs by name, plus table RMs for names that only appear as cached input scores."""
    from morkit.reward_models import registry
    from morkit.reward_models.table import TableRewardModel

    known = {s.name: s for s in registry.specs()}
    rms = []
    for name in names:
        if name in known:
            spec = known[name]
            options = _rm_options(args) if spec.backend == "transformers" else {}
            rms.append(registry.build(name, **options))
        elif name in table_names:
            rms.append(TableRewardModel(name, args.reduction))
        else:
            raise UnknownRewardModel(name, list(known) + list(table_names))
    return rms


def open_cache(args: argparse.Namespace) -> Any:
    if args.no_cache:
        return None
    from morkit.runtime.assets import cache_dir
    from morkit.reward_models.cache import ScoreCache

    return ScoreCache(args.cache or cache_dir() / "scores.sqlite")


def add_scoring_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", help="torch device for model RMs (default: auto = cuda, mps, else cpu)")
    p.add_argument("--batch-size", type=int, default=16, help="max sequences per forward pass (default 16)")
    p.add_argument("--max-tokens", type=int, help="max tokens per (question, answer) pair (default: per model)")
    p.add_argument("--truncation", choices=("right", "left", "error"), default="right",
                   help="pair too long: cut the answer's end (right), its start (left), or fail (error)")
    p.add_argument("--reduction", choices=("min", "last", "mean", "prod"), default="min",
                   help="how a cached PRM step list becomes one score (default min)")
    p.add_argument("--chunk", type=int, default=64, help="pairs per scoring call, cached as each finishes")
    p.add_argument("--cache", help="score cache file (default: $MORKIT_CACHE_DIR/scores.sqlite)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the score cache")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")


def ensure_scores(queries: Sequence[Query], names: Sequence[str], args: argparse.Namespace) -> list[Query]:
    """Fill in each named RM's score where the input has none, by running the registered RM (through the
    score cache). A name that is not registered stays a table of whatever the input caches (gaps are
    counted by the pool); a name that is neither registered nor cached anywhere is an error."""
    from morkit.reward_models import registry
    from morkit.reward_models.scoring import score_queries
    from morkit.reward_models.table import table_names

    registered = {s.name for s in registry.specs()}
    cached = set(table_names(queries))
    unknown = [n for n in names if n not in registered and n not in cached]
    if unknown:
        raise UnknownRewardModel(unknown[0], sorted(registered | cached))
    to_run = [n for n in names if n in registered and not all(n in c.scores for q in queries for c in q.candidates)]
    if not to_run:
        return list(queries)
    cache = open_cache(args)
    try:
        return score_queries(queries, build_rms(to_run, [], args), cache=cache, chunk=args.chunk,
                             progress=not args.quiet)
    finally:
        if cache:
            cache.close()


def add_input_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", action="append", metavar="NAME[:N]", default=[],
                   help="a shared labelled data set (first N questions), repeatable: "
                        "gsm8k_model_solutions, qwen25_math_rm8, rewardmath_rm_scores, humaneval_davinci_samples")
    p.add_argument("--data-dir", help="shared data folder (default $MORKIT_DATA_DIR or ../shared/data)")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_inputs(paths: Sequence[str], args: argparse.Namespace) -> tuple[list[Query], list[dict[str, Any]]]:
    """Queries from JSONL files and --dataset specs, with provenance; an id seen twice is an error."""
    from morkit.data.contract import load_queries
    from morkit.data.datasets import load_spec

    queries: list[Query] = []
    provenance: list[dict[str, Any]] = []
    for path in paths:
        loaded = load_queries(path)
        queries.extend(loaded)
        provenance.append({"file": str(Path(path).resolve()), "sha256": _sha256(path), "queries": len(loaded)})
    data_dir = Path(args.data_dir) if getattr(args, "data_dir", None) else None
    for spec in getattr(args, "dataset", None) or []:
        loaded = load_spec(spec, data_dir)
        queries.extend(loaded)
        provenance.append({"dataset": spec, "queries": len(loaded)})
    if not provenance:
        raise InputError("no input: give JSONL files and/or --dataset NAME")
    seen: set[str] = set()
    for query in queries:
        if query.id in seen:
            raise InputError(f"duplicate id {query.id!r} across the inputs")
        seen.add(query.id)
    return queries, provenance


def pool_selector(pool: Any, args: argparse.Namespace, method: str, *, k: int = 100, singles_only: bool = False,
                  allow_run: bool = True) -> Any:
    """A Selector over `pool` using the pool's embedder; registered pool RMs that can run here (weights and
    packages present) count as available for candidates with text, unless `allow_run` is off."""
    from morkit.question_pool.embed import load_embedder
    from morkit.reward_models import registry
    from morkit.selection.selector import Selector

    specs = {s.name: s for s in registry.specs()}
    runnable = [n for n in pool.rm_names if n in specs and specs[n].missing() is None] if allow_run else []
    return Selector(pool, method, embedder=load_embedder(pool.embedder, args.device), k=k,
                    singles_only=singles_only, runnable=runnable)
