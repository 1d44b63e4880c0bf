"""Flash-attention forward (fp16, non-causal) as a Triton kernel with an online softmax and a swizzle site.

One program computes one BLOCK_M slice of queries of one (batch, head) pair, streaming all its keys/values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.runtime import device, ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from swizzlelab.swizzle import apply_swizzle  # noqa: E402

LOG2_E = 1.4426950408889634


@dataclass(frozen=True)
class FlashConfig:
    """Launch configuration: query/key block sizes, warps and software-pipelining stages."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


# H100, head_dim 128: 128 query rows keep the wgmma pipes busy; 64-key blocks keep K, V and the fp32
# accumulator of 8 warps within registers + shared memory with 3 pipeline stages.
GPU_CONFIG = FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=3)
# The interpreter runs every program in numpy: tiny blocks keep tests fast and exercise the masking.
CPU_CONFIG = FlashConfig(block_m=16, block_n=16, num_warps=4, num_stages=1)

# Programs resident per SM for GPU_CONFIG on an H100, as ncu measured it (the smallest launch__occupancy_limit_*;
# git 43bd3ac:benchmarks/eval_h100/flash_attention-profile.json): the simulator's occupancy for NVIDIA targets.
H100_OCCUPANCY = 1


def default_config() -> FlashConfig:
    """The configuration for the backend this process runs kernels on."""
    return GPU_CONFIG if device() == "cuda" else CPU_CONFIG


@triton.jit
def flash_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    n_bh,
    seq_len,
    qk_scale_log2,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EVEN_N: tl.constexpr,
):
    # Tile grid (batch*heads, query blocks): row-major launch order walks all query blocks of one head
    # before the next head, so concurrently running programs share that head's K and V in L2.
    num_pid_m = n_bh  # noqa: F841 - read by swizzle formulas
    num_pid_n = tl.cdiv(seq_len, BLOCK_M)
    # swizzle: begin
    pid = tl.program_id(0)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    # swizzle: end
    head_offset = pid_m.to(tl.int64) * seq_len * HEAD_DIM
    offs_m = pid_n * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seq_len

    q_ptrs = q_ptr + head_offset + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)

    # Running row maximum (in log2 units), running denominator and unnormalised output.
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    k_base = k_ptr + head_offset
    v_base = v_ptr + head_offset
    for start_n in range(0, seq_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        # K is read transposed (HEAD_DIM x BLOCK_N) so the score tile is a plain dot.
        kt_ptrs = k_base + offs_n[None, :] * HEAD_DIM + offs_d[:, None]
        v_ptrs = v_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
        if EVEN_N:
            kt = tl.load(kt_ptrs)
            v = tl.load(v_ptrs)
        else:
            col_ok = offs_n < seq_len
            kt = tl.load(kt_ptrs, mask=col_ok[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=col_ok[:, None], other=0.0)
        scores = tl.dot(q, kt) * qk_scale_log2
        if not EVEN_N:
            scores = tl.where((offs_n < seq_len)[None, :], scores, float("-inf"))
        # Every key block holds at least one valid key, so m_new is finite and exp2 never sees inf - inf.
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        rescale = tl.math.exp2(m_i - m_new)
        probs = tl.math.exp2(scores - m_new[:, None])
        l_i = l_i * rescale + tl.sum(probs, axis=1)
        acc = acc * rescale[:, None] + tl.dot(probs.to(v.dtype), v)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(
        out_ptr + head_offset + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=row_ok[:, None],
    )


def tile_grid(
    *, batch: int, heads: int, seq: int, head_dim: int = 128, config: FlashConfig | None = None, **_: Any
) -> tuple[int, int]:
    """(batch*heads, query blocks): the tile space one launch covers."""
    cfg = config or default_config()
    return (batch * heads, math.ceil(seq / cfg.block_m))


def swizzle_args(
    *, batch: int, heads: int, seq: int, head_dim: int = 128, config: FlashConfig | None = None, **_: Any
) -> tuple[dict[str, int], dict[str, Any]]:
    """Runtime scalars and constexprs a swizzle formula may name at this kernel's site."""
    cfg = config or default_config()
    args = {"n_bh": batch * heads, "seq_len": seq}
    consts = {"HEAD_DIM": head_dim, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "EVEN_N": seq % cfg.block_n == 0}
    return args, consts


def kernel_for(order: Any = None) -> Any:
    """The jit kernel with `order` (a Formula) at its swizzle site; None keeps the row-major site."""
    return apply_swizzle(flash_attention_kernel, order)


def custom_kernel(data: dict[str, Any], order: Any = None, config: FlashConfig | None = None) -> torch.Tensor:
    """Run the kernel on data["q"], data["k"], data["v"] (batch, heads, seq, head_dim) into data["out"]."""
    cfg = config or default_config()
    q, k, v, out = data["q"], data["k"], data["v"], data["out"]
    for name, tensor in (("q", q), ("k", k), ("v", v), ("out", out)):
        if tensor.shape != q.shape or not tensor.is_contiguous():
            raise UserError(
                f"flash_attention: {name} must be a contiguous tensor of q's shape {tuple(q.shape)}, "
                f"got {tuple(tensor.shape)}{'' if tensor.is_contiguous() else ' (not contiguous)'}"
            )
    batch, heads, seq, head_dim = q.shape
    grid = tile_grid(batch=batch, heads=heads, seq=seq, head_dim=head_dim, config=cfg)
    qk_scale_log2 = data["sm_scale"] * LOG2_E
    kernel_for(order)[(grid[0] * grid[1],)](
        q,
        k,
        v,
        out,
        batch * heads,
        seq,
        qk_scale_log2,
        HEAD_DIM=head_dim,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        EVEN_N=seq % cfg.block_n == 0,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out
