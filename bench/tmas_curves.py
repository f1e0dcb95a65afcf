"""TMAS per-iteration accuracy curves: best-so-far and round-mean accuracy at each iteration.

Two modes:

    .venv/bin/python bench/tmas_curves.py read OUT.jsonl     # records of `morkit loop tmas ... -o OUT.jsonl`
    .venv/bin/python bench/tmas_curves.py run --questions 3 --iterations 3 --threads 1 \
        --save /tmp/tmas_run.jsonl                            # TMAS on GSM8K test questions, local SmolLM2

Curves (morkit.loops.tmas.curves): at iteration t, *best-so-far* is the share of questions whose answer
had the loop stopped after t (its `select` rule over rounds 1..t) is correct; *round mean* is the mean,
over questions, of the share of round t's N solutions that are correct (the paper's per-iteration pass@1).
Correctness needs each query's reference (the loop only marks it; no prompt sees it).

`run` uses the embedded SmolLM2-135M-Instruct for every TMAS role and as the critic
(`LLMVerifier(LocalLLM())`, each verification pass sampled at the loop's verify_temperature), on GSM8K
test lines from --start (1100, as bench/loops.py). SmolLM2-135M is tiny and slow on CPU (seconds per
call): keep it to a few questions, 2-3 iterations and 64-96 tokens. Its accuracy is near zero; the run
shows the curves' plumbing on real data, not TMAS's scaling.
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
    return p.parse_args(argv)


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
