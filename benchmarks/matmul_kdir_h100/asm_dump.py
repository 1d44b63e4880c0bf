"""Registers and assembly of the task kernel and the probe (benchmarks/lab/kdir.py) with K alternation and the
barrier between waves.

    python -m benchmarks.matmul_kdir_h100.asm_dump OUT_DIR   (a CUDA GPU; writes NAME.ttgir/.ptx/.sass there)
Prints each kernel's registers, spills and shared memory (asm_regs_h100.txt keeps two runs' output).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from benchmarks.lab import kdir as probe
from swizzlelab.swizzle import apply_swizzle
from swizzlelab.tasks import load_task
from swizzlelab.tasks.matmul import kernel as mk


def main(out: str) -> int:
    task = load_task("matmul")
    data = task.generate_input(probe.CASE)
    a, b, c = data["a"], data["b"], data["out"]
    m, k = a.shape
    n = b.shape[1]
    grid = (64 * 64,)
    order = task.parse_order("serpentine>column_major@16x4")
    done = torch.zeros(16, dtype=torch.int32, device="cuda")
    args = (a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    tiles = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)
    handles = {}
    handles["task"] = mk.kernel_for(order)[grid](*args, K_WAVE=264, done_ptr=done, SYNC_WAVE=264, **tiles)
    done.zero_()
    handles["probe"] = apply_swizzle(probe.matmul_kdir_kernel, order)[grid](
        *args, REVERSE=1, WAVE=264, done_ptr=done, SYNC=1, **tiles)
    done.zero_()
    handles["task_fwd"] = mk.kernel_for(order)[grid](*args, K_WAVE=0, done_ptr=done, SYNC_WAVE=264, **tiles)
    for name, handle in handles.items():
        print(name, "regs", handle.n_regs, "spills", handle.n_spills, "shared", handle.metadata.shared)
        for kind in ("ttgir", "ptx", "sass"):
            try:
                text = handle.asm[kind]
            except Exception as err:  # noqa: BLE001 - an assembly form this Triton does not keep
                text = f"unavailable: {err}"
            Path(os.path.join(out, f"{name}.{kind}")).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
