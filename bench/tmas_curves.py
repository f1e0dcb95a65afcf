"""TMAS per-iteration accuracy curves: best-so-far and round-mean accuracy at each iteration.

Two modes:

    .venv/bin/python bench/tmas_curves.py read OUT.jsonl     # records of `morkit loop tmas ... -o OUT.jsonl`
    .venv/bin/python bench/tmas_curves.py run --questions 3 --iterations 3 --threads 1 \
        --save runs/tmas.jsonl                               # TMAS on GSM8K test questions, local SmolLM2
    .venv/bin/python bench/tmas_curves.py replay              # recorded Qwen2.5-Math solutions, RM-72B scores

Curves (morkit.loops.tmas.curves): at iteration t, *best-so-far* is the share of questions whose answer
had the loop stopped after t (its `select` rule over rounds 1..t) is correct; *round mean* is the mean,
over questions, of the share of round t's N solutions that are correct (the paper's per-iteration pass@1).
Correctness needs each query's reference (the loop only marks it; no prompt sees it).

`run` uses the embedded SmolLM2-135M-Instruct for every TMAS role and as the critic
(`LLMVerifier(LocalLLM())`, each verification pass sampled at the loop's verify_temperature), on GSM8K
test lines from --start (1100, as bench/loops.py). SmolLM2-135M is tiny and slow on CPU (seconds per
call): keep it to a few questions, 2-3 iterations and 64-96 tokens. Its accuracy is near zero; the run
shows the curves' plumbing on real data, not TMAS's scaling.

`replay` runs the real TMAS loop on real candidates: the solver replays each MATH problem's 8 recorded
Qwen2.5-Math-Instruct solutions (qwen25_math_rm8) in a seeded order, one per solver call, and the
verifier returns each solution's recorded Qwen2.5-Math-RM-72B score (deterministic, so one pass). The
memory agents get empty replies. What was generated cannot depend on the memory, so the curve shows the
verifier-guided selection across rounds (best-so-far over 2, 4, 6, 8 solutions), not the memory's effect;
that needs a live model behind `morkit loop tmas`. `replay --zscore` turns the scores into z-scores within
each call, which compare only within one call: TMAS then re-scores each round's best together to choose.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("read", help="curves from an existing `morkit loop tmas` output file")
    r.add_argument("records", help="JSONL output of `morkit loop tmas`")
    r.add_argument("--json", help="also write the curve rows here")
    g = sub.add_parser("run", help="run TMAS on GSM8K test questions with the local SmolLM2, then the curves")
    g.add_argument("--questions", type=int, default=3)
    g.add_argument("--start", type=int, default=1100, help="first GSM8K test line (0-based)")
    g.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    g.add_argument("--iterations", type=int, default=3)
    g.add_argument("--solutions", type=int, default=3)
    g.add_argument("--verifications", type=int, default=2)
    g.add_argument("--max-tokens", type=int, default=96, help="new tokens per solution and per agent reply")
    g.add_argument("--critic-tokens", type=int, default=64, help="new tokens per critique")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--threads", type=int, help="torch threads (1 is often fastest on a busy small machine)")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any TMASConfig field")
    g.add_argument("--save", help="write the run's records (the `morkit loop` format) here")
    g.add_argument("--json", help="also write the curve rows here")
    y = sub.add_parser("replay", help="TMAS over recorded Qwen2.5-Math solutions, scored by their recorded RM-72B")
    y.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    y.add_argument("--questions", type=int, default=0, help="at most this many problems (0: all 70)")
    y.add_argument("--iterations", type=int, default=4)
    y.add_argument("--solutions", type=int, default=2, help="per round; iterations x solutions <= 8")
    y.add_argument("--seed", type=int, default=0)
    y.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any TMASConfig field")
    y.add_argument("--zscore", action="store_true",
                   help="z-score each call's scores within the call: a verifier whose scores compare only within "
                        "one call (as a learned MoR selector's), so TMAS re-scores each round's best together")
    y.add_argument("--json", help="also write the curve rows here")
    return p.parse_args(argv)


class ReplaySolver:
    """An LLM that answers TMAS's solver prompts with a problem's recorded solutions, each once, in a seeded
    order, and every memory agent with an empty reply (thread-safe: TMAS samples in parallel)."""

    name = "replay"

    def __init__(self, solutions: Sequence[str], seed: int):
        import random
        import threading

        from morkit.loops.tmas.prompts import SOLVER_SYSTEM

        self._order = list(solutions)
        random.Random(seed).shuffle(self._order)
        self._solver_system, self._lock, self.served = SOLVER_SYSTEM, threading.Lock(), 0

    def chat(self, conversations, params=None):
        from morkit.core.errors import LLMError
        from morkit.llm.base import Completion

        out = []
        for conversation in conversations:
            text = ""
            if conversation[0]["content"] == self._solver_system:
                with self._lock:
                    if self.served >= len(self._order):
                        raise LLMError("every recorded solution was replayed")
                    text, self.served = self._order[self.served], self.served + 1
            out.append(Completion((text,), 0, len(text.split())))
        return out

    def stream(self, conversation, params=None):
        yield self.chat([conversation], params)[0].texts[0]


class RecordedScores:
    """A deterministic verifier: each recorded solution's recorded reward-model score. A score belongs to its text
    alone, so scores compare across calls (TMAS compares rounds directly); it writes no analysis."""

    name = "recorded-rm"
    absolute_scores = True

    def __init__(self, scores: dict[str, float]):
        self.scores, self.rm_calls = scores, 0

    def verify(self, question, answers, context=()):
        from morkit.core.types import Verdict

        self.rm_calls += len(answers)
        return [Verdict(self.scores.get(a, 0.0)) for a in answers]


class ZScoredScores(RecordedScores):
    """The recorded scores as z-scores over the call's texts (answers and context): they compare only within one
    call, as a learned selector's within-call features do."""

    absolute_scores = False

    def verify(self, question, answers, context=()):
        import statistics

        from morkit.core.types import Verdict

        raw = [v.score for v in super().verify(question, list(answers) + [t for t in context if t not in answers])]
        mean, spread = statistics.mean(raw), statistics.pstdev(raw) or 1.0
        return [Verdict((value - mean) / spread) for value in raw[: len(answers)]]


def run_replay(args: argparse.Namespace) -> list[dict[str, Any]]:
    """TMAS records over qwen25_math_rm8: replayed solutions, recorded RM-72B scores."""
    from morkit.data.datasets import load_spec
    from morkit.loops.settings import configure, parse_setting
    from morkit.loops.tmas.loop import TMAS, TMASConfig

    queries = load_spec("qwen25_math_rm8", args.data_dir)
    queries = queries[: args.questions] if args.questions else queries
    config = configure(TMASConfig, [parse_setting(s) for s in args.set], iterations=args.iterations,
                       solutions=args.solutions, verifications=1, seed=args.seed)
    records = []
    for query in queries:
        texts = [c.text for c in query.candidates]
        scores = {c.text: c.scores["qwen2.5-math-rm-72b"] for c in query.candidates}
        verifier = (ZScoredScores if args.zscore else RecordedScores)(scores)
        result = TMAS(ReplaySolver(texts, args.seed), verifier, config).run(query.question,
                                                                                           query.reference)
        records.append({"id": query.id, "reference": query.reference, **result.to_json()})
    oracle = sum(any(c.correct for c in q.candidates) for q in queries) / len(queries)
    print(f"[tmas-curves] replay: {len(queries)} MATH problems, {args.iterations} rounds x {args.solutions} "
          f"solutions; any of the 8 recorded solutions correct (oracle): {100 * oracle:.1f}%", file=sys.stderr)
    return records


def run_local(args: argparse.Namespace) -> list[dict[str, Any]]:
    """TMAS records for GSM8K test questions, every role and the critic the embedded SmolLM2."""
    from morkit.data.datasets import load_spec
    from morkit.llm.base import SamplingParams
    from morkit.llm.local import LocalLLM
    from morkit.loops.settings import configure, parse_setting
    from morkit.loops.tmas.loop import TMAS, TMASConfig
    from morkit.verify.critic import LLMVerifier

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    queries = load_spec(f"gsm8k_test:{args.start + args.questions}", args.data_dir)[args.start:]
    llm = LocalLLM()
    started = time.perf_counter()
    llm.chat([[{"role": "user", "content": "Say hi."}]], SamplingParams(temperature=0.0, max_tokens=4))
    print(f"[tmas-curves] model loaded in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    config = configure(TMASConfig, [parse_setting(s) for s in args.set], iterations=args.iterations,
                       solutions=args.solutions, verifications=args.verifications, seed=args.seed,
                       max_tokens=args.max_tokens, agent_max_tokens=args.max_tokens)
    records = []
    for number, query in enumerate(queries, 1):
        verifier = LLMVerifier(llm, SamplingParams(temperature=0.0, max_tokens=args.critic_tokens))
        result = TMAS(llm, verifier, config).run(query.question, query.reference)
        records.append({"id": query.id, "reference": query.reference, **result.to_json()})
        print(f"[tmas-curves] [{number}/{len(queries)}] {query.id}: {result.seconds:.0f}s, {result.calls} calls, "
              f"stop {result.stop_reason}, curve {[p['correct'] for p in result.state['curve']]}", file=sys.stderr)
    print(f"[tmas-curves] config: {json.dumps(asdict(config))}", file=sys.stderr)
    return records


def table(rows: list[dict[str, Any]]) -> str:
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.1f}%"

    lines = [f"{'iteration':>9}  {'best-so-far':>11} {'(n)':>4}  {'round mean':>10} {'(n)':>4}"]
    lines += [f"{r['iteration']:>9}  {pct(r['best_so_far']):>11} {r['best_n']:>4}  {pct(r['round_mean']):>10} "
              f"{r['round_n']:>4}" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from morkit.data.jsonl import read_jsonl, write_jsonl
    from morkit.loops.tmas.curves import aggregate

    args = parse_args(argv)
    if args.mode == "read":
        records = [record for _, record in read_jsonl(args.records)]
    elif args.mode == "replay":
        records = run_replay(args)
    else:
        records = run_local(args)
        if args.save:
            write_jsonl(args.save, records)
    rows = aggregate(records)
    stops: dict[str, int] = {}
    for r in records:
        stops[r.get("stop_reason", "?")] = stops.get(r.get("stop_reason", "?"), 0) + 1
    print(f"TMAS curves over {len(records)} record(s); stop reasons {stops}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "records": len(records), "stops": stops}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
