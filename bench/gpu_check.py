"""GPU check in one call: morkit's scoring paths on CUDA in bf16 against a plain per-pair loop, and CTTS-MM parity
with CPU fp32. Needs only torch and transformers (no weights travel: every model is random, built here).

  (a) a Llama-3.1-8B-shaped random model (real width, heads and vocabulary; `--layers`, default all 32) and tiny
      random models of the eight CTTS-MM architectures, built the way tests/fakes/ctts_checkpoints.py builds them;
  (b) best-of-N-shaped SYNTHETIC token ids (random ids; each question's prompt shared by its candidates) scored by
      the plain loop (one pair per forward pass), morkit's batched core and its prefix reuse (each also without its
      padding cap). Per path: pairs/s, tokens/s, the ratio of the plain loop's time to the path's (`x plain`),
      the share of the matmul peak measured in the same run and dtype (`% peak`), and the largest score
      difference from the loop; then the best path's ratio over the loop;
  (c) parity: the CTTS tiny models' scores on the device in fp32 and bf16 against CPU fp32 (each row prints its
      tolerance), with and without prefix reuse and at batch sizes 8 and 1;
  (d) everything as JSON to --json, or to $OUT/gpu_check.json when $OUT is set.

    python3 bench/gpu_check.py                          # on a GPU machine: cuda, bf16, the full 8B shape
    python3 bench/gpu_check.py --device cpu --tiny      # the quick CPU run tests/test_bench.py makes

Exit status 1 when a parity check fails; the speed figures are reported, not checked.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT / "tests", ROOT / "bench", ROOT):  # morkit from this checkout; the tiny checkpoint builders
    sys.path.insert(0, str(folder))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5}
TINY = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1,
        "num_hidden_layers": 2, "vocab_size": 512, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5}
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}  # |device - CPU fp32| <= tol * max(1, |CPU fp32|)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def best_of_n(questions: int, candidates: int, prompt: int, answer: int, vocab: int, seed: int = 0
              ) -> tuple[list[int], list[list[int]]]:
    """(question key, token ids) of synthetic best-of-N inputs: lengths uniform in [0.5, 1.5] x the means given,
    each question's prompt ids shared by its candidates, ids random (no text, no tokenizer)."""
    rng = random.Random(seed)
    draw = lambda mean: [rng.randrange(10, vocab) for _ in range(rng.randint(mean // 2, mean * 3 // 2))]
    keys, seqs = [], []
    for q in range(questions):
        head = draw(prompt)
        for _ in range(candidates):
            keys.append(q)
            seqs.append(head + draw(answer))
    return keys, seqs


def build_model(shape: dict, layers: int | None, device: str, dtype):
    """A random LlamaModel of `shape` (`layers` overrides its depth) on `device`, plus a random score head."""
    import torch
    import transformers

    config = transformers.LlamaConfig(**{**shape, **({"num_hidden_layers": layers} if layers else {})},
                                      pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaModel._from_config(config, dtype=dtype).eval()
        head = torch.nn.Linear(config.hidden_size, 1, dtype=dtype).eval()
    model.config.use_cache = False
    return model, head


def speed(args, device: str) -> dict:
    """Plain loop, batched core and prefix reuse on the 8B-shaped (or tiny) model: rates, ratios, % of peak."""
    import torch
    from compute import forward_flops, matmul_peak

    from morkit.reward_models.backends.hf import Batching, last_token_pool, run_batches
    from morkit.reward_models.backends.prefix import run_grouped
    from morkit.reward_models.truncation import Encoded

    dtype = getattr(torch, args.dtype)
    shape = TINY if args.tiny else LLAMA_8B
    model, head = build_model(shape, args.layers, device, dtype)
    keys, seqs = best_of_n(args.questions, args.candidates, args.prompt_tokens, args.answer_tokens,
                           shape["vocab_size"])
    encoded = [Encoded(tuple(s)) for s in seqs]
    batching = Batching(max_batch=args.batch_size, max_tokens=args.max_tokens)
    uncapped = Batching(max_batch=args.batch_size, max_tokens=args.max_tokens, max_padding=None)

    def pool(hidden, mask, _ids):
        return last_token_pool(hidden, mask)

    def scores(rows) -> list[float]:
        with torch.inference_mode():
            return head(torch.stack(rows).to(device, dtype)).float().flatten().tolist()

    def plain(_):
        out = []
        for s in seqs:  # what a user writes: one sequence per forward pass, the last token's state, the head
            with torch.inference_mode():
                hidden = model(input_ids=torch.tensor([s], device=device)).last_hidden_state[0, -1]
                out.append(float(head(hidden)[0]))
        return out

    paths = {
        "plain loop": plain,
        "batched": lambda _: scores(run_batches(model, encoded, pool, pad_id=0, device=device,
                                                batching=batching)),
        "batched+pfx": lambda _: scores(run_grouped(model, keys, encoded, pool, pad_id=0,
                                                    device=device, batching=batching)),
        "batched/nocap": lambda _: scores(run_batches(model, encoded, pool, pad_id=0, device=device,
                                                      batching=uncapped)),  # what the padding cap buys here
        "batched+pfx/nocap": lambda _: scores(run_grouped(model, keys, encoded, pool, pad_id=0, device=device,
                                                          batching=uncapped)),
    }
    for path in paths.values():  # warm-up: kernels, allocator, autotuning
        path(None)
    sync(device)
    seconds = {label: float("inf") for label in paths}
    values: dict[str, list[float]] = {}
    for _ in range(args.repeats):  # alternated, fastest kept
        for label, path in paths.items():
            sync(device)
            start = time.perf_counter()
            values[label] = path(None)
            sync(device)
            seconds[label] = min(seconds[label], time.perf_counter() - start)
    peak = matmul_peak(args.peak_seconds, 8192 if device.startswith("cuda") else 512, device=device,
                       dtype=args.dtype)
    flops = forward_flops(model.config, [len(s) for s in seqs])
    ref = values["plain loop"]
    rows = {label: {"pairs_per_s": len(seqs) / s, "tokens_per_s": sum(map(len, seqs)) / s,
                    "pct_peak": 100 * flops / s / 1e9 / peak, "x_plain": seconds["plain loop"] / s,
                    "max_abs_diff_vs_plain": max(abs(a - b) for a, b in zip(values[label], ref))}
            for label, s in seconds.items()}
    return {"shape": {**shape, "num_hidden_layers": args.layers or shape["num_hidden_layers"]}, "dtype": args.dtype,
            "pairs": len(seqs), "questions": args.questions, "candidates": args.candidates,
            "mean_tokens": sum(map(len, seqs)) / len(seqs), "inputs": "synthetic token ids", "peak_gflops": peak,
            "batching": {"max_batch": args.batch_size, "max_tokens": args.max_tokens}, "paths": rows}


def ctts_scores(names, checkpoints, pairs, device: str, dtype: str) -> dict:
    """{name: {"batched", "one by one", "no prefix reuse": [values]}} of each tiny CTTS model on device/dtype."""
    from morkit.reward_models.backends.hf import Batching
    from morkit.reward_models.catalog import load_rm

    out = {}
    for name in names:
        rm = load_rm(name, path=checkpoints[name]["root"], device=device, dtype=dtype, batching=Batching(max_batch=8))
        flat = lambda scores: [v for s in scores for v in (s.steps or (s.value,))]  # a PRM: each step
        runs = {"batched": flat(rm.score(pairs))}
        rm.prefix_reuse = False
        runs["no prefix reuse"] = flat(rm.score(pairs))
        rm.batching = Batching(max_batch=1)
        runs["one by one"] = flat(rm.score(pairs))
        out[name] = runs
        del rm
    return out


def parity(device: str, tiny: bool) -> dict:
    """Every CTTS tiny model's scores on `device` in fp32 and bf16 against CPU fp32, within TOLERANCE (`tiny`:
    fewer pairs, and no fp32 pass on a CPU device, which is the reference itself)."""
    from fakes.ctts_checkpoints import MODELS, PAIRS, build_checkpoints

    group = [(PAIRS[2][0], a) for a in ("42.", "It is 42.\n\nDone.", "7*6 = 41.", PAIRS[0][1])]  # shares a prompt
    pairs = PAIRS[:4] + group[:2] if tiny else PAIRS + group
    dtypes = [d for d in TOLERANCE if not (tiny and device == "cpu" and d == "float32")]
    with tempfile.TemporaryDirectory() as tmp:
        checkpoints = build_checkpoints(Path(tmp), MODELS)
        reference = ctts_scores(MODELS, checkpoints, pairs, "cpu", "float32")
        measured = {dtype: ctts_scores(MODELS, checkpoints, pairs, device, dtype) for dtype in dtypes}
    rows = []
    for dtype, by_name in measured.items():
        for name, runs in by_name.items():
            want = reference[name]["one by one"]
            worst = max(abs(a - b) / max(1.0, abs(b)) for run in runs.values() for a, b in zip(run, want))
            rows.append({"model": name, "dtype": dtype, "max_rel_diff": worst, "tolerance": TOLERANCE[dtype],
                         "ok": worst <= TOLERANCE[dtype] and all(len(r) == len(want) for r in runs.values())})
    return {"pairs": len(pairs), "reference": "cpu float32, one pair per batch", "rows": rows,
            "ok": all(r["ok"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--tiny", action="store_true", help="a 2-layer width-128 model and a few pairs (CPU test)")
    parser.add_argument("--layers", type=int, help="layers of the 8B-shaped model (default: its 32)")
    parser.add_argument("--questions", type=int, help="best-of-N questions (default 16; 2 with --tiny)")
    parser.add_argument("--candidates", type=int, help="candidates per question (default 16; 4 with --tiny)")
    parser.add_argument("--prompt-tokens", type=int, help="mean shared prompt length (default 256; 24 with --tiny)")
    parser.add_argument("--answer-tokens", type=int, help="mean answer length (default 384; 16 with --tiny)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=16384, help="padded tokens per batch")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-parity", action="store_true")
    parser.add_argument("--json", type=Path, help="default: $OUT/gpu_check.json when $OUT is set")
    args = parser.parse_args(argv)
    small = {"questions": 2, "candidates": 4, "prompt_tokens": 24, "answer_tokens": 16}
    large = {"questions": 16, "candidates": 16, "prompt_tokens": 256, "answer_tokens": 384}
    for key, value in (small if args.tiny else large).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.peak_seconds = 0.3 if args.tiny else 5.0

    import torch
    import transformers

    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            parser.error("torch sees no CUDA device here: use --device cpu --tiny for the CPU check")
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 parity means IEEE fp32 matmuls
        torch.backends.cudnn.allow_tf32 = False
    start, load = time.perf_counter(), os.getloadavg()[0]
    gpu = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.device} ({gpu}), "
          f"load {load:.1f}", flush=True)
    result = {"device": args.device, "device_name": gpu, "torch": torch.__version__,
              "transformers": transformers.__version__, "tiny": args.tiny}
    result["speed"] = run = speed(args, args.device)
    print(f"{'8B-shaped' if not args.tiny else 'tiny'} model, {run['shape']['num_hidden_layers']} layers, "
          f"{args.dtype}; {run['pairs']} synthetic best-of-{args.candidates} pairs, {run['mean_tokens']:.0f} tokens "
          f"on average; {args.dtype} matmul peak {run['peak_gflops']:.0f} GFLOP/s")
    print(f"{'path':<19}{'pairs/s':>9}{'tokens/s':>11}{'% peak':>8}{'x plain':>9}{'max|diff|':>11}")
    for label, row in run["paths"].items():
        print(f"{label:<19}{row['pairs_per_s']:9.2f}{row['tokens_per_s']:11.0f}{row['pct_peak']:8.1f}"
              f"{row['x_plain']:9.2f}{row['max_abs_diff_vs_plain']:11.1e}", flush=True)
    best = max(row["x_plain"] for row in run["paths"].values())
    print(f"best path over the plain loop: {best:.2f}x")
    if not args.skip_parity:
        result["parity"] = check = parity(args.device, args.tiny)
        for row in check["rows"]:
            print(f"parity {row['model']:<32}{row['dtype']:<10}max rel diff {row['max_rel_diff']:.1e} "
                  f"(tol {row['tolerance']:.0e}) {'ok' if row['ok'] else 'FAIL'}")
        print(f"parity: {'all ok' if check['ok'] else 'FAILED'}")
    result["wall_s"] = time.perf_counter() - start
    result["load_end"] = os.getloadavg()[0]
    target = args.json or (Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else None)
    if target:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(result, indent=1))
        print(f"wrote {target}")
    print(f"done in {result['wall_s']:.0f} s")
    return 0 if result.get("parity", {"ok": True})["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
