"""Throughput of morkit's batched scoring against a plain per-pair transformers loop, every row on the same pairs.

Each row scores the same first --pairs real (question, answer) pairs from GSM8K model solutions with the SmolLM2 ORM
(same weights, same head), in one run: the plain loop a user writes without morkit (one pair at a time: template ->
tokenizer -> model -> head); morkit's batching alone at each --sweep batch size (prefix reuse off); and morkit's
default path (batches of --batch-size, a question's shared prompt prefix computed once). The rows are timed in turn,
--repeats rounds, and each keeps its fastest pass (load only ever slows a pass down). Also printed: the largest score
difference between the loop and the default path and between the smallest and largest batch size, and each row's
model FLOP/s against the machine's peak measured in the same run (the best fp32 matmul rate, before and after; FLOPs
and peak as bench/compute.py counts them for every bench: every pair's whole prompt, so prefix reuse, which skips
some of it, can pass 100%).

    python bench/score_throughput.py [--pairs 128] [--batch-size 16] [--sweep 1 4 16] [--repeats 2]
                                     [--plot docs/figures/throughput.svg] [--json PATH] [--page docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from plotting import figure_path, write_json  # noqa: E402 (beside this script)
from compute import cpu_name, forward_flops, matmul_peak  # noqa: E402
from tables import markdown, prose, write_block  # noqa: E402

TABLE = "throughput"  # its block on the benchmarks page


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


def label(row: dict) -> str:
    """A row's name in the table and the figure."""
    if row["path"] == "loop":
        return "plain per-pair loop"
    return f"morkit, batches of {row['batch_size']}{' + prefix reuse' * row['prefix_reuse']}"


def table(result: dict) -> str:
    """The benchmarks page's block: what ran, a row per path (pairs/s, tokens/s, share of the peak, against the loop
    where a row scored the loop's pairs), and how far the scores agree."""
    loop = next(r for r in result["rows"] if r["path"] == "loop")
    rows = [[label(r), str(r["pairs"]), f"{r['pairs_per_s']:.2f}", f"{r['tokens_per_s']:,.0f}",
             f"{r['pct_of_peak']:.1f}",
             f"{r['pairs_per_s'] / loop['pairs_per_s']:.2f}x" if r["pairs"] == loop["pairs"] else ""]
            for r in result["rows"]]
    low, high = result["compared_sizes"]
    return "\n\n".join([
        prose(f"{result['rm']} on {result['pairs']} GSM8K pairs ({result['tokens_per_pair']:.0f} tokens on "
              f"average), {result['threads']} torch threads on {result['cpu']}, torch {result['torch']}; each row the "
              f"fastest of {result['repeats']} pass{'es' * (result['repeats'] != 1)} in turn; load "
              f"{result['load_start']:.1f} at the start, {result['load_end']:.1f} at the end; the machine's peak "
              f"{result['peak_gflops']:.0f} GFLOP/s (fp32 matmul)."),
        markdown(["path", "pairs", "pairs/s", "tokens/s", "% of peak", "vs the loop"], rows),
        prose(f"Scores agree within {result['max_diff_loop']:.1e} between the loop and the default path, and within "
              f"{result['max_diff_batch_sizes']:.1e} between batches of {low} and {high} "
              f"({result['compared_pairs']} pairs).")])


def plot(result: dict, path: Path) -> None:
    """Model GFLOP/s per batch size against the measured peak: a line per set of batched rows (prefix reuse or not,
    on how many pairs), the loop at batch size 1; each point labelled with its pairs/s."""
    from plotting import BEST_SINGLE, LEARNED, OTHER, PRES, figure

    peak = result["peak_gflops"]
    loop = next(r for r in result["rows"] if r["path"] == "loop")
    series: dict[tuple[bool, int], list[dict]] = {}
    for row in result["rows"]:
        if row["path"] != "loop":
            series.setdefault((row["prefix_reuse"], row["pairs"]), []).append(row)
    with figure(path, height=4.2) as (fig, axes):
        ax = axes[0, 0]
        sizes = [1]
        for (reuse, pairs), rows in sorted(series.items()):
            rows = sorted(rows, key=lambda r: r["batch_size"])
            sizes += [r["batch_size"] for r in rows]
            ax.plot([r["batch_size"] for r in rows], [r["gflops"] for r in rows], "D" if reuse else "o-",
                    color=OTHER if reuse else LEARNED, markersize=7 if reuse else 5,
                    label=f"morkit{' + prefix reuse' if reuse else ', batching alone'}, {pairs} pairs")
            for r in rows:
                ax.annotate(f"{r['pairs_per_s']:.2f} pairs/s", (r["batch_size"], r["gflops"]),
                            xytext=(0, 9 if reuse else -15), textcoords="offset points", ha="center", fontsize=8)
        ax.plot([1], [loop["gflops"]], "s", color=PRES, markersize=7,
                label=f"plain per-pair loop, {loop['pairs']} pairs")
        ax.annotate(f"{loop['pairs_per_s']:.2f} pairs/s", (1, loop["gflops"]), xytext=(-8, -3),
                    textcoords="offset points", ha="right", fontsize=8)
        ax.axhline(peak, color=BEST_SINGLE, linewidth=1.5, label=f"machine peak: fp32 matmul, {peak:.0f} GFLOP/s")
        ticks = sorted(set(sizes))
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(v) for v in ticks])
        ax.minorticks_off()
        ax.margins(x=0.16)
        ax.set_ylim(0, peak * 1.25)
        ax.set(xlabel="batch size (pairs per forward pass, at most)", ylabel="model GFLOP/s",
               title=f"{result['rm']} scoring GSM8K pairs ({result['tokens_per_pair']:.0f} tokens on average)\n"
                     f"{result['threads']} torch threads, fastest of {result['repeats']} passes each, "
                     f"load {result['load_start']:.1f} at the start, {result['load_end']:.1f} at the end")
        right = ax.secondary_yaxis("right", functions=(lambda v: 100 * v / peak, lambda p: p * peak / 100))
        right.set_ylabel("% of the measured peak")
        ax.legend(loc="upper left", fontsize=8, ncol=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=128, help="the first N GSM8K pairs, scored by every row")
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    parser.add_argument("--batch-size", type=int, default=16, help="the default path's batch size (default 16)")
    parser.add_argument("--sweep", type=int, nargs="+", default=[1, 4, 16],
                        help="batch sizes of morkit's batching alone, prefix reuse off (default 1 4 16)")
    parser.add_argument("--repeats", type=int, default=2,
                        help="rounds over the rows; each keeps its fastest pass (default 2)")
    parser.add_argument("--plot", type=figure_path, help="write throughput per batch size against the peak (.svg/.png)")
    parser.add_argument("--json", type=Path, help="write the measured numbers as JSON")
    parser.add_argument("--page", type=Path, help="write the table into this docs page's throughput block")
    args = parser.parse_args()
    if args.repeats < 1 or args.pairs < 1 or min(args.sweep) < 1 or args.batch_size < 1:
        parser.error("--pairs, --batch-size, --sweep and --repeats must be at least 1")

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
          f"{torch.get_num_threads()} threads, device {rm.backbone.device}, {cpu_name()}")
    rm.score(pairs[:4])  # warm-up for both paths
    plain_loop(rm, pairs[:2])

    paths = [("loop", 1, False)] + [("batched", size, False) for size in sorted(set(args.sweep))] \
        + [("batched", args.batch_size, True)]
    best = dict.fromkeys(paths, float("inf"))
    scores: dict[tuple, list[float]] = {}
    for _ in range(args.repeats):  # every row once per round, in turn: load only ever slows a pass down
        for key in paths:
            kind, size, reuse = key
            started = time.perf_counter()
            if kind == "loop":
                scores[key] = plain_loop(rm, pairs)
            else:
                rm.batching, rm.prefix_reuse = Batching(max_batch=size), reuse
                scores[key] = [s.value for s in rm.score(pairs)]
            best[key] = min(best[key], time.perf_counter() - started)

    low, high = min(args.sweep), max(args.sweep)
    default = ("batched", args.batch_size, True)
    agreement = max(abs(a - b) for a, b in zip(scores[paths[0]], scores[default]))
    invariance = max(abs(a - b) for a, b in zip(scores[("batched", low, False)], scores[("batched", high, False)]))
    peak = max(peak_before, matmul_peak())
    flops = forward_flops(rm.backbone.model.config, lengths)
    rows = [{"path": kind, "batch_size": size, "prefix_reuse": reuse, "pairs": len(pairs), "seconds": best[key],
             "pairs_per_s": len(pairs) / best[key], "tokens_per_s": tokens / best[key],
             "gflops": flops / best[key] / 1e9, "pct_of_peak": 100 * flops / best[key] / 1e9 / peak}
            for key in paths for kind, size, reuse in [key]]
    result = {"rm": rm.name, "cpu": cpu_name(), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "device": str(rm.backbone.device), "pairs": len(pairs), "tokens_per_pair": tokens / len(pairs),
              "repeats": args.repeats, "rows": rows, "max_diff_loop": agreement, "max_diff_batch_sizes": invariance,
              "compared_sizes": [low, high], "compared_pairs": len(pairs), "peak_gflops": peak,
              "load_start": load_start, "load_end": os.getloadavg()[0]}
    print(table(result))
    if args.json:
        write_json(args.json, result)
    if args.plot:
        plot(result, args.plot)
    if args.page:
        write_block(args.page, TABLE, table(result))


if __name__ == "__main__":
    main()
