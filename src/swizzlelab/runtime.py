"""Where Triton kernels run: the GPU when CUDA is present, else the CPU interpreter (TRITON_INTERPRET=1).

Must be called before `triton` is first imported, because Triton reads the variable at import time.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from swizzlelab.interpreter_compat import fix_interpreter_scalar_index


def cuda_available() -> bool:
    """True when torch sees a CUDA device; never raises (imports torch: not for start-up paths)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def driver_sees_gpu() -> bool:
    """True when the CUDA driver reports at least one device; asks libcuda directly (milliseconds), not torch."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    try:
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    except (AttributeError, OSError):
        return False


def nvidia_gpu_names(visible_only: bool = True) -> list[str]:
    """Names of the host's NVIDIA GPUs from nvidia-smi, restricted to CUDA_VISIBLE_DEVICES unless `visible_only` is
    False (the whole host: each GPU may have a worker); [] without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = [(idx.strip(), name.strip()) for idx, name in
            (line.split(",", 1) for line in out.splitlines() if "," in line)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible_only else None
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        gpus = [g for g in gpus if g[0] in wanted]
    return [name for _, name in gpus]


def torch_built_with_cuda() -> bool:
    """Whether the installed torch is a CUDA build, read from torch/version.py without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return False
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return False
    match = re.search(r"^cuda\b[^=]*=\s*(.+)$", text, re.MULTILINE)
    return bool(match) and match.group(1).strip() not in ("None", "''", '""')


def select_backend() -> str:
    """Set TRITON_INTERPRET=1 when no GPU is present, before triton is imported; cheap (no torch, no triton)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "interpreter"
    if "torch" in sys.modules and cuda_available():
        return "cuda"
    if "torch" not in sys.modules and torch_built_with_cuda() and driver_sees_gpu():
        return "cuda"
    os.environ["TRITON_INTERPRET"] = "1"
    return "interpreter"


def ensure_triton_backend() -> str:
    """Select the backend (see select_backend) and, for the interpreter, patch it; returns 'cuda' or
    'interpreter'. Call it right before importing triton (task kernels do); the patch imports triton."""
    if select_backend() == "cuda":
        return "cuda"
    fix_interpreter_scalar_index()
    return "interpreter"


def device() -> str:
    """The torch device string kernels' tensors should live on."""
    return "cuda" if cuda_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


# A process memory limit its parent enforces (bytes; harness.isolate's ChildProcess sets it from Limits.host_mem_bytes,
# whose watcher kills the child's process group beyond it): what is available is then what is left under it.
MEM_LIMIT_ENV = "SWIZZLELAB_MEM_LIMIT_BYTES"


def memory_limit_bytes() -> int | None:
    """The process memory limit from MEM_LIMIT_ENV, or None when unset or not a positive whole number."""
    try:
        limit = int(os.environ.get(MEM_LIMIT_ENV, ""))
    except ValueError:
        return None
    return limit if limit > 0 else None


def _proc_bytes(path: str, field: str) -> int | None:
    """A "Field:  N kB" line of a /proc file, in bytes; None where it cannot be read."""
    try:
        with open(path, encoding="ascii") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def resident_bytes(pid: int | str = "self") -> int:
    """A process's resident memory now (this one's by default), 0 where /proc cannot say. Read from statm: it is
    what harness.isolate's memory watcher sums over a child's processes to enforce MEM_LIMIT_ENV."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def host_memory_bytes() -> int:
    """This machine's physical memory (MemTotal)."""
    found = _proc_bytes("/proc/meminfo", "MemTotal")
    return found if found is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def host_mem_share(evaluations: int = 1, total: int | None = None) -> int:
    """One sandboxed child's host memory limit when `evaluations` run at once (one per GPU worker): three quarters
    of the machine's memory split between them, less 2 GiB each for its evaluating parent (torch, CUDA, the inputs),
    at least 1 GiB. The rest is the service's, the database's and the kernel's: the watcher must kill a child long
    before the machine's OOM killer would pick a victim (a fixed 32 GiB never fired on a 23.5 GiB host)."""
    total = host_memory_bytes() if total is None else total
    return max(2**30, int(total * 0.75) // max(1, evaluations) - 2 * 2**30)


def machine_available_bytes() -> int:
    """Memory this machine can still give a process (MemAvailable on Linux, else physical memory)."""
    found = _proc_bytes("/proc/meminfo", "MemAvailable")
    if found is not None:
        return found
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62  # unknown: never refuse on this ground


def available_memory_bytes() -> int:
    """Memory this process can still take: the machine's (machine_available_bytes), and under a process limit
    (MEM_LIMIT_ENV) at most the limit less this process's resident memory: a sandboxed child is killed at its
    limit long before a large host runs out."""
    available = machine_available_bytes()
    limit = memory_limit_bytes()
    if limit is None:
        return available
    return max(min(available, limit - resident_bytes()), 0)
