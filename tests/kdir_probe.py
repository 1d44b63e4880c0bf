"""The K-direction probe kernel (once the matmul_kdir_h100 study's, git 305b79c): the task kernel's structure with K
walked backwards on odd waves (and an optional barrier between waves), its launcher, and the H100 set-up of its case.
"""

from __future__ import annotations

from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from swizzlelab.hw import get_model  # noqa: E402
from swizzlelab.sim import footprint_of  # noqa: E402
from swizzlelab.swizzle import apply_swizzle  # noqa: E402
from swizzlelab.tasks import load_task  # noqa: E402
from swizzlelab.tasks.matmul.kernel import wait_for_previous_wave  # noqa: E402

CASE = {"seed": 12, "m": 8192, "n": 8192, "k": 8192}
BM, BN, BK, WARPS, STAGES = 128, 128, 64, 8, 3  # the task's GPU_CONFIG
WAVE = 132 * 2  # H100 SXM: 132 SMs x 2 resident programs of this config


@triton.jit
def matmul_kdir_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, REVERSE: tl.constexpr, WAVE: tl.constexpr,
    done_ptr=None, SYNC: tl.constexpr = 0,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)  # noqa: F841 - read by swizzle formulas
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    GROUP_M = 8
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + pid % num_pid_in_group % group_size_m
    pid_n = pid % num_pid_in_group // group_size_m
    backwards = ((tl.program_id(0) // WAVE) % 2) * REVERSE == 1
    n_k = tl.cdiv(K, BLOCK_K)
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    wave = tl.program_id(0) // WAVE
    if SYNC:
        # Start only once every program of the previous wave has stored its tile, so a wave's programs walk K in
        # step rather than drifting apart over the run.
        wait_for_previous_wave(done_ptr, wave, WAVE)
    for i in range(0, n_k):
        kb = tl.where(backwards, n_k - 1 - i, i)
        k0 = kb * BLOCK_K
        a = tl.load(a_ptr + offs_am[:, None] * stride_am + (k0 + offs_k[None, :]) * stride_ak,
                    mask=(k0 + offs_k[None, :]) < K, other=0.0)
        b = tl.load(b_ptr + (k0 + offs_k[:, None]) * stride_bk + offs_bn[None, :] * stride_bn,
                    mask=(k0 + offs_k[:, None]) < K, other=0.0)
        acc = tl.dot(a, b, acc)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))
    if SYNC:
        tl.atomic_add(done_ptr + wave, 1, sem="release")


def launcher(task: Any, order: str, wave: int, task_kernel: bool = False, sync: bool = False) -> Any:
    """The kernel under `order`; K alternates every `wave` launches (0: every program walks K forwards).
    `task_kernel` (--task-kernel): the task's own kernel (tasks/matmul/kernel.py, its K switch `k_wave`), which
    `swizzlelab optimize --k-dir alternate` ranks and times, instead of this file's probe kernel."""
    if task_kernel:
        from swizzlelab.tasks.matmul.kernel import GPU_CONFIG, with_k_alternation, with_wave_sync

        formula, cfg = task.parse_order(order), with_k_alternation(GPU_CONFIG, wave)
        cfg = with_wave_sync(cfg, wave or WAVE) if sync else cfg
        return lambda data: task.custom_kernel(data, formula, cfg)
    kernel = apply_swizzle(matmul_kdir_kernel, task.parse_order(order))

    def run(data: dict[str, Any]) -> Any:
        a, b, out = data["a"], data["b"], data["out"]
        m, k = a.shape
        n = b.shape[1]
        grid = (triton.cdiv(m, BM) * triton.cdiv(n, BN),)
        # --sync: one counter per wave of the launch, zeroed before it (part of the timed call)
        done = torch.zeros(-(-grid[0] // (wave or WAVE)), dtype=torch.int32, device=a.device) if sync else None
        kernel[grid](a, b, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0),
                     out.stride(1), BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, REVERSE=1 if wave else 0, WAVE=wave or WAVE,
                     done_ptr=done, SYNC=1 if sync else 0, num_warps=WARPS, num_stages=STAGES)
        return out

    return run


def h100_setup(case: dict[str, Any]) -> tuple[Any, ...]:
    """What every simulation of `case` shares (task kernel's GPU config, H100 model and occupancy): task,
    model, occupancy, trace, footprint, grid, swizzle args and consts."""
    task = load_task("matmul")
    cfg = task.kernel.GPU_CONFIG
    trace = task.access_model(case, config=cfg)
    grid = task.tile_grid(case, cfg)
    args, consts = task.swizzle_args(case, cfg)
    return task, get_model("h100"), task.kernel.H100_OCCUPANCY, trace, footprint_of(trace), grid, args, consts
