"""The trusted side of an isolated run: spawn the sandboxed child, feed it fresh inputs through shared buffers,
judge every output it leaves there itself, cross-check its clock against the parent's wall clock, and build
the same EvalReport the in-process path builds.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy.stats import theilslopes

import swizzlelab
from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.harness.timers import GATE_NS_PER_CALL
from swizzlelab.harness.correctness import CaseResult, RunCheck, case_sizes, count_poisoned, derive_seed, poison_
from swizzlelab.harness.evaluate import MODES, BenchRow, Candidate, EvalReport, ExtraBaseline
from swizzlelab.harness.clock_sampler import sampler_for, wait_for_first_sample
from swizzlelab.harness.isolate import protocol
from swizzlelab.harness.isolate import caches, preempt, vmm
from swizzlelab.harness.isolate.caches import KeptCaches
from swizzlelab.harness.isolate.limits import NOBODY, Limits, tasks_of_uid
from swizzlelab.harness.isolate.profiling import profile_isolated
from swizzlelab.harness.isolate.transport import SlotSet
from swizzlelab.harness.sysinfo import system_info
from swizzlelab.harness.requests import (
    CHECK_FRACTION,
    LIBRARY_BUDGET_S,
    WARMUP_S,
    next_request_size,
    pool_size,
    stop_reason,
)
from swizzlelab.harness.timing import Timing, compare_unpaired, geometric_mean, summarize
from swizzlelab.names import check_file_name

ProgressFn = Callable[[str], None]

SRC_ROOT = str(Path(swizzlelab.__file__).resolve().parent.parent)
# Loads limits.py by path and locks the process down before the swizzlelab package (and torch) is imported.
BOOT = (
    "import sys, json, importlib.util\n"
    "src, in_fd, out_fd, cfg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])\n"
    "def _load(name, file, root=None):\n"
    "    spec = importlib.util.spec_from_file_location(name, (root or src + '/swizzlelab/harness/isolate') + '/' + file)\n"
    "    mod = importlib.util.module_from_spec(spec); sys.modules[name] = mod; spec.loader.exec_module(mod); return mod\n"
    "lim = _load('_swizzlelab_sandbox', 'limits.py')\n"
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
    "uid_tasks=cfg.get('uid_tasks', 0)).to_dict(), cfg.get('fd_socket'))\n"
)
# Environment variables the child keeps (paths to the toolchain and the GPU); everything else is dropped, so
# tokens, database URLs and seeds in the parent's environment never reach a submission.
KEEP_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "LANG", "LC_ALL",
            "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "CC", "CXX")
# A timed request runs k calls back to back on k slot sets of fresh inputs, k drawn by the parent from 1..pool
# size (shuffled rounds). The parent's wall clock over a request, minus the child's figures (the residual), grows
# per call only by what happens between calls (the seal); whatever the child skips or forges once per request
# cannot change that growth. Both the residual's growth per call and its fixed part are compared with those of
# trusted requests of busy stand-in calls made before the submission is imported.
SEAL_N = 1024  # output elements sampled right after each call ends (a call must be complete when it returns)
SEAL_WAIT_S = 5.0  # after that the seal check refuses the request anyway
# When the budget is spent but the residual's interval is still too wide to judge, timing goes on up to
# EXTEND_FACTOR x the budget + EXTEND_S: more requests narrow it; a child cannot gain from the extra requests.
# (Measured on an H100, 2026-11-25: the 0.23 ms histogram, whose 512 MiB fresh inputs make requests slow, still had
# a +-0.047 ms interval after 3 x 1 s + 2 s, against 0.036 allowed, and an honest kernel was refused.)
EXTEND_FACTOR, EXTEND_S = 5.0, 10.0
# The residual's growth per call (between calls: the seal copy, event gaps, per-call host work after the
# synchronize; measured 0.009..0.043 ms on an H100) may be at most this much + a share of the figure (GPU clock
# drift over long kernels) + its 99% interval, and that interval at most RESIDUAL_CI_MS + a share of the
# figure: a wall clock noisier than that cannot vouch for the figures. On the CPU (tests only) interpreter
# noise is milliseconds.
RESIDUAL_SLOPE_MS, RESIDUAL_SLOPE_REL = 0.05, 0.01
RESIDUAL_CI_MS, RESIDUAL_CI_REL = 0.03, 0.03
RESIDUAL_SLOPE_MS_CPU, RESIDUAL_SLOPE_REL_CPU = 3.0, 0.2
RESIDUAL_CI_MS_CPU, RESIDUAL_CI_REL_CPU = 10.0, 0.5
# ... and its fixed part per request by this much: work hidden outside the marks once per request is bounded
# by it, spread over up to MAX_POOL calls.
INTERCEPT_MS = 0.6
INTERCEPT_MS_CPU = 40.0
# Work left on another stream after the last end mark: counted when the device-wide synchronize after it takes
# longer than this beyond the empty requests'.
TAIL_SLACK_MS = 0.02
CALIBRATION_REQUESTS = 24
UNPAIRED_METHOD = ("unpaired delta method: the library timed through the same isolated loop in a child of its own, "
                   "after the submission, on inputs from the same secret")
CALIBRATION_POOL = 4


@dataclass
class Calibration:
    """The residual (parent's wall clock minus the child's figures) over trusted requests of busy stand-in
    calls, made before the submission is imported: its growth per call and its fixed part per request."""

    slope_ms: float
    intercept_ms: float
    tail_ms: float
    n: int


@dataclass
class Prepared:
    """A benchmark case bound and calibrated before the submission exists in the child."""

    seed: int
    data0: dict[str, Any]
    pool: list[SlotSet]
    calibration: Calibration | None  # None only while start() calibrates it
    pool_size: int


@dataclass
class IsolatedRun:
    """The outcome of one isolated evaluation (the leaderboard worker stores this)."""

    mode: str
    passed: bool
    score_ms: float | None
    reason: str | None
    report_text: str
    report: dict[str, Any]
    stdout_tail: str
    stderr_tail: str
    system: dict[str, Any]
    profile_files: list[Path]
    duration_s: float
    verdicts: list[dict[str, Any]]
    isolation: dict[str, Any] = field(default_factory=dict)
    secret_run: IsolatedRun | None = None  # the secret phase of a ranked run, when one was asked for

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "passed": self.passed, "score_ms": self.score_ms, "reason": self.reason,
            "report_text": self.report_text, "report": self.report, "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail, "system": self.system,
            "profile_files": [str(p) for p in self.profile_files], "duration_s": self.duration_s,
            "verdicts": self.verdicts, "isolation": self.isolation,
            "secret_run": self.secret_run.to_dict() if self.secret_run is not None else None,
        }


class ChildFailed(Exception):
    """The child died, hung, broke the protocol or a limit; `reason` is one line for the report."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- seeds


def secret_seed(secret: bytes, case_seed: int, salt: str) -> int:
    """A 31-bit seed from the leaderboard's secret, the case's seed and a salt (HMAC-SHA256): not predictable
    without the secret, reproducible with it."""
    digest = hmac.new(secret, f"{int(case_seed)}|{salt}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


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


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


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


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
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
        self.stdout = _Tail(limits.output_bytes // 2)
        self.stderr = _Tail(limits.output_bytes // 2)
        self.proc: subprocess.Popen[bytes] | None = None
        self.killed_for: str | None = None
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
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        in_r, self.in_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.fd_socket, child_socket = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        config = {"limits": self.limits.to_dict(), "on_gpu": self.on_gpu, "drop_to": self.drop_to,
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
        if self.limits.host_mem_bytes is not None:
            watch = threading.Thread(target=self._watch_memory, daemon=True)
            watch.start()
            self._threads.append(watch)
        preempt.child_started(self)  # low-priority work (a GiveWay scope) may kill it when a submission waits

    def _drain(self, stream: Any, tail: _Tail) -> None:
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                return
            tail.add(chunk)

    def _watch_memory(self) -> None:
        assert self.proc is not None
        limit = int(self.limits.host_mem_bytes or 0)
        rounds = 0
        pids: list[int] = []
        while not self._stop.wait(WATCH_PERIOD_S):
            if self.proc.poll() is not None:
                return
            rounds += 1
            if rounds % SESSION_SCAN_EVERY == 1:
                pids = _session_pids(self.proc.pid)
            rss = sum(_rss_bytes(pid) for pid in set(pids) | set(_tree_pids(self.proc.pid)))
            if rss > limit:
                self.kill(f"exceeded the host memory limit ({rss / 2**30:.2f} GiB resident > {limit / 2**30:.2f} GiB)")
                return

    def kill(self, reason: str | None = None) -> None:
        """SIGKILL the child's process group and every process of its session (setsid is refused in the
        child, so a process that changed its group is still found by its session)."""
        if reason and self.killed_for is None:
            self.killed_for = reason
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


# ---------------------------------------------------------------- evaluation


def timeout_reason(phase: str, limits: Limits) -> str:
    """One line for a child stopped at a deadline; the first call holds the JIT build *and* the first run, so a
    kernel that never ends is named there too (a spinning kernel once read as 'timed out compiling')."""
    if phase == "compile":
        return (f"timed out: the import and first call of custom_kernel took over {limits.compile_s:.0f} s (a kernel "
                "that never returns, or a build that long; limit compile_s)")
    return (f"timed out: the calls after the first took over {limits.run_s:.0f} s (a kernel that never returns or "
            "runs far too long; limit run_s)")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:400]


class _Evaluation:
    """One evaluate_isolated call: the child, the deadlines and the report being filled."""

    def __init__(self, task: Any, mode: str, limits: Limits, secret: bytes | None, budget_s: float,
                 progress: ProgressFn | None, with_baseline: bool, workdir: Path, drop_to: int | None):
        from swizzlelab.runtime import device

        self.task, self.mode, self.limits, self.budget_s = task, mode, limits, budget_s
        self.secret = secret if secret is not None else os.urandom(32)
        self.secret_given = secret is not None
        self.progress = progress
        self.with_baseline = with_baseline
        self.workdir = workdir
        self.on_gpu = device() == "cuda"
        self.kind = "vmm" if self.on_gpu else "host"
        builtin = Path(task.path).resolve().parent == Path(swizzlelab.__file__).resolve().parent / "tasks"
        self.child = ChildProcess(limits, self.on_gpu, workdir, drop_to,
                                  extra_read=() if builtin else (str(Path(task.path).resolve()),))
        self.formula: Any = None
        self.order_spec: str | None = None
        self.own_kernel = False
        self.clock_info: dict[str, Any] = {}
        self.drop_to = drop_to
        self.compile_deadline = 0.0
        self.run_deadline = 0.0
        self.verdicts: list[dict[str, Any]] = []
        self.rng = random.SystemRandom()
        self.child_system: dict[str, Any] = {}
        self.sandbox: dict[str, Any] = {}
        self.first_call_done = False
        self.transport_note = ""
        self.cpu_timing = False
        self._flush_buffer: Any = None
        self._probe_buffer: Any = None
        self.prepared: dict[int, Prepared] = {}
        self.calibrations: dict[int, Calibration] = {}
        self.next_id = 0
        self.phases: dict[str, float] = {}
        self.on_started: Callable[[], None] = lambda: None  # after the child's trusted start, before the submission

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def deadline(self) -> tuple[float, str]:
        if not self.first_call_done:
            return self.compile_deadline, "compile"
        return self.run_deadline, "run"

    def ask(self, message: dict[str, Any]) -> tuple[dict[str, Any], float]:
        deadline, phase = self.deadline()
        return self.child.request(message, deadline, phase)

    # -- set-up ----------------------------------------------------------------------------------------------
    def phase(self, name: str, since: float) -> float:
        """Add the seconds since `since` to phase `name` (where a run's time goes); returns now."""
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - since
        return now

    def start(self, submission: Path, bench_salt: str | None) -> None:
        mark = time.perf_counter()
        self.child.start()
        self.compile_deadline = time.monotonic() + self.limits.compile_s
        reply, _ = self.ask({"op": "init", "gpu_mem_bytes": self.limits.gpu_mem_bytes,
                             "cpu_timing": self.cpu_timing, "expect_gpu": self.on_gpu})
        if not reply.get("ok"):
            raise ChildFailed(_one_line(reply.get("error", "the child could not start")))
        mark = self.phase("child start (sandbox, torch, CUDA, clock)", mark)
        self.on_started()
        self.child_system = dict(reply.get("system") or {})
        self.clock_info = dict(reply.get("clock") or {})
        self.sandbox = dict(reply.get("sandbox") or {})
        if self.mode in ("benchmark", "ranked"):
            # Every benchmark case is mapped and calibrated before the submission exists in the child, so the
            # stand-in calls that calibrate the clocks run trusted code only.
            for index, case in enumerate(self.task.cases("benchmarks")):
                prep = self._bind_case(case, self.bench_seed(case, bench_salt), None)
                # A few sets are enough to fit the empty requests' line; the full pool is bound when the case is
                # timed, so memory holds one case's pool at a time.
                pool = prep.pool
                while len(pool) < min(prep.pool_size, CALIBRATION_POOL):
                    pool.append(self.bind(prep.data0))
                prep.calibration = self.calibrations[index] = self._calibrate(pool, case, prep.seed)
                for extra in pool[1:]:
                    self.unbind(extra)
                del pool[1:]
                self.prepared[index] = prep
            mark = self.phase("inputs and clock calibration", mark)
        load: dict[str, Any] = {"op": "load", "path": str(submission)}
        if self.formula is not None:
            load["order"] = {"source": self.formula.normalized_source(), "outputs": list(self.formula.outputs)}
        reply, _ = self.ask(load)
        if not reply.get("ok"):
            raise ChildFailed(_one_line(reply.get("error", "the submission could not be loaded")))
        self.phase("import of the submission", mark)

    def bench_seed(self, case: dict[str, Any], salt: str | None) -> int:
        if salt and self.secret_given:
            return secret_seed(self.secret, case["seed"], salt)
        return derive_seed(case["seed"], salt) if salt else int(case["seed"])

    def _calibrate(self, pool: list[SlotSet], case: dict[str, Any], seed: int) -> Calibration:
        """The residual over trusted requests of every size through the case's own buffers, made the way timed
        requests are: fresh inputs, outputs poisoned and seals armed before each, the parent's flush, and after
        each the parent's checks on a random half of the outputs (their verdicts are ignored: the stand-in
        calls write nothing). The parent's work between requests changes what the child's first steps cost
        (measured on an H100: +0.3..0.8 ms per request when the calibration skipped it)."""
        ks, walls, tails = [], [], []
        sizes = case_sizes(case)
        rounds = max(2, math.ceil(CALIBRATION_REQUESTS / len(pool)))
        for n, k in enumerate([k for _ in range(rounds) for k in self.rng.sample(range(1, len(pool) + 1), len(pool))]):
            group = pool[:k]
            seeds = [secret_seed(self.secret, seed, f"cal{n}.{j}") for j in range(k)]
            inputs = self._load_group(group, seeds, sizes)
            reply, wall_ms = self.request(group, null=True)
            if not reply.get("ok"):
                raise ChildFailed(_one_line(reply.get("error", "calibration failed")))
            for slots, data, rep_seed in zip(group, inputs, seeds):
                slots.seal_intact()
                if self.rng.random() < CHECK_FRACTION:
                    self.judge(slots, data, {"ok": True, "returned": "out"}, rep_seed)
            ks.append(k)
            walls.append(wall_ms - sum(float(t) for t in reply["t_ms"]))
            tails.append(float(reply["tail_ms"]))
        fit = theilslopes(walls, ks)
        return Calibration(slope_ms=float(fit[0]), intercept_ms=float(fit[1]), tail_ms=float(np.median(tails)),
                           n=len(ks))

    def request(self, group: list[SlotSet], null: bool = False) -> tuple[dict[str, Any], float]:
        """One timed request over `group`; the wall time (ms) runs from the request until the parent's own
        probe kernel after the answer has finished, so GPU work the child left running is inside it."""
        self._settle()
        start = time.perf_counter()
        reply, _ = self.ask({"op": "calls", "ids": [slots.id for slots in group], "null": null})
        self._probe()
        if reply.get("ok"):
            # Contexts take turns on the GPU in time slices, so the probe alone can finish while work the child
            # left queued still runs (measured: a child that skipped its synchronize). The last call's seal is
            # written in stream order after every call of the request: the wall clock runs until it is there.
            give_up = time.monotonic() + SEAL_WAIT_S
            while not group[-1].seal_written() and time.monotonic() < give_up:
                pass
        wall_ms = (time.perf_counter() - start) * 1e3
        if not null and not self.first_call_done:
            self.first_call_done = True
            self.run_deadline = time.monotonic() + self.limits.run_s
        return reply, wall_ms

    def _probe(self) -> None:
        """A tiny kernel of the parent's, waited for: it cannot finish while work the child left on the GPU
        still runs (contexts take turns), so the parent's wall clock of a call covers that work too."""
        if self.on_gpu:
            import torch

            if self._probe_buffer is None:
                self._probe_buffer = torch.zeros(1, dtype=torch.int32, device="cuda")
            self._probe_buffer.add_(1)
            torch.cuda.synchronize()

    # -- one call ------------------------------------------------------------------------------------------
    def bind(self, data: dict[str, Any]) -> SlotSet:
        """Shared buffers for one case, mapped by the child; device buffers fall back to shared host memory."""
        while True:
            try:
                slots = SlotSet(data, self.kind, self.workdir / "slots", self.drop_to, seal_n=SEAL_N)
            except OSError as err:  # the driver refused an exportable allocation
                if self.kind != "vmm" or self.first_call_done:
                    raise
                self.transport_note = f"device buffers by file descriptor failed ({_one_line(err)}); shared host memory"
                self.kind = "host"
                continue
            self.next_id += 1
            slots.id = self.next_id
            fd = slots.export_fd()
            if fd is not None:
                assert self.child.fd_socket is not None
                try:
                    vmm.send_fd(self.child.fd_socket, fd)
                except OSError:
                    slots.close()
                    raise ChildFailed(self.child._death()) from None
            reply, _ = self.ask({"op": "bind", "id": slots.id, "spec": slots.spec()})
            if reply.get("ok"):
                return slots
            slots.close()
            if self.kind == "vmm" and not self.first_call_done:
                self.transport_note = (f"device buffers by file descriptor failed ({_one_line(reply.get('error', ''))});"
                                       " shared host memory")
                self.kind = "host"
                continue
            raise ChildFailed(_one_line(reply.get("error", "the child could not map the inputs")))

    def unbind(self, slots: SlotSet) -> None:
        try:
            self.ask({"op": "unbind", "id": slots.id})
        finally:
            slots.close()

    def _settle(self) -> None:
        """The parent's own L2 flush before every call (empty or real), so the child's flush always evicts
        the same dirty lines whatever the parent computed before (its checks touch hundreds of MB)."""
        if self.on_gpu:
            import torch

            if self._flush_buffer is None:
                l2 = int(self.child_system.get("l2_bytes") or 0) or (128 << 20)
                self._flush_buffer = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
            self._flush_buffer.fill_(self.rng.randrange(1 << 30))
            torch.cuda.synchronize()

    def call(self, slots: SlotSet, data: dict[str, Any], timed: bool) -> dict[str, Any]:
        """One call on fresh inputs whose output is judged, not timed (tests, the first and last checks of a
        benchmark case): `timed` runs it through the child's timing path, as a timed call sees it."""
        slots.load(data)
        poison_(slots.out)
        if self.on_gpu:
            import torch

            # The copy and the poison run on the parent's stream; the child's context does not wait for them, so
            # without this a kernel that accumulates into its output (histogram: zero, then atomics) can race
            # the poison (measured on an H100: poison + counts in the output of an honest kernel).
            torch.cuda.synchronize()
        reply, _ = self.ask({"op": "call", "id": slots.id, "timed": timed})
        if not self.first_call_done:
            self.first_call_done = True
            self.run_deadline = time.monotonic() + self.limits.run_s
        return reply

    def judge(self, slots: SlotSet, data: dict[str, Any], reply: dict[str, Any], seed: int) -> RunCheck:
        """The parent's verdict on the output slot after one call, from its own copy of the inputs."""
        if not reply.get("ok"):
            return RunCheck(seed=seed, passed=False, message=_one_line(reply.get("error", "the call failed")),
                            n_bad=-1, max_abs_err=math.inf)
        returned = str(reply.get("returned", ""))
        if returned not in ("out", "copied"):
            return RunCheck(seed=seed, passed=False, message=_one_line(f"the kernel {returned}"), n_bad=-1,
                            max_abs_err=math.inf)
        output = slots.out.clone()
        changed = slots.inputs_intact(data)
        if changed is not None:
            return RunCheck(seed=seed, passed=False, n_bad=-1, max_abs_err=math.inf,
                            message=f"the kernel wrote into its input {changed!r}")
        try:
            verdict = self.task.check(data, output)
        except Exception as err:  # the task's check is trusted code; a crash on odd output is a failure
            return RunCheck(seed=seed, passed=False, n_bad=-1, max_abs_err=math.inf,
                            message=_one_line(f"the check raised {type(err).__name__}: {err}"))
        n_poisoned, first = count_poisoned(output, output.dtype)
        ok = bool(getattr(verdict, "ok", verdict))
        message = str(getattr(verdict, "message", "passed" if ok else "failed"))
        if n_poisoned and not ok:
            message += f"; {n_poisoned} elements still hold the poison value, first at {first}"
        return RunCheck(seed=seed, passed=ok, message=message, n_bad=int(getattr(verdict, "n_bad", 0 if ok else -1)),
                        max_abs_err=float(getattr(verdict, "max_abs_err", 0.0)),
                        worst_index=getattr(verdict, "worst_index", None), n_poisoned=n_poisoned)

    def order_info(self, case: dict[str, Any]) -> dict[str, Any]:
        from swizzlelab.harness.evaluate import order_info

        candidate = Candidate(fn=lambda data: None, source="", order_spec=self.order_spec, formula=self.formula,
                              submission=None if self.own_kernel else "submission")
        return order_info(self.task, candidate, case)

    def check_once(self, slots: SlotSet, case: dict[str, Any], seed: int) -> RunCheck:
        data = self.task.generate_input({"seed": int(seed), **case_sizes(case)})
        reply = self.call(slots, data, timed=False)
        return self.judge(slots, data, reply, seed)

    # -- modes -----------------------------------------------------------------------------------------------
    def run_tests(self) -> list[CaseResult]:
        results = []
        for index, case in enumerate(self.task.cases("tests")):
            seed = int(case["seed"])
            data = self.task.generate_input({"seed": seed, **case_sizes(case)})
            slots = self.bind(data)
            try:
                result = CaseResult(case=dict(case))
                result.runs.append(self.judge(slots, data, self.call(slots, data, timed=False), seed))
                if result.runs[0].passed:
                    result.runs.append(self.check_once(slots, case, derive_seed(seed, "recheck")))
            finally:
                self.unbind(slots)
            result.order = self.order_info(case)
            results.append(result)
            self.verdicts.append({"case": dict(case), "kind": "test", "passed": result.passed,
                                  "reason": None if result.passed else f"test {index}: {result.message}"})
            self.note(self.task.case_label(case))
        return results

    def time_case(self, case: dict[str, Any], index: int) -> BenchRow:
        prep = self.prepared.pop(index)
        seed, data0, slots = prep.seed, prep.data0, prep.pool[0]
        verdict: dict[str, Any] = {"case": dict(case), "kind": "benchmark", "seed": seed}
        try:
            check = CaseResult(case=dict(case))
            check.runs.append(self.judge(slots, data0, self.call(slots, data0, timed=False), seed))
            row = BenchRow(case=dict(case), seed=seed, check=check, order=self.order_info(case))
            if not check.passed:
                row.error = "not timed: the output is wrong"
                verdict.update(passed=False, reason=f"benchmark {index}: {check.message}")
                return row
            while len(prep.pool) < prep.pool_size:
                prep.pool.append(self.bind(data0))
            self._timed_loop(row, prep, case, verdict)
        finally:
            for bound in prep.pool:
                self.unbind(bound)
            self.verdicts.append(verdict)
        return row

    def time_cases(self) -> tuple[list[BenchRow], str | None]:
        """Every benchmark case timed in turn; stops at the first that fails (its reason returned)."""
        rows: list[BenchRow] = []
        for index, case in enumerate(self.task.cases("benchmarks")):
            mark = time.perf_counter()
            if index not in self.prepared:  # the secret phase: the same case, the leaderboard's inputs
                self.prepared[index] = self._bind_case(case, self.bench_seed(case, "ranked"), self.calibrations[index])
            row = self.time_case(case, index)
            self.phase(f"benchmark {index} (first call, warm-up, timed requests, checks)", mark)
            rows.append(row)
            self.note(self.task.case_label(case))
            if row.error or not row.check.passed:
                return rows, self.verdicts[-1].get("reason") or row.error
        return rows, None

    def _bind_case(self, case: dict[str, Any], seed: int, calibration: Calibration | None) -> Prepared:
        """A case's first input bound in one slot set, and the pool size its timing will use."""
        data0 = self.task.generate_input({"seed": seed, **case_sizes(case)})
        slots = self.bind(data0)
        total = 0
        if self.on_gpu:
            import torch

            total = int(torch.cuda.get_device_properties(0).total_memory)
        return Prepared(seed, data0, [slots], calibration, pool_size(slots.nbytes(), self.on_gpu, total))

    def switch_to_secret(self, secret: bytes) -> None:
        """From here on, inputs come from the leaderboard's secret (the secret phase of a ranked run, in the same
        child after the public benchmarks). The clocks' calibration of each case was made before the submission
        was imported, through buffers of the same sizes, and stays valid."""
        self.secret, self.secret_given = secret, True

    def _load_group(self, group: list[SlotSet], seeds: list[int], sizes: dict[str, Any]) -> list[dict[str, Any]]:
        inputs = []
        for slots, rep_seed in zip(group, seeds):
            data = self.task.generate_input({"seed": rep_seed, **sizes})
            slots.load(data)
            poison_(slots.out)
            slots.arm_seal(self.rng.getrandbits(62))
            inputs.append(data)
        return inputs

    def _timed_loop(self, row: BenchRow, prep: Prepared, case: dict[str, Any], verdict: dict[str, Any]) -> None:
        """The timed requests with the GPU's SM clock sampled over them (the parent's nvidia-smi, not the child)."""
        torch = None
        if self.on_gpu:
            import torch
        with sampler_for(torch) as clock:
            wait_for_first_sample(clock)
            self._timed_requests(row, prep, case, verdict)
        if row.candidate is not None:
            row.candidate.gpu_clock = clock.summary()
            verdict["gpu_clock"] = row.candidate.gpu_clock

    def _timed_requests(self, row: BenchRow, prep: Prepared, case: dict[str, Any], verdict: dict[str, Any]) -> None:
        sizes, seed, pool, cal = case_sizes(case), prep.seed, prep.pool, prep.calibration
        # Warm-up over every slot set: compiles, autotunes, fills caches; its figures are dropped.
        warm_start = time.perf_counter()
        for attempt in range(3):
            self._load_group(pool, [secret_seed(self.secret, seed, f"warm{attempt}.{j}") for j in range(len(pool))],
                             sizes)
            reply, _ = self.request(pool)
            if not reply.get("ok"):
                row.error = _one_line(reply.get("error", "the call failed"))
                verdict.update(passed=False, reason=f"warm-up: {row.error}")
                return
            if time.perf_counter() - warm_start > WARMUP_S:
                break
        samples: list[float] = []
        ks: list[int] = []
        walls: list[float] = []
        sums: list[float] = []
        tails: list[float] = []
        n_checked = n_calls = 0
        failure: str | None = None
        design: list[int] = []
        started = time.perf_counter()
        stopped_by = "budget"
        while failure is None:
            k = next_request_size(design, self.rng, len(pool))
            group = pool[:k]
            seeds = [secret_seed(self.secret, seed, f"rep{n_calls + j + 1}") for j in range(k)]
            inputs = self._load_group(group, seeds, sizes)
            reply, wall_ms = self.request(group)
            if not reply.get("ok"):
                failure = _one_line(reply.get("error", "the call failed"))
                break
            figures, tail_ms, returned = reply.get("t_ms"), reply.get("tail_ms"), reply.get("returned")
            if not (isinstance(figures, list) and isinstance(returned, list) and len(figures) == k == len(returned)
                    and all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in figures)
                    and isinstance(tail_ms, (int, float)) and math.isfinite(tail_ms) and tail_ms >= 0):
                failure = f"the child reported impossible times ({str(figures)[:80]} ms)"
                break
            figures = [float(t) for t in figures]
            if sum(figures) + tail_ms > wall_ms:
                failure = (f"the child reported {sum(figures) + tail_ms:.4g} ms for a request the parent saw take "
                           f"{wall_ms:.4g} ms")
                break
            if tail_ms > cal.tail_ms + TAIL_SLACK_MS:
                figures[-1] += tail_ms  # work was still running on another stream after the last end mark: it counts
            for j, (slots, data, rep_seed) in enumerate(zip(group, inputs, seeds)):
                n_calls += 1
                if not slots.seal_intact():
                    failure = (f"timed call {n_calls} (seed {rep_seed}): its output changed after the call returned "
                               f"(work left running on another stream or thread, or finished by a later call)")
                    break
                # The parent decides after the request which outputs to look at, so the child cannot know.
                if n_calls == 1 or self.rng.random() < CHECK_FRACTION:
                    n_checked += 1
                    result = self.judge(slots, data, {"ok": True, "returned": returned[j]}, rep_seed)
                    if not result.passed:
                        failure = f"timed call {n_calls} (seed {rep_seed}): {result.message}"
                        break
            if failure is not None:
                break
            samples.extend(figures)
            ks.append(k)
            walls.append(wall_ms)
            sums.append(sum(figures))
            tails.append(float(tail_ms))
            elapsed = time.perf_counter() - started
            reason = stop_reason(len(ks), samples, len(pool), elapsed, self.budget_s)
            if reason == "sem":
                stopped_by = "sem"
                break
            # Past the budget, the loop also waits (up to the extension) until the clocks can be judged.
            if reason == "budget" and (elapsed >= self.budget_s * EXTEND_FACTOR + EXTEND_S
                                       or residual_ci_ok(ks, walls, sums, self.on_gpu)):
                break
        if failure is not None:
            row.error = f"refused: {failure}"
            verdict.update(passed=False, reason=f"benchmark: {failure}")
            return
        # The last call is always checked too (a kernel that breaks late).
        data = self.task.generate_input({"seed": secret_seed(self.secret, seed, "last"), **sizes})
        reply = self.call(pool[0], data, timed=True)
        last = self.judge(pool[0], data, reply, -1)
        n_checked += 1
        if not last.passed:
            row.error = f"refused: the last timed call's output is wrong: {last.message}"
            verdict.update(passed=False, reason=row.error)
            return
        clocks, error = clock_verdict(ks, walls, sums, cal, self.on_gpu)
        clocks.update(calibration_tail_ms=cal.tail_ms, median_tail_ms=float(np.median(tails)), n_checked=n_checked,
                      n_timed=len(samples), n_requests=len(ks), pool=len(pool), check_fraction=CHECK_FRACTION)
        verdict["clocks"] = clocks
        if error:
            row.error = f"refused: {error}"
            verdict.update(passed=False, reason=row.error)
            return
        row.candidate = summarize(np.asarray(samples), stopped_by, device=str(self.child_system.get("gpu", "")))
        row.candidate.check_after = last.message
        verdict.update(passed=True, reason=None, mean_ms=row.candidate.mean_ms, std_ms=row.candidate.std_ms,
                       best_ms=row.candidate.best_ms, worst_ms=row.candidate.worst_ms, n=row.candidate.n)


def _residual_fit(ks: list[int], walls_ms: list[float], sums_ms: list[float]) -> tuple[float, float, float, float]:
    """Theil-Sen fit (99% interval) of the residual, wall time - the request's figures, over k: slope,
    intercept, and the interval's low and high slope."""
    residual = [w - f for w, f in zip(walls_ms, sums_ms)]
    fit = theilslopes(residual, ks, alpha=0.99)
    return float(fit[0]), float(fit[1]), float(fit[2]), float(fit[3])


def _ci_allowed(per_call: float, on_gpu: bool) -> float:
    return (RESIDUAL_CI_MS + RESIDUAL_CI_REL * per_call) if on_gpu else (RESIDUAL_CI_MS_CPU
                                                                         + RESIDUAL_CI_REL_CPU * per_call)


def residual_ci_ok(ks: list[int], walls_ms: list[float], sums_ms: list[float], on_gpu: bool) -> bool:
    """Whether the requests so far pin the residual's growth per call down well enough to judge the figures;
    when not, the loop keeps timing (up to its extension) instead of refusing an honest kernel for want of
    samples (measured on an H100: a 0.21 ms histogram, whose 512 MiB fresh inputs make requests slow, reached
    a 0.040 ms interval in a 1 s budget against 0.037 allowed)."""
    if len(set(ks)) < 2:
        return False
    _, _, low, high = _residual_fit(ks, walls_ms, sums_ms)
    return (high - low) / 2 <= _ci_allowed(float(sum(sums_ms) / sum(ks)), on_gpu)


def clock_verdict(ks: list[int], walls_ms: list[float], sums_ms: list[float], cal: Calibration,
                  on_gpu: bool) -> tuple[dict[str, float], str | None]:
    """The parent's wall clock against the child's figures over timed requests of k calls each.

    The residual (wall - the request's figures) is fitted over k (Theil-Sen, 99% interval). Its growth per call,
    less the trusted gate's, may be at most RESIDUAL_SLOPE_MS + RESIDUAL_SLOPE_REL of the figure + its interval: more means work each
    call did outside its marks, or a forged figure; the interval itself may be at most RESIDUAL_CI_MS +
    RESIDUAL_CI_REL of the figure. Its fixed part may exceed the trusted calibration's by INTERCEPT_MS + the
    interval over the mean k: more means work done once per request outside the marks, e.g. a child that pads
    short requests to flatten the growth. Returns the figures and None, or the figures and a one-line reason."""
    if len(set(ks)) < 2:
        return {}, "the timed requests all had the same size, so the wall clock cannot be checked"
    slope, intercept, low, high = _residual_fit(ks, walls_ms, sums_ms)
    # The trusted gate before a request grows by GATE_NS_PER_CALL per call (timers.py): not the child's doing.
    gate_ms = GATE_NS_PER_CALL / 1e6 if on_gpu else 0.0
    slope -= gate_ms
    per_call = float(sum(sums_ms) / sum(ks))
    half = (high - low) / 2
    if on_gpu:
        abs_ms, rel, fixed = RESIDUAL_SLOPE_MS, RESIDUAL_SLOPE_REL, INTERCEPT_MS
    else:
        abs_ms, rel, fixed = RESIDUAL_SLOPE_MS_CPU, RESIDUAL_SLOPE_REL_CPU, INTERCEPT_MS_CPU
    ci_allowed = _ci_allowed(per_call, on_gpu)
    slope_allowed = abs_ms + rel * per_call + half
    intercept_allowed = fixed + half * float(np.mean(ks))
    clocks = {"figure_per_call_ms": per_call, "residual_slope_ms": slope, "gate_slope_ms": gate_ms,
              "residual_slope_ci99_ms": half,
              "residual_slope_ci99_allowed_ms": ci_allowed, "slope_allowed_ms": slope_allowed,
              "calibration_slope_ms": cal.slope_ms, "residual_intercept_ms": intercept,
              "calibration_intercept_ms": cal.intercept_ms, "intercept_excess_ms": intercept - cal.intercept_ms,
              "intercept_allowed_ms": intercept_allowed, "calibration_requests": cal.n}
    head = "the child's clock and the parent's wall clock disagree:"
    if slope > slope_allowed:
        return clocks, (f"{head} each call adds {slope + per_call:.4g} ms of wall time but its figure says "
                        f"{per_call:.4g} ms (at most {slope_allowed:.3f} ms more allowed): work outside the measured "
                        f"interval")
    if half > ci_allowed:
        return clocks, (f"the parent's wall clock varies too much between requests (99% interval of the time "
                        f"between calls +-{half:.3f} ms, at most {ci_allowed:.3f} ms) to vouch for the child's figures")
    if intercept - cal.intercept_ms > intercept_allowed:
        return clocks, (f"{head} each request costs {intercept - cal.intercept_ms:.3f} ms more wall time than a "
                        f"trusted one beyond its calls' figures (allowed {intercept_allowed:.3f} ms): work outside "
                        f"the measured interval")
    return clocks, None


def data0_again(task: Any, seed: int, sizes: dict[str, Any]) -> dict[str, Any]:
    return task.generate_input({"seed": seed, **sizes})


# The code a submission-less `eval TASK` runs in the child: the task's own kernel (the parent adds the order).
TASK_KERNEL_CODE = (
    "# the task's own kernel, run isolated like any submission\n"
    "import os\n"
    "from swizzlelab.tasks import load_task\n"
    "_task = load_task(os.environ['SWIZZLELAB_TASK'])\n\n\n"
    "def custom_kernel(data, order=None):\n"
    "    return _task.custom_kernel(data, order)\n"
)


# A library row of the task (its `baseline`, or one of its EXTRA_BASELINES), run through the isolated loop like a
# submission, so that it is timed the way the submission was: the loop's duty cycle sets the GPU's clock (measured
# on an H100: a sustained in-process loop ran an 8192^3 GEMM at ~1600 MHz, the isolated loop at ~1900 MHz).
BASELINE_CODE = (
    "# the task's library implementation {name!r}, run isolated like any submission\n"
    "import os\n"
    "from swizzlelab.tasks import load_task\n"
    "_task = load_task(os.environ['SWIZZLELAB_TASK'])\n"
    "_fn = _task.baseline if {name!r} == 'baseline' else _task.extra_baselines()[{name!r}][1]\n\n\n"
    "def custom_kernel(data, order=None):\n"
    "    return _fn(data)\n"
)


def _library_key(task: Any, name: str, mode: str, secret: bytes | None, budget_s: float) -> str:
    """What a kept library row depends on: the task's files, the row, the mode, the inputs' secret, the budget,
    the GPU and this evaluator's code."""
    digest = hashlib.sha256()
    folder = Path(task.path).resolve()
    for path in sorted(folder.glob("*.py")) + sorted(folder.glob("*.yml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(Path(__file__).read_bytes())
    info = system_info()
    digest.update(json.dumps([str(folder), name, mode, secret.hex() if secret else "", float(budget_s), info.gpu,
                              getattr(swizzlelab, "__version__", "")]).encode())
    return digest.hexdigest()[:32]


def library_names(loaded: Any, mode: str) -> list[tuple[str, str]]:
    """The task's library rows shown in `mode`: (name, description)."""
    names = [("baseline", "")] if getattr(loaded, "baseline", None) is not None else []
    if mode == "ranked":
        names += [(name, description) for name, (description, _) in loaded.extra_baselines().items()]
    return names


def _library_cases(task: str | Path, loaded: Any, name: str, mode: str, *, secret: bytes | None, limits: Limits,
                   budget_s: float, triton_cache_seed: Path | None, cpu_timing: bool,
                   kept_caches: Path | None) -> tuple[list[Any], str, float | None]:
    """One library row's timed cases (candidate dicts), why a case has none, and the age of kept rows (None:
    timed now). Rows are kept by an evaluating process for caches.LIBRARY_KEEP_S."""
    kept = KeptCaches(kept_caches)
    budget = min(budget_s, LIBRARY_BUDGET_S)
    key = _library_key(loaded, name, mode, secret, budget)
    found = kept.library(key)
    if found is not None:
        return found[0], "not timed when it was kept", found[1]
    run = evaluate_isolated(task, BASELINE_CODE.format(name=name), mode, filename=f"library_{name}.py",
                            secret=secret, limits=limits, budget_s=budget, with_baseline=False,
                            triton_cache_seed=triton_cache_seed, tests=False, cpu_timing=cpu_timing,
                            kept_caches=kept_caches)
    cases = [row.get("candidate") for row in timed_rows(run.report, mode)]
    if run.passed and cases and all(c and c.get("samples_ms") for c in cases):
        kept.keep_library(key, cases)
    return cases, run.reason or "no figure for this case", None


def time_library_ahead(task: str | Path, mode: str, *, limits: Limits, budget_s: float, kept_caches: Path,
                       cpu_timing: bool = False) -> int:
    """Time the library rows of `task` a later run in `mode` (public inputs) would show, unless kept already: an
    idle worker does this so a submission does not wait for them. Returns how many rows were timed now."""
    from swizzlelab.tasks import load_task

    loaded = load_task(task)
    timed = 0
    for name, _ in library_names(loaded, mode):
        _, _, age = _library_cases(task, loaded, name, mode, secret=None, limits=limits, budget_s=budget_s,
                                   triton_cache_seed=None, cpu_timing=cpu_timing, kept_caches=kept_caches)
        timed += age is None
    return timed


def _time_library_rows(task: str | Path, loaded: Any, report: Any, mode: str, *, secret: bytes | None,
                       limits: Limits, budget_s: float, triton_cache_seed: Path | None, cpu_timing: bool,
                       kept_caches: Path | None = None) -> str:
    """The task's library rows for each timed case: each library implementation in a child of its own through
    the same loop (same secret, so the same inputs when one is given), compared unpaired with the submission.
    Returns where the rows came from, for the report."""
    rows = report.ranked if mode == "ranked" else report.benchmarks
    names = library_names(loaded, mode)
    ages: list[float] = []
    for name, description in names:
        lib_cases, run_reason, age = _library_cases(task, loaded, name, mode, secret=secret, limits=limits,
                                                    budget_s=budget_s, triton_cache_seed=triton_cache_seed,
                                                    cpu_timing=cpu_timing, kept_caches=kept_caches)
        if age is not None:
            ages.append(age)
        for index, row in enumerate(rows):
            cand = (lib_cases[index] if index < len(lib_cases) else None) or None
            timing = comparison = None
            error = ""
            if cand and cand.get("samples_ms"):
                timing = Timing.from_dict(cand)
                if row.candidate is not None:
                    comparison = compare_unpaired(timing, row.candidate, UNPAIRED_METHOD)
            else:
                error = _one_line(f"{name} not timed: {run_reason}")
            if name == "baseline":
                row.baseline, row.comparison = timing, comparison
                row.baseline_error = error
            else:
                row.extra_baselines.append(ExtraBaseline(name=name, description=description, timing=timing,
                                                         comparison=comparison, error=error))
    if not ages:
        return "timed in this run"
    return (f"{len(ages)} of {len(names)} kept by this evaluating process from runs {min(ages):.0f}-{max(ages):.0f} s "
            f"earlier on the same GPU (trusted code; timed again after {caches.LIBRARY_KEEP_S:.0f} s)")


def timed_rows(report: dict[str, Any] | None, mode: str) -> list[dict[str, Any]]:
    """The timed case rows of an isolated run's report dict, one per benchmark case (ranked mode keeps them under
    ranked.cases, benchmark mode as the benchmarks list)."""
    rows = (report or {}).get("ranked" if mode == "ranked" else "benchmarks")
    if isinstance(rows, dict):
        rows = rows.get("cases")
    return [row if isinstance(row, dict) else {} for row in rows or []]


def _not_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0) on this (parent) process: processes of the same uid without CAP_SYS_PTRACE
    can no longer read its memory, environment or file descriptors through /proc or ptrace."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def child_workdir(code: str, filename: str, profiling: bool = False) -> tuple[Path, Path, int | None]:
    """(folder, the code's file in it, uid the child drops to or None): a fresh private folder for one sandboxed
    child, with the code written into it and the sub-folders the child may write (ChildProcess.env)."""
    # The evaluating process's pid in the name: whoever supervises it removes what it left if it dies.
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
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


def evaluate_isolated(
    task: str | Path,
    code: str,
    mode: str,
    *,
    filename: str = "submission.py",
    secret: bytes | None = None,
    limits: Limits | None = None,
    progress: ProgressFn | None = None,
    budget_s: float = 3.0,
    with_baseline: bool = True,
    command: str = "",
    out_dir: Path | None = None,
    order: str | None = None,
    cpu_timing: bool = False,
    outputs: list[str] | None = None,
    triton_cache_seed: Path | None = None,
    source: str | None = None,
    tests: bool = True,
    kept_caches: Path | None = None,
    secret_phase: bytes | None = None,
) -> IsolatedRun:
    """Evaluate submission `code` on `task` in `mode` inside a sandboxed child process.

    Never raises for a bad submission (that is a failed IsolatedRun with a one-line reason); raises UserError
    for bad arguments (unknown task or mode, a bad file name, a mode that needs a GPU on a CPU machine).
    With `secret_phase` (ranked only), the same child then times every benchmark case on inputs from that secret,
    returned as the run's `secret_run`.
    """
    from swizzlelab.tasks import load_task

    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if not isinstance(code, str):
        raise UserError("the submission code must be text")
    if budget_s <= 0:
        raise UserError(f"budget_s must be > 0, got {budget_s}")
    loaded = load_task(task)
    name = check_file_name(filename)
    # The order is read and proved here, in the parent: a bad one is a bad argument, not a bad submission.
    formula = None
    if order:
        from swizzlelab.harness.evaluate import NO_TARGET
        from swizzlelab.scenario import load_scenario

        formula = load_scenario(loaded, target=NO_TARGET, config="backend").parse_order(order, outputs=outputs)
    if formula is not None:
        from swizzlelab.swizzle import to_permutation

        for case in loaded.cases("tests") + loaded.cases("benchmarks"):
            args, consts = loaded.swizzle_args(case)
            to_permutation(formula, loaded.tile_grid(case), args, consts)
    limits = limits or Limits()
    info = system_info()
    if mode in ("benchmark", "ranked") and cpu_timing and not info.is_gpu:
        pass  # tests of the timed flow: interpreter wall times, labelled as CPU figures in the report
    elif mode != "test" and not info.is_gpu:
        raise NoGpuError(f"--mode {mode} needs a CUDA GPU; run --mode test on the CPU")
    elif mode != "test":
        from swizzlelab.runtime import device

        if device() != "cuda":  # e.g. a process that picked the Triton interpreter before it saw the GPU
            raise NoGpuError(f"--mode {mode}: this process sees {info.gpu} but runs kernels on the CPU "
                             f"(TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r}); unset it to time on the GPU")
    started = time.perf_counter()
    workdir, submission, drop_to = child_workdir(code, name, profiling=mode == "profile")
    # Triton caches are copied in, never shared: the trusted kernels' (kept from an earlier child, snapshotted
    # before its submission ran) and this code's own from its earlier run (else a given seed); what a submission
    # writes into its copies dies with the run.
    kept = KeptCaches(kept_caches)
    caches.copy_tree(kept.trusted() or workdir / "-", workdir / caches.TRUSTED)
    code_cache = kept.of_code(code)
    seed = code_cache if code_cache is not None and code_cache.is_dir() else triton_cache_seed
    caches.copy_tree(Path(seed) if seed is not None else workdir / "-", workdir / caches.SUBMISSION)
    if drop_to is not None:
        for tree in (caches.TRUSTED, caches.SUBMISSION):
            for root, dirs, files in os.walk(workdir / tree):
                for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
                    os.chown(name, drop_to, drop_to, follow_symlinks=False)
    own = code == TASK_KERNEL_CODE
    label = source or (f"task kernel {Path(loaded.path) / 'kernel.py'}" if own else name)
    candidate = Candidate(fn=lambda data: None, source=label, order_spec=order, formula=formula,
                          submission=None if own else name)
    report = EvalReport(task=loaded.name, mode=mode, candidate=candidate, system=info, command=command,
                        budget_s=budget_s)
    if secret_phase is not None and mode != "ranked":
        raise UserError("a secret phase belongs to a ranked run")
    ev = _Evaluation(loaded, mode, limits, secret, budget_s, progress, with_baseline, workdir, drop_to)
    ev.formula, ev.order_spec, ev.own_kernel = formula, order, own
    ev.cpu_timing = cpu_timing and not info.is_gpu
    ev.child.extra_env["SWIZZLELAB_TASK"] = str(Path(loaded.path).resolve())
    ev.child.extra_env["SWIZZLELAB_SUBMISSION_TRITON_CACHE"] = str(workdir / caches.SUBMISSION)
    ev.on_started = lambda: kept.keep_trusted(workdir / caches.TRUSTED)
    reason: str | None = None
    profile_files: list[Path] = []
    secret_part: _SecretPart | None = None
    try:
        try:
            ev.start(submission, "ranked" if mode == "ranked" else None)
            if mode in ("test", "ranked", "profile") and tests:
                mark = time.perf_counter()
                report.tests = ev.run_tests()
                ev.phase("tests", mark)
                if not report.tests_passed:
                    failed = next(v for v in ev.verdicts if not v["passed"])
                    reason = failed["reason"]
            if reason is None and mode in ("benchmark", "ranked"):
                rows, reason = ev.time_cases()
                if mode == "ranked":
                    report.ranked = rows
                else:
                    report.benchmarks = rows
            if reason is None and mode == "profile":
                rows, profile_files = profile_isolated(ev, submission, out_dir)
                report.profiles = rows
                bad = [r for r in rows if not r.check_passed]
                if bad:
                    reason = f"profile: {bad[0].check_message}"
        except ChildFailed as failure:
            reason = failure.reason
        if secret_phase is not None:
            secret_part = _secret_phase(ev, secret_phase, reason)
    finally:
        for prep in ev.prepared.values():
            for slots in prep.pool:
                slots.close()
        ev.child.close()
    library = ""
    if reason is None and with_baseline and (ev.on_gpu or ev.cpu_timing) and mode in ("benchmark", "ranked"):
        mark = time.perf_counter()
        library = _time_library_rows(task, loaded, report, mode, secret=secret, limits=limits, budget_s=budget_s,
                                     triton_cache_seed=triton_cache_seed, cpu_timing=ev.cpu_timing,
                                     kept_caches=kept_caches)
        ev.phase("library rows (each in a child of its own)", mark)
    run = _finished(report, reason, ev, limits, secret, started, profile_files,
                    {"library_rows": library} if library else {},
                    secret_part.tails if secret_part is not None else None)
    if secret_part is not None:
        run.secret_run = _secret_run(secret_part, report, ev, limits, secret_phase)
    if ev.first_call_done:
        kept.keep_code(code, workdir / caches.SUBMISSION)
    shutil.rmtree(workdir, ignore_errors=True)
    return run


@dataclass
class _SecretPart:
    """The secret phase of a ranked run: its rows, reason, phases, verdicts and the public part's output."""

    rows: list[BenchRow]
    reason: str | None
    phases: dict[str, float]
    verdicts: list[dict[str, Any]]
    tails: tuple[str, str]  # the child's stdout and stderr before any secret input existed (the public run's)
    started: float
    duration_s: float


def _secret_phase(ev: _Evaluation, secret: bytes, public_reason: str | None) -> _SecretPart:
    """Time every benchmark case again on the leaderboard's secret inputs, in the child that ran the public part
    (no second start, calibration or compile). Not run when the public part failed."""
    tails = (ev.child.stdout.text(), ev.child.stderr.text())
    started = time.perf_counter()
    if public_reason is not None:
        return _SecretPart([], f"not run: the public run failed ({public_reason})", {}, [], tails, started, 0.0)
    # The secret phase fills phases and verdicts of its own; the public run's are put back afterwards.
    public_phases, public_verdicts = ev.phases, ev.verdicts
    ev.phases, ev.verdicts = {}, []
    ev.switch_to_secret(secret)
    try:
        rows, reason = ev.time_cases()
    except ChildFailed as failure:
        rows, reason = [], failure.reason
    part = _SecretPart(rows, reason, ev.phases, ev.verdicts, tails, started, time.perf_counter() - started)
    ev.phases, ev.verdicts = public_phases, public_verdicts
    return part


def _finished(report: EvalReport, reason: str | None, ev: _Evaluation, limits: Limits, secret: bytes | None,
              started: float, profile_files: list[Path], notes: dict[str, str],
              tails: tuple[str, str] | None) -> IsolatedRun:
    """The IsolatedRun of a finished evaluation: verdict, score, text and the isolation record."""
    from swizzlelab.harness.report import HEADLINES, render_text, report_dict

    mode = report.mode
    if reason is None and mode == "ranked":
        means = [row.candidate.mean_ms for row in report.ranked if row.candidate is not None]
        if means and len(means) == len(report.ranked):
            report.score_ms = geometric_mean(means)
    passed = reason is None and report.success
    if not passed and reason is None:
        reason = "the evaluation failed"
    score = None
    if passed and mode == "ranked":
        score = report.score_ms
    elif passed and mode == "benchmark":
        means = [row.candidate.mean_ms for row in report.benchmarks if row.candidate is not None]
        score = geometric_mean(means) if means else None
    text = render_text(report)
    if not passed:
        good, bad = HEADLINES[mode]
        text = text.replace(f"> {good}", f"> {bad}", 1)
    if reason is not None:
        text = text.rstrip("\n") + f"\n\n❌ {reason}\n"
    isolation = {"sandbox": ev.sandbox, "transport": ev.kind, "transport_note": ev.transport_note,
                 "clock": ev.clock_info, "limits": limits.to_dict(), "phases_s": ev.phases,
                 "secret": "given" if secret is not None else "random per run"}
    isolation.update(notes)  # where library rows came from; that a run is a secret phase
    text = text.rstrip("\n") + "\n" + _isolation_lines(isolation) + "\n"
    as_dict = report_dict(report)
    as_dict["isolated"] = True
    as_dict["isolation"] = isolation
    as_dict["success"] = passed
    as_dict["reason"] = reason
    stdout, stderr = tails if tails is not None else (ev.child.stdout.text(), ev.child.stderr.text())
    return IsolatedRun(
        mode=mode, passed=passed, score_ms=score, reason=reason, report_text=text, report=as_dict,
        stdout_tail=stdout, stderr_tail=stderr, system=ev.child_system or report.system.to_dict(),
        profile_files=profile_files, duration_s=time.perf_counter() - started, verdicts=ev.verdicts, isolation=isolation,
    )


def _secret_run(part: _SecretPart, public: EvalReport, ev: _Evaluation, limits: Limits, secret: bytes) -> IsolatedRun:
    """The secret phase as a run of its own (the leaderboard stores it as the submission's secret run): the
    public part's tests, the secret rows; the whole child's output (a secret run's output is never shown to its
    author)."""
    report = EvalReport(task=public.task, mode="ranked", candidate=public.candidate, system=public.system,
                        command=public.command, budget_s=public.budget_s)
    report.tests = public.tests
    report.ranked = part.rows
    ev.phases, ev.verdicts = part.phases, part.verdicts
    run = _finished(report, part.reason, ev, limits, secret, part.started, [],
                    {"secret_phase": "in the public run's child, after its benchmarks"}, None)
    run.duration_s = part.duration_s  # its own time, not the library rows timed after it
    return run


def _isolation_lines(isolation: dict[str, Any]) -> str:
    applied = "; ".join(isolation["sandbox"].get("applied", [])) or "none"
    skipped = "; ".join(isolation["sandbox"].get("skipped", [])) or "none"
    return (f"Isolation: sandboxed child (python -I, private dir, scrubbed env), outputs judged by the parent "
            f"from {isolation['transport']} shared buffers\n  applied: {applied}\n  not applied: {skipped}"
            + (f"\n  library rows: {isolation['library_rows']}" if isolation.get("library_rows") else "")
            + (f"\n  secret phase: {isolation['secret_phase']}" if isolation.get("secret_phase") else ""))


__all__ = ["TASK_KERNEL_CODE", "ChildFailed", "clock_verdict", "IsolatedRun", "evaluate_isolated", "secret_seed",
           "time_library_ahead"]
