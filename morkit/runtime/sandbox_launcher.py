"""The sandbox's launcher: runs as `python -I -S -B sandbox_launcher.py CONFIG PROGRAM` in a new session.

It isolates itself (network and mount namespaces where allowed), sets resource limits, drops
capabilities, installs a seccomp filter, then exec's the untrusted program. Standard library only:
in the child there is no morkit on the path. A failure before exec is reported as a setup failure
(exit SETUP_EXIT with SETUP_MARK on stderr), and the program never runs.
"""

from __future__ import annotations

import json
import os
import sys

FILE_SIZE_LIMIT = 16 << 20  # RLIMIT_FSIZE: also caps what a flood can write into the capture files
SETUP_EXIT = 121
SETUP_MARK = "morkit-sandbox: setup failed"

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
# syscall numbers: fork, vfork, clone, clone3, kill, tkill, tgkill, rt_sigqueueinfo,
# rt_tgsigqueueinfo, pidfd_send_signal, ptrace, process_vm_readv, process_vm_writev, setsid, setpgid
_SYSCALLS = {
    "x86_64": (0xC000003E, dict(fork=57, vfork=58, clone=56, clone3=435, kill=62, tkill=200, tgkill=234,
                                rt_sigqueueinfo=129, rt_tgsigqueueinfo=297, pidfd_send_signal=424, ptrace=101,
                                process_vm_readv=310, process_vm_writev=311, setsid=112, setpgid=109)),
    "aarch64": (0xC00000B7, dict(clone=220, clone3=435, kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138,
                                 rt_tgsigqueueinfo=240, pidfd_send_signal=424, ptrace=117,
                                 process_vm_readv=270, process_vm_writev=271, setsid=157, setpgid=154)),
}


# -S skips `site`, which is also what defines exit(), quit() and help(); LLM code calls them.
_BOOTSTRAP = (
    "import builtins, runpy, sys, _sitebuiltins as s\n"
    "builtins.exit = s.Quitter('exit', 'Ctrl-D (i.e. EOF)')\n"
    "builtins.quit = s.Quitter('quit', 'Ctrl-D (i.e. EOF)')\n"
    "builtins.help = s._Helper()\n"
    "del builtins, s\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def _launch(config: dict, program: str) -> int:
    import ctypes
    import resource

    libc = ctypes.CDLL(None, use_errno=True)
    root = os.geteuid() == 0
    _isolate(libc, config["workdir"], root)
    for res, value in ((resource.RLIMIT_CPU, config["cpu"]), (resource.RLIMIT_AS, config["memory"]),
                       (resource.RLIMIT_NPROC, config["nproc"]), (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
                       (resource.RLIMIT_CORE, 0)):
        hard = resource.getrlimit(res)[1]
        soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
        extra = 1 if res == resource.RLIMIT_CPU else 0  # SIGXCPU at soft, SIGKILL one second later
        resource.setrlimit(res, (soft, soft + extra if hard == resource.RLIM_INFINITY else hard))
    if root:
        for cap in range(64):  # empty the bounding set so exec as uid 0 cannot regain capabilities
            if _prctl(libc, 24, cap) != 0 and ctypes.get_errno() == 22:
                break
    installed = _install_seccomp(libc, block_fork=root or config["nproc"] <= 1)
    if root:
        if not installed:
            raise OSError("running as root needs seccomp to block fork and kill; refusing to run")
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
            raise OSError(ctypes.get_errno(), "capset failed")
    os.execv(sys.executable, [sys.executable, "-I", "-S", "-B", "-c", _BOOTSTRAP, program])
    return SETUP_EXIT  # not reached


def _isolate(libc, workdir: str, root: bool) -> None:
    """Best effort: no network; as root, everything read-only except the work dir."""
    import ctypes

    if root and libc.unshare(ctypes.c_int(_CLONE_NEWNS | _CLONE_NEWNET)) == 0:
        if libc.mount(None, b"/", None, ctypes.c_ulong(0x4000 | 0x40000), None) == 0:  # MS_REC|MS_PRIVATE
            wd = workdir.encode()
            attr = (ctypes.c_uint64 * 4)(1, 0, 0, 0)  # struct mount_attr {attr_set=MOUNT_ATTR_RDONLY, ...}
            clear = (ctypes.c_uint64 * 4)(0, 1, 0, 0)
            if (libc.mount(wd, wd, None, ctypes.c_ulong(0x1000), None) == 0  # MS_BIND: work dir is its own mount
                    and _mount_setattr(libc, b"/", 0x8000, attr) == 0):  # mount_setattr, AT_RECURSIVE
                _mount_setattr(libc, wd, 0, clear)
            os.chdir(workdir)  # re-enter the cwd through the new mount
    elif libc.unshare(_CLONE_NEWNET) != 0:
        libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET)


def _prctl(libc, option: int, *args: int) -> int:
    import ctypes

    padded = [ctypes.c_ulong(a) for a in (*args, 0, 0, 0, 0)[:4]]  # prctl is variadic: pass full longs
    return libc.prctl(ctypes.c_int(option), *padded)


def _mount_setattr(libc, path: bytes, flags: int, attr) -> int:
    import ctypes

    return libc.syscall(ctypes.c_long(442), ctypes.c_long(-100), path, ctypes.c_long(flags), attr, ctypes.c_long(32))


def _install_seccomp(libc, block_fork: bool) -> bool:
    """Deny signals to other processes, leaving the group, and (if asked) new processes."""
    import ctypes
    import platform

    if sys.platform != "linux" or platform.machine() not in _SYSCALLS:
        return False
    arch, nr = _SYSCALLS[platform.machine()]
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06
    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000
    me = os.getpid()
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld, 0, 0, 0)]
    if arch == 0xC000003E:
        prog += [(0x35, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # no x32 syscalls
    deny = ["tkill", "pidfd_send_signal", "ptrace", "process_vm_readv", "process_vm_writev", "setsid", "setpgid"]
    deny += ["fork", "vfork"] if block_fork else []
    for name in deny:
        if name in nr:
            prog += [(jeq, 0, 1, nr[name]), (ret, 0, 0, eperm)]
    prog += [(jeq, 0, 1, nr["clone3"]), (ret, 0, 0, enosys)]  # libc falls back to clone
    if block_fork:  # clone is allowed only for threads (CLONE_THREAD)
        prog += [(jeq, 0, 4, nr["clone"]), (ld, 0, 0, 16), (jset, 0, 1, 0x10000), (ret, 0, 0, allow),
                 (ret, 0, 0, eperm)]
    for name, targets in (("kill", (me, 0, -me & 0xFFFFFFFF)), ("rt_sigqueueinfo", (me,)),
                          ("tgkill", (me,)), ("rt_tgsigqueueinfo", (me,))):
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
    try:
        sys.exit(_launch(json.loads(sys.argv[1]), sys.argv[2]))
    except Exception as exc:  # anything before exec: report as a setup failure, never run the code
        sys.stderr.write(f"{SETUP_MARK}: {exc!r}\n")
        sys.exit(SETUP_EXIT)
