"""Agent Collaboration Search against its baselines on GSM8K test questions, with the local SmolLM2 agents.

What it measures: accuracy (final answer equivalent to the reference), LLM calls, RM calls, score-cache
hits and wall time per method, all methods on the SAME agent answers. The agents are the packaged
offline pool (SmolLM2-135M-Instruct under several prompts and temperatures); the verifier is each
question's MoR ensemble chosen from a pool built on gsm8k_model_solutions (questions that are not
in the benchmark: the benchmark takes GSM8K test lines from --start on, past the 1000 the pool uses).
The model is tiny, so absolute accuracy is low; the point is the cost of each method.

ACS runs once per `--acs-steps` entry (default: argmax and first, each with morkit's step limit, the
paper's 8; `--max-steps 0` for none); "aggregations/q" counts every set ACS aggregated (initial, each
greedy try, residual), read from the trace, so a picking aggregator's work counts too.

    .venv/bin/python bench/acs.py                 # 30 questions, about 30-60 min on 2 CPU cores
    .venv/bin/python bench/acs.py --questions 5   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

BASELINES = ("best-of-n", "majority", "self-consistency", "moa")


def aggregations(result) -> int:
    """Sets a search aggregated, from its trace: ACS's initial set, every greedy try and the residual; moa's one."""
    return sum(len(s.tried) if s.step == "greedy" else s.step in ("initial", "residual")
               for s in result.trace)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=30)
    p.add_argument("--start", type=int, default=1000, help="first GSM8K test line (0-based) to use")
    p.add_argument("--pool-questions", type=int, default=300, help="gsm8k_model_solutions questions in the pool")
    p.add_argument("--pool-rms", nargs="+", default=["math-consensus", "minilm-probe"])
    p.add_argument("--selection", default="stacker", choices=("stacker", "pres", "pres-top1"))
    p.add_argument("--agents", help="agents.toml (default: the packaged offline SmolLM2 pool)")
    p.add_argument("--n-agents", type=int, default=3, help="use the first N agents of the config")
    p.add_argument("--max-tokens", type=int, default=128, help="new tokens per agent answer and aggregation")
    p.add_argument("--acs-steps", nargs="+", default=["argmax", "first"], choices=["argmax", "first"], help="ACS greedy steps to run, one row each")
    p.add_argument("--max-steps", type=int, help="ACS steps at most (default: morkit's, the paper's 8; 0: no limit)")
    p.add_argument("--seed", type=int, default=0, help="the aggregator's sampling seed (reruns give the same text)")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    p.add_argument("--data-dir", help="folder of the public data sets (default: $MORKIT_DATA_DIR, "
                   "else data/ in morkit's cache folder, which `morkit data fetch NAME` fills)")
    p.add_argument("--work", default=str(Path.home() / ".cache" / "morkit" / "bench-acs"),
                   help="where the pool and the generated answers are kept between runs")
    return p.parse_args()


def build_or_load_pool(args: argparse.Namespace, work: Path):
    from morkit.core import settings
    from morkit.data.datasets import gsm8k_model_solutions
    from morkit.question_pool.pool import load_pool
    from morkit.reward_models.options import ScoringOptions
    from morkit.services.pools import build_pool
    from morkit.reward_models.options import default_cache_path

    path = work / f"pool-{args.pool_questions}-{'-'.join(args.pool_rms)}"
    if (path / "pool.json").is_file():
        return load_pool(path)
    queries = gsm8k_model_solutions(settings.data_dir(args.data_dir))[: args.pool_questions]
    build_pool(queries, args.pool_rms, options=ScoringOptions(cache=default_cache_path(), progress=True)).save(path)
    return load_pool(path)


def agent_answers(config, queries, llms, work: Path, max_tokens: int) -> tuple[dict, float, int]:
    """Every agent's answer to every question, batched across questions per agent; cached on disk."""
    from dataclasses import replace

    store = work / f"answers-{max_tokens}.json"
    done = json.loads(store.read_text()) if store.is_file() else {}
    started, calls = time.perf_counter(), 0
    for spec in config.agents:
        todo = [q for q in queries if f"{spec.name}|{q.id}" not in done]
        if not todo:
            continue
        params = replace(spec.params, max_tokens=max_tokens)
        conversations = [([{"role": "system", "content": spec.system}] if spec.system else [])
                         + [{"role": "user", "content": q.question}] for q in todo]
        for query, completion in zip(todo, llms.llm(spec).chat(conversations, params)):
            done[f"{spec.name}|{query.id}"] = completion.texts[0].strip()
        calls += len(todo)
        store.write_text(json.dumps(done))
        print(f"  agent {spec.name}: {len(todo)} answers", file=sys.stderr)
    return done, time.perf_counter() - started, calls


def main() -> int:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from dataclasses import replace

    from morkit.core.grading import is_correct
    from morkit.core.types import Candidate
    from morkit.data.datasets import load_spec
    from morkit.llm.agents import AgentAnswer, LLMPool, load_agents
    from morkit.reward_models.session import ScoringSession
    from morkit.search.methods import SearchOptions
    from morkit.search.run import SearchRunner
    from morkit.selection.methods import SelectOptions
    from morkit.selection.router import Router
    from morkit.reward_models.options import default_cache_path

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    queries = load_spec(f"gsm8k_test:{args.start + args.questions}", args.data_dir)[args.start:]
    pool = build_or_load_pool(args, work)
    config = load_agents(args.agents)
    config = replace(config, agents=config.agents[: args.n_agents],
                     aggregator=replace(config.aggregator, params=replace(config.aggregator.params, seed=args.seed,
                                                                          max_tokens=args.max_tokens)))
    llms = LLMPool()
    print(f"{len(queries)} GSM8K test questions (lines {args.start}..{args.start + len(queries) - 1}); "
          f"agents {[a.name for a in config.agents]}; pool {len(pool)} questions, RMs {list(pool.rm_names)}; "
          f"selection {args.selection}; {args.max_tokens} new tokens per generation; aggregator temperature "
          f"{config.aggregator.params.temperature}, seed {args.seed}", file=sys.stderr)
    answers, answer_s, answer_calls = agent_answers(config, queries, llms, work, args.max_tokens)

    router = Router.from_options(pool, SelectOptions(method=args.selection))
    limit = {} if args.max_steps is None else {"max_steps": args.max_steps or None}
    runs = [(f"acs ({step})", "acs", SearchOptions(acs_step=step, **limit)) for step in args.acs_steps]
    runs += [(m, m, SearchOptions()) for m in BASELINES]
    totals = {name: {"correct": 0, "llm": 0, "agg": 0, "rm": 0, "hits": 0, "seconds": 0.0} for name, _, _ in runs}
    agent_correct = {a.name: 0 for a in config.agents}
    with ScoringSession(cache=default_cache_path()) as session:
        runner = SearchRunner(router, config, session, session.cache)
        for number, query in enumerate(queries, start=1):
            given = [AgentAnswer(a.name, answers[f"{a.name}|{query.id}"]) for a in config.agents]
            for a in given:
                agent_correct[a.agent] += bool(is_correct(a.text, query.reference))
            with_answers = replace(query, candidates=tuple(Candidate(text=a.text, agent=a.agent) for a in given))
            marks = []
            for name, method, options in runs:  # one at a time, so each one's cache hits and calls are its own
                hits_before = session.cache.hits
                runner.options = options
                result = runner.run(with_answers, [method]).results[method]
                ok = bool(is_correct(result.answer, query.reference))
                marks.append(f"{name} {'ok' if ok else '--'}")
                t = totals[name]
                t["correct"] += ok
                t["llm"] += result.llm_calls
                t["agg"] += aggregations(result)
                t["rm"] += result.rm_calls
                t["hits"] += session.cache.hits - hits_before
                t["seconds"] += result.seconds
            print(f"  [{number}/{len(queries)}] {query.id}: {', '.join(marks)}", file=sys.stderr)

    n = len(queries)
    print(f"\nACS vs baselines on {n} GSM8K test questions, {len(config.agents)} local SmolLM2 agents "
          f"({args.max_tokens} new tokens each), verifier: per-query MoR ensemble ({args.selection}) over "
          f"{', '.join(pool.rm_names)}")
    print(f"agent answers (shared by every method): {answer_calls} LLM calls, {answer_s:.1f}s "
          f"({answer_s / max(n, 1):.1f}s per question; 0 when cached from an earlier run)")
    print("single agents: " + ", ".join(f"{k} {v / n:.1%}" for k, v in agent_correct.items()))
    print(f"{'method':<18}{'accuracy':>9}{'LLM calls/q':>13}{'aggregations/q':>16}{'RM calls/q':>12}"
          f"{'cache hits/q':>14}{'s/q':>8}")
    for name, t in totals.items():
        print(f"{name:<18}{t['correct'] / n:>9.1%}{t['llm'] / n:>13.2f}{t['agg'] / n:>16.2f}{t['rm'] / n:>12.2f}"
              f"{t['hits'] / n:>14.1f}{t['seconds'] / n:>8.2f}")
    print("(LLM calls/q count aggregations only; add the agents' answer calls above. RM calls count model "
          "evaluations that missed the score cache, plus rule evaluations.)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
