"""Will this model fit? Weights x dtype bytes plus activation headroom, against free device memory, checked
before anything is loaded, so a 72B model on one 80 GB GPU is refused in a second, not after minutes of
loading, and the refusal names the ways out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from morkit.core.errors import UnavailableError

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
OVERHEAD = 1.10  # allocator fragmentation, CUDA context, buffers the weights do not count


def checkpoint_parameters(root: Path) -> int:
    """Number of parameters in a checkpoint's *.safetensors files, read from their headers (no tensor loaded)."""
    total = 0
    for file in sorted(Path(root).glob("*.safetensors")):
        with open(file, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
        for name, info in header.items():
            if name != "__metadata__":
                count = 1
                for dim in info["shape"]:
                    count *= dim
                total += count
    return total


def activation_bytes(config_path: Path, batch_tokens: int, dtype_bytes: int) -> int:
    """Peak activations of one forward pass over `batch_tokens` tokens without a KV cache kept:
    a layer's hidden states, attention output and MLP intermediates (the widest moment)."""
    config = json.loads(Path(config_path).read_text())
    config = config.get("text_config", config)
    hidden = int(config.get("hidden_size", 4096))
    inter = int(config.get("intermediate_size", 4 * hidden))
    return batch_tokens * (4 * hidden + 3 * inter) * dtype_bytes


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes one model needs on each device it is spread over."""

    weights: int
    activations: int
    devices: int = 1

    @property
    def per_device(self) -> int:
        return int((self.weights / self.devices + self.activations) * OVERHEAD)


def estimate(root: Path, dtype: str, *, batch_tokens: int = 8192, devices: int = 1) -> MemoryNeed:
    """What a checkpoint needs in `dtype` ("float32", "bfloat16", "float16"), spread over `devices`."""
    nbytes = DTYPE_BYTES[dtype]
    return MemoryNeed(checkpoint_parameters(root) * nbytes, activation_bytes(root / "config.json", batch_tokens, nbytes),
                      devices)


def free_bytes(device: str) -> int | None:
    """Free memory on `device` ("cpu", "cuda", "cuda:N"); None where it cannot be known (e.g. mps)."""
    if device.startswith("cuda"):
        import torch

        index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
        return int(torch.cuda.mem_get_info(index)[0])
    if device == "cpu":
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def devices_free(device: str, spread: int) -> list[int] | None:
    """Free bytes of the devices a model spread over `spread` accelerators would use (one entry on CPU)."""
    if device.startswith("cuda") and spread > 1:
        import torch

        count = torch.cuda.device_count()
        return [int(torch.cuda.mem_get_info(i)[0]) for i in range(min(spread, count))]
    free = free_bytes(device)
    return None if free is None else [free]


def check_fit(name: str, need: MemoryNeed, device: str, dtype: str, *, placement: str) -> None:
    """Refuse (UnavailableError) when `need` cannot fit the free memory of the devices it would use."""
    free = devices_free(device, need.devices)
    if free is None:
        return
    if len(free) >= need.devices and min(free) >= need.per_device:
        return
    ways = ("--tensor-parallel-size N with --placement vllm (N GPUs share the weights)",
            "--max-model-len N with --placement vllm (a shorter engine: less memory, longer pairs cut to N tokens)",
            "--device-map auto with --placement transformers (layers spread over every visible GPU)",
            "--url to a vLLM server that holds the model")
    have = ", ".join(f"{b / GIB:.1f}" for b in free)
    raise UnavailableError(
        f"reward model {name!r} does not fit: it needs about {need.per_device / GIB:.1f} GiB per device in {dtype} "
        f"({need.weights / GIB:.1f} GiB of weights over {need.devices} device(s) plus "
        f"{need.activations / GIB:.1f} GiB of activations) on {placement}, but {device} has {have} GiB free "
        f"({len(free)} device(s) seen); ways out: " + "; ".join(ways))
