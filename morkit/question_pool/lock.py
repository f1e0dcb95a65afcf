"""The writers' lock of a pool directory: an exclusive flock on `.NAME.lock` beside it.

A second writer waits up to LOCK_TIMEOUT_S, then fails naming the pool; a flock dies with its process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from morkit.core.errors import InputError

LOCK_TIMEOUT_S = 600.0
"""How long a pool writer waits for another writer of the same pool before it gives up. Writers hold the
lock only while they merge and write (seconds, also for large pools), never while they score."""


def canonical(path: str | os.PathLike) -> Path:
    """The pool path with its parent resolved (symlinks, `..`), the last component kept as given."""
    path = Path(os.path.abspath(path))
    return Path(os.path.realpath(path.parent)) / path.name


class _Held:
    """This process's hold on one pool's lock: a thread lock, the flock'ed descriptor, the nesting depth."""

    def __init__(self) -> None:
        self.thread_lock = threading.RLock()
        self.fd: int | None = None
        self.depth = 0


_HELD: dict[str, _Held] = {}
_HELD_GUARD = threading.Lock()


def lock_path(path: str | os.PathLike) -> Path:
    """The lock file of the pool at `path`: `.NAME.lock` in its parent directory."""
    target = canonical(path)
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def pool_lock(path: str | os.PathLike, timeout: float | None = None) -> Iterator[None]:
    """Hold the pool's writer lock for the block (re-entrant within a process; threads queue on it).

    Waits up to `timeout` seconds (default LOCK_TIMEOUT_S) for another writer, then raises InputError."""
    target = canonical(path)
    file = lock_path(target)
    timeout = LOCK_TIMEOUT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    with _HELD_GUARD:
        held = _HELD.setdefault(str(file), _Held())

    def busy() -> InputError:
        return InputError(f"another process is writing this pool (waited {timeout:g} s for its lock {file.name}); "
                          "try again when it has finished", path=str(target))

    if not held.thread_lock.acquire(timeout=max(0.0, timeout)):
        raise busy()
    try:
        if held.depth == 0:
            held.fd = _acquire(file, deadline, busy)
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
            if held.depth == 0:
                _release(file, held.fd)
                held.fd = None
    finally:
        held.thread_lock.release()


def _acquire(file: Path, deadline: float, busy: Callable[[], InputError]) -> int:
    """Open and flock the lock file; retry when the file was replaced between open and flock. No writer goes
    unlocked: a system without flock (not POSIX) or a file system without locks is an error naming the file."""
    try:
        import fcntl
    except ImportError as exc:  # pragma: no cover - not POSIX
        raise InputError(f"cannot lock the pool's lock file: this platform ({sys.platform}) has no flock; write "
                         "pools on Linux or macOS", path=str(file)) from exc
    pause = 0.01
    while True:
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(f"cannot create the pool's lock file: {exc.strerror}", path=str(file)) from exc
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise busy() from None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.2)
                except OSError as exc:  # a file system without locks: no writer may go unlocked
                    raise InputError(f"cannot lock the pool's lock file ({exc.strerror}): write pools on a file "
                                     "system that supports file locks (build it on a local disk, then move it)",
                                     path=str(file)) from exc
            # The holder before us removes the file on release: ours must still be the one at the path.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(file))
            except FileNotFoundError:
                same = False
            if same:
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _release(file: Path, fd: int) -> None:
    import fcntl

    try:
        file.unlink(missing_ok=True)  # while still holding it, so no one else's lock file is removed
    except OSError:
        pass
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
