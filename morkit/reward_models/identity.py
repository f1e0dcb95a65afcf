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


def cache_key(name: str, card: Any = None, *, head: str | None = None, weights: str | None = None,
              engine: str | None = None, dtype: str | None = None, device_map: str | None = None,
              truncation: str | None = None) -> str:
    """The key RM `name`'s scores are cached under, known without loading it: `name@version`, then `head=` the hash
    of the head it scores with, `weights=` the version of the weights it loads, then the facts given. The
    SCORE_NEUTRAL options (batch size, chunk, progress, cache path, Ray workers, memory check) have no parameter.

    Args:
        name: The RM's name.
        card: Its RMCard (read: `version`, `head`, `model_id`, `required`); None for an RM not registered.
        head: The hash of the head it holds (a built RM's own); None: the card's packaged head's (`head_hash`).
        weights: The version of the weights folder it loaded (a built RM's own, `folder_version`); None: that of the
            card's weights found here (`weights_version`).
        engine: What computes the score: `transformers` or `vllm` (an offline engine or vLLM servers).
        dtype: The dtype the model runs in, resolved (`float32`, `bfloat16`, ...); `served` on vLLM servers.
        device_map: The transformers device map a model is spread with, where one is given.
        truncation: How pairs are cut (`truncation_part`: `policy@limit`, `policy@window=N`); None for an RM that
            never cuts.

    Returns:
        The key, e.g. `code-tests@5` or `smollm2-orm;head=1f2e...;engine=transformers;dtype=float32;
        truncation=middle@window=2048`.
    """
    version = getattr(card, "version", None)
    model_id = getattr(card, "model_id", None)
    parts = [name + (f"@{version}" if version else "")]
    if head is None and getattr(card, "head", None):
        head = head_hash(card.head)
    if head:
        parts.append(f"head={head}")
    if weights is None and model_id:
        weights = weights_version(model_id, getattr(card, "required", ("config.json",)))
    if weights:
        parts.append(f"weights={weights}")
    given = {"engine": engine, "dtype": dtype, "device_map": device_map, "truncation": truncation}
    parts.extend(f"{fact}={given[fact]}" for fact in FACTS if given[fact] is not None)
    return ";".join(parts)


def head_hash(head: str) -> str:
    """The hash packaged head `head` was saved with (`untracked` for a head saved without one)."""
    from morkit.reward_models.heads import load_packaged_head

    return held_head_hash(load_packaged_head(head))


def held_head_hash(head: Any) -> str:
    """The hash a loaded head (a LogisticHead) was saved with (`untracked` for none, or one saved without it)."""
    return str((getattr(head, "info", None) or {}).get("sha256", "untracked"))


def model_dtype(model: Any) -> str | None:
    """A loaded model's dtype as a key holds it (`float32`, `bfloat16`); None for a model without one."""
    dtype = getattr(model, "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


def truncation_part(truncation: Any, window: int | None = None) -> str | None:
    """A key's truncation part: the truncation's `signature` (`policy@limit` for a given limit), and where the
    model's window is known (`window`, else the one the truncation was fitted to) the limit it resolves to,
    `policy@window=N` (the window, bounded by a vLLM engine's max_model_len), so a new window scores again.

    Args:
        truncation: A Truncation, or None for an RM that never cuts.
        window: The model's own window in tokens, where known without loading it (`card_window`).

    Returns:
        The part, e.g. `left@512`, `middle@window=2048`, `middle@window` (window unknown); None without truncation.
    """
    if truncation is None:
        return None
    window = window or truncation.window
    if truncation.max_tokens or not window:
        return truncation.signature
    return f"{truncation.policy}@window={truncation.within(window).limit}"


def card_window(card: Any) -> int | None:
    """The window a card's model reads, known without loading it: the card's own `window`, else its checkpoint
    config's (capped by `trained_context`) where its weights are found here; None where neither is known."""
    if getattr(card, "window", None):
        return card.window
    if not getattr(card, "model_id", None):
        return None
    from morkit.core.errors import MorkitError
    from morkit.reward_models.weights import locate_weights

    try:
        return card.window_at(locate_weights(card.model_id, required=tuple(card.required)))
    except (MorkitError, OSError, ValueError):
        return None


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
    root = Path(root)
    if root.parent.name == "snapshots":
        return root.name[:12]
    digest = hashlib.sha256()
    config = root / "config.json"
    if config.is_file():
        digest.update(config.read_bytes())
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(root)}\0{path.stat().st_size}\n".encode())
    return digest.hexdigest()[:16]
