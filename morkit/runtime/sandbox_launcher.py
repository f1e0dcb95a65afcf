"""The sandbox's launcher: `python -I -S -B sandbox_launcher.py CONFIG`, started by morkit in a new session.

Monitor, namespace init and program, so no limit depends on the candidate or on morkit staying alive."""

from __future__ import annotations

import json
import os
import sys

MARK = "morkit-sandbox"  # on every sandboxed program's command line
FILE_SIZE_LIMIT = 16 << 20  # RLIMIT_FSIZE: also caps what a flood can write into the capture files
OPEN_FILES = 256
FIRST_UID = 1 << 21  # root runs: the program runs as FIRST_UID + the monitor's pid, a uid nothing owns
WORK = "/work"
SOLUTION_DIR = "/.solution"  # read-only, holding solution.py -> /work/main.py; equal to sandbox_harness's

_NS_MOUNT, _NS_UTS, _NS_IPC, _NS_USER, _NS_PID, _NS_NET = (0x00020000, 0x04000000, 0x08000000, 0x10000000,
                                                           0x20000000, 0x40000000)
_RDONLY, _NOSUID, _NODEV, _REMOUNT, _BIND, _REC, _PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_CLONE_NEW_ANY = 0x7E020000  # every CLONE_NEW* flag clone() takes (cgroup, uts, ipc, user, pid, net, ns)
_ROOT_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")  # bound read-only, or mirrored symlinks
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd", "group")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORK, "TMPDIR": WORK, "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}

# syscall numbers per machine: (audit arch, numbers); pivot_root and mount_setattr are used here too
_SYSCALLS = {
    "x86_64": (0xC000003E, dict(fork=57, vfork=58, clone=56, clone3=435, kill=62, tkill=200, tgkill=234,
                                rt_sigqueueinfo=129, rt_tgsigqueueinfo=297, pidfd_send_signal=424, ptrace=101,
                                process_vm_readv=310, process_vm_writev=311, setsid=112, setpgid=109, fcntl=72,
                                ioctl=16, unshare=272, setns=308, mount=165, umount2=166, pivot_root=155,
                                chroot=161, bpf=321, perf_event_open=298, userfaultfd=323, keyctl=250, add_key=248,
                                request_key=249, io_uring_setup=425, open_tree=428, move_mount=429, fsopen=430,
                                fsmount=432, mount_setattr=442, fsconfig=431, fspick=433, shmget=29, semget=64,
                                msgget=68, pidfd_getfd=438)),
    "aarch64": (0xC00000B7, dict(clone=220, clone3=435, kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138,
                                 rt_tgsigqueueinfo=240, pidfd_send_signal=424, ptrace=117, process_vm_readv=270,
                                 process_vm_writev=271, setsid=157, setpgid=154, fcntl=25, ioctl=29, unshare=97,
                                 setns=268, mount=40, umount2=39, pivot_root=41, chroot=51, bpf=280,
                                 perf_event_open=241, userfaultfd=282, keyctl=219, add_key=217, request_key=218,
                                 io_uring_setup=425, open_tree=428, move_mount=429, fsopen=430, fsmount=432,
                                 mount_setattr=442, fsconfig=431, fspick=433, shmget=194, semget=190, msgget=186,
                                 pidfd_getfd=438)),
}
_DENIED = ("tkill", "pidfd_send_signal", "pidfd_getfd", "ptrace", "process_vm_readv", "process_vm_writev", "setsid",
           "setpgid", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "bpf", "perf_event_open",
           "userfaultfd", "keyctl", "add_key", "request_key", "io_uring_setup", "open_tree", "move_mount", "fsopen",
           "fsmount",
           "mount_setattr", "fsconfig", "fspick",
           "shmget", "semget", "msgget")  # System V IPC: shared memory would not count against RLIMIT_AS
# fcntl F_SETOWN, F_SETSIG, F_SETOWN_EX and ioctl FIOSETOWN, SIOCSPGRP would aim signals at other processes
_DENIED_ARGS = (("fcntl", (8, 10, 15)), ("ioctl", (0x8901, 0x8902)))

HARNESS = [os.path.join(os.path.dirname(os.path.abspath(__file__)), name)  # their texts, one after the other,
           for name in ("sandbox_codec.py", "sandbox_harness.py")]     # run with -c


def _monitor(config: dict) -> dict:
    """Make the namespaces, fork the init, enforce the wall limit; return how the run ended."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    if _prctl(libc, 1, signal.SIGKILL) != 0 or os.getppid() != config["parent"]:  # PR_SET_PDEATHSIG
        return {"setup": "morkit exited before the sandbox started"}
    root = os.geteuid() == 0
    uid, gid = os.geteuid(), os.getegid()
    flags = _NS_MOUNT | _NS_UTS | _NS_IPC | _NS_PID | _NS_NET | (0 if root else _NS_USER)
    if libc.unshare(ctypes.c_int(flags)) != 0:
        raise OSError(ctypes.get_errno(), "cannot make namespaces: the sandbox needs root or unprivileged user "
                                          "namespaces (sysctl user.max_user_namespaces > 0)")
    if not root:  # the program is uid 0 of its user namespace, mapped to the caller's own uid
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    config = {**config, "run_as": FIRST_UID + os.getpid() if root else None,
              "python": os.path.realpath(sys.executable),  # resolved while the host's tree is visible
              "harness": "\n".join(map(_read_text, HARNESS))}
    read_end, write_end = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read_end)
        os.close(config["status_fd"])
        try:
            _init(libc, config, write_end)
        except BaseException as exc:  # noqa: BLE001 - reported, the program never runs
            _report(write_end, {"setup": repr(exc)})
        finally:
            os._exit(0)
    os.close(write_end)
    ended = wait_for_exit(init, config["wall"])
    if not ended:
        os.kill(init, signal.SIGKILL)
    os.waitpid(init, 0)
    with os.fdopen(read_end, "rb") as f:
        lines = [json.loads(line) for line in f.read().splitlines() if line.strip()]
    if not ended:
        return {"timeout": True}
    setup = [line for line in lines if "setup" in line]
    return setup[0] if setup else (lines[-1] if lines else {"setup": "the sandbox's init died"})


def _init(libc, config: dict, status_fd: int) -> None:
    """PID 1 of the namespace: build the new root, run the program, report its end status."""
    import signal

    if _prctl(libc, 1, signal.SIGKILL) != 0:  # PR_SET_PDEATHSIG
        raise OSError("cannot tie the sandbox's init to its monitor")
    os.write(status_fd, b"\n")  # the monitor is outside the namespace (ppid reads 0 either way): if it died
    # before the line above, its end of this pipe is closed and the write fails, so no init outlives it
    _build_root(libc, config)
    program = os.fork()
    if program == 0:
        try:
            _exec_program(libc, config, status_fd)
        except BaseException as exc:  # noqa: BLE001
            _report(status_fd, {"setup": repr(exc)})
        finally:
            os._exit(127)
    while True:  # reap orphans the namespace hands to us until the program itself ends
        pid, status = os.waitpid(-1, 0)
        if pid == program:
            break
    code = os.waitstatus_to_exitcode(status)
    _report(status_fd, {"signal": -code} if code < 0 else {"exit": code})


def _build_root(libc, config: dict) -> None:
    """A new root on a small tmpfs: read-only system binds and the program in a capped /work; no /proc."""
    host_dir, root = config["workdir"], config["workdir"]
    files = {}
    for name in os.listdir(host_dir):
        with open(os.path.join(host_dir, name), "rb") as f:
            files[name] = f.read()
    _mount(libc, None, "/", None, _REC | _PRIVATE)
    _mount(libc, "tmpfs", root, "tmpfs", _NOSUID | _NODEV, "size=1m,nr_inodes=512,mode=755")
    for name in _ROOT_DIRS:
        if os.path.islink("/" + name):
            os.symlink(os.readlink("/" + name), f"{root}/{name}")
        elif os.path.isdir("/" + name):
            _bind(libc, "/" + name, root + "/" + name)
    for path in _interpreter_dirs(config["python"]):
        _bind(libc, path, root + path)
    for name in _ETC_FILES:
        if os.path.exists("/etc/" + name):
            _bind(libc, "/etc/" + name, f"{root}/etc/{name}")
    for name in _DEVICES:
        if os.path.exists("/dev/" + name):
            _bind(libc, "/dev/" + name, f"{root}/dev/{name}", devices=True)
    owner = config["run_as"] or 0
    os.makedirs(root + "/dev/shm")  # POSIX semaphores and shared memory (multiprocessing), private to this run
    _mount(libc, "tmpfs", root + "/dev/shm", "tmpfs", _NOSUID | _NODEV,
           f"size={config['disk']},nr_inodes={config['inodes']},mode=1777")
    os.mkdir(root + WORK)
    _mount(libc, "tmpfs", root + WORK, "tmpfs", _NOSUID | _NODEV,
           f"size={config['disk']},nr_inodes={config['inodes']},mode=700,uid={owner},gid={owner}")
    for name, data in files.items():
        path = f"{root}{WORK}/{name}"
        with open(path, "wb") as f:
            f.write(data)
        os.chown(path, owner, owner)
    os.symlink(WORK, root + "/tmp")
    if config.get("tests"):  # the candidate's module for the children it spawns (the harness's SOLUTION_DIR)
        os.mkdir(root + SOLUTION_DIR)
        os.symlink(f"{WORK}/main.py", f"{root}{SOLUTION_DIR}/solution.py")
    os.mkdir(root + "/.old")
    if _syscall(libc, "pivot_root", root.encode(), (root + "/.old").encode()) != 0:
        raise OSError(_errno(), "pivot_root failed")
    os.chdir("/")
    if libc.umount2(b"/.old", 2) != 0:  # MNT_DETACH: the host's tree is gone from this namespace
        raise OSError(_errno(), "cannot detach the old root")
    os.rmdir("/.old")
    _mount(libc, None, "/", None, _REMOUNT | _RDONLY | _NOSUID | _NODEV)
    os.chdir(WORK)


def _interpreter_dirs(python: str) -> list[str]:
    """The real interpreter's installation, outside the system dirs already bound (outermost only)."""
    dirs = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.dirname(python)))}
    system = tuple(os.path.realpath("/" + name) + "/" for name in _ROOT_DIRS)
    keep = [d for d in dirs if not (d + "/").startswith(system) and d != "/"]
    return sorted(d for d in keep if not any(d != o and d.startswith(o + "/") for o in keep))


def _exec_program(libc, config: dict, status_fd: int) -> None:
    """The program's own session, uid, limits, no capabilities, seccomp; then exec Python.

    Only stdio and the harness fds survive; `status_fd` (close-on-exec) stays to report a failure here."""
    import ctypes
    import resource

    os.setsid()
    bounds = [2, *sorted({status_fd, *config["harness_fds"]}), resource.getrlimit(resource.RLIMIT_NOFILE)[0]]
    for low, high in zip(bounds, bounds[1:]):  # close everything between the fds kept
        os.closerange(low + 1, high)
    if config["stdin"]:  # the input, read-only on fd 0 (else the launcher's /dev/null)
        os.dup2(fd := _open_hidden(config["stdin"]), 0)
        os.close(fd)
    harness_fds = list(config["harness_fds"])
    if config.get("tests"):  # the test code: an fd the harness reads and closes before the candidate runs
        os.set_inheritable(fd := _open_hidden(config["tests"]), True)
        harness_fds.append(fd)
    stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
    for res, value in ((resource.RLIMIT_CPU, config["cpu"]), (resource.RLIMIT_AS, config["memory"]),
                       (resource.RLIMIT_NPROC, config["nproc"]), (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
                       (resource.RLIMIT_NOFILE, OPEN_FILES), (resource.RLIMIT_CORE, 0),
                       (resource.RLIMIT_MEMLOCK, 0), (resource.RLIMIT_MSGQUEUE, 0), (resource.RLIMIT_SIGPENDING, 64),
                       (resource.RLIMIT_STACK, stack if stack != resource.RLIM_INFINITY else 64 << 20)):
        extra = 1 if res == resource.RLIMIT_CPU else 0  # SIGXCPU at soft, SIGKILL one second later
        resource.setrlimit(res, (value, value + extra))  # hard = soft: the program cannot raise them
    for cap in range(64):  # empty the bounding set so no exec can regain capabilities
        if _prctl(libc, 24, cap) != 0 and ctypes.get_errno() == 22:  # PR_CAPBSET_DROP; EINVAL: no such cap
            break
    if any(_prctl(libc, 23, cap) == 1 for cap in range(64)):  # PR_CAPBSET_READ
        raise OSError("cannot empty the capability bounding set")
    if config["run_as"] is not None:
        os.setgroups([])
        os.setresgid(config["run_as"], config["run_as"], config["run_as"])
        os.setresuid(config["run_as"], config["run_as"], config["run_as"])
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
        raise OSError(_errno(), "capset failed")
    if not _install_seccomp(libc, block_fork=config["nproc"] <= 1):
        raise OSError("cannot install the seccomp filter")
    python = config["python"]
    fds = ",".join(map(str, harness_fds))
    os.execve(python, [python, "-I", "-S", "-B", "-c", config["harness"], f"{WORK}/main.py", fds, MARK], _ENV)


def _open_hidden(name: str) -> int:
    """A read-only fd on /work/`name`, which is unlinked from /work at once: the program finds no such file."""
    fd = os.open(f"{WORK}/{name}", os.O_RDONLY)
    os.unlink(f"{WORK}/{name}")
    return fd


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _bind(libc, source: str, target: str, devices: bool = False) -> None:
    """Bind `source` read-only (and nosuid; nodev unless it is a device) at `target`, made as needed."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        open(target, "wb").close()
    _mount(libc, source, target, None, _BIND | _REC)
    attr = _RDONLY | _NOSUID | (0 if devices else _NODEV)
    if _mount_setattr(libc, target, attr) != 0:
        raise OSError(_errno(), f"cannot make {source} read-only in the sandbox")


def _mount(libc, source, target: str, fstype, flags: int, data: str | None = None) -> None:
    import ctypes

    enc = (lambda s: None if s is None else s.encode())
    if libc.mount(enc(source), target.encode(), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        raise OSError(_errno(), f"mount {fstype or source or ''} on {target} failed")


def _mount_setattr(libc, path: str, attr_set: int) -> int:
    import ctypes

    attr = (ctypes.c_uint64 * 4)(attr_set, 0, 0, 0)  # struct mount_attr {attr_set, attr_clr, propagation, userns}
    return _syscall(libc, "mount_setattr", ctypes.c_long(-100), path.encode(), ctypes.c_long(0x8000), attr,
                    ctypes.c_long(32))  # AT_FDCWD, AT_RECURSIVE


def _syscall(libc, name: str, *args) -> int:
    import ctypes
    import platform

    return libc.syscall(ctypes.c_long(_SYSCALLS[platform.machine()][1][name]), *args)


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


def _prctl(libc, option: int, *args: int) -> int:
    import ctypes

    padded = [ctypes.c_ulong(a) for a in (*args, 0, 0, 0, 0)[:4]]  # prctl is variadic: pass full longs
    return libc.prctl(ctypes.c_int(option), *padded)


def wait_for_exit(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` s for a child to exit without reaping it; True if it exited."""
    import select

    fd = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(max(0, int(timeout * 1000))))
    finally:
        os.close(fd)


def _report(fd: int, outcome: dict) -> None:
    os.write(fd, (json.dumps(outcome) + "\n").encode())


def _install_seccomp(libc, block_fork: bool) -> bool:
    """Deny signals to other processes, leaving the session, namespace and mount calls, signal-owner
    fcntl/ioctl commands, and (if asked) new processes."""
    import ctypes
    import platform

    if sys.platform != "linux" or platform.machine() not in _SYSCALLS:
        return False
    arch, nr = _SYSCALLS[platform.machine()]
    ld, jeq, jgt, jge, jset, ret = 0x20, 0x15, 0x25, 0x35, 0x45, 0x06
    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000
    me = os.getpid()
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld, 0, 0, 0)]
    if arch == 0xC000003E:
        prog += [(0x35, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # no x32 syscalls
    for name in _DENIED + (("fork", "vfork") if block_fork else ()):
        if name in nr:
            prog += [(jeq, 0, 1, nr[name]), (ret, 0, 0, eperm)]
    prog += [(jeq, 0, 1, nr["clone3"]), (ret, 0, 0, enosys)]  # libc falls back to clone
    prog += [(jeq, 0, 3, nr["clone"]), (ld, 0, 0, 16), (jset, 0, 1, _CLONE_NEW_ANY), (ret, 0, 0, eperm),
             (ld, 0, 0, 0)]  # clone into new namespaces: refused (as unshare and setns are)
    if block_fork:  # clone is allowed only for threads (CLONE_THREAD)
        prog += [(jeq, 0, 4, nr["clone"]), (ld, 0, 0, 16), (jset, 0, 1, 0x10000), (ret, 0, 0, allow),
                 (ret, 0, 0, eperm)]
    for name, commands in _DENIED_ARGS:  # second argument (offset 24) is one of `commands`: refused
        prog += [(jeq, 0, len(commands) + 3, nr[name]), (ld, 0, 0, 24)]
        prog += [(jeq, len(commands) - i, 0, c) for i, c in enumerate(commands)]
        prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    # kill: its own group (0, -me) or a process of its own (pid 2 and up: only its own live in its PID
    # namespace, beside the init, pid 1); never the init, other groups or every process (-1)
    prog += [(jeq, 0, 7, nr["kill"]), (ld, 0, 0, 16), (jeq, 4, 0, 0), (jeq, 3, 0, -me & 0xFFFFFFFF),
             (jge, 0, 1, 2), (jgt, 0, 1, 0x7FFFFFFF), (ret, 0, 0, eperm), (ret, 0, 0, allow)]
    for name, targets in (("rt_sigqueueinfo", (me,)), ("tgkill", (me,)), ("rt_tgsigqueueinfo", (me,))):
        prog += [(jeq, 0, len(targets) + 3, nr[name]), (ld, 0, 0, 16)]
        prog += [(jeq, len(targets) - i, 0, t) for i, t in enumerate(targets)]
        prog += [(ret, 0, 0, eperm), (ret, 0, 0, allow)]
    prog += [(ret, 0, 0, allow)]

    class Insn(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(Insn))]

    insns = (Insn * len(prog))(*[Insn(*i) for i in prog])
    if _prctl(libc, 38, 1) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    fprog = Prog(len(prog), insns)  # keep referenced until the call returns
    return _prctl(libc, 22, 2, ctypes.addressof(fprog)) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    try:
        outcome = _monitor(settings)
    except BaseException as exc:  # noqa: BLE001 - anything before the exec: a setup failure, never run the code
        outcome = {"setup": repr(exc)}
    _report(settings["status_fd"], outcome)
