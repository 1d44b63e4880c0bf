"""Nothing of an evaluation outlives its evaluator: a cgroup per sandboxed child (where cgroup v2 is writable) that
the parent kills whole, and the sweep of what a dead evaluator left (its cgroups, processes and folders).

The parent-death signals of the child (jail.py) end it with its evaluator however that ends; this is the second
line: a supervisor reaps a dead worker's leftovers, and `serve` sweeps those of a dead serve when it starts.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from swizzlelab.harness.isolate import disk

# The folders an evaluating process names after its pid (sandbox.child_workdir, the job runner, ncu, Triton caches).
TEMP_PATTERNS = ("swizzlelab-isolate-{pid}-*", "swizzlelab-job-{pid}-*", "swizzlelab-ncu-{pid}-*",
                 "swizzlelab-tcache-{pid}")
CGROUP_PARENT = "swizzlelab"
# The first line of the child's boot program (sandbox.BOOT): how a sandboxed process is recognised in /proc.
BOOT_MARK = "import sys, json, importlib.util\nsrc, in_fd, out_fd, cfg = "


def _cgroup2_mounts() -> list[str]:
    """Mount points of cgroup v2 (the unified hierarchy) from this process's mount table."""
    found = []
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    found.append(left.split()[4])
    except OSError:
        pass
    return found


_ROOT: dict[str, str | None] = {}


def cgroup_root() -> str | None:
    """The folder this process makes evaluation cgroups in (CGROUP_PARENT under a writable cgroup v2 mount), or
    None where there is none (no cgroup v2, a read-only one, not root). Probed once per process."""
    if "root" not in _ROOT:
        _ROOT["root"] = None
        for mount in _cgroup2_mounts():
            parent = os.path.join(mount, CGROUP_PARENT)
            try:
                os.makedirs(parent, exist_ok=True)
                probe = os.path.join(parent, f"probe-{os.getpid()}-{uuid.uuid4().hex[:8]}")
                os.mkdir(probe)
                os.rmdir(probe)
            except OSError:
                continue
            _ROOT["root"] = parent
            break
    return _ROOT["root"]


def new_cgroup() -> str | None:
    """A fresh, empty cgroup for one sandboxed child, named after this (the evaluating) process; None without one."""
    root = cgroup_root()
    if root is None:
        return None
    path = os.path.join(root, f"{os.getpid()}-{uuid.uuid4().hex[:12]}")
    try:
        os.mkdir(path)
    except OSError:
        return None
    return path


def cgroup_pids(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as handle:
            return [int(p) for p in handle.read().split()]
    except (OSError, ValueError):
        return []


def cgroup_task_count(path: str) -> int:
    """Processes and threads in the cgroup (one read, however many there are)."""
    try:
        with open(os.path.join(path, "cgroup.threads")) as handle:
            return sum(1 for _ in handle)
    except OSError:
        return 0


def kill_cgroup(path: str | None) -> None:
    """SIGKILL every process in the cgroup (cgroup.kill, Linux 5.14+; else each listed process, a few rounds so
    that processes forked meanwhile are found too)."""
    if not path:
        return
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as handle:
            handle.write("1")
        return
    except OSError:
        pass
    for _ in range(20):
        pids = cgroup_pids(path)
        if not pids:
            return
        for pid in pids:
            _kill(pid)
        time.sleep(0.01)


def remove_cgroup(path: str | None, wait_s: float = 5.0) -> bool:
    """Kill what is left in the cgroup and remove it once empty; False if it still held processes after wait_s."""
    if not path or not os.path.isdir(path):
        return True
    kill_cgroup(path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            kill_cgroup(path)
            time.sleep(0.02)


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def argv_of(pid: int | str) -> list[bytes]:
    """A process's arguments from /proc ([] where it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def parent_of(pid: int | str) -> int:
    """A process's parent pid from /proc (-1 where it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def sandboxed_processes() -> dict[int, int]:
    """{pid: the pid of the evaluator that started it} for every process still running the child's boot program
    (the sandboxed child and the process waiting outside its PID namespace)."""
    found: dict[int, int] = {}
    for pid in all_pids():
        argv = argv_of(pid)
        if len(argv) < 4 or b"-c" not in argv:
            continue
        at = argv.index(b"-c")
        if at + 1 >= len(argv) or not argv[at + 1].decode("utf-8", "replace").startswith(BOOT_MARK):
            continue
        try:
            config = json.loads(argv[at + 5].decode("utf-8"))
            found[pid] = int(config["parent_pid"])
        except (IndexError, ValueError, KeyError, TypeError):
            found[pid] = 0
    return found


@dataclass
class Reaped:
    """What a reap or sweep ended and removed."""

    processes: int = 0
    cgroups: int = 0
    folders: int = 0
    owners: set[int] = field(default_factory=set)

    def add(self, other: Reaped) -> None:
        self.processes += other.processes
        self.cgroups += other.cgroups
        self.folders += other.folders
        self.owners |= other.owners

    def __bool__(self) -> bool:
        return bool(self.processes or self.cgroups or self.folders)

    def describe(self) -> str:
        return (f"{self.processes} process(es), {self.cgroups} cgroup(s) and {self.folders} folder(s) of "
                f"{len(self.owners)} dead evaluator(s)")


def _owned_cgroups(owner: int | None) -> list[tuple[int, str]]:
    root = cgroup_root()
    if root is None:
        return []
    found = []
    for path in glob.glob(os.path.join(root, "*-*")):
        head = os.path.basename(path).split("-", 1)[0]
        if head.isdigit() and (owner is None or int(head) == owner):
            found.append((int(head), path))
    return found


def reap(owner: int) -> Reaped:
    """End and remove everything the (dead) evaluating process `owner` left: its children's cgroups and every
    process in them, sandboxed processes it started, its temporary folders (a quota disk unmounted first)."""
    done = Reaped(owners={owner})
    for _, path in _owned_cgroups(owner):
        done.processes += len(cgroup_pids(path))
        done.cgroups += remove_cgroup(path)
    for pid, parent in sandboxed_processes().items():
        if parent == owner and _kill(pid):
            done.processes += 1
    for pattern in TEMP_PATTERNS:
        for path in glob.glob(os.path.join(tempfile.gettempdir(), pattern.format(pid=owner))):
            disk.remove_workdir(Path(path))
            done.folders += not os.path.exists(path)
    return done


def _folder_owner(name: str) -> int | None:
    for pattern in TEMP_PATTERNS:
        prefix = pattern.split("{pid}")[0]
        if name.startswith(prefix):
            head = name[len(prefix):].split("-", 1)[0]
            return int(head) if head.isdigit() else None
    return None


def sweep() -> Reaped:
    """Reap every evaluator that is gone but left something: `serve` calls this when it starts, for what a serve
    killed outright (its process group SIGKILLed, the machine's OOM killer) could not clean up itself."""
    dead: set[int] = set()
    for owner, _ in _owned_cgroups(None):
        dead.add(owner)
    dead.update(parent for parent in sandboxed_processes().values() if parent)
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "swizzlelab-*")):
        owner = _folder_owner(os.path.basename(path))
        if owner is not None:
            dead.add(owner)
    done = Reaped()
    for owner in sorted(dead):
        if owner != os.getpid() and not pid_alive(owner):
            done.add(reap(owner))
    # A sandboxed process whose evaluator's pid is unknown (its config unreadable) and whose parent is PID 1 was
    # orphaned: nothing waits for it.
    for pid, parent in sandboxed_processes().items():
        if parent == 0 and parent_of(pid) == 1 and _kill(pid):
            done.processes += 1
    return done
