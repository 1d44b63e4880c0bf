"""What a user kernel's compiled code needs per program (registers, shared memory, warps), for the simulator's
occupancy: read from the kernel the GPU compiled when one is here, else compiled for the NVIDIA target without
a GPU (Triton's own compiler and the ptxas/cuobjdump it ships), else unknown.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swizzlelab.errors import UserError

CUOBJDUMP_TIMEOUT_S = 60
COMPILE_TIMEOUT_S = 600.0  # a child importing the file and compiling one kernel
_COMPILED: dict[bytes, tuple[Resources | None, str]] = {}  # per request: one compile per process


@dataclass(frozen=True)
class Resources:
    """Registers per thread, shared memory per program (bytes), warps per program, and how they were known."""

    n_regs: int
    shared_bytes: int
    num_warps: int
    how: str  # "compiled on <GPU>" / "compiled for sm_90 here, without a GPU"

    def as_dict(self) -> dict[str, int]:
        return {"n_regs": self.n_regs, "shared_bytes": self.shared_bytes, "num_warps": self.num_warps}

    def text(self) -> str:
        return (f"{self.n_regs} registers/thread, {self.shared_bytes} bytes shared memory, {self.num_warps} warps "
                f"({self.how})")


def _cached_kernel(jit_fn: Any) -> Any:
    """The most recently compiled kernel a JITFunction holds (after it ran)."""
    caches = getattr(jit_fn, "device_caches", {}) or {}
    kernels = [k for cache in caches.values() for k in list(cache[0].values())]
    return kernels[-1] if kernels else None


def _registers_from_cubin(cubin: bytes, name: str) -> int | None:
    """Registers per thread of kernel `name` in a cubin, from the cuobjdump that Triton bundles."""
    from triton import knobs

    tool = getattr(knobs.nvidia, "cuobjdump", None)
    path = getattr(tool, "path", None) if tool is not None else None
    if not path:
        return None
    with tempfile.TemporaryDirectory(prefix="swizzlelab-cubin-") as folder:
        file = Path(folder) / "kernel.cubin"
        file.write_bytes(cubin)
        try:
            done = subprocess.run([path, "-res-usage", str(file)], capture_output=True, text=True,
                                  timeout=CUOBJDUMP_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    blocks = done.stdout.split("Function ")
    for block in blocks[1:]:
        if block.startswith(name) or len(blocks) == 2:
            match = re.search(r"REG:(\d+)", block)
            if match:
                return int(match.group(1))
    return None


def from_compiled(kernel: Any, how: str) -> Resources | None:
    """Resources of a Triton CompiledKernel: n_regs as loaded on the GPU, else read from its cubin."""
    if kernel is None:
        return None
    if hasattr(kernel, "result"):
        kernel = kernel.result()
    metadata = kernel.metadata
    n_regs = getattr(kernel, "n_regs", None)
    if not n_regs:
        cubin = kernel.asm.get("cubin") if hasattr(kernel, "asm") else None
        n_regs = _registers_from_cubin(cubin, metadata.name) if cubin else None
    if not n_regs:
        return None
    return Resources(int(n_regs), int(metadata.shared), int(metadata.num_warps), how)


def kernel_resources(user_kernel: Any, gpu_name: str | None, model: Any = None) -> tuple[Resources | None, str]:
    """(resources, why none) of the user kernel in its chosen config for target `model` (default: the one it
    was opened for): from the GPU's compiled kernel when a GPU runs it here, else compiled for an NVIDIA target
    without a GPU; (None, reason) when neither can be had."""
    model = model or user_kernel.launcher.model
    if model.vendor != "nvidia":
        return None, f"no compiler model of {model.name}'s register file here"
    launcher = user_kernel.launcher
    if not launcher.kernel.interpreted:
        try:
            launcher(None)
        except Exception as err:  # noqa: BLE001 - a kernel that fails here fails again where it is measured
            return None, f"running it on the GPU failed: {type(err).__name__}"
        found = from_compiled(_cached_kernel(launcher.kernel.jit_fn), f"compiled on {gpu_name or 'this GPU'}")
        return found, "" if found else "the compiled kernel did not say"
    from swizzlelab.userkernel.child import run_in_child

    if user_kernel.request is None:
        return None, "opened without a request a compiling child can rebuild"
    key = pickle.dumps(user_kernel.request)
    if key not in _COMPILED:
        try:
            # a child whose Triton compiles: this process imported Triton to interpret
            _COMPILED[key] = (run_in_child(user_kernel.request, "resources", interpret=False,
                                           timeout_s=COMPILE_TIMEOUT_S), "")
        except UserError as err:
            _COMPILED[key] = (None, f"compiling it for sm_90 without a GPU failed: {str(err)[:200]}")
    return _COMPILED[key]
