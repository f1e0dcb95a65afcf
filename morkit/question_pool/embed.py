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
from morkit.core.errors import InputError, MorkitError, UnavailableError

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


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".ckpt", ".h5", ".msgpack", ".gguf")
"""The files a model folder keeps its weights in (one of them must be there)."""
HUB_ORGANIZATION = "sentence-transformers"
"""Where sentence-transformers looks up a hub name without an organisation."""


def _local_path(name: str) -> Path | None:
    """`name` as an existing local path, or None (a hub name; or a name no file system accepts)."""
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, ValueError):  # a NUL byte, too long
        return None


def model_folder_problem(folder: Path) -> str | None:
    """Why `folder` holds no model sentence-transformers can load (no modules.json or config.json, a modules.json
    that lists no modules, no weights file), or None; reads no weights."""
    import json

    if not folder.is_dir():
        return "it is a file, not a model folder"
    if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
        return "it holds no modules.json or config.json (not a sentence-transformers or transformers model)"
    if (folder / "modules.json").is_file():
        try:
            modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
            paths = [m["path"] for m in modules] if isinstance(modules, list) else None
        except (OSError, UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError):
            paths = None
        if not paths or not all(isinstance(p, str) for p in paths):
            return "its modules.json is not a list of modules with paths"
    try:
        weights = any(p.suffix in WEIGHT_SUFFIXES and p.is_file() for p in folder.rglob("*"))
    except OSError as exc:
        return f"cannot list it: {exc.strerror or exc}"
    return None if weights else f"it holds no weights file ({', '.join(WEIGHT_SUFFIXES)})"


def _cached_snapshot(name: str) -> Path | None:
    """The local Hugging Face cache's folder of hub model `name` (as sentence-transformers resolves a name
    without an organisation, or as given), or None when it is not cached."""
    from huggingface_hub import try_to_load_from_cache

    for repo in ([f"{HUB_ORGANIZATION}/{name}"] if "/" not in name else []) + [name]:
        for file in ("modules.json", "config.json"):
            try:
                found = try_to_load_from_cache(repo, file)
            except Exception:  # noqa: BLE001 - an invalid repo id: not cached
                found = None
            if isinstance(found, str):
                return Path(found).parent
    return None


def check_embedder(name: str | None) -> None:
    """What `load_embedder(name)` needs, looked at without loading any weights: sentence-transformers installed,
    the packaged model present; a local path a folder holding a model (model_folder_problem); another name, unless
    downloads are allowed, in the local Hugging Face cache. InputError (UnavailableError for what is not
    installed) saying which; a folder whose weights are damaged is found only when loaded."""
    from morkit.runtime import assets

    name = embedder_name(name)
    if importlib.util.find_spec("sentence_transformers") is None:
        raise UnavailableError("sentence-transformers is not installed (pip install sentence-transformers)")
    if name == DEFAULT_EMBEDDER:
        assets.minilm_path()
        return
    local = _local_path(name)
    if local is not None:
        problem = model_folder_problem(local)
        if problem:
            raise InputError(f"cannot load embedder {name!r} from this path: {problem}")
        return
    if settings.downloads_allowed():
        return  # fetched when first loaded
    snapshot = _cached_snapshot(name)
    if snapshot is None:
        raise InputError(f"cannot load embedder {name!r}: not a local path and not in the local Hugging Face "
                         f"cache; morkit downloads models only when {ALLOW_DOWNLOADS}=1 is set")
    problem = model_folder_problem(snapshot)
    if problem:
        raise InputError(f"cannot load embedder {name!r} from the local Hugging Face cache: {problem}")


def embedder_memory(name: str | None) -> Any:
    """What loading embedder `name` takes (a `reward_models.memory.MemoryNeed`): its weights in float32, as
    sentence-transformers loads them, and one question's activations at its longest (a server embeds one question
    a call). None where its folder is not here to read: it is checked as it loads."""
    import json

    from morkit.reward_models import memory
    from morkit.runtime import assets

    name = embedder_name(name)
    try:
        folder = assets.minilm_path() if name == DEFAULT_EMBEDDER else (_local_path(name) or _cached_snapshot(name))
        if folder is None or not (folder / "config.json").is_file():
            return None
        length = 512
        if (folder / "sentence_bert_config.json").is_file():
            length = int(json.loads((folder / "sentence_bert_config.json").read_text()).get("max_seq_length") or 512)
        return memory.estimate(folder, "float32", batch_tokens=length)
    except (MorkitError, OSError, ValueError, TypeError, AttributeError, KeyError):  # unreadable: found at load
        return None


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
    local = _local_path(name) is not None
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
