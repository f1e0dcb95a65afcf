"""Models resident in this process, each loaded once per (kind, source, device, dtype): one SmolLM2 serves the ORM,
the judge and the local agents, one MiniLM the probe and the embedder. `release_models()` drops them and frees
accelerator memory; loading is quiet.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from morkit.runtime import assets
from morkit.runtime.device import resolve_device, resolve_dtype

log = logging.getLogger(__name__)
T = TypeVar("T")

_LOCK = threading.RLock()
_RESIDENT: dict[tuple, Any] = {}


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' and huggingface_hub's load-time bars and warnings for the duration."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency
        yield
        return
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def resident(key: tuple, load: Callable[[], T]) -> T:
    """The model stored under `key`, loading it with `load()` the first time (quietly, once per process)."""
    with _LOCK:
        if key not in _RESIDENT:
            log.debug("loading %s", key)
            with quiet_loading():
                _RESIDENT[key] = load()
        return _RESIDENT[key]


def resident_keys() -> list[tuple]:
    with _LOCK:
        return list(_RESIDENT)


def release_models(kind: str | None = None) -> int:
    """Drop resident models (all, or those of one kind, e.g. "causal-lm"); returns how many were dropped.

    Callers that still hold a model keep it alive; the next request loads a fresh copy.

    Args:
        kind: The kind of model to drop (`causal-lm` or `sentence-transformer`); None drops every one.

    Returns:
        How many resident models were dropped.
    """
    with _LOCK:
        keys = [k for k in _RESIDENT if kind is None or k[0] == kind]
        for key in keys:
            del _RESIDENT[key]
    free_memory()
    return len(keys)


def free_memory() -> None:
    """Return what dropped models held: collect them, then give cached accelerator memory back."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover
        pass


@dataclass(frozen=True)
class LoadedLM:
    """A causal LM with its tokenizer, the device it sits on, and the lock that serialises generation."""

    model: Any
    tokenizer: Any
    device: str
    lock: threading.Lock


def causal_lm(path: str | Path | None = None, device: str | None = None, dtype: str | None = None) -> LoadedLM:
    """A transformers causal LM + tokenizer in eval mode (default: the embedded SmolLM2-135M-Instruct).

    The tokenizer pads on the left (generation continues from the right end of every row)."""
    path = Path(path) if path is not None else assets.smollm2_checkpoint()
    device = resolve_device(device)
    torch_dtype = resolve_dtype(device, dtype)

    def load() -> LoadedLM:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device).eval()
        return LoadedLM(model, tokenizer, device, threading.Lock())

    return resident(("causal-lm", str(path.resolve()), device, str(torch_dtype)), load)


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """The Hugging Face hub client in offline mode for the block: files come from the local cache only, and
    any HTTP request through it fails (whatever HF_HUB_OFFLINE says)."""
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - a dependency of sentence-transformers
        yield
        return
    with _LOCK:
        before = constants.HF_HUB_OFFLINE
        constants.HF_HUB_OFFLINE = True
        try:
            yield
        finally:
            constants.HF_HUB_OFFLINE = before


def sentence_transformer(source: str | Path | None = None, device: str | None = None, *,
                         offline: bool = False) -> Any:
    """A sentence-transformers model in eval mode (default: the embedded all-MiniLM-L6-v2, fp32).

    `offline`: load from a local path or the local HF cache only, never from the network."""
    source = str(source) if source is not None else str(assets.minilm_path())
    device = resolve_device(device)

    def load() -> Any:
        from sentence_transformers import SentenceTransformer

        if not offline:
            return SentenceTransformer(source, device=device).eval()
        with hub_offline():
            return SentenceTransformer(source, device=device, local_files_only=True).eval()

    return resident(("sentence-transformer", source, device), load)
