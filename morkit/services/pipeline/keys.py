"""What each pipeline stage's key is made of, so that a stage is kept only when nothing that shapes its output changed.

Settings enter whole, minus a named list of fields that cannot change the output, so a new option is in the key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from morkit.reward_models.options import NEUTRAL_FIELDS, ScoringOptions

SCHEME = 2
"""The key scheme, part of every key. Keys made under an older scheme (whose generate stage reused answers by
question id whatever the question said, and whose score stage left options out) cannot vouch for their
outputs, so a run.json from before differs everywhere and every stage reruns once."""

def digest(*parts: Any) -> str:
    """A short hash of JSON-able parts (paths and other objects by their text), under the current SCHEME."""
    return hashlib.sha256(json.dumps([SCHEME, *parts], sort_keys=True, default=str).encode()).hexdigest()[:16]


def file_digest(path: str | Path | None) -> str | None:
    """A short hash of a file's bytes (None for no file)."""
    return None if path is None else hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def settings(options: Any, neutral: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every field of an options dataclass (nested ones as dicts) but the `neutral` ones, for a key."""
    return {name: value for name, value in asdict(options).items() if name not in neutral}


def scoring_key(scoring: ScoringOptions) -> dict[str, Any]:
    """What in the scoring options can change a score: every field, nested ones as `part.field`, but those of
    options.SCORE_NEUTRAL (NEUTRAL_FIELDS), the one list the RMs' cache keys leave out too."""
    key: dict[str, Any] = {}
    for name, value in asdict(scoring).items():
        parts = value.items() if isinstance(value, dict) else ()
        key.update({f"{name}.{k}": v for k, v in parts} if parts else {name: value})
    return {name: value for name, value in key.items() if name not in NEUTRAL_FIELDS}


def rm_versions(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Each named RM's identity without the scoring options (which `scoring_key` holds): its declared version, its
    packaged head's hash, its weights' version (morkit.reward_models.identity), read from its registered spec with
    nothing built or loaded: a new version of an RM rescores, of `code-tests` relabels. A name not registered (scores
    given in the input) is itself."""
    from morkit.reward_models.catalog import identity_of

    return {name: identity_of(name) for name in names}


def embedder_version(name: str | None) -> str | None:
    """The pool's embedder as a key holds it: its name and, for a local model folder, a digest of its files'
    names, sizes and modification times (embed_cache.embedder_key, the rule the embedding cache keys vectors
    by), so a model changed in place rebuilds the pool. None: the packaged default."""
    from morkit.question_pool.embed_cache import embedder_key

    return None if name is None else embedder_key(name)
