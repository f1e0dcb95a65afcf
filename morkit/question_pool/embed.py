"""Question embedders: any sentence-transformers model, L2-normalised so inner product = cosine.

Loaded offline unless MORKIT_ALLOW_DOWNLOADS=1, so a pool file never makes morkit reach the hub (docs/pools.md).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from morkit.core import settings
from morkit.core.errors import InputError, UnavailableError

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
ALLOW_DOWNLOADS = "MORKIT_ALLOW_DOWNLOADS"  # core.settings.downloads_allowed reads it
_PACKAGED = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
CHUNK = 512
"""Texts per sentence-transformers call (8 of its batches): the unit embedded, cached and sent to a Ray actor."""


@dataclass
class SentenceEmbedder:
    """Wraps a loaded SentenceTransformer; `name` is what the pool records and checks."""

    name: str
    model: Any = field(repr=False)

    @property
    def dim(self) -> int:
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(get_dim())

    def encode(self, texts: Sequence[str], *, batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors; `progress` shows one bar in questions."""
        from tqdm import tqdm

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = []
        with tqdm(total=len(texts), desc="embed", unit="question", disable=not progress, leave=False) as bar:
            for _, vectors in self.encode_chunks(texts, batch_size=batch_size):
                parts.append(vectors)
                bar.update(len(vectors))
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)

    def encode_chunks(self, texts: Sequence[str], *, batch_size: int = 64) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(positions, vectors) per chunk of CHUNK texts, in order: the unit a cache keeps and a Ray actor embeds,
        so every path cuts the same chunks and gets the same vectors (sentence-transformers pads per chunk)."""
        for start in range(0, len(texts), CHUNK):
            part = list(texts[start: start + CHUNK])
            yield np.arange(start, start + len(part)), self.embed_chunk(part, batch_size=batch_size)

    def embed_chunk(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """One chunk's float32 unit vectors (sentence-transformers sorts by length within each call)."""
        vectors = self.model.encode(list(texts), batch_size=batch_size, show_progress_bar=False,
                                    convert_to_numpy=True, normalize_embeddings=True)
        return np.ascontiguousarray(vectors, dtype=np.float32)


def embedder_name(name: str | None) -> str:
    """The name a pool records for `name` (None and the packaged model's aliases: DEFAULT_EMBEDDER)."""
    return DEFAULT_EMBEDDER if name is None or name in _PACKAGED else name


def load_embedder(name: str | None = None, device: str | None = None) -> SentenceEmbedder:
    """An embedder by name or path (the process's resident copy), downloaded only if downloads_allowed().

    A hub name not in the local cache is an InputError naming the opt-in; a local model that does not load
    (or a failed download) is an UnavailableError."""
    from morkit.runtime import models

    name = embedder_name(name)
    if importlib.util.find_spec("sentence_transformers") is None:
        raise UnavailableError("sentence-transformers is not installed (pip install sentence-transformers)")
    if name == DEFAULT_EMBEDDER:
        return SentenceEmbedder(name, models.sentence_transformer(None, device))
    try:
        local = Path(name).expanduser().exists()
    except (OSError, ValueError):  # a name no file system accepts (a NUL byte, too long)
        local = False
    offline = not settings.downloads_allowed()
    try:
        return SentenceEmbedder(name, models.sentence_transformer(name, device, offline=offline))
    except Exception as exc:  # sentence-transformers raises OSError, ValueError, HF hub errors ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if local:
            raise UnavailableError(f"cannot load embedder {name!r} from this path: {reason}") from exc
        if offline:
            raise InputError(f"cannot load embedder {name!r}: not a local path and not in the local Hugging Face "
                             f"cache; morkit downloads models only when {ALLOW_DOWNLOADS}=1 is set") from exc
        raise UnavailableError(f"cannot load embedder {name!r} (download allowed by {ALLOW_DOWNLOADS}): "
                               f"{reason}") from exc
