"""`morkit demo`: score a packaged sample with the embedded RMs, offline on CPU, and print a table."""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from morkit.data.contract import load_queries
from morkit.question_pool.prr import best_of_n_hit, prr
from morkit.core.types import Query

DOMAIN_RMS = {
    "math": ("smollm2-orm", "minilm-probe", "smollm2-judge", "math-consensus"),
    "code": ("smollm2-orm", "minilm-probe", "smollm2-judge", "code-tests"),
}


def sample_path(name: str = "sample.jsonl") -> Path:
    return Path(str(resources.files("morkit") / "resources" / "demo" / name))


def _short(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def print_query(query: Query, names: Sequence[str], out: Any = None) -> None:
    out = out or sys.stdout
    print(f"\n[{query.id}] ({query.domain}) {_short(query.question, 90)}", file=out)
    header = f"  {'#':>2} {'label':<7}" + "".join(f"{n:>16}" for n in names) + "  answer"
    print(header, file=out)
    best = {n: max(range(len(query.candidates)), key=lambda i: query.candidates[i].scores[n]) for n in names}
    for i, cand in enumerate(query.candidates):
        label = {True: "correct", False: "wrong", None: "?"}[cand.correct]
        cells = "".join(f"{cand.scores[n]:>15.3f}{'*' if best[n] == i else ' '}" for n in names)
        print(f"  {i:>2} {label:<7}{cells}  {_short(cand.text or '', 40)}", file=out)


def summarise(queries: Sequence[Query], names: Sequence[str], out: Any = None) -> None:
    out = out or sys.stdout
    print("\nPer RM over the sample (* above = the RM's pick; ties shared evenly):", file=out)
    print(f"  {'RM':<16}{'best-of-n acc':>14}{'mean PRR':>10}{'queries':>9}", file=out)
    for name in names:
        scored = [q for q in queries if all(name in c.scores for c in q.candidates)]
        hits = [best_of_n_hit([c.scores[name] for c in q.candidates], [c.correct for c in q.candidates])
                for q in scored]
        prrs = [prr([c.scores[name] for c in q.candidates], [c.correct for c in q.candidates]) for q in scored]
        prrs = [p for p in prrs if p == p]
        mean_prr = f"{sum(prrs) / len(prrs):.3f}" if prrs else "n/a"
        print(f"  {name:<16}{sum(hits) / len(hits):>14.3f}{mean_prr:>10}{len(scored):>9}", file=out)


def run_demo(args: argparse.Namespace) -> int:
    from morkit.reward_models import registry
    from morkit.reward_models.scoring import score_queries

    queries = load_queries(args.input or sample_path())
    wanted = set(args.rm) if args.rm else None
    started = time.perf_counter()
    results: list[Query] = []
    built: dict[str, Any] = {}
    for domain, names in DOMAIN_RMS.items():
        batch = [q for q in queries if (q.domain or "math") == domain]
        names = [n for n in names if wanted is None or n in wanted]
        if not batch or not names:
            continue
        for name in names:
            if name not in built:
                options = {"device": args.device} if args.device and registry.spec(name).backend == "transformers" else {}
                built[name] = registry.build(name, **options)
        scored = score_queries(batch, [built[n] for n in names], progress=True)
        for query in scored:
            print_query(query, names)
        results.extend(scored)
    summarise(results, list(built))
    print(f"\nScored {sum(len(q.candidates) for q in results)} answers of {len(results)} queries with "
          f"{len(built)} embedded RMs in {time.perf_counter() - started:.1f}s, offline on {_device(built)}.")
    if args.search:
        search_demo([q for q in results if q.domain == "math"], built, args)
    return 0


def format_trace(result: Any, answers: Sequence[Any]) -> list[str]:
    """One readable line per search step: what went in, the score, kept or not, why."""
    lines = []
    for step in result.trace:
        score = "   -  " if step.score is None else f"{step.score:6.3f}"
        ins = ",".join(answers[i].agent for i in step.members) if step.step != "answers" else "all agents"
        verdict = "kept" if step.accepted else "    "
        tried = ""
        if step.step == "greedy":
            tried = " tried " + ", ".join(f"+{answers[i].agent} {s:.3f}" for i, s in step.tried)
        elif step.step == "answers":
            tried = " " + ", ".join(f"{answers[i].agent} {s:.3f}" for i, s in step.tried)
        lines.append(f"    {step.step:<9}{score} {verdict} [{ins}]{tried} ({step.llm_calls} LLM, "
                     f"{step.rm_calls} RM calls, {step.seconds:.1f}s) {step.note}".rstrip())
        if step.text:
            lines.append(f"{'':16}-> {_short(step.text, 100)}")
    return lines


def search_demo(pool_queries: Sequence[Query], built: dict[str, Any], args: argparse.Namespace) -> None:
    """The whole path offline: a pool from the scored sample, PRES per query, local agents, ACS."""
    from morkit.reward_models.cache import ScoreCache
    from morkit.runtime.assets import cache_dir
    from morkit.question_pool.embed import load_embedder
    from morkit.question_pool.pool import build_pool
    from morkit.llm.agents import load_agents
    from morkit.search.run import SearchRunner, is_correct
    from morkit.selection.selector import Selector

    names = [n for n in DOMAIN_RMS["math"] if n in built]
    print(f"\n== Search: a pool of {len(pool_queries)} scored sample questions, PRES picks the RM ensemble, "
          f"local SmolLM2 agents answer, ACS aggregates ==")
    embedder = load_embedder(None, args.device)
    pool = build_pool(pool_queries, embedder, rm_names=names)
    selector = Selector(pool, "pres", embedder=embedder, k=10, runnable=names)
    with ScoreCache(cache_dir() / "scores.sqlite") as cache:
        runner = SearchRunner(selector, load_agents(args.agents), built.__getitem__, cache)
        for query in load_queries(sample_path("search.jsonl")):
            started = time.perf_counter()
            run = runner.run(query, ["acs"])
            result = run.results["acs"]
            ensemble = run.selection.choice.ensemble
            print(f"\n[{query.id}] {query.question}  (reference {query.reference})")
            print(f"  ensemble ({selector.method_name}): "
                  + " + ".join(f"{w:.2f} {m}" for m, w in zip(ensemble.members, ensemble.weights)))
            for answer in run.answers:
                print(f"  {answer.agent:<10}{_short(answer.text, 100)}")
            print("\n".join(format_trace(result, run.answers)))
            verdict = {True: "correct", False: "wrong", None: "ungraded"}[is_correct(query, result.answer)]
            print(f"  final: {_short(result.answer, 120)}  [{verdict}] in {time.perf_counter() - started:.1f}s")


def _device(built: dict[str, Any]) -> str:
    for rm in built.values():
        backbone = getattr(rm, "backbone", None)
        if backbone is not None:
            return backbone.device
    return "cpu"
