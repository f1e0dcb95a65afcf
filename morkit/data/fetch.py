"""`morkit data fetch`: download a data source's upstream files (or take them from a folder), prepare them, check
every sha256 pin, and put the prepared files in the data folder; a file appears only once it checks.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from morkit.core import settings
from morkit.core.errors import InputError, UnavailableError
from morkit.data import staging
from morkit.data.sources import RAW_BASE, SOURCES, DataSource, Prepared, Upstream, source

DOWNLOADS = ".upstream"
"""Folder of the data folder holding a source's verified downloads until its prepared files check."""
CONNECT_TIMEOUT_S, READ_TIMEOUT_S, DEADLINE_S = 15.0, 60.0, 1800.0
"""A download gives up when connecting takes 15 s, when no byte comes for 60 s, or after 30 minutes in all."""
MAX_DOWNLOAD_BYTES = 256 << 20
"""A download bigger than this is refused: the largest upstream file is a few MB, so more is a wrong or hostile
server, stopped before it fills the disk."""


@dataclass(frozen=True)
class FileState:
    """One prepared file of a source in the data folder: `state` is checked (its sha256 is the pin), differs,
    missing, or present (no pin to check: a file placed by hand)."""

    path: Path
    state: str
    sha256: str | None = None


@dataclass(frozen=True)
class Fetched:
    """What `fetch` did for one source: `action` is "here" (already in place and checked), "downloaded",
    "prepared" (from upstream files in --from) or "copied" (prepared files in --from); `detail` says it in words."""

    source: str
    folder: Path
    action: str
    files: tuple[Path, ...]
    detail: str = ""


def sha256_of(path: str | os.PathLike) -> str:
    """The sha256 of a file (hex), read in blocks: a data file's pin, an input file's provenance."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def states(src: DataSource, data_dir: Path, pins: Mapping[str, str] | None = None) -> list[FileState]:
    """The state of each prepared file of `src` under `data_dir` (a pattern's matches, or one missing entry).

    Args:
        src: The data source.
        data_dir: The data folder.
        pins: sha256 values replacing the pinned ones, by prepared name (see `fetch`).

    Returns:
        One FileState per prepared file (per match, for a pattern such as LiveCodeBench's test*.jsonl).
    """
    folder = data_dir / src.name
    found = []
    for prepared in src.files:
        if prepared.is_pattern:
            matches = sorted(folder.glob(prepared.name))
            found += [FileState(p, "present") for p in matches] or [FileState(folder / prepared.name, "missing")]
            continue
        path, pin = folder / prepared.name, _pin(prepared, pins or {})
        if not path.is_file():
            found.append(FileState(path, "missing"))
        elif pin is None:
            found.append(FileState(path, "present"))
        else:
            digest = sha256_of(path)
            found.append(FileState(path, "checked" if digest == pin else "differs", digest))
    return found


def here(found: Sequence[FileState]) -> str:
    """One word for `morkit data list` from a source's file states: yes (every file in place, checked where pinned),
    no, partly or differs.

    Args:
        found: The source's file states (`states`).

    Returns:
        "yes", "no", "partly" or "differs".
    """
    kinds = {s.state for s in found}
    if "differs" in kinds:
        return "differs"
    if kinds == {"missing"}:
        return "no"
    return "partly" if "missing" in kinds else "yes"


def fetch(name: str, *, data_dir: str | os.PathLike | None = None, from_path: str | os.PathLike | None = None,
          force: bool = False, progress: bool = True, base_url: str = RAW_BASE,
          pins: Mapping[str, str] | None = None) -> Fetched:
    """Put one data source's prepared files in the data folder: downloaded at the pinned commit, or from
    `from_path`, prepared, every sha256 pin checked; a source already in place and checked is left as it is.

    Args:
        name: A data source's name, or a data set it serves (`mbpp` -> `mbpp_sanitized`).
        data_dir: The data folder (default: $MORKIT_DATA_DIR, else data/ in the cache folder); made if absent.
        from_path: A folder holding the upstream files (as laid out upstream, or side by side) or the prepared
            files; nothing is downloaded.
        force: Replace prepared files already in place (also ones that differ from their pins).
        progress: Show a progress bar per download.
        base_url: Where raw files are fetched from (a local server in the tests).
        pins: sha256 values that replace the pinned ones, by upstream path, file name or prepared name: to check
            a preparation on other inputs (the tests use the RewardMATH files cut to 20 problems).

    Returns:
        What was done, and where the files are.
    """
    src = source(name)
    root = settings.data_dir(data_dir, create=True)
    with _one_fetch_at_a_time(root, src.name):
        return _fetch(src, root, from_path, force, progress, base_url, dict(pins or {}))


@contextlib.contextmanager
def _one_fetch_at_a_time(root: Path, name: str) -> Iterator[None]:
    """Hold an exclusive flock on this data folder's lock for source `name`, kept in morkit's cache folder (the
    data folder holds only data): a second fetch of the same source waits, then finds the files in place, rather
    than removing the first one's downloads under it."""
    import fcntl

    folder = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    lock = settings.cache_dir() / "locks" / f"data-{folder}-{name}.lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")
    except OSError as exc:
        raise InputError(f"cannot make the fetch lock: {exc.strerror or exc}", path=str(lock)) from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, or when the process dies
        yield


def _fetch(src: DataSource, root: Path, from_path: str | os.PathLike | None, force: bool, progress: bool,
           base_url: str, pins: dict[str, str]) -> Fetched:
    """`fetch` for one source, under its lock."""
    folder = root / src.name
    if not force:
        current = states(src, root, pins)
        if all(s.state in ("checked", "present") for s in current):
            checked = "sha256 checked" if all(s.state == "checked" for s in current) else "no sha256 pin to check"
            return Fetched(src.name, folder, "here", tuple(s.path for s in current), f"already here, {checked}")
        differs = next((s for s in current if s.state == "differs"), None)
        if differs is not None:
            raise InputError(f"differs from its pinned sha256 (is {differs.sha256}); `--force` replaces it",
                             path=str(differs.path))
    if from_path is not None:
        return _from_folder(src, Path(from_path).expanduser(), folder, pins)
    if not src.fetchable:
        raise InputError(f"data source {src.name!r} cannot be fetched by URL: {src.manual}")
    downloads = root / DOWNLOADS / src.name
    try:
        inputs = [_download_once(src, up, downloads, base_url, _upstream_pin(up, pins), progress)
                  for up in src.upstream]
        try:
            _prepare(src, inputs, folder, pins, UnavailableError, f"prepared from {src.origin}")
        except UnavailableError:
            for path, up in zip(inputs, src.upstream):
                if _upstream_pin(up, pins) is None:  # an unpinned download may be what is wrong: fetch it again
                    path.unlink(missing_ok=True)
            raise
        staging.remove(downloads)
    finally:
        for empty in (downloads, root / DOWNLOADS):  # checked downloads stay for a rerun; empty folders go
            with contextlib.suppress(OSError):
                empty.rmdir()
    return Fetched(src.name, folder, "downloaded", tuple(folder / p.name for p in src.files),
                   f"downloaded {_files(len(inputs))} from {src.origin}, prepared, sha256 checked")


def _from_folder(src: DataSource, given: Path, folder: Path, pins: Mapping[str, str]) -> Fetched:
    """fetch --from: the prepared files copied from `given` when it holds them, else prepared from the upstream
    files it holds; every pinned file checked."""
    if not given.exists():
        raise InputError("--from: no such file or folder", path=str(given))
    copies = _prepared_copies(src, given)
    if copies is not None:
        for path, prepared in zip(copies, src.files):
            _check(path, _pin(prepared, pins), InputError, f"{src.name}/{prepared.name}")
        _install(src, folder, copies)
        pinned = all(_pin(p, pins) for p in src.files)
        return Fetched(src.name, folder, "copied", tuple(folder / p.name for p in src.files),
                       f"copied {_files(len(copies))} from {given}, "
                       + ("sha256 checked" if pinned else "no sha256 pin to check"))
    if not src.fetchable:
        names = ", ".join(f.name for f in src.files)
        raise InputError(f"--from: no {names} here; {src.name}: {src.manual}", path=str(given))
    inputs = [_upstream_copy(src, up, given) for up in src.upstream]
    for path, up in zip(inputs, src.upstream):
        _check(path, _upstream_pin(up, pins), InputError, f"upstream {up.path} at {src.origin}")
    _prepare(src, inputs, folder, pins, InputError, f"prepared from {given}")
    return Fetched(src.name, folder, "prepared", tuple(folder / p.name for p in src.files),
                   f"prepared from {_files(len(inputs))} in {given}, sha256 checked")


def _files(count: int) -> str:
    return f"{count} file" + ("" if count == 1 else "s")


def fetchable_names() -> list[str]:
    """The sources `morkit data fetch --all` downloads (every one with a pinned GitHub commit and no manual step)."""
    return [entry.name for entry in SOURCES if entry.spec.fetchable]


# -- checks ------------------------------------------------------------------------------------------------------


def _pin(prepared: Prepared, pins: Mapping[str, str]) -> str | None:
    return pins.get(prepared.name, prepared.sha256)


def _upstream_pin(up: Upstream, pins: Mapping[str, str]) -> str | None:
    return pins.get(up.path, pins.get(up.basename, up.sha256))


def _check(path: Path, pin: str | None, error: type[Exception], what: str, shown: str | None = None) -> None:
    """An `error` naming the file (`shown`, else `path`) unless its sha256 is `pin` (no pin: nothing to check)."""
    if pin is None:
        return
    digest = sha256_of(path)
    if digest == pin:
        return
    message = f"sha256 {digest} is not the pinned {pin} of {what}: a different or damaged file"
    if error is InputError:
        raise InputError(message, path=shown or str(path))
    raise error(f"{shown or path}: {message}")


# -- finding inputs ----------------------------------------------------------------------------------------------


def _prepared_copies(src: DataSource, given: Path) -> list[Path] | None:
    """The prepared files of `src` in `given` (side by side, or in a <source>/ folder of a data folder), or None
    unless every one is there."""
    if any(f.is_pattern for f in src.files):
        return None
    for folder in (given, given / src.name):
        paths = [folder / f.name for f in src.files]
        if all(p.is_file() for p in paths):
            return paths
    if given.is_file() and len(src.files) == 1 and given.name == src.files[0].name:
        return [given]
    return None


def _upstream_copy(src: DataSource, up: Upstream, given: Path) -> Path:
    """Upstream file `up` under `given`: at its repository path, or by its name alone; `given` itself when it is
    the one upstream file."""
    if given.is_file() and len(src.upstream) == 1:
        return given
    for path in (given / up.path, given / up.basename):
        if path.is_file():
            return path
    raise InputError(f"--from: no {up.basename} (upstream {up.path} at {src.origin}) here, by that path or name",
                     path=str(given))


# -- preparing and installing ------------------------------------------------------------------------------------


def _prepare(src: DataSource, inputs: Sequence[Path], folder: Path, pins: Mapping[str, str],
             error: type[Exception], origin: str) -> None:
    """Run the source's prepare function into a temp folder beside `folder`, check the outputs, install them."""
    work = staging.make_temp(folder, directory=True)
    try:
        SOURCES.load(src.name)(src, inputs, work)
        outputs = [work / f.name for f in src.files]
        for path, prepared in zip(outputs, src.files):
            if not path.is_file():
                raise error(f"preparing {src.name} wrote no {prepared.name}")
            _check(path, _pin(prepared, pins), error, f"{src.name}/{prepared.name} {origin}",
                   shown=str(folder / prepared.name))
        _install(src, folder, outputs)
    finally:
        staging.remove(work)


def _install(src: DataSource, folder: Path, paths: Sequence[Path]) -> None:
    """Copy each checked file into `folder` under its prepared name: a temp file beside it, renamed into place."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for path, prepared in zip(paths, src.files):
            target = folder / prepared.name
            temp = staging.make_temp(target)
            try:
                shutil.copyfile(path, temp)
                os.replace(temp, target)
            finally:
                staging.remove(temp)
    except OSError as exc:
        raise InputError(f"cannot write the data set: {exc.strerror or exc}", path=str(folder)) from exc


# -- downloading -------------------------------------------------------------------------------------------------


def _download_once(src: DataSource, up: Upstream, downloads: Path, base_url: str, pin: str | None,
                   progress: bool) -> Path:
    """Upstream file `up` in `downloads`: kept from an earlier run when it checks, else downloaded now."""
    target = downloads / up.basename
    if target.is_file() and (pin is None or sha256_of(target) == pin):
        return target
    try:
        downloads.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot make the download folder: {exc.strerror or exc}", path=str(downloads)) from exc
    download(src.url(up, base_url), target, pin, progress=progress, name=src.name)
    return target


def download(url: str, target: Path, sha256: str | None, *, progress: bool = True, name: str = "NAME",
             timeouts: tuple[float, float, float] = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S, DEADLINE_S),
             max_bytes: int = MAX_DOWNLOAD_BYTES) -> None:
    """Stream `url` into a temp file beside `target` and rename it to `target` once complete and, where `sha256`
    is given, checked; any failure leaves nothing behind and is one UnavailableError line.

    Args:
        url: The file's address.
        target: Where the file goes.
        sha256: Its pinned sha256, or None when only the prepared file can be checked.
        progress: Show a progress bar over bytes.
        name: The source's name, for the offline advice in the error.
        timeouts: Seconds for connecting, between two reads, and for the whole download.
        max_bytes: The most bytes taken before the download is refused (no upstream file is near it).
    """
    from tqdm.auto import tqdm

    offline = (f"; on a machine without a network, copy the upstream files and run "
               f"`morkit data fetch {name} --from PATH`")
    httpx = _httpx()
    connect, read, deadline = timeouts
    temp = staging.make_temp(target)
    digest = hashlib.sha256()
    try:
        started = time.monotonic()
        timeout = httpx.Timeout(read, connect=connect)
        with httpx.Client(timeout=timeout, follow_redirects=True) as client, \
                client.stream("GET", url, headers={"Accept-Encoding": "identity"}) as reply:
            if reply.status_code != 200:
                raise UnavailableError(f"cannot download {url}: HTTP {reply.status_code}{offline}")
            length = reply.headers.get("content-length")
            total = int(length) if length and length.isdigit() else None
            with open(temp, "wb") as out, tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                                               desc=target.name, disable=not progress, leave=False) as bar:
                for chunk in reply.iter_bytes():  # per network read: the deadline and the cap are checked each time
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
                    if time.monotonic() - started > deadline:
                        raise UnavailableError(f"cannot download {url}: not done after {deadline:g} s{offline}")
                    if reply.num_bytes_downloaded > max_bytes:
                        raise UnavailableError(f"cannot download {url}: more than {max_bytes} bytes, far more than "
                                               "the file should have")
            if total is not None and reply.num_bytes_downloaded != total:
                raise UnavailableError(f"cannot download {url}: {reply.num_bytes_downloaded} of {total} bytes "
                                       f"came{offline}")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        staging.remove(temp)
        raise UnavailableError(f"cannot download {url}: {_reason(exc)}{offline}") from None
    except OSError as exc:  # the disk is full, the folder read-only
        staging.remove(temp)
        raise InputError(f"cannot write the download: {exc.strerror or exc}", path=str(temp)) from None
    except BaseException:
        staging.remove(temp)
        raise
    if sha256 is not None and digest.hexdigest() != sha256:
        staging.remove(temp)
        raise UnavailableError(f"{url}: sha256 {digest.hexdigest()} is not the pinned {sha256}: a different or "
                               "damaged file (nothing was kept)")
    os.replace(temp, target)


def _httpx() -> Any:
    from morkit.runtime.http import httpx_module

    try:
        return httpx_module()
    except ImportError:
        raise UnavailableError("downloading needs httpx (pip install httpx); or copy the upstream files and run "
                               "`morkit data fetch NAME --from PATH`") from None


def _reason(exc: BaseException) -> str:
    """An httpx error in a few words: its message, else its kind."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
