"""Scoring engines against the machine's limit: the same model, the same pairs, every path, one run.

Paths (all score the SmolLM2 ORM: SmolLM2-135M-Instruct's last-token state + its trained head):
  plain loop           one pair at a time through transformers (what a user writes without morkit)
  transformers         morkit's batched transformers core (length-sorted batches, padding capped)
  transformers+pfx     the same with question-prefix KV reuse
  transformers/nocap   the same batches without a padding cap (--uncapped: how it batched before the cap)
  vllm                 morkit's vLLM placement (CPU engine), prefix caching off
  vllm+pfx             the same with vLLM's prefix caching on
Inputs: 64 real GSM8K model solutions (16 questions, 4 solutions each) and a best-of-N set (MATH problems with
8 Qwen2.5-Math solutions each). The fp32 matmul peak is measured in the same run; FLOPs count the
unshared work (every pair's full prompt), so work saved by prefix reuse shows as more than 100%. The transformers
paths run alternated, fastest of --repeats each; the peak is the higher of two measurements, before and after.

    .venv/bin/python bench/score_engines.py [--pairs 64] [--bon-questions 8] [--uncapped] [--skip-vllm]

Last line: `best: <path> <P>% of peak; prefix reuse <R>x vs vLLM without it` (R: the faster prefix path
on the best-of-N set over vLLM without prefix caching on that set).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

from compute import forward_flops, matmul_peak  # noqa: E402 (beside this script)


def best_of_n(questions: int, data_dir: str | None) -> list[tuple[str, str]]:
    from morkit.core import settings
    from morkit.data.datasets import load_spec

    queries = load_spec("qwen25_math_rm8", settings.data_dir(data_dir))[:questions]
    return [(q.question, c.text) for q in queries for c in q.candidates]


def timed(score, pairs) -> tuple[float, list[float]]:
    start = time.perf_counter()
    values = score(pairs)
    return time.perf_counter() - start, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=64, help="GSM8K pairs (default 64)")
    parser.add_argument("--bon-questions", type=int, default=8, help="best-of-N questions, 8 candidates each")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2,
                        help="timed runs per path, the transformers paths alternated; the fastest counts")
    parser.add_argument("--max-padding", type=float, default=0.05,
                        help="padded share a batch may have (morkit's default; a negative value: no cap, as before)")
    parser.add_argument("--uncapped", action="store_true", help="also time the batched path without a padding cap")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--data-dir")
    args = parser.parse_args()

    import torch
    from score_throughput import plain_loop, real_pairs

    from morkit.reward_models.backends.hf import Batching
    from morkit.reward_models.catalog import resolve_rm
    from morkit.reward_models.embedded.models import smollm2_orm
    from morkit.reward_models.options import ScoringOptions

    sets = {"gsm8k": real_pairs(args.pairs, args.data_dir), "best-of-8": best_of_n(args.bon_questions, args.data_dir)}
    cap = None if args.max_padding < 0 else args.max_padding
    rm = smollm2_orm(device="cpu", batching=Batching(max_batch=args.batch_size, max_padding=cap))
    load_start = os.getloadavg()[0]
    config = rm.backbone.model.config
    lengths = {name: [len(rm.render(q, a)) for q, a in pairs] for name, pairs in sets.items()}
    flops = {name: forward_flops(config, ls) for name, ls in lengths.items()}
    peak = matmul_peak()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; fp32 matmul peak {peak:.0f} GFLOP/s; "
          f"load {load_start:.1f}; batches of {args.batch_size}, padding cap {cap}")
    for name, ls in lengths.items():
        plan = rm.batching.plan(ls)
        padded = 1 - sum(ls) / sum(len(b) * ls[b[0]] for b in plan)
        print(f"{name}: {len(ls)} pairs, {sum(ls) / len(ls):.0f} tokens on average, {flops[name] / 1e9:.0f} GFLOP; "
              f"batched: {len(plan)} batches, {100 * padded:.1f}% of their tokens padding")

    def transformers_path(reuse: bool, batching: Batching = rm.batching):
        def score(pairs):
            rm.prefix_reuse, rm.batching = reuse, batching
            return [s.value for s in rm.score(pairs)]
        return score

    paths = {"plain loop": lambda pairs: plain_loop(rm, pairs), "transformers": transformers_path(False),
             "transformers+pfx": transformers_path(True)}
    if args.uncapped:  # the same batches without the padding cap (morkit before it had one)
        paths["transformers/nocap"] = transformers_path(False, Batching(max_batch=args.batch_size, max_padding=None))
    if not args.skip_vllm:  # engines start one at a time, after the transformers paths: an idle engine
        for label, caching in (("vllm", False), ("vllm+pfx", True)):  # still takes CPU from other paths
            paths[label] = ScoringOptions.from_flags(placement="vllm", prefix_reuse=caching, max_model_len=2048)
    transformers_path(False)(sets["gsm8k"][:4])  # warm-up

    rates: dict[tuple[str, str], float] = {}
    values: dict[tuple[str, str], list[float]] = {}

    def record(label: str, name: str, seconds: float, scores: list[float]) -> None:
        pairs = len(sets[name])
        if pairs / seconds > rates.get((label, name), 0.0):
            rates[(label, name)], values[(label, name)] = pairs / seconds, scores

    local = [label for label, score in paths.items() if not isinstance(score, ScoringOptions)]
    for _ in range(args.repeats):  # alternated, so a change of load hits every path alike
        for label in local:
            for name, pairs in sets.items():
                record(label, name, *timed(paths[label], pairs))
    for label, options in paths.items():
        if label in local:
            continue
        engine = resolve_rm("smollm2-orm", options).load()
        engine.score(sets["gsm8k"][:2])  # start the engine outside the timing
        def score(pairs, e=engine):
            e.engine.llm.reset_prefix_cache()  # a repeat must not read the previous run's prompts
            return [s.value for s in e.score(pairs)]
        for _ in range(args.repeats):
            for name, pairs in sets.items():
                record(label, name, *timed(score, pairs))
        engine.close()
    peak = max(peak, matmul_peak())  # the higher of the two, measured before and after
    print(f"\nfp32 matmul peak (the higher of before and after) {peak:.0f} GFLOP/s; load {os.getloadavg()[0]:.1f} "
          f"at the end")
    print(f"{'path':<20}{'set':<11}{'pairs/s':>9}{'tokens/s':>10}{'% peak':>8}{'max|diff|':>11}")
    for (label, name), rate in rates.items():
        reference = values[("plain loop", name)]
        diff = max(abs(a - b) for a, b in zip(reference, values[(label, name)]))
        share = rate / len(sets[name]) * flops[name] / 1e9 / peak * 100
        print(f"{label:<20}{name:<11}{rate:9.2f}{rate / len(sets[name]) * sum(lengths[name]):10.0f}{share:8.1f}"
              f"{diff:11.1e}", flush=True)

    def peak_share(label: str) -> float:
        return max(rates[(label, n)] / len(lengths[n]) * flops[n] / 1e9 / peak * 100 for n in sets)

    best = max((label for label in paths), key=peak_share)
    baseline = rates.get(("vllm", "best-of-8"), rates[("transformers", "best-of-8")])
    reuse = max(rates[(label, "best-of-8")] for label in paths if label.endswith("+pfx")) / baseline
    print("transformers (batched, no prefix reuse) over the plain loop: " + ", ".join(
        f"{name} {rates[('transformers', name)] / rates[('plain loop', name)]:.2f}x" for name in sets))
    print(f"best: {best} {peak_share(best):.0f}% of peak; prefix reuse {reuse:.2f}x vs "
          f"{'vLLM' if ('vllm', 'best-of-8') in rates else 'transformers'} without it")


if __name__ == "__main__":
    main()
