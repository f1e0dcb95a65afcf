"""Symbolic answer comparison in a child process (`python -m morkit.runtime.symbolic`, JSON lines on its pipes)
that is killed past its time: sympy has no timeout, and one big-integer power is a single C call holding the GIL,
which no thread can stop. The routing engine compares here (`core.budget.SymbolicBudget`; docs/serving.md).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MEMORY_BYTES = 2 << 30
"""The child's address-space limit (RLIMIT_AS): sympy and math_verify take about 0.3 GiB of it."""
READY = b"ready\n"
WARM_UP = (("1", "1"), ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"), ("\\sin^2x+\\cos^2x", "1"))
"""Compared before the child says it is ready (about 1.5 s in all, most of it importing math_verify and sympy): the
costliest of sympy's lazy imports are done by then, so a real answer's first comparison does not pay for them."""


class _Child:
    """One comparison process and what it has written that was not read yet."""

    def __init__(self, memory_bytes: int):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else ""),
               "MORKIT_SYMBOLIC_MEMORY": str(memory_bytes), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "morkit.runtime.symbolic"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True)
        self.ready = False
        self._buffer = b""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def line(self, timeout_s: float) -> bytes | None:
        """Its next line within `timeout_s`, or None (timed out, or it closed its end)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass


class SymbolicWorker:
    """A child comparing answers with math_verify (`core.grading.verify_pair`): `compare(a, b, pair_s, wait_s)`
    waits up to `wait_s` for it to be ready (about a second of imports), gives the pair `pair_s`, then kills it and
    answers None (undecided). From the first kill a spare child (60 MB) is kept warming. Thread-safe."""

    def __init__(self, memory_bytes: int = MEMORY_BYTES):
        self.memory_bytes = memory_bytes
        self._child: _Child | None = None
        self._spare: _Child | None = None
        self._lock = threading.Lock()
        self._spawner: ThreadPoolExecutor | None = None  # one long-lived thread: a child dies with the thread
        # that started it (PR_SET_PDEATHSIG), so none is started from a caller's thread that may end first
        self.killed = 0  # children ended for running past a pair's time

    def start(self, wait_s: float = 0.0) -> None:
        """Start the child now (if none is running) and wait up to `wait_s` for it to be ready, so that the first
        comparison need not wait for its imports."""
        with self._lock:
            child = self._running()
            if wait_s > 0 and not child.ready:
                child.ready = child.line(wait_s) == READY

    def _running(self) -> _Child:
        if self._child is None or not self._child.alive():
            if self._child is not None:
                self._child.kill()
            if self._spare is None:
                self._child = self._new()
            else:  # a comparison was ended before: keep the next spare warming too
                self._child, self._spare = self._spare, self._new()
        return self._child

    def _new(self) -> _Child:
        if self._spawner is None:
            self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="morkit-symbolic")
        return self._spawner.submit(_Child, self.memory_bytes).result()

    def compare(self, a: str, b: str, pair_s: float, wait_s: float) -> tuple[bool | None, float]:
        """(verdict, seconds the pair took): the pair gets `pair_s` from the moment it is sent, once the child is
        ready (waited for up to `wait_s`, uncharged; SymbolicSpent when it is not, so no pair's verdict depends on
        whether an earlier one ended a child). None: not decided in time (the child is ended)."""
        from morkit.core.budget import SymbolicSpent

        with self._lock:
            try:
                child = self._running()
            except OSError as exc:  # no process could be started (out of memory or file descriptors)
                raise SymbolicSpent(f"no comparison process: {exc}") from exc
            if not child.ready:
                child.ready = child.line(wait_s) == READY
                if not child.ready:
                    self._end()  # it died starting, or is too slow: the next call starts another
                    raise SymbolicSpent("the comparison process did not start in time")
            started = time.monotonic()
            try:
                assert child.proc.stdin is not None
                child.proc.stdin.write(json.dumps([a, b]).encode() + b"\n")
                child.proc.stdin.flush()
            except OSError:  # it died between two comparisons
                self._end()
                return None, time.monotonic() - started
            line = child.line(pair_s)
            took = time.monotonic() - started
            if line is None:  # past its time: end it, the only stop that always works
                self._end()
                self.killed += 1
                if self._spare is None:
                    self._spare = self._new()  # warming while the caller goes on
                return None, took
            try:
                return bool(json.loads(line)["equal"]), took
            except (ValueError, KeyError, TypeError):
                self._end()
                return None, took

    def _end(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()

    def close(self) -> None:
        with self._lock:
            self._end()
            spare, self._spare = self._spare, None
            if spare is not None:
                spare.kill()
            if self._spawner is not None:
                self._spawner.shutdown(wait=False)
                self._spawner = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (a comparison stuck in C would otherwise outlive it)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main() -> None:
    """The child: compare pairs read from stdin until it closes."""
    import resource

    _die_with_parent()
    limit = int(os.environ.get("MORKIT_SYMBOLIC_MEMORY", MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # whatever sympy or math_verify print goes nowhere, not into the replies
    from morkit.core.grading import verify_pair

    for a, b in WARM_UP:
        verify_pair(a, b)
    replies.write(READY)
    replies.flush()
    for line in sys.stdin.buffer:
        try:
            a, b = json.loads(line)
            equal = verify_pair(str(a), str(b))
        except MemoryError:
            equal = False
        except (ValueError, TypeError):
            equal = False
        replies.write(json.dumps({"equal": bool(equal)}).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    main()
