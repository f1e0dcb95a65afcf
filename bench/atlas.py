"""ATLAS on a few GSM8K test questions with the local SmolLM2: how the orchestrator's protocol holds up.

Every role is the local SmolLM2-135M-Instruct (`LocalLLM()`): the orchestrator, the solver, and an
`LLMVerifier` critic. Per run it reports the histogram of explore counts, the stop reasons, where the final
answer came from (the orchestrator's final-answer turn, a give-up, a fallback), how the orchestrator's
replies were read (parsed ACTION, no ACTION line -> protocol default, min_explores override, failed call),
candidates left out of the pool budget, LLM calls and tokens (the loop's own, then the critic's), seconds,
and accuracy (final answer equivalent to the reference; "stated" also needs the text to state it).

A 135M model rarely follows the ACTION protocol: the figures measure the protocol's fallbacks and cost,
not the paper's accuracy. Questions are GSM8K test lines from --start (1100), past those other benchmarks use.

    .venv/bin/python bench/atlas.py --threads 1                   # 3 questions, a few minutes per question
    .venv/bin/python bench/atlas.py --questions 1 --synthesis integrator
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=3, help="GSM8K test questions")
    p.add_argument("--start", type=int, default=1100, help="first GSM8K test line (0-based)")
    p.add_argument("--data-dir", help="folder of the public data sets (default: $MORKIT_DATA_DIR, "
                   "else data/ in morkit's cache folder, which `morkit data fetch NAME` fills)")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    p.add_argument("--max-explores", type=int, default=3)
    p.add_argument("--solver-tokens", type=int, default=96, help="a solver's new tokens")
    p.add_argument("--orchestrator-tokens", type=int, default=96, help="one orchestrator turn: reasoning + ACTION")
    p.add_argument("--synthesis-tokens", type=int, default=128, help="the final-answer turn")
    p.add_argument("--critic-tokens", type=int, default=64, help="LLMVerifier's new tokens per critique")
    p.add_argument("--pool-tokens", type=int, default=2000, help="candidate-pool budget (estimated tokens)")
    p.add_argument("--synthesis", choices=("orchestrator", "integrator"), default="orchestrator")
    p.add_argument("--no-reason-first", action="store_true", help="one ACTION line per turn, no reasoning")
    p.add_argument("--no-verifier", action="store_true", help="no critic (the paper's setting)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write every figure and each run's record to this JSON file")
    return p.parse_args(argv)


def run_one(loop: Any, critic: Any, qid: str, question: str, reference: str) -> dict[str, Any]:
    """One ATLAS run as a flat record: explores, stop, final source, decision sources, costs, correctness."""
    from loops import states_answer

    from morkit.core.grading import is_correct

    calls0, tokens0 = (critic.calls, critic.tokens) if critic else (0, 0)
    result = loop.run(question, reference)
    critic_calls = critic.calls - calls0 if critic else 0
    critic_tokens = critic.tokens - tokens0 if critic else 0
    state = result.state
    ok = bool(result.answer) and bool(is_correct(result.answer, reference))
    return {"id": qid, "explores": state["explores"], "stop": result.stop_reason, "final_source": state["final_source"],
            "decision_sources": [d["source"] for d in state["decisions"]],
            "actions": [d["action"] for d in state["decisions"]], "left_out": state["left_out"],
            "calls": result.calls - critic_calls, "critic_calls": critic_calls,
            "tokens": result.tokens - critic_tokens, "critic_tokens": critic_tokens, "seconds": result.seconds,
            "correct": ok, "stated": ok and states_answer(result.answer), "explores_correct":
            state["reference_check"]["explores_correct"], "answer": result.answer, "reference": reference,
            "decisions_raw": [d["raw"] for d in state["decisions"]], "synthesis": state["synthesis"]}


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(records)
    sources = Counter(s for r in records for s in r["decision_sources"])
    decisions = sum(sources.values())
    return {"questions": n,
            "explores_histogram": dict(sorted(Counter(r["explores"] for r in records).items())),
            "stop_reasons": dict(Counter(r["stop"] for r in records)),
            "final_sources": dict(Counter(r["final_source"] for r in records)),
            "decisions": decisions, "decision_sources": dict(sources),
            "unparsed_share": sources["default"] / decisions if decisions else 0.0,
            "actions": dict(Counter(a for r in records for a in r["actions"])),
            "left_out": sum(r["left_out"] for r in records),
            "mean": {k: statistics.mean(r[k] for r in records) for k in
                     ("explores", "calls", "critic_calls", "tokens", "critic_tokens", "seconds")},
            "accuracy": sum(r["correct"] for r in records) / n, "stated": sum(r["stated"] for r in records) / n,
            "any_explore_correct": sum(any(r["explores_correct"]) for r in records) / n}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from loops import STATED_NOTE, CountingLLM, gsm8k_test

    from morkit.llm.base import SamplingParams
    from morkit.llm.local import LocalLLM
    from morkit.loops.atlas.loop import ATLAS, ATLASConfig, Effort, Solver
    from morkit.verify.critic import LLMVerifier

    problems = gsm8k_test(args.start, args.questions, args.data_dir)
    llm = LocalLLM()
    started = time.perf_counter()
    llm.chat([[{"role": "user", "content": "Say hi."}]], SamplingParams(temperature=0.0, max_tokens=4))  # load
    print(f"[atlas] model loaded and warmed up in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    critic = None if args.no_verifier else CountingLLM(LocalLLM())
    m = args.solver_tokens
    config = ATLASConfig(max_explores=args.max_explores, max_tokens=args.orchestrator_tokens,
                         synthesis_max_tokens=args.synthesis_tokens, pool_tokens=args.pool_tokens,
                         synthesis=args.synthesis, reason_first=not args.no_reason_first,
                         efforts={"low": Effort(max(m // 2, 1), "Answer briefly."),
                                  "medium": Effort(m, "Solve step by step."),
                                  "high": Effort(2 * m, "Think step by step carefully and check every step.")})
    solver = Solver(llm, SamplingParams(temperature=0.7, max_tokens=m, seed=args.seed))
    records = []
    for number, (qid, question, reference) in enumerate(problems, 1):
        verifier = None if critic is None else LLMVerifier(critic, SamplingParams(temperature=0.0,
                                                                                  max_tokens=args.critic_tokens))
        record = run_one(ATLAS(llm, solver, verifier, config), critic, qid, question, reference)
        records.append(record)
        print(f"[atlas] [{number}/{len(problems)}] {qid}: {'ok' if record['correct'] else '--'} "
              f"{record['seconds']:.1f}s, {record['explores']} explores, {record['calls']}+{record['critic_calls']} "
              f"calls, decisions {record['decision_sources']}, stop: {record['stop']}", file=sys.stderr)
    s = summarise(records)
    print(f"\nATLAS on {s['questions']} GSM8K test question(s) from line {args.start}; every role the local "
          f"SmolLM2-135M-Instruct; critic {'none' if critic is None else f'LLMVerifier, {args.critic_tokens} tokens'}; "
          f"max_explores {config.max_explores}, orchestrator turn {config.max_tokens} tokens (reason_first "
          f"{config.reason_first}), final answer {config.synthesis_max_tokens} ({config.synthesis}), solver {m}, "
          f"pool {config.pool_tokens}, seed {args.seed}.")
    print(f"  explores per question (histogram): {s['explores_histogram']}")
    print(f"  stop reasons: {s['stop_reasons']}")
    print(f"  final answer from: {s['final_sources']}")
    print(f"  orchestrator decisions: {s['decisions']}, read as {s['decision_sources']} -> no parseable ACTION in "
          f"{s['unparsed_share']:.0%} (default action taken); actions {s['actions']}")
    print(f"  candidates left out of the pool budget: {s['left_out']}")
    mean = s["mean"]
    print(f"  per question: {mean['calls']:.1f} loop calls + {mean['critic_calls']:.1f} critic calls, "
          f"{mean['tokens']:.0f} + {mean['critic_tokens']:.0f} tokens, {mean['seconds']:.1f}s")
    print(f"  accuracy {s['accuracy']:.0%}, stated {s['stated']:.0%}, some explore correct "
          f"{s['any_explore_correct']:.0%}")
    print(f"  {STATED_NOTE}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "summary": s, "records": records}, indent=1,
                                              default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
