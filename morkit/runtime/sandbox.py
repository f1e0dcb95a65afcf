"""Run untrusted (LLM-written, possibly hostile) Python in a separate, isolated process tree, never in this one.

`run_python` starts sandbox_launcher.py and classifies how the run ended; docs/security.md says what holds."""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from morkit.core import checks
from morkit.runtime.sandbox_harness import NO_CHECK
from morkit.runtime.sandbox_launcher import wait_for_exit

MiB = 1 << 20
_T = TypeVar("_T")
_R = TypeVar("_R")
_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_launcher.py")
STATUSES = ("passed", "failed", "timeout", "memory", "error")
_GRACE_SECONDS = 5.0  # morkit's own backstop after the launcher's wall limit
_NOT_FINISHED = "morkit-sandbox: the program did not run to its end (it exited before the tests finished)"
_STDIN_FILE = ".stdin"  # in the workdir beside main.py; unlinked in the sandbox once it is on fd 0
_TESTS_FILE = ".tests"  # likewise; the harness reads it from an fd and closes it before the candidate runs


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits: memory is address space (RLIMIT_AS), processes count the run's own uid,
    disk is the size of the /work tmpfs (files plus directories, at most `max_files` of them)."""

    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 512 * MiB
    max_processes: int = 64
    max_output_bytes: int = 64 * 1024
    disk_bytes: int = 64 * MiB
    max_files: int = 4096

    def __post_init__(self) -> None:
        checks.positive(self.wall_seconds, "SandboxLimits.wall_seconds")
        for name in ("cpu_seconds", "memory_bytes", "max_processes", "max_output_bytes", "disk_bytes", "max_files"):
            checks.positive_int(getattr(self, name), f"SandboxLimits.{name}")


@dataclass(frozen=True)
class SandboxResult:
    """How one run ended: status is one of STATUSES; returncode < 0 means killed by that signal. `checks`: with
    tests, how many checks ran (asserts passed, unittest tests run) when the tests reached their end, else None."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    checks: int | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run_python(code: str, limits: SandboxLimits = SandboxLimits(), *, stdin: bytes | str | None = None,
               tests: str | None = None, helpers: str = "") -> SandboxResult:
    """Run `code` as a Python program in a fresh sandbox and classify the outcome. With `tests`, `code` is the
    candidate, imported as module `solution`, and "passed" needs the tests, run as `__main__` in another process
    after `helpers` (the prompt's code), to reach their end with a check run. `stdin` (str: UTF-8) is fd 0; None:
    /dev/null."""
    import shutil
    import subprocess
    import tempfile

    start = time.monotonic()
    kept: list[int] = []  # our pipe ends, each closed once below
    workdir = tempfile.mkdtemp(prefix="morkit-sandbox-")
    try:
        status_r, status_w = _pipe(kept)
        reported = tests is not None  # the tests' process reports their end with the token
        token_r, token_w = _pipe(kept) if reported else (-1, -1)
        report_r, report_w = _pipe(kept) if reported else (-1, -1)
        down = [fd for fd in (status_w, token_r, report_w) if fd >= 0]  # the launcher's ends
        token = secrets.token_hex(16).encode()
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        test_code = None if tests is None else json.dumps({"tests": tests, "helpers": helpers}).encode("utf-8")
        hidden = {_STDIN_FILE: data, _TESTS_FILE: test_code}  # unlinked in the sandbox once opened
        for name, content in hidden.items():
            if content is not None:
                with open(os.path.join(workdir, name), "wb") as f:
                    f.write(content)
        config = {"cpu": limits.cpu_seconds, "memory": limits.memory_bytes,
                  "nproc": limits.max_processes + reported,  # the tests' process, beside the candidate's
                  "disk": limits.disk_bytes + sum(len(c) for c in hidden.values() if c),
                  "inodes": limits.max_files + sum(c is not None for c in hidden.values()),
                  "wall": limits.wall_seconds, "workdir": workdir, "parent": os.getpid(), "status_fd": status_w,
                  "harness_fds": down[1:], "stdin": None if data is None else _STDIN_FILE,
                  "tests": None if test_code is None else _TESTS_FILE}
        cmd = [sys.executable, "-I", "-S", "-B", _LAUNCHER, json.dumps(config)]
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(cmd, cwd="/", env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True, pass_fds=down)
            except OSError as e:
                return SandboxResult("error", None, "", f"could not start sandbox: {e}", time.monotonic() - start)
            finally:
                for fd in down:
                    kept.remove(fd)
                    os.close(fd)
            if reported:
                _write_quietly(token_w, token)
                kept.remove(token_w)
                os.close(token_w)
            try:
                backstop = not wait_for_exit(proc.pid, limits.wall_seconds + _GRACE_SECONDS)
            finally:
                _killpg(proc.pid)  # leader is a zombie or running, so the group id is still ours
                _, wait_status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(wait_status)  # reaped here: Popen must not wait
            outcome = {"timeout": True} if backstop else _read_outcome(status_r)
            counted = _checks_reported(_read_small(report_r), token) if reported else None
            stdout = _read_capped(out, limits.max_output_bytes)
            stderr = _read_capped(err, limits.max_output_bytes)
        status, returncode, stderr = _classify(outcome, stderr, usage.ru_utime + usage.ru_stime, limits,
                                               not reported or counted is not None, counted)
        return SandboxResult(status, returncode, stdout, stderr, time.monotonic() - start, counted)
    finally:
        for fd in kept:
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


def run_many(codes: Iterable[str], limits: SandboxLimits = SandboxLimits(), workers: int = 2) -> list[SandboxResult]:
    """Run several programs, each in its own sandbox, `workers` at a time; results keep input order."""
    return in_parallel(lambda c: run_python(c, limits), codes, workers)


def in_parallel(run: Callable[[_T], _R], items: Iterable[_T], workers: int = 2) -> list[_R]:
    """`run` on every item, `workers` threads at a time (each call starts its own sandboxes); input order."""
    from concurrent.futures import ThreadPoolExecutor

    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [run(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="morkit-sandbox") as pool:
        return list(pool.map(run, items))


def _pipe(kept: list[int]) -> tuple[int, int]:
    """A new pipe whose two ends join `kept` (closed by the caller, each once)."""
    read_end, write_end = os.pipe()
    kept += [read_end, write_end]
    return read_end, write_end


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _write_quietly(fd: int, data: bytes) -> None:
    try:
        os.write(fd, data)
    except BrokenPipeError:  # the launcher failed before reading it; its status says why
        pass


def _read_small(fd: int, limit: int = 4096) -> bytes:
    """What a pipe holds now, at most `limit` bytes; never blocks (every writer has exited)."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, limit)
    except BlockingIOError:
        return b""


def _checks_reported(report: bytes, token: bytes) -> int | None:
    """The count of checks in the tests' report `token:count`, or None when the report is not that (the tests did
    not reach their end)."""
    head, colon, count = report.partition(b":")
    if head != token or not colon or not (0 < len(count) <= 12 and count.isdigit()):
        return None
    return int(count)


def _read_outcome(fd: int) -> dict:
    """The launcher's one-line report: {"exit": n}, {"signal": n}, {"timeout": true} or {"setup": why}."""
    try:
        outcome = json.loads(_read_small(fd).decode() or "null")
    except ValueError:
        outcome = None
    return outcome if isinstance(outcome, dict) else {"setup": "the sandbox launcher died without a report"}


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


def _classify(outcome: dict, stderr: str, cpu_used: float, limits: SandboxLimits, finished: bool,
              counted: int | None = None) -> tuple[str, int | None, str]:
    """(status, returncode, stderr) from the launcher's report; a setup failure's reason joins stderr. Tests that
    reached their end with no check run fail (the harness exits 1 then; this holds even if it did not)."""
    if "timeout" in outcome:
        return "timeout", None, stderr
    if "setup" in outcome:
        return "error", None, (stderr + f"\nmorkit-sandbox: setup failed: {outcome['setup']}").lstrip()
    returncode = -int(outcome["signal"]) if "signal" in outcome else int(outcome.get("exit", 1))
    if returncode == -signal.SIGXCPU:
        return "timeout", returncode, stderr
    if returncode == 0 and not finished:
        return "failed", 0, (stderr + "\n" + _NOT_FINISHED).lstrip()
    if returncode == 0 and counted == 0:
        return "failed", 0, stderr if NO_CHECK in stderr else (stderr + "\n" + NO_CHECK).lstrip()
    if returncode == 0:
        return "passed", 0, stderr
    if "MemoryError" in stderr[-2000:]:
        return "memory", returncode, stderr
    if returncode in (-signal.SIGKILL, -signal.SIGSEGV):
        return ("timeout" if cpu_used >= limits.cpu_seconds else "memory"), returncode, stderr
    return "failed", returncode, stderr
