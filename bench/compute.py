"""What a scoring run could reach on this machine: the fp32 matmul peak and a model's forward-pass FLOPs, counted
one way for every bench script that reports a share of the peak."""

from __future__ import annotations

import platform
import time
from pathlib import Path


def matmul_peak(seconds: float = 3.0, n: int = 2048, *, device: str = "cpu", dtype: str = "float32") -> float:
    """Best GFLOP/s of n x n matmuls on `device` in `dtype` (default: fp32 on this process's CPU threads)."""
    import torch

    a, b = (torch.randn(n, n, device=device).to(getattr(torch, dtype)) for _ in range(2))
    cuda = device.startswith("cuda")
    reps = 10 if cuda else 1  # a GPU matmul is too short to time alone: time a few, synchronised
    best, stop = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < stop:
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b)
        if cuda:
            torch.cuda.synchronize(device)
        best = max(best, reps * 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


def forward_flops(config, lengths: list[int]) -> float:
    """FLOPs of one forward pass over each sequence: 2 x linear weights per token + causal attention."""
    h, layers = config.hidden_size, config.num_hidden_layers
    kv = h * config.num_key_value_heads // config.num_attention_heads
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * config.intermediate_size  # q, o, k, v, gate/up/down
    linear = 2 * per_layer * layers
    return sum(linear * n + 2 * layers * h * n * n for n in lengths)  # QK^T and AV over the causal half, x2


def cpu_name() -> str:
    """The CPU's model name, as the kernel gives it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
