"""`morkit demo`: what morkit does, offline on a CPU, in about two minutes.

1. Routing on the real cached scores of 22 RMs (RewardMATH); 2. live: embedded RMs, a PRES pool, SmolLM2 agents, ACS.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Sequence, TextIO

from morkit.core.types import Query
from morkit.data.contract import load_queries
from morkit.question_pool.prr import best_of_n_hit, prr

LIVE_RMS = {
    "math": ("smollm2-orm", "minilm-probe", "math-consensus"),
    "code": ("smollm2-orm", "minilm-probe", "code-tests"),
}


@dataclass(frozen=True)
class DemoOptions:
    """What the demo shows: the routing part, then (with `live`) the SmolLM2 part."""

    live: bool = True
    rms: tuple[str, ...] = ()  # live part: the RMs to show (default: per domain, LIVE_RMS)
    input: str | None = None  # live part: JSONL to score instead of the packaged sample
    agents: str | None = None  # live part: agents.toml (default: the packaged SmolLM2 pool)
    device: str | None = None
    held_out: float = 0.2  # routing part: share of problems kept out of the pool
    examples: int = 3
    searches: int = 1  # live part: packaged questions the agents answer (each ~a minute on 2 CPU cores)
    seed: int = 0
    out: TextIO | None = field(default=None, compare=False)  # None: sys.stdout when the demo runs


def sample_path(name: str = "sample.jsonl") -> Path:
    return Path(str(resources.files("morkit") / "resources" / "demo" / name))


def _short(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def run_demo(options: DemoOptions = DemoOptions()) -> int:
    if options.out is None:
        options = replace(options, out=sys.stdout)
    started = time.perf_counter()
    routing_demo(options)
    if options.live:
        live_demo(options)
    print(f"\nDemo done in {time.perf_counter() - started:.0f}s, offline.", file=options.out)
    return 0


# -- 1. routing on real cached scores ------------------------------------------------------------

def routing_demo(options: DemoOptions) -> None:
    from morkit.reward_models.options import ScoringOptions
    from morkit.selection.chooser import method_summary
    from morkit.selection.router import Router
    from morkit.services.pools import build_pool

    out = options.out
    queries = load_queries(sample_path("rewardmath.jsonl.gz"))
    order = list(range(len(queries)))
    random.Random(options.seed).shuffle(order)
    cut = int(len(queries) * (1 - options.held_out))
    pool_queries, held = [queries[i] for i in order[:cut]], [queries[i] for i in order[cut:]]
    print(f"== 1. Per-query routing on real cached scores: {len(queries[0].candidates[0].scores)} RMs and LLM "
          f"judges, {len(queries)} MATH problems x 10 solutions (RewardMATH) ==", file=out)
    pool = build_pool(pool_queries, options=ScoringOptions(device=options.device))
    singles = pool.ensemble_table()[: len(pool.rm_names)]
    best = max(singles, key=lambda r: r["best_of_n"])["ensemble"].members[0]
    rankings = Router.from_options(pool, device=options.device).route(held)  # the candidates carry their scores
    selections = [r.selection for r in rankings]
    morkit_hits = [best_of_n_hit(r.scores, _labels(q)) for q, r in zip(held, rankings)]
    single_hits = [best_of_n_hit(_member_scores(q, best), _labels(q)) for q in held]
    oracle_hits = [max(best_of_n_hit(_member_scores(q, n), _labels(q)) for n in pool.rm_names) for q in held]
    ensemble = rankings[0].selection.choice.ensemble
    top = sorted(zip(ensemble.members, ensemble.weights), key=lambda mw: -abs(mw[1]))[:4]
    print(f"Pool: {len(pool)} problems, {len(pool.ensembles)} ensembles. Held out: {len(held)} problems.\n"
          f"Best single RM on the pool: {best}. morkit's selection ({method_summary(selections)}) weighs every RM; "
          f"largest weights: {', '.join(f'{m} {w:+.2f}' for m, w in top)}.", file=out)
    shown = [i for i, (a, b) in enumerate(zip(morkit_hits, single_hits)) if a != b][: options.examples]
    for i in shown:
        _print_pick(held[i], rankings[i], best, out)
    n = len(held)
    wins = sum(a > b for a, b in zip(morkit_hits, single_hits))
    losses = sum(a < b for a, b in zip(morkit_hits, single_hits))
    print(f"\nHeld-out best-of-10 accuracy over {n} problems (ties shared): best single RM {best} "
          f"{sum(single_hits) / n:.1%}, morkit {sum(morkit_hits) / n:.1%} "
          f"({(sum(morkit_hits) - sum(single_hits)) / n * 100:+.1f} points: better on {wins} problems, worse on "
          f"{losses}); a per-problem oracle over single RMs {sum(oracle_hits) / n:.1%}.", file=out)


def _labels(query: Query) -> list[bool]:
    return [bool(c.correct) for c in query.candidates]


def _member_scores(query: Query, name: str) -> list[float]:
    return [float(c.scores[name]) for c in query.candidates]


def _print_pick(query: Query, ranking: Any, single: str, out: TextIO) -> None:
    from morkit.selection.mor import pick_best

    mark = {True: "right", False: "wrong"}
    single_pick = pick_best(query.id, _member_scores(query, single)).best_index
    print(f"\n[{query.id}] {_short(query.question, 100)}\n"
          f"  {single} picks solution {single_pick} ({mark[bool(query.candidates[single_pick].correct)]}); "
          f"morkit picks solution {ranking.best_index} ({mark[bool(query.candidates[ranking.best_index].correct)]})",
          file=out)


# -- 2. the live path ---------------------------------------------------------------------------

def live_demo(options: DemoOptions) -> None:
    from morkit.reward_models.options import ScoringOptions
    from morkit.services.scoring import score

    out = options.out
    print("\n== 2. Live, with models that run here: embedded RMs score a sample, a pool routes new questions, "
          "local SmolLM2 agents answer, ACS aggregates ==", file=out)
    queries = load_queries(options.input or sample_path())
    scoring = ScoringOptions(device=options.device)
    scored: list[Query] = []
    started = time.perf_counter()
    for domain, names in LIVE_RMS.items():
        batch = [q for q in queries if (q.domain or "math") == domain]
        names = tuple(options.rms) or names
        if batch:
            scored.extend(score(batch, names, options=scoring))
            print_query(scored[-len(batch)], names, out)
    summarise(scored, out)
    print(f"Scored {sum(len(q.candidates) for q in scored)} answers of {len(scored)} queries in "
          f"{time.perf_counter() - started:.1f}s.", file=out)
    math = [q for q in scored if q.domain == "math"]
    if len(math) >= 2:
        search_demo(math, options)


def print_query(query: Query, names: Sequence[str], out: TextIO) -> None:
    print(f"\n[{query.id}] ({query.domain}) {_short(query.question, 90)}", file=out)
    print(f"  {'#':>2} {'label':<7}" + "".join(f"{n:>16}" for n in names) + "  answer", file=out)
    best = {n: max(range(len(query.candidates)), key=lambda i: query.candidates[i].scores[n]) for n in names}
    for i, cand in enumerate(query.candidates):
        label = {True: "correct", False: "wrong", None: "?"}[cand.correct]
        cells = "".join(f"{cand.scores[n]:>15.3f}{'*' if best[n] == i else ' '}" for n in names)
        print(f"  {i:>2} {label:<7}{cells}  {_short(cand.text or '', 40)}", file=out)


def summarise(queries: Sequence[Query], out: TextIO) -> None:
    names = list(dict.fromkeys(n for q in queries for c in q.candidates for n in c.scores))
    print("\nPer RM over the sample (* above = the RM's pick; ties shared evenly):", file=out)
    print(f"  {'RM':<16}{'best-of-n acc':>14}{'mean PRR':>10}{'queries':>9}", file=out)
    for name in names:
        used = [q for q in queries if all(name in c.scores for c in q.candidates)]
        hits = [best_of_n_hit([c.scores[name] for c in q.candidates], _labels(q)) for q in used]
        prrs = [p for p in (prr([c.scores[name] for c in q.candidates], _labels(q)) for q in used) if p == p]
        mean_prr = f"{sum(prrs) / len(prrs):.3f}" if prrs else "n/a"
        print(f"  {name:<16}{sum(hits) / len(hits):>14.3f}{mean_prr:>10}{len(used):>9}", file=out)


def format_trace(trace: Sequence[dict], agents: Sequence[str]) -> list[str]:
    """One readable line per search step of a search record: what went in, the score, kept or not, why."""
    lines = []
    for step in trace:
        score = "   -  " if step["score"] is None else f"{step['score']:6.3f}"
        ins = "all agents" if step["step"] == "answers" else ",".join(agents[i] for i in step["members"])
        tried = ""
        if step["step"] == "greedy":
            tried = " tried " + ", ".join(f"+{agents[i]} {s:.3f}" for i, s in step["tried"])
        elif step["step"] == "answers":
            tried = " " + ", ".join(f"{agents[i]} {s:.3f}" for i, s in step["tried"])
        lines.append(f"    {step['step']:<9}{score} {'kept' if step['accepted'] else '    '} [{ins}]{tried} "
                     f"({step['llm_calls']} LLM, {step['rm_calls']} RM calls, {step['seconds']:.1f}s) "
                     f"{step['note']}".rstrip())
        if step["text"]:
            lines.append(f"{'':16}-> {_short(step['text'], 100)}")
    return lines


def search_demo(pool_queries: Sequence[Query], options: DemoOptions) -> None:
    """A pool from the scored sample, PRES per query, local agents, ACS with its trace."""
    from morkit.core.grading import is_correct
    from morkit.reward_models.options import ScoringOptions
    from morkit.selection.methods import SelectOptions
    from morkit.services.pools import build_pool
    from morkit.services.searching import run_search

    out = options.out
    names = [n for n in LIVE_RMS["math"] if all(n in c.scores for q in pool_queries for c in q.candidates)]
    scoring = ScoringOptions(device=options.device)
    pool = build_pool(pool_queries, names, options=scoring)
    selection = SelectOptions(method="pres", k=len(pool))
    print(f"\nA pool of {len(pool)} scored sample questions; PRES picks each new question's ensemble.", file=out)
    for query in load_queries(sample_path("search.jsonl"))[: options.searches]:
        started = time.perf_counter()
        record = run_search([query], pool, agents=options.agents, selection=selection, scoring=scoring)[0]
        result = record["results"]["acs"]
        ensemble = record["ensemble"]
        print(f"\n[{query.id}] {query.question}  (reference {query.reference})", file=out)
        print("  ensemble (pres): " + " + ".join(f"{w:.2f} {m}" for m, w in zip(ensemble["members"],
                                                                               ensemble["weights"])), file=out)
        for answer in record["answers"]:
            print(f"  {answer['agent']:<10}{_short(answer['text'], 100)}", file=out)
        print("\n".join(format_trace(result["trace"], [a["agent"] for a in record["answers"]])), file=out)
        verdict = {True: "correct", False: "wrong", None: "ungraded"}[is_correct(result["answer"], query.reference)]
        print(f"  final: {_short(result['answer'], 120)}  [{verdict}] in {time.perf_counter() - started:.1f}s",
              file=out)
