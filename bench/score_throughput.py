"""Throughput of morkit's batched scoring path against a plain per-pair transformers loop.

Both score the same real (question, answer) pairs from GSM8K model solutions with the SmolLM2 ORM
(same weights, same head), in one run, so the ratio is not hurt by machine noise between runs.
Also prints the largest score difference between batch size 1 and 32 (batch-size invariance).

    .venv/bin/python bench/score_throughput.py [--pairs 256] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--data-dir", help="folder of the public data sets (default $MORKIT_DATA_DIR)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--invariance-pairs", type=int, default=64)
    parser.add_argument("--sweep", type=int, nargs="*", default=[1, 4],
                        help="also time these batch sizes on the first --invariance-pairs pairs")
    args = parser.parse_args()

    import torch

    from morkit.reward_models.embedded.models import smollm2_orm
    from morkit.reward_models.backends.hf import Batching

    pairs = real_pairs(args.pairs, args.data_dir)
    rm = smollm2_orm()
    tokens = sum(len(rm.render(q, a)) for q, a in pairs)
    print(f"{len(pairs)} GSM8K pairs, {tokens / len(pairs):.0f} tokens on average; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, device {rm.backbone.device}")
    rm.score(pairs[:4])  # warm-up for both paths

    started = time.perf_counter()
    baseline = plain_loop(rm, pairs)
    loop_s = time.perf_counter() - started

    rm.batching = Batching(max_batch=args.batch_size)
    started = time.perf_counter()
    batched = [s.value for s in rm.score(pairs)]
    batched_s = time.perf_counter() - started

    subset = pairs[: args.invariance_pairs]
    rm.batching = Batching(max_batch=1)
    one = [s.value for s in rm.score(subset)]
    rm.batching = Batching(max_batch=32, max_tokens=1 << 20)
    many = [s.value for s in rm.score(subset)]
    invariance = max(abs(a - b) for a, b in zip(one, many))
    agreement = max(abs(a - b) for a, b in zip(baseline, batched))

    sweep = {}
    for size in args.sweep:
        rm.batching = Batching(max_batch=size)
        started = time.perf_counter()
        rm.score(subset)
        sweep[size] = len(subset) / (time.perf_counter() - started)

    print(f"plain per-pair loop : {len(pairs) / loop_s:7.2f} pairs/s ({loop_s:.1f}s)")
    print(f"morkit batched (bs {args.batch_size}): {len(pairs) / batched_s:7.2f} pairs/s ({batched_s:.1f}s)")
    print(f"ratio morkit / loop : {loop_s / batched_s:.2f}x")
    for size, rate in sweep.items():
        print(f"morkit bs {size:<3} on the first {len(subset)} pairs: {rate:7.2f} pairs/s")
    print(f"max |score(bs=1) - score(bs=32)| over {len(subset)} pairs: {invariance:.2e}")
    print(f"max |morkit - plain loop| over {len(pairs)} pairs: {agreement:.2e}")


if __name__ == "__main__":
    main()
