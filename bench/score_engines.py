"""Scoring engines against the machine's limit: the same model, the same pairs, every path, one run.

Paths (all score the SmolLM2 ORM: SmolLM2-135M-Instruct's last-token state + its trained head):
  plain loop         one pair at a time through transformers (what a user writes without morkit)
  transformers       morkit's batched transformers core
  transformers+pfx   the same with question-prefix KV reuse
  vllm               morkit's vLLM backend (CPU engine), prefix caching off
  vllm+pfx           the same with vLLM's prefix caching on
Inputs: 64 real GSM8K model solutions (distinct questions) and a best-of-N set (MATH problems with
8 Qwen2.5-Math solutions each). The fp32 matmul peak is measured in the same run; FLOPs count the
unshared work (every pair's full prompt), so work saved by prefix reuse shows as more than 100%.

    .venv/bin/python bench/score_engines.py [--pairs 64] [--bon-questions 8] [--skip-vllm]

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


def timed(label: str, score, pairs, repeats: int) -> tuple[float, list[float]]:
    best, values = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        values = score(pairs)
        best = min(best, time.perf_counter() - start)
    return best, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=64, help="GSM8K pairs (default 64)")
    parser.add_argument("--bon-questions", type=int, default=8, help="best-of-N questions, 8 candidates each")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per path; the best counts")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--data-dir")
    args = parser.parse_args()

    import torch
    from score_throughput import plain_loop, real_pairs

    from morkit.reward_models.backends.hf import Batching
    from morkit.reward_models.catalog import resolve
    from morkit.reward_models.embedded.models import smollm2_orm
    from morkit.reward_models.options import ScoringOptions

    sets = {"gsm8k": real_pairs(args.pairs, args.data_dir), "best-of-8": best_of_n(args.bon_questions, args.data_dir)}
    rm = smollm2_orm(device="cpu", batching=Batching(max_batch=args.batch_size))
    config = rm.backbone.model.config
    lengths = {name: [len(rm.render(q, a)) for q, a in pairs] for name, pairs in sets.items()}
    flops = {name: forward_flops(config, ls) for name, ls in lengths.items()}
    peak = matmul_peak()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; fp32 matmul peak {peak:.0f} GFLOP/s")
    for name, ls in lengths.items():
        print(f"{name}: {len(ls)} pairs, {sum(ls) / len(ls):.0f} tokens on average, {flops[name] / 1e9:.0f} GFLOP")

    def transformers_path(reuse: bool):
        def score(pairs):
            rm.prefix_reuse = reuse
            return [s.value for s in rm.score(pairs)]
        return score

    paths = {"plain loop": lambda pairs: plain_loop(rm, pairs), "transformers": transformers_path(False),
             "transformers+pfx": transformers_path(True)}
    if not args.skip_vllm:  # engines start one at a time, after the transformers paths: an idle engine
        for label, caching in (("vllm", False), ("vllm+pfx", True)):  # still takes CPU from other paths
            paths[label] = ScoringOptions.from_flags(backend="vllm", prefix_reuse=caching, max_model_len=2048)
    transformers_path(False)(sets["gsm8k"][:4])  # warm-up

    rates: dict[tuple[str, str], float] = {}
    reference: dict[str, list[float]] = {}
    print(f"\n{'path':<18}{'set':<11}{'pairs/s':>9}{'tokens/s':>10}{'% peak':>8}{'max|diff|':>11}")
    for label, score in paths.items():
        engine = None
        if isinstance(score, ScoringOptions):
            engine = resolve("smollm2-orm", score).load()
            engine.score(sets["gsm8k"][:2])  # start the engine outside the timing
            def score(pairs, e=engine):
                e.engine.llm.reset_prefix_cache()  # a repeat must not read the previous run's prompts
                return [s.value for s in e.score(pairs)]
        for name, pairs in sets.items():
            repeats = 1 if label == "plain loop" else args.repeats
            seconds, values = timed(label, score, pairs, repeats)
            reference.setdefault(name, values)
            diff = max(abs(a - b) for a, b in zip(reference[name], values))
            share = flops[name] / seconds / 1e9 / peak * 100
            rates[(label, name)] = len(pairs) / seconds
            print(f"{label:<18}{name:<11}{len(pairs) / seconds:9.2f}{sum(lengths[name]) / seconds:10.0f}"
                  f"{share:8.1f}{diff:11.1e}", flush=True)
        if engine is not None:
            engine.close()

    def peak_share(label: str) -> float:
        return max(rates[(label, n)] / len(lengths[n]) * flops[n] / 1e9 / peak * 100 for n in sets)

    best = max((label for label in paths), key=peak_share)
    baseline = rates.get(("vllm", "best-of-8"), rates[("transformers", "best-of-8")])
    reuse = max(rates[(label, "best-of-8")] for label in paths if label.endswith("+pfx")) / baseline
    print(f"plain loop -> transformers on gsm8k: {rates[('transformers', 'gsm8k')] / rates[('plain loop', 'gsm8k')]:.2f}x")
    print(f"best: {best} {peak_share(best):.0f}% of peak; prefix reuse {reuse:.2f}x vs "
          f"{'vLLM' if ('vllm', 'best-of-8') in rates else 'transformers'} without it")


if __name__ == "__main__":
    main()
