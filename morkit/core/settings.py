"""Every environment variable morkit reads, in one place, with its default (ENVIRONMENT). Values are read when asked
for, not frozen at import, and no folder is guessed from where the package happens to be installed.
"""

from __future__ import annotations

import os
from pathlib import Path

from morkit.core.errors import InputError

ENVIRONMENT = {
    "MORKIT_CACHE_DIR": "score cache and converted models (default $XDG_CACHE_HOME/morkit, else ~/.cache/morkit)",
    "MORKIT_DATA_DIR": "folder of the public data sets that --dataset NAME reads and `morkit data fetch` writes "
                       "(default: data/ in the cache folder, $MORKIT_CACHE_DIR/data)",
    "MORKIT_WEIGHTS_DIR": "reward-model weights as <org>/<name> folders (else the Hugging Face cache)",
    "MORKIT_DEVICE": "torch device for models: auto (cuda, mps, else cpu), cpu, cuda:1, ...",
    "MORKIT_DTYPE": "model dtype: auto (bfloat16 on accelerators, float32 on CPU), float32, bfloat16, float16",
    "MORKIT_ALLOW_DOWNLOADS": "1 lets morkit download an embedder named in a pool or flag that is neither a local "
                              "path nor in the local Hugging Face cache (default: never download)",
    "MORKIT_API_KEY": "the key `morkit serve` requires as `Authorization: Bearer KEY` (unless --api-key is given), "
                      "and the one its clients (the TRL reward function) send",
    "MORKIT_PRR_THREADS": "threads that count one query's on-the-fly PRR (PRES on a pool past its dense table), "
                          "each over its own ensembles (default: the cores this process may use, at most 4; 1: on "
                          "the query's thread alone)",
    "OPENAI_BASE_URL": "default server of the `openai` LLM backend",
    "OPENAI_API_KEY": "default key of the `openai` LLM backend",
}


def downloads_allowed() -> bool:
    """Whether the user opted in to downloading models ($MORKIT_ALLOW_DOWNLOADS=1)."""
    return os.environ.get("MORKIT_ALLOW_DOWNLOADS", "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path:
    """morkit's cache root: $MORKIT_CACHE_DIR, else $XDG_CACHE_HOME/morkit, else ~/.cache/morkit."""
    env = os.environ.get("MORKIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "morkit"


def default_data_dir() -> Path:
    """Where `morkit data fetch` puts the public data sets when no folder is named: data/ in the cache folder."""
    return cache_dir() / "data"


def data_dir_path(explicit: str | os.PathLike | None = None) -> Path:
    """The public data sets' folder, unchecked: `explicit` (a --data-dir flag), else $MORKIT_DATA_DIR, else
    `default_data_dir()`."""
    chosen = explicit or os.environ.get("MORKIT_DATA_DIR")
    return Path(chosen).expanduser() if chosen else default_data_dir()


def data_dir(explicit: str | os.PathLike | None = None, *, create: bool = False) -> Path:
    """The public data sets' folder (`data_dir_path`): a named one must exist unless `create` (then it is made);
    the default may be absent (its data sets are then reported missing, with the command that fetches them)."""
    path = data_dir_path(explicit)
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot make the data folder: {exc.strerror or exc}", path=str(path)) from exc
    elif (explicit or os.environ.get("MORKIT_DATA_DIR")) and not path.is_dir():
        raise InputError("data folder not found", path=str(path))
    return path


def weights_dir() -> Path | None:
    """$MORKIT_WEIGHTS_DIR, where reward-model weights live as <org>/<name> (None when unset)."""
    env = os.environ.get("MORKIT_WEIGHTS_DIR")
    return Path(env).expanduser() if env else None


def api_key() -> str | None:
    """The `morkit serve` API key from $MORKIT_API_KEY; None when unset. Set but empty (a secret that expanded to
    nothing), blank or with whitespace around it (no client can send that), an InputError: never a server with
    no key by mistake."""
    key = os.environ.get("MORKIT_API_KEY")
    if key is None:
        return None
    problem = api_key_problem(key)
    if problem:
        raise InputError(f"MORKIT_API_KEY {problem}; set it to the key, or unset it to serve without one")
    return key


def api_key_problem(key: str) -> str | None:
    """What makes `key` unusable as an API key (the one rule for the variable, --api-key and create_app), or None:
    empty or blank (a secret that expanded to nothing), or whitespace around it (no client can send that)."""
    if not key.strip():
        return "is empty"
    if key != key.strip():
        return "has whitespace around it, which no client can send in an Authorization header"
    return None


def prr_threads() -> int:
    """Threads for one on-the-fly PRR count: MORKIT_PRR_THREADS, else the usable cores up to 4."""
    env = os.environ.get("MORKIT_PRR_THREADS", "").strip()
    if env:
        if not (env.isascii() and env.isdecimal()) or int(env) < 1:
            raise InputError(f"MORKIT_PRR_THREADS must be a whole number of threads, at least 1, not {env!r}")
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(4, cores))


def device_preference() -> str:
    return os.environ.get("MORKIT_DEVICE") or "auto"


def dtype_preference() -> str:
    return os.environ.get("MORKIT_DTYPE") or "auto"
