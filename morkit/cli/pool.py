"""`morkit pool build | add | info | report | upgrade`: make, extend, inspect and upgrade question pools."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from morkit.cli.args import (
    CONTRACT,
    NON_NEGATIVE,
    POSITIVE,
    POSITIVE_INT,
    add_cost_options,
    add_input_options,
    add_scoring_options,
    cost_options,
    output_dir,
    output_file,
    scoring_options,
)
from morkit.data.jsonl import json_safe


def _print_labels(pool: Any) -> None:
    """How the last revision's missing labels were filled, when any were."""
    labels = pool.meta["history"][-1]["provenance"].get("labels") or {}
    if any(labels.values()):
        print(f"labels: {labels['by_reference']} candidates by reference answer, {labels['by_tests']} by tests "
              f"({labels.get('undecided', 0)} undecided: false), {labels['no_source']} left unlabelled "
              "(no reference or tests)", file=sys.stderr)


def _inputs(args: argparse.Namespace) -> tuple[list[Any], dict[str, Any]]:
    from morkit.services.pools import load_inputs

    queries, provenance = load_inputs(args.input, args.dataset, args.data_dir)
    return queries, {"inputs": provenance}


def _embed_ray(args: argparse.Namespace) -> Any:
    """The embedder actors' options; given without --ray, an error naming the flag."""
    from morkit.core.errors import InputError
    from morkit.question_pool.embed_ray import RayEmbedOptions

    given = [flag for flag, value in (("--embed-actors", args.embed_actors), ("--embed-gpus", args.embed_gpus),
                                      ("--embed-cpus", args.embed_cpus)) if value is not None]
    if given and args.ray is None:
        raise InputError(f"{given[0]} applies only with --ray (the questions are embedded on Ray actors)")
    return RayEmbedOptions(args.embed_actors, args.embed_gpus, args.embed_cpus)


def add_embed_ray_options(p: argparse.ArgumentParser) -> None:
    """--embed-actors/--embed-gpus/--embed-cpus: the Ray actors that embed the questions under --ray."""
    g = p.add_argument_group("embedding on Ray (with --ray: Ray Data over embedder actors, one model each)")
    g.add_argument("--embed-actors", type=POSITIVE_INT, metavar="N",
                   help="embedder actors (default: one per GPU of the cluster, else one per node)")
    g.add_argument("--embed-gpus", type=NON_NEGATIVE, metavar="G",
                   help="GPUs per embedder actor, a fraction packs several on a GPU (default 1 where the cluster "
                        "has GPUs, else 0)")
    g.add_argument("--embed-cpus", type=POSITIVE, metavar="C",
                   help="CPUs per embedder actor, its torch threads (default 1 beside a GPU, else the cluster's "
                        "CPUs split over the actors)")


def cmd_pool_build(args: argparse.Namespace) -> int:
    from morkit.question_pool.index import IndexConfig
    from morkit.question_pool.pool import PoolConfig
    from morkit.services.pools import build_pool

    config = PoolConfig(normalizer=args.normalizer, max_members=args.max_members,
                        weightings=tuple(args.weighting or PoolConfig().weightings), temperature=args.temperature,
                        reduction=args.reduction, index=IndexConfig(kind=args.index), statistics=args.statistics)
    options = scoring_options(args)
    embed_ray = _embed_ray(args)
    costs = cost_options(args)
    output_dir(args.output)
    started = time.perf_counter()
    queries, provenance = _inputs(args)
    pool = build_pool(queries, args.rm, config=config, embedder=args.embedder, options=options,
                      provenance=provenance, embed_ray=embed_ray, costs=costs)
    pool.save(args.output)
    _print_labels(pool)
    print(f"pool: {len(pool)} questions, {len(pool.rm_names)} RMs, {len(pool.ensembles)} ensembles, "
          f"index {pool.meta['index']['kind']}, built in {time.perf_counter() - started:.1f}s -> {args.output}",
          file=sys.stderr)
    return 0


def cmd_pool_add(args: argparse.Namespace) -> int:
    from morkit.services.pools import add_to_saved_pool

    options = scoring_options(args)
    embed_ray = _embed_ray(args)
    costs = cost_options(args)
    queries, provenance = _inputs(args)
    pool, grown = add_to_saved_pool(args.pool, queries, options=options, provenance=provenance, embed_ray=embed_ray,
                                    costs=costs)
    _print_labels(grown)
    print(f"pool: added {len(grown) - len(pool)} questions (now {len(grown)}, revision {grown.meta['revision']})"
          f" -> {args.pool}", file=sys.stderr)
    return 0


def _fmt(value: float) -> str:
    return "   n/a" if value is None or value != value else f"{value:6.3f}"


def cmd_pool_info(args: argparse.Namespace) -> int:
    from morkit.question_pool.pool import load_pool

    info = load_pool(args.pool).summary(args.top)
    if args.json:
        print(json.dumps(json_safe(info), indent=1, allow_nan=False, default=lambda v: None))
        return 0
    domains = ", ".join(f"{d} {n}" for d, n in info["domains"].items())
    print(f"pool {args.pool}: revision {info['revision']}, created {info['created']}, updated {info['updated']}, "
          f"morkit {info['morkit_version']}")
    print(f"  {info['questions']} questions ({domains}), up to {info['max_candidates']} candidates each")
    print(f"  embedder {info['embedder']['name']} (dim {info['embedder']['dim']}), index {info['index']}")
    print(f"  {len(info['rms'])} RMs, {info['ensembles']} ensembles, normaliser {info['normalizer']}, "
          f"PRM steps reduced by {info['reduction']}; statistics {info['statistics']}")
    skipped = {k: v for k, v in info["skipped"].items() if v}
    missing = {k: v for k, v in info["missing_scores"].items() if v}
    if skipped or missing:
        print(f"  skipped queries {skipped or 'none'}; questions with missing scores per RM {missing or 'none'}")
    skips = "; ".join(f"{name} on {', '.join(f'{d} ({n})' for d, n in domains.items())}"
                      for name, domains in info["not_applicable"].items() if domains)
    if skips:
        print(f"  not applicable (no score, by design): {skips}")
    print(f"\n  {'RM':<28}{'PRR':>7}{'best-of-n':>11}{'with PRR':>11}{'agreement':>11}{'acc alone':>11}")
    for name, row in info["rms"].items():
        print(f"  {name:<28}{_fmt(row['mean_prr']):>7}{_fmt(row['best_of_n']):>11}{row['questions']:>11}"
              f"{_fmt(row['agreement']):>11}{_fmt(row['accuracy_alone']):>11}")
    if len(info["rms"]) > 1:
        print("  (agreement: how often its pick is another RM's; acc alone: its best-of-n where most others pick "
              "another answer; both over the mixed questions)")
    for warning in info["warnings"]:
        print(f"  warning: {warning}")
    print(f"\n  best {len(info['best'])} ensembles by mean PRR:")
    for row in info["best"]:
        weights = ", ".join(f"{w:.2f}" for w in row["weights"])
        print(f"  {_fmt(row['mean_prr'])} {_fmt(row['best_of_n'])}  {row['name']}  [{weights}]")
    return 0


def cmd_pool_report(args: argparse.Namespace) -> int:
    from morkit.question_pool.pool import load_pool
    from morkit.question_pool.report import write_report
    from morkit.selection.report import selection_section

    output_file(args.output)
    pool = load_pool(args.pool)
    path = write_report(pool, args.output, sections=[selection_section(pool)])
    print(f"report -> {path}", file=sys.stderr)
    return 0


def cmd_pool_upgrade(args: argparse.Namespace) -> int:
    from morkit.services.pool_upgrade import upgrade_pool

    done = upgrade_pool(args.pool)
    dropped = f"removed the retired slot{'s' if len(done.removed) > 1 else ''} {', '.join(done.removed)}"
    if done.found != done.format:
        print(f"pool {args.pool}: rewritten from format {done.found} in format {done.format}"
              + (f"; {dropped}" if done.removed else ""), file=sys.stderr)
    elif done.removed:
        print(f"pool {args.pool}: format {done.format}; {dropped} from pool.json", file=sys.stderr)
    else:
        print(f"pool {args.pool}: already format {done.format}; nothing to do", file=sys.stderr)
    return 0


def add_parsers(sub: Any, parent: argparse.ArgumentParser) -> None:
    from morkit.question_pool.ensembles import NORMALIZERS, WEIGHTINGS
    from morkit.question_pool.index import APPROXIMATE_ABOVE, INDEX_KINDS
    from morkit.question_pool.pool import DENSE_CELLS, STATISTICS
    from morkit.services.scoring import DEFAULT_RMS

    pool = sub.add_parser("pool", parents=[parent], help="build, extend and inspect question pools",
                          description="A question pool holds, per labelled validation question, every RM's and RM "
                                      "ensemble's PRR, plus an embedding index; `select` and `rank` route by it.")
    verbs = pool.add_subparsers(dest="pool_command", required=True, metavar="VERB", parser_class=type(pool))

    p = verbs.add_parser("build", parents=[parent], help="build a pool from labelled queries",
                         description="Label candidates that lack `correct` (reference answer or sandboxed tests), "
                                     "score them with each pool RM (cached input scores are used as they are; an RM "
                                     "skips queries of domains it does not apply to, see `morkit rms`), "
                                     "compute PRR for every RM and every 2..N-member ensemble, embed the questions "
                                     "and index them (--ray scores model RMs and embeds the questions on a Ray "
                                     "cluster). Embeddings are cached beside the score cache, so a killed build "
                                     "embeds only what it had not finished. Writes the pool directory atomically.")
    p.add_argument("input", nargs="*", default=[], help=f"labelled input files ({CONTRACT})")
    add_input_options(p)
    p.add_argument("-o", "--output", required=True, help="pool directory to write (replaced atomically)")
    p.add_argument("--rm", action="append", metavar="NAME",
                   help="pool RM, repeatable (default: every RM with cached scores in the input, else "
                        f"{', '.join(DEFAULT_RMS)}); registered RMs are run where scores are missing")
    p.add_argument("--embedder",
                   help="sentence-transformers model name or path (default: the embedded all-MiniLM-L6-v2)")
    p.add_argument("--normalizer", choices=NORMALIZERS, default="zscore",
                   help="per-RM score normalisation fitted on the pool (default zscore; raw = the CTTS-MM paper)")
    p.add_argument("--weighting", action="append", choices=WEIGHTINGS,
                   help="ensemble weightings to enumerate, repeatable (default all three)")
    p.add_argument("--temperature", type=POSITIVE, default=1.0, help="softmax weighting temperature (default 1.0)")
    p.add_argument("--max-members", type=POSITIVE_INT, default=3, help="largest ensemble size (default 3)")
    p.add_argument("--index", choices=INDEX_KINDS, default="auto",
                   help="FAISS index: exact (flat), approximate (ivf or hnsw), or auto: flat up to "
                        f"{APPROXIMATE_ABOVE:,} questions, ivf above (default)")
    p.add_argument("--statistics", choices=STATISTICS, default="auto",
                   help="store PRR and best-of-n of every ensemble as dense tables, or keep only member scores and "
                        "compute the neighbours' values per query (on-the-fly); auto: dense up to "
                        f"{DENSE_CELLS:,} (question, ensemble) cells (default)")
    add_cost_options(p, "store the RMs' costs with the pool and fit its budget routes (routing under a budget)")
    add_scoring_options(p)
    add_embed_ray_options(p)
    p.set_defaults(func=cmd_pool_build)

    p = verbs.add_parser("add", parents=[parent], help="append labelled questions to a pool without rebuilding it",
                         description="New questions are scored with the pool's RMs, normalised and weighted as the "
                                     "pool was built, embedded with its embedder (on Ray actors with --ray), and "
                                     "appended as a new revision.")
    p.add_argument("pool", help="pool directory")
    p.add_argument("input", nargs="*", default=[], help=f"labelled input files ({CONTRACT})")
    add_input_options(p)
    add_cost_options(p, "update the RMs' costs the pool stores, or store them (routing under a budget; a pool that "
                        "stores costs refits its budget routes on every add)")
    add_scoring_options(p, reduction=False)  # the pool's own reduction applies
    add_embed_ray_options(p)
    p.set_defaults(func=cmd_pool_add)

    p = verbs.add_parser("info", parents=[parent], help="print a pool's summary and RM table")
    p.add_argument("pool", help="pool directory")
    p.add_argument("--top", type=POSITIVE_INT, default=10, help="how many best ensembles to list (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    p.set_defaults(func=cmd_pool_info)

    p = verbs.add_parser("report", parents=[parent], help="write an HTML report with plots",
                         description="One self-contained HTML file: PRR by RM and domain, the best ensembles, "
                                     "PRR distributions, and how the selection methods do on the pool (CV and "
                                     "leave-one-out accuracy, the learned selector's calibration, weights and "
                                     "per-domain gains).")
    p.add_argument("pool", help="pool directory")
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.set_defaults(func=cmd_pool_report)

    p = verbs.add_parser("upgrade", parents=[parent], help="rewrite a pool of an older morkit in this one's format",
                         description="Pools written by older morkits (format 1 or 2, the questions in "
                                     "questions.jsonl) do not open: this rewrites one in place in format 3 (the "
                                     "questions in columns). The new directory is written beside the pool, checked "
                                     "whole, and only then swapped in, so a failure leaves the old pool as it was. "
                                     "Header slots nothing reads now (an older morkit's stacker fit) are dropped, "
                                     "in format 3 too; a pool without them already in format 3 is left as it is.")
    p.add_argument("pool", help="pool directory")
    p.set_defaults(func=cmd_pool_upgrade)
