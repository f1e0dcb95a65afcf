"""The one key a reward model's scores are cached under: what the RM is (name, version, head hash, weights' version)
and every scoring option that changes what it computes (truncation, resolved dtype, engine, device map); the options
that cannot (options.SCORE_NEUTRAL, which the pipeline's keys leave out too) never enter it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

FACTS = ("engine", "dtype", "device_map", "truncation")
"""The scoring facts a key holds, in this order, each only where it is known (a rule has none of them)."""


def cache_key(name: str, card: Any = None, *, engine: str | None = None, dtype: str | None = None,
              device_map: str | None = None, truncation: str | None = None) -> str:
    """The key RM `name`'s scores are cached under, known without loading it: `name@version`, then `head=` the
    packaged head's hash, `weights=` the version of its weights here (`weights_version`), then the facts given.
    The SCORE_NEUTRAL options (batch size, chunk, progress, cache path, Ray workers, memory check) have no parameter.

    Args:
        name: The RM's name.
        card: Its registered spec (read: `version`, `head`, `model_id`, `required`); None for an RM not registered.
        engine: What computes the score: `transformers` or `vllm` (an offline engine or vLLM servers).
        dtype: The dtype the model runs in, resolved (`float32`, `bfloat16`, ...); `served` on vLLM servers.
        device_map: The transformers device map a model is spread with, where one is given.
        truncation: How pairs are cut (`Truncation.signature`, `policy@limit`); None for an RM that never cuts.

    Returns:
        The key, e.g. `code-tests@5` or `smollm2-orm;head=1f2e...;engine=transformers;dtype=float32;
        truncation=middle@window`.
    """
    version = getattr(card, "version", None)
    head = getattr(card, "head", None)
    model_id = getattr(card, "model_id", None)
    parts = [name + (f"@{version}" if version else "")]
    if head:
        parts.append(f"head={head_hash(head)}")
    if model_id:
        weights = weights_version(model_id, getattr(card, "required", ("config.json",)))
        if weights:
            parts.append(f"weights={weights}")
    given = {"engine": engine, "dtype": dtype, "device_map": device_map, "truncation": truncation}
    parts.extend(f"{fact}={given[fact]}" for fact in FACTS if given[fact] is not None)
    return ";".join(parts)


def head_hash(head: str) -> str:
    """The hash packaged head `head` was saved with (`untracked` for a head saved without one)."""
    from morkit.reward_models.heads import load_packaged_head

    return str(load_packaged_head(head).info.get("sha256", "untracked"))


def weights_version(model_id: str, required: Any = ("config.json",)) -> str | None:
    """The version of `model_id`'s weights found here, cheaply: a Hugging Face snapshot's commit, else a digest of
    the folder's config.json and its files' names and sizes (no weights are read). None where none are found.

    Args:
        model_id: The Hugging Face id of the weights.
        required: Files that must be present (the folder the RM would load from is the one described).

    Returns:
        A short version string, or None.
    """
    from morkit.core.errors import UnavailableError
    from morkit.reward_models.weights import locate_weights

    try:
        root = locate_weights(model_id, required=tuple(required))
    except UnavailableError:
        return None
    return folder_version(root)


def folder_version(root: Path) -> str:
    """A snapshot folder's commit (`.../snapshots/<commit>`), else 16 hex digits of its config.json bytes and its
    files' relative names and sizes."""
    if root.parent.name == "snapshots":
        return root.name[:12]
    digest = hashlib.sha256()
    config = root / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(root)}\0{path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]
