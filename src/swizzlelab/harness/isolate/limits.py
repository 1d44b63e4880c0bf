"""Resource limits of an isolated run and the sandbox the child applies to itself before any submission code:
rlimits, a private network namespace, an unprivileged uid, no_new_privs, landlock and a seccomp filter.

What is enforced and what is not is written down in docs/isolation.md; `Sandbox.applied` records it per run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import resource
import struct
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

GIB = 1 << 30
# The uid/gid a root parent drops the child to: `nobody` on Debian/Ubuntu/Fedora.
NOBODY = 65534


def _host_share() -> int:
    # The parent's default: this host's share for one evaluation. limits.py is also loaded by path in the child,
    # before swizzlelab can be imported, where every field is given: hence the import here.
    from swizzlelab.runtime import host_mem_share

    return host_mem_share()


DEFAULT_DISK_BYTES = 8 * GIB


@dataclass(frozen=True)
class Limits:
    """Limits of one isolated run. Every field is enforced; docs/isolation.md says how and where the edges are.

    compile_s: wall seconds for importing the submission plus its first call (JIT / nvcc builds happen there);
    run_s: wall seconds for everything after that (tests, warm-up, timing); cpu_s: CPU seconds of the child
    (RLIMIT_CPU; None = compile_s + run_s); host_mem_bytes: resident memory of the child's process group
    (watched by the parent, plus RLIMIT_AS on the CPU); gpu_mem_bytes: device memory of torch's allocator in
    the child (set_per_process_memory_fraction) and, where NVML answers, of the whole process;
    output_bytes: stdout + stderr kept from the child (the rest is dropped, the run goes on); file_bytes:
    largest file the child may write (RLIMIT_FSIZE); n_procs: processes + threads of the sandbox uid
    (RLIMIT_NPROC, against fork bombs; only where the child runs as its own uid); disk_bytes: size of the
    filesystem holding the child's folder (a loop-mounted image, else a tmpfs; None: no quota, the host's disk).
    host_mem_bytes defaults to this machine's share for one evaluation (runtime.host_mem_share).
    """

    compile_s: float = 120.0
    run_s: float = 180.0
    cpu_s: float | None = None
    host_mem_bytes: int | None = field(default_factory=_host_share)
    gpu_mem_bytes: int | None = 40 * GIB
    output_bytes: int = 1 << 20
    file_bytes: int = 1 * GIB
    n_procs: int = 1024
    disk_bytes: int | None = DEFAULT_DISK_BYTES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def cpu_seconds(self) -> int:
        return int(self.cpu_s if self.cpu_s is not None else self.compile_s + self.run_s) + 1


@dataclass
class Sandbox:
    """What the child managed to apply to itself (reported back to the parent and into the run's report)."""

    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, list[str]]:
        return {"applied": list(self.applied), "skipped": list(self.skipped)}


# ---------------------------------------------------------------- child side (runs before any submission code)

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# x86_64 syscall numbers the filter refuses (EPERM): reading/writing other processes' memory, tracing, and the
# socket families that reach a network (AF_UNIX stays: Python and CUDA use it locally).
_X86_64 = {
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "socket": 41,
    "bpf": 321,
    "perf_event_open": 298,
    "unshare": 272,
    "setns": 308,
    "mount": 165,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "userfaultfd": 323,
    "setsid": 112,
}
PRCTL_NR = 157
PR_SET_PDEATHSIG = 1
AUDIT_ARCH_X86_64 = 0xC000003E
AF_UNIX = 1
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1


def _libc() -> Any:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_program(profiling: bool = False) -> bytes:
    """A classic-BPF seccomp program for x86_64: EPERM for the calls above, socket() only for AF_UNIX."""
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    denied = [nr for name, nr in _X86_64.items() if name != "socket" and not (profiling and name == "perf_event_open")]
    prog = [
        _bpf(ld_w_abs, 0, 0, 4),  # arch
        _bpf(jeq_k, 1, 0, AUDIT_ARCH_X86_64),
        _bpf(ret_k, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        _bpf(ld_w_abs, 0, 0, 0),  # syscall nr
    ]
    # socket(domain, ...): allow AF_UNIX, refuse every other family (profiling: Nsight Compute needs sockets).
    prog += [] if profiling else [
        _bpf(jeq_k, 0, 4, _X86_64["socket"]),
        _bpf(ld_w_abs, 0, 0, 16),  # args[0] low word
        _bpf(jeq_k, 0, 1, AF_UNIX),
        _bpf(ret_k, 0, 0, SECCOMP_RET_ALLOW),
        _bpf(ret_k, 0, 0, SECCOMP_RET_ERRNO | EPERM),
    ]
    # The reload of the syscall number after the socket branch keeps jump offsets local.
    if not profiling:
        prog.append(_bpf(ld_w_abs, 0, 0, 0))
    # prctl(PR_SET_PDEATHSIG, ...): refused, so the submission cannot clear the signal that kills it with its
    # evaluator; every other prctl is allowed.
    prog += [
        _bpf(jeq_k, 0, 4, PRCTL_NR),
        _bpf(ld_w_abs, 0, 0, 16),  # args[0] low word
        _bpf(jeq_k, 0, 1, PR_SET_PDEATHSIG),
        _bpf(ret_k, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        _bpf(ld_w_abs, 0, 0, 0),
    ]
    for nr in denied:
        prog += [_bpf(jeq_k, 0, 1, nr), _bpf(ret_k, 0, 0, SECCOMP_RET_ERRNO | EPERM)]
    prog.append(_bpf(ret_k, 0, 0, SECCOMP_RET_ALLOW))
    return b"".join(prog)


SYS_SECCOMP = 317
SECCOMP_FILTER_FLAG_TSYNC = 1


def _install_seccomp(libc: Any, profiling: bool) -> str:
    program = seccomp_program(profiling)
    n = len(program) // 8
    buf = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(n, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    # seccomp(SET_MODE_FILTER, TSYNC): every thread of the process, the ones torch and CUDA started included.
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(SYS_SECCOMP, ctypes.c_uint(1), ctypes.c_uint(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog)) == 0:
        return "on all threads"
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    return "on the main thread"


def _set_rlimit(sandbox: Sandbox, name: str, which: int, value: int) -> None:
    try:
        resource.setrlimit(which, (value, value))
        sandbox.applied.append(f"{name}={value}")
    except (ValueError, OSError) as err:
        sandbox.skipped.append(f"{name}: {err}")


def _new_netns(libc: Any, sandbox: Sandbox) -> None:
    if os.geteuid() == 0:
        if libc.unshare(CLONE_NEWNET) == 0:
            sandbox.applied.append("network namespace (no interfaces but a down loopback)")
            return
        sandbox.skipped.append(f"network namespace: unshare failed (errno {ctypes.get_errno()})")
        return
    # Unprivileged: a user namespace mapping our own uid, then a network namespace inside it.
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        sandbox.skipped.append(f"network namespace: user namespaces not allowed (errno {ctypes.get_errno()})")
        return
    try:
        with open("/proc/self/setgroups", "w") as handle:
            handle.write("deny")
        with open("/proc/self/uid_map", "w") as handle:
            handle.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as handle:
            handle.write(f"{gid} {gid} 1")
        sandbox.applied.append("network namespace (in a user namespace)")
    except OSError as err:
        sandbox.skipped.append(f"uid map of the user namespace: {err}")


# Landlock filesystem rights (ABI 1-3); IOCTL_DEV (ABI 5) stays unhandled so GPU ioctls keep working.
LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
LL_ALL_V1 = (1 << 13) - 1
LL_REFER, LL_TRUNCATE = 1 << 13, 1 << 14
LL_FILE_RIGHTS = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446


def _landlock(libc: Any, read_paths: list[str], write_paths: list[str], sandbox: Sandbox) -> None:
    """Restrict the filesystem to `read_paths` (read + execute) and `write_paths` (everything)."""
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        sandbox.skipped.append(f"landlock: not available (errno {ctypes.get_errno()})")
        return
    handled = LL_ALL_V1 | (LL_REFER if abi >= 2 else 0) | (LL_TRUNCATE if abi >= 3 else 0)
    attr = ctypes.c_uint64(handled)
    ruleset = syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        sandbox.skipped.append(f"landlock: create_ruleset failed (errno {ctypes.get_errno()})")
        return
    read_rights = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
    try:
        for paths, rights in ((read_paths, read_rights), (write_paths, handled)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    allowed = rights if os.path.isdir(path) else rights & LL_FILE_RIGHTS
                    rule = struct.pack("=Qi", allowed & handled, fd)
                    if syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0)) != 0:
                        sandbox.skipped.append(f"landlock rule for {path}: errno {ctypes.get_errno()}")
                finally:
                    os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            sandbox.skipped.append(f"landlock: restrict_self failed (errno {ctypes.get_errno()})")
            return
        sandbox.applied.append(f"landlock ABI {abi}: read-only {len(read_paths)} system/Python paths, "
                               f"read-write {len(write_paths)} (the private dir and devices)")
    finally:
        os.close(ruleset)


PROC_READ = ("/proc/driver", "/proc/sys", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/filesystems",
             "/proc/version", "/proc/loadavg", "/proc/uptime", "/proc/devices", "/proc/modules")
PR_CAPBSET_DROP = 24
CAP_LAST = 63


def _drop_capabilities(libc: Any, sandbox: Sandbox) -> None:
    """Empty the bounding, effective, permitted and inheritable capability sets (uid 0 keeps only file
    ownership; no ptrace, no DAC override, no resource-limit override, no raw network)."""
    for cap in range(CAP_LAST + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two (effective, permitted, inheritable) triples, all zero
    if libc.capset(header, data) != 0:
        sandbox.skipped.append(f"dropping capabilities: capset failed (errno {ctypes.get_errno()})")
        return
    sandbox.applied.append("all capabilities dropped (bounding set emptied)")


def tasks_of_uid(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            continue
    return count


def apply_sandbox(limits: Limits, on_gpu: bool, drop_to: int | None, profiling: bool = False,
                  read_paths: list[str] | None = None, write_paths: list[str] | None = None,
                  stage: str = "all", uid_tasks: int = 0, on_uid_dropped: Callable[[], None] | None = None) -> Sandbox:
    """Lock this (child) process down, in two stages. `early` (first thing, before torch): CPU, file-size and
    core rlimits. `late` (after torch and CUDA are initialised by trusted code, before the submission is
    imported): network namespace, memory rlimit, uid/capabilities, process count, landlock, seccomp. CUDA's
    initialisation needs what the late stage takes away (device mappings, driver helpers); no submission
    code has run before it. `all` applies both at once (the profiled child)."""
    sandbox = Sandbox()
    libc = _libc()
    if stage in ("early", "all"):
        _set_rlimit(sandbox, "RLIMIT_CPU", resource.RLIMIT_CPU, limits.cpu_seconds)
        _set_rlimit(sandbox, "RLIMIT_FSIZE", resource.RLIMIT_FSIZE, int(limits.file_bytes))
        _set_rlimit(sandbox, "RLIMIT_CORE", resource.RLIMIT_CORE, 0)
    if stage not in ("late", "all"):
        return sandbox
    if profiling:
        sandbox.skipped.append("network namespace, landlock and the socket rule (Nsight Compute's injection needs them)")
    else:
        _new_netns(libc, sandbox)
    if limits.host_mem_bytes is not None:
        if on_gpu:
            # CUDA reserves terabytes of address space, so RLIMIT_AS would stop it; RLIMIT_DATA counts only
            # private writable mappings (what malloc and numpy use), CUDA's own among them, so it is a
            # backstop at twice the limit (at least 32 GiB). The parent watches the resident memory.
            _set_rlimit(sandbox, "RLIMIT_DATA", resource.RLIMIT_DATA, max(2 * int(limits.host_mem_bytes), 32 * GIB))
        else:
            _set_rlimit(sandbox, "RLIMIT_AS", resource.RLIMIT_AS, int(limits.host_mem_bytes))
    if drop_to is not None and os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(drop_to)
            os.setuid(drop_to)
            sandbox.applied.append(f"uid/gid {drop_to} (no access to the parent's memory, files or signals)")
        except OSError as err:
            sandbox.skipped.append(f"dropping to uid {drop_to}: {err}")
    if on_uid_dropped is not None:
        on_uid_dropped()  # a changed uid cleared the parent-death signal: set again before seccomp pins it
    if os.geteuid() == 0:
        sandbox.skipped.append(f"uid drop to {NOBODY}: not done (no private root filesystem and the Python "
                               "installation is not readable by it); uid 0 without capabilities")
        _drop_capabilities(libc, sandbox)
    # RLIMIT_NPROC counts every task of the uid on the host: allow what the uid runs now plus the child's share
    # (the parent counted the host's tasks: a child in its own PID namespace sees only its own).
    _set_rlimit(sandbox, "RLIMIT_NPROC", resource.RLIMIT_NPROC,
                max(tasks_of_uid(os.getuid()), int(uid_tasks)) + int(limits.n_procs))
    if read_paths is not None and write_paths is not None and not profiling:
        # /proc is readable only for this process (its pid dir, which /proc/self points to) and a few
        # system-wide files; the parent's /proc/PID (memory, environment, fds) is out of reach.
        own = [f"/proc/{os.getpid()}"] + [p for p in PROC_READ if os.path.exists(p)]
        _landlock(libc, [p for p in read_paths if p != "/proc"] + own, write_paths, sandbox)
    if platform.machine() == "x86_64":
        try:
            how = _install_seccomp(libc, profiling)
            sandbox.applied.append(f"no_new_privs + seccomp {how} (ptrace, process_vm_*, network sockets, bpf, "
                                   "namespaces, mount, keyrings, userfaultfd, setsid, clearing the parent-death "
                                   "signal refused)")
        except OSError as err:
            sandbox.skipped.append(f"seccomp: {err}")
    else:
        sandbox.skipped.append(f"seccomp: no filter for {platform.machine()}")
    return sandbox
