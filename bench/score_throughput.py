"""Throughput of morkit's batched scoring path against a plain per-pair transformers loop.

Both score the same real (question, answer) pairs from GSM8K model solutions with the SmolLM2 ORM
(same weights, same head), in one run, so the ratio is not hurt by machine noise between runs.
Also prints the largest score difference between batch size 1 and 32 (batch-size invariance), and each
path's model FLOP/s against the machine's peak measured in the same run (the best fp32 matmul rate, before
and after; FLOPs and peak as bench/compute.py counts them for every bench).

    .venv/bin/python bench/score_throughput.py [--pairs 256] [--batch-size 16] [--sweep 1 4] [--repeats 1]
                                               [--plot docs/figures/throughput.svg] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from plotting import figure_path, write_json  # noqa: E402 (beside this script)
from compute import forward_flops, matmul_peak  # noqa: E402


def real_pairs(count: int, data_dir: str | None = None) -> list[tuple[str, str]]:
    from morkit.core import settings
    from morkit.data.datasets import gsm8k_model_solutions

    # Questions 600+ lie outside the data the packaged head was trained on.
    queries = gsm8k_model_solutions(settings.data_dir(data_dir))[600:]
    pairs = [(q.question, c.text) for q in queries for c in q.candidates]
    return pairs[:count]


def plain_loop(rm, pairs) -> list[float]:
    """What a user writes without morkit: one pair at a time, template -> tokenizer -> model -> head."""
    import numpy as np
    import torch

    tok, model = rm.backbone.tokenizer, rm.backbone.model
    out = []
    for question, answer in pairs:
        text = tok.apply_chat_template(
            [{"role": "user", "content": question}, {"role": "assistant", "content": answer}], tokenize=False)
        enc = tok(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            hidden = model(**enc).last_hidden_state[0, -1].float().numpy()
        out.append(float(rm.trained_head.probabilities(np.asarray([hidden], dtype=np.float64))[0]))
    return out


def plot(result: dict, path: Path) -> None:
    """Model GFLOP/s per batch size against the measured peak, each point labelled with its pairs/s."""
    from plotting import BEST_SINGLE, LEARNED, OTHER, PRES, figure

    peak = result["peak_gflops"]
    with figure(path, height=4.2) as (fig, axes):
        ax = axes[0, 0]
        sweep, main, loop = result["sweep"], result["batched"], result["loop"]
        sizes = [row["batch_size"] for row in sweep]
        ax.plot(sizes, [row["gflops"] for row in sweep], "o-", color=LEARNED,
                label=f"morkit, first {result['invariance_pairs']} pairs")
        ax.plot([main["batch_size"]], [main["gflops"]], "D", color=OTHER, markersize=7,
                label=f"morkit, all {result['pairs']} pairs")
        ax.plot([1], [loop["gflops"]], "s", color=PRES, markersize=7,
                label=f"plain per-pair loop, all {result['pairs']}")
        for row, (dx, dy, ha) in ([(row, (0, -15, "center")) for row in sweep] + [(main, (0, 9, "center")),
                                  ({**loop, "batch_size": 1}, (-8, -3, "right"))]):
            ax.annotate(f"{row['pairs_per_s']:.2f} pairs/s", (row["batch_size"], row["gflops"]), xytext=(dx, dy),
                        textcoords="offset points", ha=ha, fontsize=8)
        ax.axhline(peak, color=BEST_SINGLE, linewidth=1.5, label=f"machine peak: fp32 matmul, {peak:.0f} GFLOP/s")
        ticks = sorted(set(sizes + [1, main["batch_size"]]))
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(v) for v in ticks])
        ax.minorticks_off()
        ax.margins(x=0.16)
        ax.set_ylim(0, peak * 1.25)
        ax.set(xlabel="batch size (pairs per forward pass)", ylabel="model GFLOP/s",
               title=f"{result['rm']} scoring GSM8K pairs ({result['tokens_per_pair']:.0f} tokens on average)\n"
                     f"{result['threads']} torch threads, fastest of {result.get('repeats', 1)} alternated "
                     f"pass{'es' * (result.get('repeats', 1) != 1)}, load {result['load_start']:.1f} at the start, "
                     f"{result['load_end']:.1f} at the end")
        right = ax.secondary_yaxis("right", functions=(lambda v: 100 * v / peak, lambda p: p * peak / 100))
        right.set_ylabel("% of the measured peak")
        ax.legend(loc="upper left", fontsize=8, ncol=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--invariance-pairs", type=int, default=64)
    parser.add_argument("--sweep", type=int, nargs="*", default=[1, 4],
                        help="also time these batch sizes on the first --invariance-pairs pairs")
    parser.add_argument("--repeats", type=int, default=1,
                        help="time each path this many times, alternated, and keep its fastest (a loaded machine)")
    parser.add_argument("--plot", type=figure_path, help="write throughput per batch size against the peak (.svg/.png)")
    parser.add_argument("--json", type=Path, help="write the measured numbers as JSON")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    import torch

    from morkit.reward_models.embedded.models import smollm2_orm
    from morkit.reward_models.backends.hf import Batching

    load_start = os.getloadavg()[0]
    pairs = real_pairs(args.pairs, args.data_dir)
    rm = smollm2_orm()
    lengths = [len(rm.render(q, a)) for q, a in pairs]  # tokens per pair: the average and the FLOPs read them
    tokens = sum(lengths)
    peak_before = matmul_peak()  # GFLOP/s
    print(f"{len(pairs)} GSM8K pairs, {tokens / len(pairs):.0f} tokens on average; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {rm.backbone.device}")
    rm.score(pairs[:4])  # warm-up for both paths

    loop_s = batched_s = float("inf")
    for _ in range(args.repeats):  # alternated, each path's fastest kept: load only ever slows a pass down
        started = time.perf_counter()
        baseline = plain_loop(rm, pairs)
        loop_s = min(loop_s, time.perf_counter() - started)

        rm.batching = Batching(max_batch=args.batch_size)
        started = time.perf_counter()
        batched = [s.value for s in rm.score(pairs)]
        batched_s = min(batched_s, time.perf_counter() - started)

    subset = pairs[: args.invariance_pairs]
    rm.batching = Batching(max_batch=1)
    one = [s.value for s in rm.score(subset)]
    rm.batching = Batching(max_batch=32, max_tokens=1 << 20)
    many = [s.value for s in rm.score(subset)]
    invariance = max(abs(a - b) for a, b in zip(one, many))
    agreement = max(abs(a - b) for a, b in zip(baseline, batched))

    sweep = dict.fromkeys(args.sweep, 0.0)
    for _ in range(args.repeats):  # every size once per round, the fastest round kept
        for size in args.sweep:
            rm.batching = Batching(max_batch=size)
            started = time.perf_counter()
            rm.score(subset)
            sweep[size] = max(sweep[size], len(subset) / (time.perf_counter() - started))

    if args.repeats > 1:
        print(f"each path's fastest of {args.repeats} alternated passes:")
    print(f"plain per-pair loop : {len(pairs) / loop_s:7.2f} pairs/s ({loop_s:.1f}s)")
    print(f"morkit batched (bs {args.batch_size}): {len(pairs) / batched_s:7.2f} pairs/s ({batched_s:.1f}s)")
    print(f"ratio morkit / loop : {loop_s / batched_s:.2f}x")
    for size, rate in sweep.items():
        print(f"morkit bs {size:<3} on the first {len(subset)} pairs: {rate:7.2f} pairs/s")
    print(f"max |score(bs=1) - score(bs=32)| over {len(subset)} pairs: {invariance:.2e}")
    print(f"max |morkit - plain loop| over {len(pairs)} pairs: {agreement:.2e}")

    peak = max(peak_before, matmul_peak())
    config = rm.backbone.model.config
    flops, subset_flops = forward_flops(config, lengths), forward_flops(config, lengths[: len(subset)])
    share = lambda seconds: 100 * flops / seconds / 1e9 / peak  # noqa: E731
    print(f"machine peak: {peak:.0f} GFLOP/s (fp32 matmul, the better of two measurements: start and end); model "
          f"FLOP/s of the plain loop {share(loop_s):.1f}% of it, batched {share(batched_s):.1f}%")
    if not (args.plot or args.json):
        return

    def speed(count: int, work: float, seconds: float) -> dict:
        return {"pairs_per_s": count / seconds, "gflops": work / seconds / 1e9,
                "pct_of_peak": 100 * work / seconds / 1e9 / peak}

    result = {"rm": rm.name, "pairs": len(pairs), "tokens_per_pair": tokens / len(pairs),
              "invariance_pairs": len(subset), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "device": str(rm.backbone.device), "loop": speed(len(pairs), flops, loop_s),
              "batched": {"batch_size": args.batch_size, **speed(len(pairs), flops, batched_s)},
              "sweep": [{"batch_size": size, **speed(len(subset), subset_flops, len(subset) / r)}
                        for size, r in sweep.items()],
              "repeats": args.repeats, "ratio": loop_s / batched_s, "max_diff_bs1_bs32": invariance, "max_diff_loop": agreement,
              "peak_gflops": peak, "load_start": load_start, "load_end": os.getloadavg()[0]}
    if args.json:
        write_json(args.json, result)
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
