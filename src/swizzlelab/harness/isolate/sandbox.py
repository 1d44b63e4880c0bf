"""The sandbox of an isolated run: a fresh private folder, the `python -I` child started in its jail with a
scrubbed environment and limits, its output captured, its memory watched, its deadlines kept.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import swizzlelab
from swizzlelab.harness.isolate import caches, disk, preempt, protocol, reaper
from swizzlelab.harness.isolate.limits import NOBODY, Limits, tasks_of_uid
from swizzlelab.runtime import MEM_LIMIT_ENV, resident_bytes

SRC_ROOT = str(Path(swizzlelab.__file__).resolve().parent.parent)
# Loads limits.py by path and locks the process down before the swizzlelab package (and torch) is imported.
BOOT = (
    "import sys, json, importlib.util\n"
    "src, in_fd, out_fd, cfg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])\n"
    "def _load(name, file, root=None):\n"
    "    spec = importlib.util.spec_from_file_location(name, (root or src + '/swizzlelab/harness/isolate') + '/' + file)\n"
    "    mod = importlib.util.module_from_spec(spec); sys.modules[name] = mod; spec.loader.exec_module(mod); return mod\n"
    "lim = _load('_swizzlelab_sandbox', 'limits.py')\n"
    # Into the evaluation's own cgroup before anything forks: the parent can then kill every process it makes.
    "if cfg.get('cgroup'):\n"
    "    try:\n"
    "        with open(cfg['cgroup'] + '/cgroup.procs', 'w') as _f: _f.write('0')\n"
    "    except OSError: pass\n"
    # First of all: PID and mount namespaces (the process that started here stays outside and waits).
    "jail = _load('_swizzlelab_jail', 'jail.py'); jail.die_with_parent(cfg['parent_pid'])\n"
    "ns = jail.enter(cfg['workdir'], cfg['read_paths'], cfg['write_paths'], cfg['tmp_bytes']) if cfg.get('jail') "
    "else {'applied': [], 'skipped': ['PID and mount namespaces: not asked for']}\n"
    # Without its own root the child drops its uid only where `nobody` can reach the Python installation.
    "drop = cfg['drop_to'] if ns.get('root') or cfg.get('nobody_reaches_python') else None\n"
    "box = lim.apply_sandbox(lim.Limits(**cfg['limits']), cfg['on_gpu'], drop, stage='early')\n"
    "box.applied[0:0] = ns['applied']; box.skipped[0:0] = ns['skipped']\n"
    "sys.path.insert(0, src)\n"
    # The harness package's __init__ pulls in the simulator (numba): the evaluator's child needs none of it, so the
    # two packages on the way to child.py are entered without running their __init__ (submodules import as usual).
    # Another entry (a suggestion's child) is loaded from its file alone, its package's __init__ not run: what it
    # imports past the sandbox's late stage (numba makes its cache folders at import) is its own business.
    "import types\n"
    "for name, sub in (('swizzlelab.harness', '/swizzlelab/harness'), ('swizzlelab.harness.isolate', '/swizzlelab/harness/isolate')):\n"
    "    pkg = types.ModuleType(name); pkg.__path__ = [src + sub]; pkg.__package__ = name; sys.modules[name] = pkg\n"
    "entry = cfg.get('entry') or 'swizzlelab.harness.isolate.child'\n"
    "if entry == 'swizzlelab.harness.isolate.child':\n"
    "    from swizzlelab.harness.isolate.child import main\n"
    "else:\n"
    "    main = _load(entry, entry.replace('.', '/') + '.py', src).main\n"
    "main(in_fd, out_fd, box.to_dict(), lambda: lim.apply_sandbox(lim.Limits(**cfg['limits']), cfg['on_gpu'], "
    "drop, False, cfg.get('read_paths'), cfg.get('write_paths'), stage='late', "
    "uid_tasks=cfg.get('uid_tasks', 0), on_uid_dropped=jail.rearm_death_signal).to_dict(), cfg.get('fd_socket'))\n"
)
# Environment variables the child keeps (paths to the toolchain and the GPU); everything else is dropped, so
# tokens, database URLs and seeds in the parent's environment never reach a submission.
KEEP_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "LANG", "LC_ALL",
            "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "CC", "CXX")


class ChildFailed(Exception):
    """The child died, hung, broke the protocol or a limit; `reason` is one line for the report."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- the child process

# What the child may read: the system, the Python installation, swizzlelab's sources, the CUDA toolkit. Not
# /work, /home, /root (bar the interpreter), /tmp or other runs' private dirs.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/dev")
DEVICE_WRITE = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/shm", "/dev/nvidiactl",
                "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia0", "/dev/nvidia1",
                "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia4", "/dev/nvidia5", "/dev/nvidia6", "/dev/nvidia7",
                "/dev/nvidia-caps", "/dev/dri", "/dev/kfd")


def read_paths() -> list[str]:
    paths = list(SYSTEM_READ)
    paths += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, SRC_ROOT,
              os.path.dirname(os.path.realpath(sys.executable))]
    for entry in sys.path:
        if entry and os.path.isdir(entry) and "site-packages" in entry:
            paths.append(entry)
    for key in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(key):
            paths.append(os.environ[key])
    return sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)})


def write_paths(workdir: Path) -> list[str]:
    return [str(workdir)] + [p for p in DEVICE_WRITE if os.path.exists(p)]


WORKDIR_PREFIX = "swizzlelab-isolate-"
_PRIVATE_ROOT: bool | None = None
# Enters the jail as a child would and says whether the private root was built and shows no host secret.
JAIL_PROBE = (
    "import sys, json, os, importlib.util, tempfile\n"
    "spec = importlib.util.spec_from_file_location('_swizzlelab_jail', sys.argv[1] + '/swizzlelab/harness/isolate/jail.py')\n"
    "jail = importlib.util.module_from_spec(spec); spec.loader.exec_module(jail)\n"
    "done = jail.enter(sys.argv[2], json.loads(sys.argv[3]), [], 1 << 20)\n"
    "print(json.dumps({'root': done['root'], 'pid': os.getpid(), 'shadow': os.path.exists('/etc/shadow')}))\n"
)


def private_root_works() -> bool:
    """Whether this machine lets the child have its own PID namespace and root filesystem (probed once)."""
    global _PRIVATE_ROOT
    if _PRIVATE_ROOT is None:
        with tempfile.TemporaryDirectory(prefix=WORKDIR_PREFIX + "probe-") as folder:
            os.makedirs(os.path.join(folder, ".jail"))
            try:
                out = subprocess.run([sys.executable, "-I", "-c", JAIL_PROBE, SRC_ROOT, folder,
                                      json.dumps(read_paths())], capture_output=True, text=True, timeout=30).stdout
                found = json.loads(out.strip().splitlines()[-1])
                _PRIVATE_ROOT = bool(found["root"]) and found["pid"] == 1 and not found["shadow"]
            except (OSError, ValueError, KeyError, IndexError, subprocess.SubprocessError):
                _PRIVATE_ROOT = False
    return _PRIVATE_ROOT


def nobody_can_run_python() -> bool:
    """True when uid `nobody` can reach the interpreter, the site-packages and swizzlelab (o+x on every
    directory on the way, o+r on the leaves); a pyenv under /root is not."""
    leaves = [os.path.realpath(sys.executable), sys.base_prefix, SRC_ROOT, os.path.dirname(os.__file__)]
    leaves += [p for p in sys.path if "site-packages" in p and os.path.isdir(p)]
    for leaf in leaves:
        path = Path(leaf).resolve()
        for part in [*reversed(path.parents), path]:
            try:
                mode = part.stat().st_mode
            except OSError:
                return False
            needed = 0o005 if part.is_dir() else 0o004
            if mode & needed != needed:
                return False
    return True


class _Tail:
    """Keeps the last `limit` bytes of a stream and counts the rest."""

    def __init__(self, limit: int):
        self.limit = max(int(limit), 0)
        self.buffer: deque[bytes] = deque()
        self.size = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.buffer.append(chunk)
        self.size += len(chunk)
        while self.size > self.limit and self.buffer:
            first = self.buffer.popleft()
            self.size -= len(first)
            extra = self.size - self.limit
            if extra < 0:  # keep the part of `first` that still fits
                keep = first[extra:]
                self.buffer.appendleft(keep)
                self.size += len(keep)
                break

    def text(self) -> str:
        body = b"".join(self.buffer).decode("utf-8", "replace")
        dropped = self.total - self.size
        return (f"[... {dropped} earlier bytes dropped]\n" if dropped > 0 else "") + body


def _pss_bytes(pid: int) -> int:
    """A process's proportional share of its resident pages (shared pages split between their users), from
    smaps_rollup; its resident bytes where that cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resident_bytes(pid)


# Proportional shares are read for at most this many of a child's processes (smaps_rollup walks every page table: a
# fork bomb's thousand torch-sized processes took the watcher 46 s to read once, and 16 of them 30 s while the bomb
# held both cores); more are estimated from a sample, and only once their number held still for STABLE_ROUNDS.
PSS_SAMPLE = 4
STABLE_ROUNDS = 5
PROCS_FULL = 0.9


def _shared_total(pids: list[int]) -> int:
    """The processes' memory with shared pages counted once (the sum of their proportional shares): forked
    processes share their pages, and each one's resident size counts them all again."""
    sample = pids if len(pids) <= PSS_SAMPLE else pids[:: -(-len(pids) // PSS_SAMPLE)]
    return sum(_pss_bytes(pid) for pid in sample) * len(pids) // max(1, len(sample))


def _task_count(pids: list[int]) -> int:
    count = 0
    for pid in pids:
        try:
            count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return count


def _tree_pids(root: int) -> list[int]:
    """`root` and its descendants, from /proc/PID/task/TID/children (cheap: no scan of every process)."""
    pids, todo = [], [root]
    while todo and len(pids) < 100_000:
        pid = todo.pop()
        pids.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as handle:
                    todo.extend(int(c) for c in handle.read().split())
        except (OSError, ValueError):
            continue
    return pids


def _session_pids(sid: int) -> list[int]:
    """Every process of session `sid` (a full /proc scan: also finds orphans that left the tree)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # field 6 (session) is index 3 after the command name
                pids.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return pids


# The tree is walked often; the whole session (orphans included) is scanned rarely, because a scan of /proc
# holds the GIL long enough to delay the parent's wall clock readings.
WATCH_PERIOD_S = 0.2
SESSION_SCAN_EVERY = 25


class ChildProcess:
    """A sandboxed `python -I` child with two private pipes, output capture, a memory watchdog and deadlines."""

    def __init__(self, limits: Limits, on_gpu: bool, workdir: Path, drop_to: int | None, profiling: bool = False,
                 extra_read: tuple[str, ...] = (), entry: str = ""):
        self.fd_socket: socket.socket | None = None  # device buffers' file descriptors go to the child over it
        # The module whose main(in_fd, out_fd, sandbox, lock_down, fd_socket) the sandboxed child runs ("": the
        # evaluator's child.py); the same BOOT, jail and limits apply to every entry.
        self.entry = entry
        self.limits = limits
        self.extra_read = extra_read
        self.extra_env: dict[str, str] = {}
        self.on_gpu = on_gpu
        self.workdir = workdir
        self.drop_to = drop_to
        self.cgroup: str | None = None  # its own cgroup (reaper.new_cgroup), where cgroup v2 is writable
        self.stdout = _Tail(limits.output_bytes // 2)
        self.stderr = _Tail(limits.output_bytes // 2)
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed_for: str | None = None
        self._counted = self._steady = 0  # the child's processes at the watcher's last round; rounds it held
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.in_w = self.out_r = -1
        self.profiling = profiling

    def env(self) -> dict[str, str]:
        env = {key: os.environ[key] for key in KEEP_ENV if key in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        home = str(self.workdir)
        # Trusted code compiles into its own cache; the child points Triton at the submission's before importing it.
        env.update(HOME=home, TMPDIR=str(self.workdir / "tmp"), TRITON_CACHE_DIR=str(self.workdir / caches.TRUSTED),
                   TORCH_EXTENSIONS_DIR=str(self.workdir / "torch_extensions"), XDG_CACHE_HOME=str(self.workdir / "cache"),
                   LANG=env.get("LANG", "C.UTF-8"))
        if not self.on_gpu:
            env["TRITON_INTERPRET"] = "1"
            # Idle OpenMP workers spin after each op; on a small CPU box they would take the cores the
            # parent needs to read its wall clock promptly.
            env["OMP_NUM_THREADS"] = "1"
        if self.limits.host_mem_bytes is not None:
            # The child's memory checks (runtime.available_memory_bytes) then refuse or shrink work under the limit
            # the watcher kills at, not under the host's free memory.
            env[MEM_LIMIT_ENV] = str(int(self.limits.host_mem_bytes))
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        in_r, self.in_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.fd_socket, child_socket = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.cgroup = reaper.new_cgroup()
        config = {"limits": self.limits.to_dict(), "on_gpu": self.on_gpu, "drop_to": self.drop_to,
                  "cgroup": self.cgroup,
                  "profiling": self.profiling, "read_paths": read_paths() + list(self.extra_read),
                  "write_paths": write_paths(self.workdir), "workdir": str(self.workdir), "jail": True,
                  "tmp_bytes": int(self.limits.file_bytes), "nobody_reaches_python": nobody_can_run_python(),
                  "uid_tasks": tasks_of_uid(self.drop_to if self.drop_to is not None else os.getuid()),
                  "fd_socket": child_socket.fileno(), "parent_pid": os.getpid(), "entry": self.entry}
        cmd = [sys.executable, "-I", "-c", BOOT, SRC_ROOT, str(in_r), str(out_w), json.dumps(config)]
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, cwd=str(self.workdir), env=self.env(),
                                         pass_fds=(in_r, out_w, child_socket.fileno()), start_new_session=True)
        finally:
            os.close(in_r)
            os.close(out_w)
            child_socket.close()
        for stream, tail in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr)):
            thread = threading.Thread(target=self._drain, args=(stream, tail), daemon=True)
            thread.start()
            self._threads.append(thread)
        watch = threading.Thread(target=self._watch, daemon=True)
        watch.start()
        self._threads.append(watch)
        preempt.child_started(self)  # low-priority work (a GiveWay scope) may kill it when a submission waits

    def _drain(self, stream: Any, tail: _Tail) -> None:
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                return
            tail.add(chunk)

    def sandbox_notes(self) -> tuple[list[str], list[str]]:
        """(applied, skipped): the layers the parent applies around the child (its cgroup, its disk quota)."""
        applied, skipped = [], []
        if self.cgroup:
            applied.append("own cgroup (every process of the run is killed with it, and with its evaluator)")
        else:
            skipped.append("own cgroup: no writable cgroup v2 here (the parent-death signals still end the run "
                           "with its evaluator)")
        quota = disk.quota_of(self.workdir)
        if quota is not None:
            (applied if quota.kind else skipped).append(quota.describe())
        return applied, skipped

    def _pids(self, rounds: int, session: list[int]) -> list[int]:
        """The child's processes: its cgroup's (complete: no process can leave it), else its tree plus, scanned
        every SESSION_SCAN_EVERY rounds, its session (orphans that left the tree)."""
        assert self.proc is not None
        if self.cgroup:
            found = reaper.cgroup_pids(self.cgroup)
            if found:
                return found
        if rounds % SESSION_SCAN_EVERY == 1:
            session[:] = _session_pids(self.proc.pid)
        return sorted(set(session) | set(_tree_pids(self.proc.pid)))

    def _breach(self, pids: list[int]) -> str | None:
        """Which limit the child's processes break now, as the verdict's words; None when none."""
        limits = self.limits
        # (Its cgroup counts every thread in one read; an empty one means the child never joined it.)
        tasks = (reaper.cgroup_task_count(self.cgroup) if self.cgroup else 0) or _task_count(pids)
        # RLIMIT_NPROC counts the uid's tasks host-wide (other runs' too), so a bomb stalls a little short of it.
        if tasks >= PROCS_FULL * limits.n_procs:
            return (f"hit the process limit: {tasks} processes and threads (the limit is {limits.n_procs}; a fork "
                    "bomb?)")
        self._steady = self._steady + 1 if len(pids) == self._counted else 0
        self._counted = len(pids)
        if limits.host_mem_bytes is not None:
            limit = int(limits.host_mem_bytes)
            held = sum(resident_bytes(pid) for pid in pids)
            # Several processes: confirmed by their shares once their number held still (reading the shares of
            # processes that fork without pause starves on their memory maps: tens of seconds).
            if held > limit and len(pids) > 1:
                held = _shared_total(pids) if self._steady >= STABLE_ROUNDS else 0
            if held > limit:
                gib, cap = held / 2**30, limit / 2**30
                if tasks >= limits.n_procs // 4:  # a fork bomb's copied pages: the count is what ran away
                    return (f"hit the process limit: {tasks} processes and threads (the limit is {limits.n_procs}; a "
                            f"fork bomb?) held {gib:.2f} GiB, over the host memory limit of {cap:.2f} GiB")
                return (f"exceeded the host memory limit: {gib:.2f} GiB in use, the limit is {cap:.2f} GiB (this "
                        "host's share for one evaluation)")
        return self.disk_breach()

    def disk_breach(self) -> str | None:
        """The verdict's words when the run's folder filled its quota, else None. Also asked once as the run ends:
        a run that fills its folder and finishes between two of the watcher's looks is still caught."""
        quota = disk.quota_of(self.workdir)
        if quota is not None and quota.kind and disk.is_full(self.workdir):
            used, _ = disk.used_bytes(self.workdir)
            return (f"exceeded the disk quota ({used / 2**30:.2f} GiB written in its folder, the quota is "
                    f"{quota.size / 2**30:.2f} GiB)")
        return None

    def _watch(self) -> None:
        """Every WATCH_PERIOD_S: the process count, the resident memory and the disk quota; the first breach
        kills the child with a reason naming it."""
        assert self.proc is not None
        try:  # a fork bomb's spinning processes must not starve the thread that ends them (root only; per thread)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
        except OSError:
            pass
        rounds = 0
        session: list[int] = []
        while not self._stop.wait(WATCH_PERIOD_S):
            if self.proc.poll() is not None:
                return
            rounds += 1
            reason = self._breach(self._pids(rounds, session))
            if reason:
                self.kill(reason)
                return

    def kill(self, reason: str | None = None) -> None:
        """SIGKILL the child's process group and every process of its session (setsid is refused in the
        child, so a process that changed its group is still found by its session)."""
        if reason and self.killed_for is None:
            self.killed_for = reason
        reaper.kill_cgroup(self.cgroup)
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            for pid in _session_pids(self.proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def _death(self) -> str:
        assert self.proc is not None
        if self.killed_for:
            return self.killed_for
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "the child stopped answering"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            hint = " (CPU time limit)" if -code == signal.SIGXCPU else (
                " (file size limit)" if -code == signal.SIGXFSZ else "")
            return f"the child was killed by {name}{hint}"
        return f"the child exited with code {code} before answering (an early exit is a failure, never a pass)"

    def request(self, message: dict[str, Any], deadline: float, phase: str) -> tuple[dict[str, Any], float]:
        """Send one frame and wait for the answer; (reply, parent wall seconds). ChildFailed on anything else."""
        start = time.perf_counter()
        try:
            protocol.send(self.in_w, message)
            reply = protocol.recv(self.out_r, deadline)
        except protocol.Timeout:
            self.kill(timeout_reason(phase, self.limits))
            raise ChildFailed(self._death()) from None
        except (protocol.ProtocolError, BrokenPipeError, OSError) as err:
            if self.proc is not None and self.proc.poll() is None and not isinstance(err, protocol.ProtocolError):
                self.kill("broke the protocol")
            elif isinstance(err, protocol.ProtocolError) and "closed" not in str(err):
                self.kill(f"broke the protocol: {err}")
            raise ChildFailed(self._death()) from None
        wall = time.perf_counter() - start
        if reply.get("fatal"):
            raise ChildFailed(str(reply.get("error", "the child failed")))
        return reply, wall

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                protocol.send(self.in_w, {"op": "exit"})
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self._stop.set()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for fd in (self.in_w, self.out_r):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.in_w = self.out_r = -1
        if self.fd_socket is not None:
            self.fd_socket.close()
            self.fd_socket = None
        for thread in self._threads:
            thread.join(timeout=2)
        if reaper.remove_cgroup(self.cgroup):
            self.cgroup = None


def timeout_reason(phase: str, limits: Limits) -> str:
    """One line for a child stopped at a deadline; the first call holds the JIT build *and* the first run, so a
    kernel that never ends is named there too (a spinning kernel once read as 'timed out compiling')."""
    if phase == "compile":
        return (f"timed out: the import and first call of custom_kernel took over {limits.compile_s:.0f} s (a kernel "
                "that never returns, or a build that long; limit compile_s)")
    return (f"timed out: the calls after the first took over {limits.run_s:.0f} s (a kernel that never returns or "
            "runs far too long; limit run_s)")


def one_line(text: str) -> str:
    return " ".join(str(text).split())[:400]

def _not_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0) on this (parent) process: processes of the same uid without CAP_SYS_PTRACE
    can no longer read its memory, environment or file descriptors through /proc or ptrace."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def child_workdir(code: str, filename: str, profiling: bool = False,
                  disk_bytes: int | None = None) -> tuple[Path, Path, int | None]:
    """(folder, the code's file in it, uid the child drops to or None): a fresh private folder for one sandboxed
    child, with the code written into it and the sub-folders the child may write (ChildProcess.env). With
    `disk_bytes` the folder is a filesystem of that size (disk.mount_quota); disk.remove_workdir removes it."""
    # The evaluating process's pid in the name: whoever supervises it removes what it left if it dies.
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
    if disk_bytes is not None:
        disk.mount_quota(workdir, int(disk_bytes))
    # A root parent runs the child as `nobody` when the child can reach Python: in its own root filesystem
    # (the jail binds the installation at its path) or where the host's permissions let it. Device buffers go
    # by file descriptor (vmm.py), so the uid does not matter to CUDA. The parent also turns non-dumpable.
    # Profile mode's child runs under ncu without a private root, so there only the host's permissions count.
    reachable = nobody_can_run_python() or (not profiling and private_root_works())
    drop_to = NOBODY if os.geteuid() == 0 and reachable else None
    _not_dumpable()
    submission = workdir / filename
    submission.write_text(code)
    for sub in ("tmp", "torch_extensions", "cache", "slots", ".jail"):
        (workdir / sub).mkdir()
    if drop_to is not None:
        for path in [workdir, submission] + [workdir / sub for sub in ("tmp", "torch_extensions", "cache")]:
            os.chown(path, drop_to, drop_to)
        os.chmod(workdir / "slots", 0o711)
    os.chmod(workdir, 0o700)
    return workdir, submission, drop_to
