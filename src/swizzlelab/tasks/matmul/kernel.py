"""Triton kernel of `matmul`: each program computes one BLOCK_M x BLOCK_N tile of C, looping over K.

The tile order is set at the kernel's swizzle site (Triton's grouped order, GROUP_M=8, as real GEMMs ship it;
row-major is the family row_major); custom_kernel splices in others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from swizzlelab.runtime import device, ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from swizzlelab.swizzle import apply_swizzle  # noqa: E402


@dataclass(frozen=True)
class MatmulConfig:
    """Launch configuration: tile shape, warps per program, software-pipelining stages, and the K direction:
    k_wave = 0 walks K forwards in every program; k_wave = W > 0 makes programs of odd waves (launch index // W)
    walk it backwards, so a wave starts on the panels the previous wave read last; -1 = W is the programs
    resident at once (SMs x occupancy: 264 on an H100). sync_wave = W > 0 (-1: resident) makes the programs of
    each wave of W launches start only once the previous wave has stored its tiles: a wave then walks K in step
    instead of drifting apart over the run, so the programs sharing a panel read it from L2 while it is there.
    The barrier assumes a whole wave is resident at once (W <= SMs x occupancy, with nothing else on the GPU): a
    program waiting for a wave that cannot all be resident gives up after SYNC_SPIN_LIMIT polls, so the output stays
    right but that launch is slow."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    k_wave: int = 0
    sync_wave: int = 0


# H100 fp16: 128 x 128 x 64 tiles, 8 warps, 3 stages (3 * 32 KiB of A/B staging in shared memory). The L2
# simulator's validation against ncu is done for exactly this configuration: do not change it silently.
GPU_CONFIG = MatmulConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)
# The interpreter runs each program in numpy; 16 is the smallest block tl.dot accepts.
CPU_CONFIG = MatmulConfig(block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=1)

# Programs resident per SM for GPU_CONFIG on an H100, as ncu measured it (the smallest launch__occupancy_limit_*;
# git 43bd3ac:benchmarks/eval_h100/matmul-profile.json): the simulator's occupancy for NVIDIA targets.
H100_OCCUPANCY = 2
SYNC_SPIN_LIMIT = tl.constexpr(1 << 22)  # polls of the previous wave's counter: far beyond any wave's spread


def with_k_alternation(config: MatmulConfig, wave: int = -1) -> MatmulConfig:
    """`config` with K walked backwards by odd waves of `wave` launches (-1: the programs resident at once)."""
    return replace(config, k_wave=int(wave))


def with_wave_sync(config: MatmulConfig, wave: int = -1) -> MatmulConfig:
    """`config` with a barrier between waves of `wave` launches (-1: the programs resident at once)."""
    return replace(config, sync_wave=int(wave))


def _resolved_wave(wave: int, name: str, resident: int | None) -> int:
    if wave >= 0:
        return wave
    if resident is not None:
        return int(resident)
    if device() != "cuda":
        raise ValueError(f"{name}=-1 (the resident wave) needs a GPU or an explicit wave")
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count) * H100_OCCUPANCY


def resolved_k_wave(config: MatmulConfig, resident: int | None = None) -> int:
    """The launches per wave of the K alternation (0: off). -1 resolves to `resident`, else to this process's
    GPU: SMs x H100_OCCUPANCY (the occupancy ncu measured for GPU_CONFIG on the H100)."""
    return _resolved_wave(config.k_wave, "k_wave", resident)


def resolved_sync_wave(config: MatmulConfig, resident: int | None = None) -> int:
    """The launches per wave of the barrier between waves (0: none); -1 as in resolved_k_wave."""
    return _resolved_wave(config.sync_wave, "sync_wave", resident)


def default_config() -> MatmulConfig:
    """The configuration for the backend this process runs kernels on."""
    return GPU_CONFIG if device() == "cuda" else CPU_CONFIG


@triton.jit
def wait_for_previous_wave(done_ptr, wave, WAVE: tl.constexpr):
    """Return once every program of wave `wave` - 1 has stored its tile (done_ptr: one counter of stored tiles per
    wave of WAVE launches). Bounded spin: a dispatcher that ran launches out of order could otherwise hang."""
    if wave > 0:
        spins = 0
        while (tl.atomic_add(done_ptr + wave - 1, 0, sem="acquire") < WAVE) & (spins < SYNC_SPIN_LIMIT):
            spins += 1


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_WAVE: tl.constexpr = 0,
    done_ptr=None,
    SYNC_WAVE: tl.constexpr = 0,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)  # noqa: F841 - read by swizzle formulas
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Names the original work's MI300X orders read (../shared/seed_formulas/matmul: `new_pid = ...` from the
    # site's tile ids, the tile count and the XCD count): read by formulas only, so they compile away. Rounded up, a
    # grid of fewer than 8 tiles still has a divisor.
    total_blocks = num_pid_m * num_pid_n
    num_XCD = 8  # noqa: N806 - the original's spelling
    blocks_per_xcd = tl.cdiv(total_blocks, num_XCD)  # noqa: F841
    # swizzle: begin
    pid = tl.program_id(0)
    GROUP_M = 8
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + pid % num_pid_in_group % group_size_m
    pid_n = pid % num_pid_in_group // group_size_m
    # swizzle: end
    # Edge tiles wrap their rows/columns back into range instead of masking the loads (as the tutorial
    # does): the duplicated rows are computed but never stored, and the K loop stays unmasked along M/N.
    # Odd waves of K_WAVE launches walk the k-blocks last to first (the launch index, not the swizzled tile, decides:
    # the next wave then starts on what the previous one read last). Computed here, before the tile's offsets, as
    # the K-direction probe does (tests/kdir_probe.py): with the barrier, the same loop placed after them compiled to
    # 116 registers instead of 103 and ran 10% slower on an H100 (sync_variants_repeat_h100.json).
    n_k = tl.cdiv(K, BLOCK_K)
    backwards = (tl.program_id(0) // (K_WAVE if K_WAVE > 0 else 1)) % 2 == 1
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SYNC_WAVE > 0:
        wait_for_previous_wave(done_ptr, tl.program_id(0) // SYNC_WAVE, SYNC_WAVE)
    if K_WAVE == 0:
        a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
        for k_start in range(0, K, BLOCK_K):
            k_left = K - k_start
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
    else:
        for i in range(0, n_k):
            k0 = tl.where(backwards, n_k - 1 - i, i) * BLOCK_K
            a = tl.load(a_ptr + offs_am[:, None] * stride_am + (k0 + offs_k[None, :]) * stride_ak,
                        mask=(k0 + offs_k[None, :]) < K, other=0.0)
            b = tl.load(b_ptr + (k0 + offs_k[:, None]) * stride_bk + offs_bn[None, :] * stride_bn,
                        mask=(k0 + offs_k[:, None]) < K, other=0.0)
            acc = tl.dot(a, b, acc)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))
    if SYNC_WAVE > 0:
        tl.atomic_add(done_ptr + tl.program_id(0) // SYNC_WAVE, 1, sem="release")


def tile_grid(*, m: int, n: int, config: MatmulConfig | None = None, **_: Any) -> tuple[int, int]:
    """(row tiles, column tiles) of C."""
    cfg = config or default_config()
    return (math.ceil(m / cfg.block_m), math.ceil(n / cfg.block_n))


def swizzle_args(
    *, m: int, n: int, k: int, config: MatmulConfig | None = None, **_: Any
) -> tuple[dict[str, int], dict[str, int]]:
    """Runtime scalars and constexprs a swizzle formula may name at this kernel's site (row-major strides)."""
    cfg = config or default_config()
    args = {
        "M": m, "N": n, "K": k,
        "stride_am": k, "stride_ak": 1, "stride_bk": n, "stride_bn": 1, "stride_cm": n, "stride_cn": 1,
    }
    return args, {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k}


def kernel_for(order: Any = None) -> Any:
    """The jit kernel with `order` (a Formula) at its swizzle site; None keeps the site's grouped order."""
    return apply_swizzle(matmul_kernel, order)


def custom_kernel(data: dict[str, Any], order: Any = None, config: MatmulConfig | None = None) -> torch.Tensor:
    """Write data["a"] @ data["b"] into data["out"] and return it."""
    cfg = config or default_config()
    a, b, out = data["a"], data["b"], data["out"]
    m, k = a.shape
    n = b.shape[1]
    grid = tile_grid(m=m, n=n, config=cfg)
    n_programs = grid[0] * grid[1]
    sync = resolved_sync_wave(cfg)
    # One counter of stored tiles per wave, zeroed for every launch (a few bytes; part of the timed call).
    done = torch.zeros(-(-n_programs // sync), dtype=torch.int32, device=out.device) if sync else None
    kernel_for(order)[(n_programs,)](
        a, b, out, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, K_WAVE=resolved_k_wave(cfg),
        done_ptr=done, SYNC_WAVE=sync, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out
