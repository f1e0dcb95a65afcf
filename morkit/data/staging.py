"""Temporary files and directories beside a target, named so that the next writer cleans up after a killed one.

DIR/.NAME.<host>-<pid>.<random>.tmp; `sweep` removes a dead writer's and any over a day old (docs/jsonl.md).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import glob
import hashlib
import logging
import os
import platform
import re
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

STALE_AFTER_S = 24 * 3600
"""A temp older than this is removed whoever made it (its writer cannot still be running a write)."""

_TAIL = re.compile(r"(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.(?:tmp|old)")
"""What follows `.NAME.` in a temp's name: <host>-<pid>.<random>."""
_TAIL_AT_END = re.compile(r"\.(?:" + _TAIL.pattern + r")$")


def _host() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):  # someone else's process, or not ours to judge
        return True
    return True


def _gone(match: re.Match | None, mtime: float) -> bool:
    """Whether a temp's writer can no longer be using it: it ran on this machine and its process has
    ended, or the temp is older than STALE_AFTER_S (a writer elsewhere, a reused pid)."""
    if match is not None and match["host"] == _host() and not _alive(int(match["pid"])):
        return True
    return time.time() - mtime > STALE_AFTER_S


def writer_alive(path: str | os.PathLike) -> bool:
    """Whether the process that made this temp may still be using it (see `_gone`)."""
    path = Path(path)
    try:
        mtime = path.lstat().st_mtime
    except OSError:
        return False
    return not _gone(_TAIL_AT_END.search(path.name), mtime)


def remove(path: str | os.PathLike) -> None:
    """Remove a file, a link or a directory tree; whatever is already gone is fine."""
    path = Path(path)
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def sweep(target: str | os.PathLike) -> int:
    """Remove stale temps of `target` (see the module doc); returns how many were removed."""
    target = Path(target)
    prefix = f".{target.name}."
    removed = 0
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        match = _TAIL.fullmatch(entry.name[len(prefix):])
        if match is None:
            continue
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if _gone(match, mtime):
            remove(entry.path)
            removed += 1
    return removed


def make_temp(target: str | os.PathLike, *, directory: bool = False, suffix: str = ".tmp") -> Path:
    """A new empty temp file (or directory) beside `target`, after sweeping its stale temps."""
    target = Path(target)
    sweep(target)
    prefix = f".{target.name}.{_host()}-{os.getpid()}."  # tempfile adds a random part and the suffix
    if directory:
        return Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=target.parent))
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
    os.close(fd)
    return Path(name)


# ---- replacing a directory ------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_SYS_RENAMEAT2 = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276}


@functools.lru_cache(maxsize=1)
def _renameat2() -> Callable[[bytes, bytes, int], int] | None:
    """renameat2(AT_FDCWD, old, AT_FDCWD, new, flags) from libc, or by syscall number; None where absent."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover
        return None
    fn = getattr(libc, "renameat2", None)
    if fn is not None:
        fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
        fn.restype = ctypes.c_int
        return lambda old, new, flags: fn(_AT_FDCWD, old, _AT_FDCWD, new, flags)
    number = _SYS_RENAMEAT2.get(platform.machine().lower())
    if number is None:  # pragma: no cover
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    return lambda old, new, flags: syscall(ctypes.c_long(number), ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(old),
                                           ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(new), ctypes.c_uint(flags))


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; False where this system or file system cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(os.fsencode(a), os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def recover(target: Path) -> None:
    """A writer killed between the two renames of the fallback left no pool at `target` and the old one in
    .NAME.*.old/pool: put that back before anything sweeps it away."""
    for old in moved_aside(target):
        if not writer_alive(old):
            os.rename(old / "pool", target)
            remove(old)
            log.warning("%s: restored the pool an interrupted save had moved aside", target)
            return


def moved_aside(target: Path) -> list[Path]:
    """The old pools that fallback saves moved aside, when `target` itself is missing."""
    if os.path.lexists(target):
        return []
    return [old for old in sorted(target.parent.glob(f".{glob.escape(target.name)}.*.old"))
            if (old / "pool" / "pool.json").is_file()]


def swap_in(staging_dir: Path, target: Path) -> None:
    """Put the complete directory `staging_dir` at `target` in one atomic exchange where the system can
    (renameat2 RENAME_EXCHANGE: never a moment without a directory there), else by two renames; the old
    directory is removed."""
    if not os.path.lexists(target):
        os.rename(staging_dir, target)
        return
    if exchange(staging_dir, target):
        remove(staging_dir)  # now the old pool
        return
    old = make_temp(target, directory=True, suffix=".old")
    os.replace(target, old / "pool")
    os.replace(staging_dir, target)
    remove(old)
