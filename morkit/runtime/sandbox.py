"""Run untrusted (LLM-written, possibly hostile) Python in a separate, limited subprocess.

Never runs the code in this process. Each run gets a fresh temp dir as cwd (removed afterwards),
`python -I -S -B`, a minimal environment, resource limits, its own session (the whole process
group is SIGKILLed at the end) and output capped in size. The limits are applied by a launcher
script (sandbox_launcher.py) that then exec's the program, not by a `preexec_fn`, which is unsafe
with threads (`run_many` uses threads).

Best-effort isolation, Linux only: a new network namespace (no network at all) and, as root, a
new mount namespace where everything but the cwd is read-only. A seccomp filter refuses signals
to other processes, leaving the process group (setsid/setpgid) and, when running as root (where
RLIMIT_NPROC does not apply) or with `max_processes <= 1`, creating processes; threads still
work. As root all capabilities are dropped. Root can still read root's files: run untrusted code
as a non-root user where secrets live. Without seccomp a root run is refused (status "error").
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Iterable

from morkit.core import checks
from morkit.runtime.sandbox_launcher import SETUP_EXIT, SETUP_MARK

MiB = 1 << 20
_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_launcher.py")
STATUSES = ("passed", "failed", "timeout", "memory", "error")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits; memory is address space (RLIMIT_AS), processes count all of the uid's."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 512 * MiB
    max_processes: int = 64
    max_output_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        checks.positive(self.wall_seconds, "SandboxLimits.wall_seconds")
        for name in ("cpu_seconds", "memory_bytes", "max_processes", "max_output_bytes"):
            checks.positive_int(getattr(self, name), f"SandboxLimits.{name}")


@dataclass(frozen=True)
class SandboxResult:
    """How one run ended: status is one of STATUSES; returncode < 0 means killed by that signal."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run_python(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` as a Python program in a fresh sandboxed subprocess and classify the outcome."""
    import shutil
    import subprocess
    import tempfile

    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="morkit-sandbox-")
    try:
        program = os.path.join(workdir, "main.py")
        with open(program, "w", encoding="utf-8") as f:
            f.write(code)
        config = {"cpu": limits.cpu_seconds, "memory": limits.memory_bytes,
                  "nproc": limits.max_processes, "workdir": workdir}
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONIOENCODING": "utf-8"}
        cmd = [sys.executable, "-I", "-S", "-B", _LAUNCHER, json.dumps(config), program]
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True)
            except OSError as e:
                return SandboxResult("error", None, "", f"could not start sandbox: {e}", time.monotonic() - start)
            timed_out, cpu_used = False, 0.0
            try:
                timed_out = not _wait_for_exit(proc.pid, limits.wall_seconds)
            finally:
                _killpg(proc.pid)  # leader is a zombie or running, so the group id is still ours
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                cpu_used = usage.ru_utime + usage.ru_stime
            stdout = _read_capped(out, limits.max_output_bytes)
            stderr = _read_capped(err, limits.max_output_bytes)
        kind = _classify(proc.returncode, stderr, timed_out, cpu_used, limits)
        return SandboxResult(kind, proc.returncode, stdout, stderr, time.monotonic() - start)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_many(codes: Iterable[str], limits: SandboxLimits = SandboxLimits(), workers: int = 2) -> list[SandboxResult]:
    """Run several programs, each in its own subprocess, `workers` at a time; results keep input order."""
    from concurrent.futures import ThreadPoolExecutor

    codes = list(codes)
    if workers <= 1 or len(codes) <= 1:
        return [run_python(c, limits) for c in codes]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="morkit-sandbox") as pool:
        return list(pool.map(lambda c: run_python(c, limits), codes))


def _wait_for_exit(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` s for the child to exit WITHOUT reaping it; True if it exited."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(max(0, int(timeout * 1000))))
        finally:
            os.close(fd)
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_capped(f, limit: int) -> str:
    """Decode at most `limit` bytes of a capture file: its head and tail, with a marker between."""
    size = os.fstat(f.fileno()).st_size
    f.seek(0)
    if size <= limit:
        data = f.read()
    else:
        head = f.read(limit // 2)
        f.seek(size - (limit - limit // 2))
        data = head + b"\n...[%d bytes omitted]...\n" % (size - limit) + f.read()
    return data.decode("utf-8", "replace")


def _classify(returncode: int, stderr: str, timed_out: bool, cpu_used: float, limits: SandboxLimits) -> str:
    if timed_out or returncode == -signal.SIGXCPU:
        return "timeout"
    if returncode == 0:
        return "passed"
    if returncode == SETUP_EXIT and SETUP_MARK in stderr:
        return "error"
    if "MemoryError" in stderr[-2000:]:
        return "memory"
    if returncode in (-signal.SIGKILL, -signal.SIGSEGV):
        return "timeout" if cpu_used >= limits.cpu_seconds else "memory"
    return "failed"
