"""The sandbox runs real subprocesses: hostile programs must end contained and classified."""

from __future__ import annotations

import os
import socket
import time

import pytest

from morkit.runtime.sandbox import SandboxLimits, run_many, run_python

FAST = SandboxLimits(wall_seconds=2.5, cpu_seconds=10, memory_bytes=256 * 2**20, max_output_bytes=4096)
ROOT = os.geteuid() == 0


def _alive_with_cmdline(pid: int, needle: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return needle.encode() in f.read()  # zombies have an empty cmdline
    except OSError:
        return False


def test_passing_code_passes_and_captures_output():
    r = run_python("import sys\nprint('hello')\nprint('warn', file=sys.stderr)", FAST)
    assert (r.status, r.returncode, r.stdout, r.stderr) == ("passed", 0, "hello\n", "warn\n")


def test_failing_assert_is_failed():
    r = run_python("assert 1 + 1 == 3, 'bad sum'", FAST)
    assert r.status == "failed" and r.returncode == 1
    assert "AssertionError: bad sum" in r.stderr


def test_infinite_loop_times_out_near_the_wall_limit():
    start = time.monotonic()
    r = run_python("while True: pass", FAST)
    assert r.status == "timeout"
    assert FAST.wall_seconds - 0.1 <= time.monotonic() - start < FAST.wall_seconds + 2


def test_cpu_limit_is_a_timeout():
    r = run_python("while True: pass", SandboxLimits(wall_seconds=6, cpu_seconds=1))
    assert r.status == "timeout" and r.seconds < 4  # stopped by RLIMIT_CPU, before the wall limit


def test_fork_bomb_is_contained_and_leaves_no_children():
    code = "import os\nwhile True:\n    pid = os.fork()\n    if pid:\n        print(pid, flush=True)\n"
    r = run_python(code, SandboxLimits(wall_seconds=2, max_processes=16, max_output_bytes=1 << 20))
    assert r.status != "passed"
    pids = [int(p) for p in r.stdout.split() if p.isdigit()]
    time.sleep(0.2)
    assert not [p for p in pids if _alive_with_cmdline(p, "morkit-sandbox-")]
    if ROOT:  # RLIMIT_NPROC does not bind root, so the sandbox refuses to fork at all
        assert not pids and "PermissionError" in r.stderr


def test_threads_still_work():
    code = "import threading\nt = threading.Thread(target=print, args=('from thread',))\nt.start(); t.join()"
    assert run_python(code, FAST).stdout == "from thread\n"


@pytest.mark.parametrize("code", ["x = bytearray(10**10)", "x = []\nwhile True:\n    x.append(' ' * 10**6)"])
def test_memory_hog_is_stopped(code):
    r = run_python(code, FAST)
    assert r.status == "memory", r.stderr[-300:]  # both raise MemoryError under RLIMIT_AS


def test_output_flood_is_bounded():
    r = run_python("while True: print('x' * 10000)", FAST)
    assert r.status != "passed"
    assert len(r.stdout) <= FAST.max_output_bytes + 100
    assert "bytes omitted" in r.stdout


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("MORKIT_TEST_SECRET", "hunter2")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    r = run_python("import os\nprint(sorted(os.environ.items()))", FAST)
    assert r.status == "passed"
    assert "hunter2" not in r.stdout and "PROXY" not in r.stdout.upper()


def test_cannot_signal_other_processes():
    r = run_python(f"import os, signal\nos.kill({os.getpid()}, 0)", FAST)
    assert r.status == "failed" and "PermissionError" in r.stderr


def test_cwd_is_private_and_removed(tmp_path):
    r = run_python("import os\nopen('note.txt', 'w').write('ok')\nprint(os.getcwd())", FAST)
    assert r.status == "passed"
    workdir = r.stdout.strip()
    assert workdir != os.getcwd() and not os.path.exists(workdir)


def test_writes_outside_cwd_fail_when_mount_namespace_works(tmp_path):
    probe = run_python("import os\nprint(os.readlink('/proc/self/ns/mnt'))", FAST)
    if probe.stdout.strip() == os.readlink("/proc/self/ns/mnt"):
        pytest.skip("no mount namespace here (needs root with CAP_SYS_ADMIN): writes are not contained")
    target = tmp_path / "escaped.txt"
    r = run_python(f"open({str(target)!r}, 'w').write('x')", FAST)
    assert r.status == "failed" and "Read-only file system" in r.stderr
    assert not target.exists()


def test_network_is_cut_when_unshare_works():
    probe = run_python("import os\nprint(os.readlink('/proc/self/ns/net'))", FAST)
    if probe.stdout.strip() == os.readlink("/proc/self/ns/net"):
        pytest.skip("unshare(CLONE_NEWNET) not permitted here: the sandbox has network access")
    with socket.socket() as server:  # a local server the sandbox could reach without a new netns
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')"
        r = run_python(code, FAST)
    assert r.status == "failed" and "connected" not in r.stdout
    assert "Network is unreachable" in r.stderr


def test_run_many_keeps_order():
    codes = [f"import time\ntime.sleep({0.3 if i % 2 == 0 else 0})\nprint({i})" for i in range(5)] + ["raise SystemExit(3)"]
    results = run_many(codes, FAST, workers=3)
    assert [r.stdout.strip() for r in results[:5]] == [str(i) for i in range(5)]
    assert results[5].status == "failed" and results[5].returncode == 3


def test_site_builtins_exist_despite_no_site():
    assert run_python("help(len)\nexit(0)\nraise SystemExit(5)", FAST).status == "passed"
    assert run_python("quit(4)", FAST).returncode == 4
