"""Leaderboard submission for `flash_attention`: FA2-style Triton forward kernel tuned for the H100.

softmax(q k^T * sm_scale) v for fp16 (batch, heads, seq, head_dim); one program per (query block, head).

Structure (docs/worklogs/flash_attention.md has the measurements behind each choice):
* Grid (query blocks, batch*heads) with the query block fastest: the ~132 programs resident at once cover
  one or two heads, whose K and V (4 MiB at seq 8192) stay in L2 while all their query blocks read them.
* The softmax runs in base 2: sm_scale * log2(e) is folded into one multiply-subtract on the score tile, the
  row maximum is taken on the unscaled scores, and exp2 replaces exp.
* The P V product accumulates straight into the fp32 accumulator (`tl.dot(p, v, acc)`), so the wgmma
  accumulates in place instead of a separate add over the 128 x head_dim tile.
* On the GPU, K and V tiles come through TMA tensor descriptors (one bulk copy per tile, no address
  arithmetic in the loop) when seq is a multiple of the blocks; other shapes and the CPU interpreter use
  pointer loads with masks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

LOG2_E = 1.4426950408889634


@dataclass(frozen=True)
class FlashConfig:
    """Query rows and keys per tile, warps, pipeline depth, TMA descriptors, Hopper warp specialisation."""

    block_m: int = 128
    block_n: int = 128
    num_warps: int = 8
    num_stages: int = 3
    use_desc: bool = True
    warp_spec: bool = False


GPU_CONFIG = FlashConfig()
# The interpreter runs each program in numpy: small tiles keep the CPU tests quick and exercise the masks.
CPU_CONFIG = FlashConfig(block_m=16, block_n=16, num_warps=4, num_stages=1, use_desc=True)


@triton.jit
def _flash_fwd(
    q_ptr, k_ptr, v_ptr, o_ptr,
    desc_q, desc_k, desc_v, desc_o,
    seq_len, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    EVEN: tl.constexpr, USE_DESC: tl.constexpr, WARP_SPEC: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    row0 = off_bh.to(tl.int64) * seq_len  # first row of this (batch, head) in the (batch*heads*seq, dim) view
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n0 = tl.arange(0, BLOCK_N)
    row_ok = offs_m < seq_len

    if USE_DESC:
        q = desc_q.load([(row0 + start_m * BLOCK_M).to(tl.int32), 0])
    else:
        q = tl.load(q_ptr + (row0 + offs_m[:, None]) * HEAD_DIM + offs_d[None, :], mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    for start_n in tl.range(0, seq_len, BLOCK_N, warp_specialize=WARP_SPEC):
        if USE_DESC:
            k = desc_k.load([(row0 + start_n).to(tl.int32), 0])
            v = desc_v.load([(row0 + start_n).to(tl.int32), 0])
        else:
            offs_n = start_n + offs_n0
            col_ok = offs_n < seq_len
            kv_off = (row0 + offs_n[:, None]) * HEAD_DIM + offs_d[None, :]
            k = tl.load(k_ptr + kv_off, mask=col_ok[:, None], other=0.0)
            v = tl.load(v_ptr + kv_off, mask=col_ok[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        if not EVEN:
            qk = tl.where(((start_n + offs_n0) < seq_len)[None, :], qk, float("-inf"))
        # Maximum of the unscaled scores times the (positive) scale = maximum of the scaled scores.
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_new

    out = (acc / l_i[:, None]).to(tl.float16)
    if USE_DESC:
        desc_o.store([(row0 + start_m * BLOCK_M).to(tl.int32), 0], out)
    else:
        tl.store(o_ptr + (row0 + offs_m[:, None]) * HEAD_DIM + offs_d[None, :], out, mask=row_ok[:, None])


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, sm_scale: float,
                    config: FlashConfig | None = None) -> torch.Tensor:
    """Launch the kernel on contiguous (batch, heads, seq, head_dim) fp16 tensors, writing into `out`."""
    cfg = config or (GPU_CONFIG if q.is_cuda else CPU_CONFIG)
    batch, heads, seq, head_dim = q.shape
    for name, tensor in (("q", q), ("k", k), ("v", v), ("out", out)):
        if tensor.shape != q.shape or not tensor.is_contiguous() or tensor.dtype != torch.float16:
            raise ValueError(f"{name} must be a contiguous fp16 tensor of shape {tuple(q.shape)}")
    even = seq % cfg.block_m == 0 and seq % cfg.block_n == 0
    rows = batch * heads * seq
    use_desc = cfg.use_desc and even and rows < 2**31
    if use_desc:
        from triton.tools.tensor_descriptor import TensorDescriptor

        views = [t.view(rows, head_dim) for t in (q, k, v, out)]
        desc_q = TensorDescriptor.from_tensor(views[0], [cfg.block_m, head_dim])
        desc_k = TensorDescriptor.from_tensor(views[1], [cfg.block_n, head_dim])
        desc_v = TensorDescriptor.from_tensor(views[2], [cfg.block_n, head_dim])
        desc_o = TensorDescriptor.from_tensor(views[3], [cfg.block_m, head_dim])
    else:
        desc_q = desc_k = desc_v = desc_o = None
    grid = (math.ceil(seq / cfg.block_m), batch * heads)
    _flash_fwd[grid](
        q, k, v, out, desc_q, desc_k, desc_v, desc_o, seq, sm_scale * LOG2_E,
        HEAD_DIM=head_dim, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, EVEN=even, USE_DESC=use_desc,
        WARP_SPEC=cfg.warp_spec and use_desc, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out


def custom_kernel(data: dict[str, Any]) -> torch.Tensor:
    """Attention of data["q"], data["k"], data["v"] with data["sm_scale"], written into data["out"]."""
    return flash_attention(data["q"], data["k"], data["v"], data["out"], data["sm_scale"])
