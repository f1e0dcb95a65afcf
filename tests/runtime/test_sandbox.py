"""The sandbox runs real subprocesses: hostile programs must end contained and classified.

The attacks from the second half failed against the sandbox before PID, mount and user isolation,
the disk cap, low hard limits and the completion report (see docs/security.md)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from morkit.runtime.sandbox import SandboxLimits, run_many, run_python

FAST = SandboxLimits(wall_seconds=2.5, cpu_seconds=10, memory_bytes=256 * 2**20, max_output_bytes=4096)


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


@pytest.mark.slow
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
    assert "BlockingIOError" in r.stderr  # RLIMIT_NPROC binds: the run has a uid of its own, even as root
    time.sleep(0.2)
    assert not _sandboxed_processes(), _describe()


def test_one_process_only_when_max_processes_is_one():
    r = run_python("import os\nos.fork()", SandboxLimits(wall_seconds=2, max_processes=1))
    assert r.status == "failed" and "PermissionError" in r.stderr


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


def _sandboxed_processes() -> list[int]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        if _alive_with_cmdline(int(pid), "morkit-sandbox") and not _alive_with_cmdline(int(pid), "pytest"):
            found.append(int(pid))
    return found


def _describe() -> str:
    """Each leftover's pid, parent, state and command line, for a failure message."""
    rows = []
    for pid in _sandboxed_processes():
        try:
            status = dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in line)
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")[:300]
            rows.append(f"{pid} ppid {status.get('PPid')} {status.get('State')} {cmdline!r}")
        except OSError:
            pass
    return "; ".join(rows)


def test_cannot_signal_other_processes():
    """Its PID namespace holds its own processes and the init (pid 1), which seccomp keeps out of reach
    with every process (-1); an outside pid does not exist there."""
    program = textwrap.dedent(f"""
        import os
        for pid, error in ((1, PermissionError), (-1, PermissionError), ({os.getpid()}, ProcessLookupError)):
            try:
                os.kill(pid, 0)
            except error:
                print("out of reach", pid)
    """)
    r = run_python(program, FAST)
    assert r.passed and r.stdout == f"out of reach 1\nout of reach -1\nout of reach {os.getpid()}\n", r


def test_cwd_is_private_and_removed():
    import tempfile

    before = set(os.listdir(tempfile.gettempdir()))
    r = run_python("import os\nopen('note.txt', 'w').write('ok')\nprint(os.getcwd(), sorted(os.listdir('.')))", FAST)
    assert r.status == "passed" and r.stdout.split(" ", 1) == ["/work", "['main.py', 'note.txt']\n"]
    assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("morkit-sandbox-")]


def test_the_host_tree_is_out_of_sight_and_system_files_are_read_only(tmp_path):
    (tmp_path / "secret.txt").write_text("hunter2")
    r = run_python(f"print(open({str(tmp_path / 'secret.txt')!r}).read())", FAST)
    assert r.status == "failed" and "FileNotFoundError" in r.stderr and "hunter2" not in r.stdout
    r = run_python("open('/usr/escaped.txt', 'w').write('x')", FAST)
    assert r.status == "failed" and "Read-only file system" in r.stderr
    assert not os.path.exists("/usr/escaped.txt")


def test_network_is_cut():
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


def test_stdin_reaches_the_program_read_only_and_out_of_sight():
    echo = "import os, sys\nprint(sorted(os.listdir('.')))\nsys.stdout.write(sys.stdin.read())"
    r = run_python(echo, FAST, stdin="first line\nsecond ünïcode line\n")
    assert r.passed and r.stdout == "['main.py']\nfirst line\nsecond ünïcode line\n", r.stderr
    r = run_python("import os\nos.write(0, b'overwrite')", FAST, stdin=b"input")
    assert r.status == "failed" and "Bad file descriptor" in r.stderr  # fd 0 is open read-only


def test_a_large_stdin_arrives_whole_and_no_stdin_reads_as_eof():
    import hashlib

    data = bytes(range(256)) * 4096  # 1 MiB, every byte value
    code = "import hashlib, sys\nd = sys.stdin.buffer.read()\nprint(len(d), hashlib.sha256(d).hexdigest())"
    r = run_python(code, SandboxLimits(wall_seconds=5, disk_bytes=1 << 20), stdin=data)  # not charged to /work
    assert r.passed and r.stdout == f"{len(data)} {hashlib.sha256(data).hexdigest()}\n", r.stderr
    r = run_python("import sys\nprint(repr(sys.stdin.read()))", FAST)
    assert r.passed and r.stdout == "''\n"
    r = run_python("input()", FAST)
    assert r.status == "failed" and "EOFError" in r.stderr


def test_site_builtins_exist_despite_no_site():
    assert run_python("help(len)\nexit(0)\nraise SystemExit(5)", FAST).status == "passed"
    assert run_python("quit(4)", FAST).returncode == 4


@pytest.fixture
def victim():
    """An outside process a candidate must not be able to signal."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_candidate_cannot_kill_an_outside_process_through_f_setown(victim):
    code = textwrap.dedent(f"""
        import fcntl, os, signal
        r, w = os.pipe()
        fcntl.fcntl(r, fcntl.F_SETOWN, {victim.pid})
        fcntl.fcntl(r, 10, signal.SIGKILL)  # F_SETSIG
        fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
        os.write(w, b"x")
        print("armed")
    """)
    r = run_python(code, FAST)
    time.sleep(0.3)
    assert victim.poll() is None, "the candidate killed an outside process"
    assert r.status == "failed" and "armed" not in r.stdout


def test_candidate_cannot_kill_morkit_through_f_setown():
    """Aimed at the morkit process itself (its host pid, given to the candidate): morkit lives on."""
    script = textwrap.dedent("""
        import os
        from morkit.runtime.sandbox import run_python
        code = (
            "import fcntl, os, signal\\n"
            "r, w = os.pipe()\\n"
            f"fcntl.fcntl(r, fcntl.F_SETOWN, {os.getpid()})\\n"
            "fcntl.fcntl(r, 10, signal.SIGKILL)\\n"
            "fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)\\n"
            "os.write(w, b'x')\\n"
        )
        print(run_python(code).status, "survived")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["failed", "survived"], out.stderr[-500:]


def test_candidate_sees_no_process():
    code = "import os\nprint(os.path.exists('/proc/self'), os.path.exists('/proc/1'), os.getpid())"
    r = run_python(code, FAST)
    assert r.status == "passed", r.stderr
    self_visible, init_visible, pid = r.stdout.split()
    assert self_visible == init_visible == "False" and int(pid) < 10  # a PID namespace, and no /proc at all


@pytest.mark.parametrize("attempt", [
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "assert libc.syscall(56, 0x10000000 | 0x40000000 | 17, 0, 0, 0, 0) == -1, 'cloned into new namespaces'",
    "import ctypes\nassert ctypes.CDLL(None).shmget(0, 1 << 30, 0o1600) == -1, 'got System V shared memory'",
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\npidfd = os.pidfd_open(os.getpid())\n"
    "assert libc.syscall(438, pidfd, 1, 0) == -1 and ctypes.get_errno() == 1, 'took a descriptor with pidfd_getfd'",
])
def test_no_new_namespaces_no_system_v_shared_memory_no_descriptor_theft(attempt):
    r = run_python(attempt, FAST)
    assert r.status == "passed", r.stderr


def test_time_limit_holds_when_the_parent_dies():
    sleeper = "import time\nprint('started', flush=True)\ntime.sleep(60)\n"
    script = (f"from morkit.runtime.sandbox import *\nrun_many([{sleeper!r}] * 2, "
              "SandboxLimits(wall_seconds=30), workers=2)")
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 20
    while len(_sandboxed_processes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sandboxed_processes(), "the sandboxed sleepers never started"
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while _sandboxed_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _sandboxed_processes(), f"sandboxed programs outlived the morkit process: {_describe()}"


def test_candidate_cannot_reach_an_outside_unix_socket(tmp_path):
    path = str(tmp_path / "outside.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        os.chmod(tmp_path, 0o777)
        os.chmod(path, 0o777)
        server.listen()
        server.settimeout(0.5)
        code = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({path!r})\ns.sendall(b'hello')"
        r = run_python(code, FAST)
        with pytest.raises(socket.timeout):
            server.accept()
    assert r.status == "failed" and ("FileNotFoundError" in r.stderr or "PermissionError" in r.stderr), r.stderr


def test_disk_use_is_capped():
    code = textwrap.dedent("""
        block = b"x" * (1 << 20)
        for i in range(64):
            with open(f"f{i}", "wb") as f:
                for _ in range(16):
                    f.write(block)
    """)
    limits = SandboxLimits(wall_seconds=20, cpu_seconds=20, disk_bytes=32 << 20)
    r = run_python(code, limits)
    assert r.status == "failed" and "No space left on device" in r.stderr, r.stderr[-500:]


def test_hard_limits_are_low_and_cannot_be_raised():
    code = textwrap.dedent("""
        import resource
        for res in (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NOFILE):
            soft, hard = resource.getrlimit(res)
            print(soft, hard)
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (hard + 1, hard + 1))
            print("raised")
        except (ValueError, OSError):
            print("refused")
    """)
    r = run_python(code, SandboxLimits(max_processes=8))
    assert r.status == "passed", r.stderr
    *rows, verdict = r.stdout.split("\n")[:-1]
    nproc, memory, cpu, files = ([int(v) for v in row.split()] for row in rows)
    assert nproc == [8, 8] and memory[0] == memory[1] and cpu[1] <= cpu[0] + 1 and files[1] <= 1024
    assert verdict == "refused"


def test_fork_is_allowed_up_to_the_process_limit_and_leaves_nothing_behind():
    code = textwrap.dedent("""
        import os, time
        for i in range(40):
            try:
                pid = os.fork()
            except OSError as e:
                print("limit", i, type(e).__name__, flush=True)
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
        print("done", flush=True)
    """)
    r = run_python(code, SandboxLimits(wall_seconds=5, max_processes=8))
    assert r.status == "passed", r.stderr
    assert "limit" in r.stdout and int(r.stdout.split()[1]) <= 8
    time.sleep(0.2)
    assert not _sandboxed_processes(), _describe()


@pytest.mark.parametrize("exit_early", ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "exit()",
                                        "raise SystemExit", "import os, signal\nos.kill(os.getpid(), 9)"])
def test_exiting_before_the_tests_is_a_failure(exit_early):
    program = "def add(a, b):\n    return a - b\n" + exit_early + "\n"
    r = run_python(program, FAST, tests="assert add(2, 3) == 5\n")
    assert not r.passed, (r.status, r.stderr)


def test_tests_that_run_to_their_end_pass_with_the_completion_report():
    program = "def add(a, b):\n    return a + b\n"
    tests = "assert add(2, 3) == 5\nprint('ok')\n"
    r = run_python(program, FAST, tests=tests)
    assert r.passed and r.stdout == "ok\n"
    assert not run_python(program.replace("a + b", "a - b"), FAST, tests=tests).passed


FORGERIES = {
    "walk the stack to the harness": (
        "import os, sys\nf = sys._getframe()\n"
        "while f is not None and 'token' not in f.f_locals:\n    f = f.f_back\n"
        "if f is not None:\n    os.write(f.f_locals['fds'][1], f.f_locals['token'])\n    os._exit(0)\n"),
    "other threads' frames": (
        "import os, sys\nfor f in sys._current_frames().values():\n"
        "    while f is not None:\n        if 'token' in f.f_locals:\n"
        "            os.write(f.f_locals['fds'][1], f.f_locals['token']); os._exit(0)\n        f = f.f_back\n"),
    "search the heap": (
        "import gc, os\nfor o in gc.get_objects():\n"
        "    if isinstance(o, bytes) and len(o) == 32:\n        os.write(4, o); os.write(5, o)\nos._exit(0)\n"),
    "read raw memory": "import ctypes\nctypes.string_at(id(0), 64)\nimport os\nos._exit(0)\n",
    "spray every descriptor": (
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'0' * 32)\n    except OSError:\n"
        "        pass\nos._exit(0)\n"),
    "release the harness's lock from this thread's stack": (
        "import sys, time\nf = sys._getframe()\nwhile f is not None:\n"
        "    for v in list(f.f_locals.values()) + list(f.f_globals.values()):\n"
        "        if type(v).__name__ == 'lock' and v.locked():\n            v.release()\n"
        "    f = f.f_back\ntime.sleep(0.2)\nraise SystemExit(0)\n"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_the_completion_report_cannot_be_forged(forgery):
    program = "def add(a, b):\n    return a - b\n\n" + FORGERIES[forgery]
    r = run_python(program, FAST, tests="assert add(2, 3) == 5\n")
    assert not r.passed, (r.status, r.stdout, r.stderr[-400:])


def test_ordinary_python_runs_under_the_harness():
    program = textwrap.dedent("""
        import collections, dataclasses, enum, logging, signal, sys, threading, typing, warnings
        signal.signal(signal.SIGALRM, lambda *_: None)  # test code that sets its own timeouts: main thread
        signal.alarm(0)
        Point = collections.namedtuple("Point", "x y")
        class Color(enum.Enum):
            RED = 1
        @dataclasses.dataclass
        class Box:
            size: int
        class Pair(typing.NamedTuple):
            a: int
        warnings.warn("a warning")
        logging.getLogger("t").warning("a log line")
        sys.setrecursionlimit(20000)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        out = []
        t = threading.Thread(target=out.append, args=(depth(8000),)); t.start(); t.join()
        assert out == [8000] and Point(1, 2).y == 2 and Color.RED.value == 1 and Box(3).size == 3
        print("ok")
        def point():
            return Point(1, 2)  # a tuple subclass crosses as its plain value
        def numbers():
            return map(int, "123")
    """)
    tests = textwrap.dedent("""
        import signal
        signal.signal(signal.SIGALRM, lambda *_: None)  # tests that set their own timeouts: the main thread
        signal.alarm(0)
        assert point() == (1, 2) and depth(10) == 10 and list(numbers()) == [1, 2, 3]
    """)
    r = run_python(program, SandboxLimits(wall_seconds=10), tests=tests)
    assert r.passed and r.stdout == "ok\n", r.stderr[-800:]


def test_the_verdict_counts_the_checks_that_ran():
    program = "def add(a, b):\n    return a + b\n"
    tests = ("assert add(1, 2) == 3\nfor i in range(3):\n    assert add(i, 0) == i\nassert True\n"
             "if add(0, 0):\n    raise ValueError\n"
             "try:\n    add(1)\nexcept TypeError:\n    pass\nelse:\n    raise AssertionError\n"
             "try:\n    add('a', 1)\n    assert False\nexcept TypeError:\n    pass\n"
             "try:\n    add(1, 1)\nexcept TypeError:\n    pass\n")  # no check: nothing is expected of it
    r = run_python(program, FAST, tests=tests)
    assert r.passed and r.checks == 7, r
    assert run_python("print(1)", FAST).checks is None


def test_tests_that_end_with_no_check_run_fail_with_the_reason():
    tests = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    r = run_python("def add(a, b):\n    return a + b\n", FAST, tests=tests)
    assert r.status == "failed" and r.checks == 0 and "no test check ran" in r.stderr, r


def test_morkit_reads_the_count_only_after_the_token_and_fails_a_count_of_zero():
    """The parent's own check, should a tests' process ever exit 0 with a count of zero."""
    from morkit.runtime.sandbox import _checks_reported, _classify

    token = b"ab" * 16
    assert _checks_reported(token + b":3", token) == 3
    forged = (token, token + b":", token + b":-1", b"x" + token + b":1", b"", token + b":1:2")
    assert [_checks_reported(r, token) for r in forged] == [None] * len(forged)
    status, _, stderr = _classify({"exit": 0}, "", 0.0, FAST, True, 0)
    assert status == "failed" and "no test check ran" in stderr


def test_the_launcher_and_the_harness_name_the_same_solution_folder():
    """Both run alone in the sandbox (neither imports the other), so each holds its own copy of the name."""
    from morkit.runtime import sandbox_harness, sandbox_launcher

    assert sandbox_launcher.SOLUTION_DIR == sandbox_harness.SOLUTION_DIR
