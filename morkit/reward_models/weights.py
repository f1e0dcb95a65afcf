"""Where a reward model's weights live on this machine, never downloading: an explicit directory, then
`$MORKIT_WEIGHTS_DIR/<org>/<name>`, then the Hugging Face cache; a place counts only with every required file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from morkit.core import settings
from morkit.core.errors import UnavailableError

WEIGHTS_ENV = "MORKIT_WEIGHTS_DIR"


def bf16_gib(n_params: float) -> float:
    """GPU memory for the weights alone in bf16 (2 bytes a parameter), in GiB; activations come on top."""
    return n_params * 2 / 2**30


def _hf_cache(model_id: str) -> tuple[Path | None, str]:
    """The cached snapshot of `model_id`, or None, plus a description of the place looked."""
    try:
        from huggingface_hub import constants, snapshot_download
    except ImportError:
        return None, "the Hugging Face cache (huggingface_hub not installed)"
    where = f"the Hugging Face cache ({constants.HF_HUB_CACHE})"
    try:
        return Path(snapshot_download(model_id, local_files_only=True)), where
    except Exception:  # LocalEntryNotFoundError and friends: not cached
        return None, where


def locate_weights(model_id: str, local_dir: str | os.PathLike | None = None,
                   required: Sequence[str] = ("config.json",)) -> Path:
    """The directory holding `model_id`'s checkpoint; UnavailableError names every place looked."""
    looked: list[str] = []

    def usable(path: Path, label: str) -> bool:
        absent = [name for name in required if not (path / name).is_file()]
        if not path.is_dir():
            looked.append(f"{label} {path} (no such directory)")
        elif absent:
            looked.append(f"{label} {path} (lacks {', '.join(absent)})")
        else:
            return True
        return False

    if local_dir is not None and usable(Path(local_dir).expanduser(), "local dir"):
        return Path(local_dir).expanduser()
    root = settings.weights_dir()
    if root is not None:
        candidate = root / model_id
        if usable(candidate, f"${WEIGHTS_ENV}"):
            return candidate
    else:
        looked.append(f"${WEIGHTS_ENV}/{model_id} (${WEIGHTS_ENV} not set)")
    cached, where = _hf_cache(model_id)
    if cached is not None and usable(cached, where):
        return cached
    if cached is None:
        looked.append(f"{where}: not cached")
    raise UnavailableError(f"weights for {model_id} not found; looked in: " + "; ".join(looked))


def weights_missing(model_id: str, required: Sequence[str] = ("config.json",)) -> str | None:
    """Why `model_id` cannot be loaded here (None = its weights are present); loads nothing."""
    try:
        locate_weights(model_id, required=required)
    except UnavailableError as exc:
        return str(exc)
    return None
