"""Device and dtype chosen at run time (never a hard-coded `cuda`)."""

from __future__ import annotations

from morkit.core import settings
from morkit.core.errors import InputError, UnavailableError

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}
"""Names a user may give (besides auto) -> the torch dtype's attribute name."""


def resolve_device(preference: str | None = None) -> str:
    """'auto' (default, or $MORKIT_DEVICE) picks cuda, then mps, then cpu; anything else is checked and used
    as given: a malformed name is an InputError, a device this machine lacks an UnavailableError."""
    import torch

    choice = preference or settings.device_preference()
    if choice != "auto":
        _check_device(torch, choice)
        return choice
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def _check_device(torch, choice: str) -> None:
    try:
        device = torch.device(choice)
    except (RuntimeError, TypeError) as exc:
        raise InputError(f"unknown device {choice!r}: use auto, cpu, cuda, cuda:N or mps") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UnavailableError(f"device {choice!r}: torch sees no CUDA device here")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UnavailableError(f"device {choice!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UnavailableError(f"device {choice!r}: MPS is not available here")


def resolve_dtype(device: str, preference: str | None = None):
    """'auto': bfloat16 on accelerators, float32 on CPU (bf16 matmuls are far slower on most CPUs)."""
    import torch

    choice = preference or settings.dtype_preference()
    if choice == "auto":
        return torch.float32 if device.startswith("cpu") else torch.bfloat16
    if choice not in DTYPES:
        raise InputError(f"unknown dtype {choice!r}; use one of {', '.join(('auto', *DTYPES))}")
    return getattr(torch, DTYPES[choice])
