"""The child's own PID and mount namespaces: it sees and signals no process but its own, and a root filesystem
holding only what it needs (the system, Python, swizzlelab, the GPU's device nodes), read-only but for its dir.

Loaded by path (like limits.py) and entered first thing in the child, before torch; docs/isolation.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import select
import signal
import stat
import sys
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG = 1
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
SYS_MOUNT_SETATTR = 442
MOUNT_ATTR_RDONLY = 0x1
AT_RECURSIVE = 0x8000
# Files of /etc the child never needs and must never read: password hashes, sudo rules, host keys, private keys.
ETC_DENIED = frozenset({"shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl", "security",
                        "subuid", "subgid", "subuid-", "subgid-", "credstore", "credstore.encrypted", ".pwd.lock",
                        "machine-id", "docker", "containerd", "kubernetes", "wireguard", "openvpn", "NetworkManager"})
TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# The roots the jail builds itself instead of binding the host's.
SPECIAL = ("/etc", "/proc", "/dev", "/sys", "/tmp")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}


def _libc() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(libc: Any, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                      flags, data.encode() if data else None), f"mount {source or fstype} on {target}")


def _read_only(libc: Any, target: str) -> None:
    """Make a bind mount and every mount below it read-only (mount_setattr, Linux 5.12+; else the top one)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                    ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    AT_FDCWD = -100
    if libc.syscall(SYS_MOUNT_SETATTR, ctypes.c_int(AT_FDCWD), target.encode(), ctypes.c_uint(AT_RECURSIVE),
                    ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0:
        return
    _mount(libc, None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)


# How the process that runs the submission learns, after it changed its uid, whether the process it must die with
# is still there: that process's pid (no PID namespace), or the read end of a pipe only the waiting outer process
# holds open (inside a PID namespace getppid() is 0).
_PARENT = {"pid": 0, "lifeline": -1}


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the evaluator that started it dies (a worker killed mid-run must not leave its
    child spinning on the GPU); if it is already gone, go now."""
    if sys.platform != "linux":
        return
    _PARENT["pid"] = parent_pid
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(3)


def rearm_death_signal() -> None:
    """Set the parent-death signal again: a change of uid (the drop to `nobody`) clears it, and a child that had
    lost it outlived its killed worker, re-parented to PID 1. Called right after the uid drop, before seccomp
    refuses PR_SET_PDEATHSIG to the submission; if the parent died in between, go now."""
    if sys.platform != "linux":
        return
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    lifeline = _PARENT["lifeline"]
    if lifeline >= 0:
        poller = select.poll()
        poller.register(lifeline, select.POLLIN | select.POLLHUP)
        gone = bool(poller.poll(0))  # the outer holds the write end open and never writes: an event means it died
        os.close(lifeline)
        _PARENT["lifeline"] = -1
    else:
        gone = bool(_PARENT["pid"]) and os.getppid() != _PARENT["pid"]
    if gone:
        os._exit(3)


def _write_map(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def unshare_and_fork(libc: Any) -> str:
    """New PID and mount namespaces (in a user namespace when not root), then fork: the child returns, as PID 1
    of the new namespace; this process stays outside, waits for it and exits as it did (never returns)."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWPID | CLONE_NEWNS | (0 if os.geteuid() == 0 else CLONE_NEWUSER)
    _check(libc.unshare(flags), "unshare(PID, mount namespaces)")
    if flags & CLONE_NEWUSER:
        _write_map("/proc/self/setgroups", "deny")
        _write_map("/proc/self/uid_map", f"{uid} {uid} 1")
        _write_map("/proc/self/gid_map", f"{gid} {gid} 1")
    lifeline_r, lifeline_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        # If the waiting parent dies (it dies with the evaluator), so does the namespace: its PID 1 is killed and
        # the kernel kills every other process in it.
        os.close(lifeline_w)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _PARENT["lifeline"] = lifeline_r
        return "own PID namespace (PID 1: no other process of the host is visible or can be signalled)"
    os.close(lifeline_r)
    _wait_and_mirror(pid, lifeline_w)
    raise AssertionError("unreachable")


def _wait_and_mirror(pid: int, keep: int = -1) -> None:
    """The outer process: hold nothing the child talks over (but the lifeline `keep`), wait, and end as the child
    ended."""
    for fd in range(3, 1024):
        if fd == keep:
            continue
        try:
            os.close(fd)
        except OSError:
            pass
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(3)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 3)


def _make_like(source: str, target: str) -> None:
    """An empty directory or file at `target` to bind `source` onto."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            with open(target, "w"):
                pass


def _bind(libc: Any, source: str, target: str, read_only: bool) -> None:
    if os.path.islink(source):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(os.readlink(source), target)
        return
    _make_like(source, target)
    _mount(libc, source, target, None, MS_BIND | MS_REC)
    if read_only:
        _read_only(libc, target)


def _outermost(paths: list[str]) -> list[str]:
    """The paths that are not below another one of the list (binding a parent brings its children along)."""
    kept: list[str] = []
    for path in sorted({os.path.normpath(p) for p in paths}):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def build_root(libc: Any, root: str, workdir: str, read_paths: list[str], devices: list[str],
               tmp_bytes: int) -> list[str]:
    """Assemble the child's filesystem on a tmpfs at `root` and pivot into it. Returns what was done."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host's mount table
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    wanted = [p for p in read_paths if os.path.exists(p) and not any(
        p == s or p.startswith(s + "/") for s in SPECIAL)]
    # An installation or checkout under /tmp (a CI clone, say) is bound once the private /tmp exists, below.
    under_tmp = [p for p in read_paths if os.path.exists(p) and p.startswith("/tmp/")]
    for path in _outermost(wanted):
        _bind(libc, path, root + path, read_only=True)
    # Merged /usr: /bin, /lib64 ... are links into /usr; new programs need them (the ELF loader's path).
    for link in TOP_LINKS:
        if os.path.islink(link):
            _bind(libc, link, root + link, read_only=True)
    # /etc: every entry but the secrets (the loader cache, users and groups, alternatives, time zone ...).
    os.makedirs(root + "/etc", exist_ok=True)
    for name in sorted(os.listdir("/etc")):
        if name not in ETC_DENIED:
            try:
                _bind(libc, "/etc/" + name, root + "/etc/" + name, read_only=True)
            except OSError:
                continue  # a socket or a file that vanished: not needed
    # /dev: only the listed nodes (null, zero, random, the GPU's), a private /dev/shm, and the fd links.
    os.makedirs(root + "/dev", exist_ok=True)
    _mount(libc, "tmpfs", root + "/dev", "tmpfs", MS_NOSUID, "mode=0755,size=1m")
    for node in devices:
        if node.startswith("/dev/") and os.path.exists(node) and node != "/dev/shm":
            mode = os.stat(node).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISDIR(mode):
                _bind(libc, node, root + node, read_only=False)
    os.makedirs(root + "/dev/shm", exist_ok=True)
    _mount(libc, "tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_bytes}")
    for name, target in DEV_LINKS.items():
        os.symlink(target, root + "/dev/" + name)
    os.makedirs(root + "/proc", exist_ok=True)
    _mount(libc, "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if os.path.isdir("/sys"):
        _bind(libc, "/sys", root + "/sys", read_only=True)
    os.makedirs(root + "/tmp", exist_ok=True)
    _mount(libc, "tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_bytes}")
    for path in _outermost(under_tmp):
        _bind(libc, path, root + path, read_only=True)
    os.makedirs(root + workdir, exist_ok=True)
    _mount(libc, workdir, root + workdir, None, MS_BIND)
    old = root + "/.old-root"
    os.makedirs(old, exist_ok=True)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(0, f"pivot_root: no system call number known for {platform.machine()}")
    _check(libc.syscall(number, root.encode(), old.encode()), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old-root", MNT_DETACH), "detach the host's root")
    os.rmdir("/.old-root")
    # The jail's own tmpfs root goes read-only too: only the run's dir, /tmp and /dev/shm stay writable.
    _mount(libc, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(workdir)
    return [f"own mount namespace: a new root with {len(_outermost(wanted + under_tmp))} read-only system and Python paths, "
            f"/etc without secrets, {sum(os.path.exists(d) for d in devices)} device nodes, a private /proc, /tmp "
            f"and /dev/shm; writable: the run's dir"]


def enter(workdir: str, read_paths: list[str], devices: list[str], tmp_bytes: int,
          mounts: bool = True) -> dict[str, Any]:
    """Called first thing in the child: namespaces, then (with `mounts`) the new root. What could not be done
    is reported as skipped; the child then runs with the other layers of the sandbox only. `root` says whether
    the child now lives in its own root filesystem."""
    applied: list[str] = []
    skipped: list[str] = []
    if sys.platform != "linux":
        return {"applied": applied, "skipped": [f"PID and mount namespaces: not on {sys.platform}"], "root": False}
    libc = _libc()
    try:
        applied.append(unshare_and_fork(libc))
    except OSError as err:
        skipped.append(f"PID and mount namespaces: {err}")
        return {"applied": applied, "skipped": skipped, "root": False}
    root = False
    if mounts:
        try:
            applied += build_root(libc, os.path.join(workdir, ".jail"), workdir, read_paths, devices, tmp_bytes)
            root = True
        except OSError as err:
            # Half-built mounts live only in this namespace: the host is untouched either way.
            skipped.append(f"private root filesystem: {err}")
            _mount_proc_only(libc, skipped)
    return {"applied": applied, "skipped": skipped, "root": root}


def _mount_proc_only(libc: Any, skipped: list[str]) -> None:
    """Without a new root, still a /proc that shows only the namespace's processes."""
    try:
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as err:
        skipped.append(f"private /proc: {err}")


def exec_in_namespace(argv: list[str]) -> None:
    """For the profiled child, which Nsight Compute starts: ncu and its target in a PID namespace of their own
    with a private /proc (the host's files stay: ncu writes its report there), then exec. Never returns."""
    libc = _libc()
    try:
        unshare_and_fork(libc)
        _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
        _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as err:
        print(f"swizzlelab: no PID namespace for the profiled child: {err}", file=sys.stderr)
    os.execvp(argv[0], argv)
