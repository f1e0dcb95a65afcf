"""The RMs a server keeps resident for its whole life, built once, after one fit check for all of them.

`RewardModelSet` swaps models so that one is in memory at a time; a server instead keeps every RM the
pool may run loaded, so a query never waits for a load. Before anything loads, the memory the model RMs
need together (their weights, plus the largest one's activations: one engine thread runs one at a time)
must fit the free memory of the device, or start-up is refused with `memory.check_fit`'s message.
"""

from __future__ import annotations

from typing import Any, Sequence

from morkit.reward_models.backends import build, is_model_rm
from morkit.reward_models.catalog import REWARD_MODELS
from morkit.reward_models.memory import MemoryNeed
from morkit.reward_models.options import ScoringOptions


def _device_and_dtype(options: ScoringOptions) -> tuple[str, str]:
    import torch

    from morkit.runtime.device import DTYPES, resolve_device, resolve_dtype

    if options.backend == "vllm":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        device = resolve_device(options.device)
    if options.dtype and options.dtype != "auto":
        return device, DTYPES[options.dtype]
    return device, str(resolve_dtype(device, "auto")).removeprefix("torch.")


def memory_need(name: str, options: ScoringOptions, dtype: str) -> MemoryNeed | None:
    """What RM `name` needs on this machine's device; None for RMs with no weights of their own to place
    (rules, tables, embedded models that share the process's resident copies, RMs on vLLM servers)."""
    entry = REWARD_MODELS.get(name)
    if not is_model_rm(entry) or not entry.meta.get("model_id") or options.servers.urls_for(name):
        return None
    from morkit.reward_models import memory
    from morkit.reward_models.weights import locate_weights

    root = locate_weights(entry.meta["model_id"], required=entry.meta.get("required", ("config.json",)))
    spread = options.vllm.tensor_parallel_size if options.backend == "vllm" else 1
    return memory.estimate(root, dtype, batch_tokens=options.vllm.max_model_len or 8192, devices=max(spread, 1))


def check_fit_together(names: Sequence[str], options: ScoringOptions) -> None:
    """Refuse (UnavailableError, memory.check_fit's message) when the RMs cannot all be resident at once."""
    if not options.check_fit or not names:
        return
    from morkit.reward_models import memory

    device, dtype = _device_and_dtype(options)
    needs = {n: need for n in names if (need := memory_need(n, options, dtype)) is not None}
    if not needs:
        return
    devices = max(n.devices for n in needs.values())
    total = MemoryNeed(sum(n.weights for n in needs.values()), max(n.activations for n in needs.values()), devices)
    memory.check_fit(" + ".join(needs), total, device, dtype, backend=options.backend)


def build_resident(names: Sequence[str], options: ScoringOptions) -> dict[str, Any]:
    """name -> the built RM, every one loaded now and kept (call check_fit_together first)."""
    return {name: build(name, options) for name in names}


def close_all(rms: dict[str, Any]) -> None:
    for rm in rms.values():
        close = getattr(rm, "close", None)
        if close is not None:
            close()
