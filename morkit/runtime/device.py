"""Device and dtype chosen at run time (never a hard-coded `cuda`)."""

from __future__ import annotations

from morkit.core import settings
from morkit.core.errors import InputError

DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")


def resolve_device(preference: str | None = None) -> str:
    """'auto' (default, or $MORKIT_DEVICE) picks cuda, then mps, then cpu; anything else is used as given."""
    import torch

    choice = preference or settings.device_preference()
    if choice != "auto":
        return choice
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_dtype(device: str, preference: str | None = None):
    """'auto': bfloat16 on accelerators, float32 on CPU (bf16 matmuls are far slower on most CPUs)."""
    import torch

    choice = preference or settings.dtype_preference()
    if choice == "auto":
        return torch.float32 if device.startswith("cpu") else torch.bfloat16
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if choice not in table:
        raise InputError(f"unknown dtype {choice!r}; use one of {', '.join(DTYPES)}")
    return table[choice]
