"""Decode attention with a stream-K ("lean attention") split: a fixed number of programs share all key blocks evenly.

Kernel 1 walks a contiguous range of (batch, head, key block) work units and writes one partial (m, l, acc) per
head it touches; kernel 2 merges the partials of each head into the fp16 output.
"""

from __future__ import annotations

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
class LeanConfig:
    """Launch configuration of the stream-K kernel: keys per work unit, warps, pipelining stages."""

    block_n: int
    num_warps: int
    num_stages: int


# Decode is bandwidth bound: 64 keys x 128 dims fp16 = 16 KiB of K (and of V) per unit; 3 cp.async stages
# (96 KiB of shared memory) in flight per program, 2 programs per SM.
GPU_CONFIG = LeanConfig(block_n=64, num_warps=4, num_stages=3)
CPU_CONFIG = LeanConfig(block_n=16, num_warps=4, num_stages=1)

# Programs resident per SM for GPU_CONFIG on an H100, as ncu measured it (the smallest launch__occupancy_limit_*;
# git 43bd3ac:benchmarks/eval_h100/lean_attention-profile.json): the simulator's occupancy for NVIDIA targets.
H100_OCCUPANCY = 3


def default_config() -> LeanConfig:
    """The configuration for the backend this process runs kernels on."""
    return GPU_CONFIG if device() == "cuda" else CPU_CONFIG


@triton.jit
def lean_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    ctx_lens_ptr,
    block_offsets_ptr,
    part_m_ptr,
    part_l_ptr,
    part_acc_ptr,
    n_bh,
    heads,
    kv_heads,
    max_ctx,
    qk_scale_log2,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    # Site of the swizzle: the logical program index decides which slice of the work line this program walks.
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    # block_offsets[bh] = first work unit of head bh (batch-major); block_offsets[n_bh] = total units.
    total_units = tl.load(block_offsets_ptr + n_bh).to(tl.int64)
    unit = pid.to(tl.int64) * total_units // n_programs
    end_unit = (pid.to(tl.int64) + 1) * total_units // n_programs

    # Binary search for the head holding `unit` (largest bh with block_offsets[bh] <= unit).
    lo = tl.zeros([], dtype=tl.int32)
    hi = lo + n_bh - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        go_up = tl.load(block_offsets_ptr + mid).to(tl.int64) <= unit
        lo = tl.where(go_up, mid, lo)
        hi = tl.where(go_up, hi, mid - 1)

    bh = lo
    offs_d = tl.arange(0, HEAD_DIM)
    group = heads // kv_heads
    while unit < end_unit:
        seg_begin = tl.load(block_offsets_ptr + bh).to(tl.int64)
        seg_end = tl.load(block_offsets_ptr + bh + 1).to(tl.int64)
        stop = tl.minimum(end_unit, seg_end)
        batch_idx = bh // heads
        kv_head = (bh % heads) // group
        ctx_len = tl.load(ctx_lens_ptr + batch_idx)
        q = tl.load(q_ptr + bh.to(tl.int64) * HEAD_DIM + offs_d).to(tl.float32)
        kv_base = (batch_idx * kv_heads + kv_head).to(tl.int64) * max_ctx * HEAD_DIM

        m_i = tl.full([], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([], dtype=tl.float32)
        acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
        # Loads feeding reductions (not tl.dot) are only software-pipelined when the loop asks for it.
        for block in tl.range(unit - seg_begin, stop - seg_begin, num_stages=NUM_STAGES):
            offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
            key_ok = offs_n < ctx_len
            kv_offs = kv_base + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
            k = tl.load(k_ptr + kv_offs, mask=key_ok[:, None], other=0.0).to(tl.float32)
            v = tl.load(v_ptr + kv_offs, mask=key_ok[:, None], other=0.0).to(tl.float32)
            scores = tl.sum(k * q[None, :], axis=1) * qk_scale_log2
            scores = tl.where(key_ok, scores, float("-inf"))
            # Block `block` < cdiv(ctx_len, BLOCK_N) always holds a valid key, so m_new is finite.
            m_new = tl.maximum(m_i, tl.max(scores, axis=0))
            rescale = tl.math.exp2(m_i - m_new)
            probs = tl.math.exp2(scores - m_new)
            l_i = l_i * rescale + tl.sum(probs, axis=0)
            acc = acc * rescale + tl.sum(probs[:, None] * v, axis=0)
            m_i = m_new

        # Along the work line (program, head) pairs form a staircase, so pid + bh is a unique slot.
        slot = pid.to(tl.int64) + bh
        tl.store(part_m_ptr + slot, m_i)
        tl.store(part_l_ptr + slot, l_i)
        tl.store(part_acc_ptr + slot * HEAD_DIM + offs_d, acc)
        unit = stop
        bh = bh + 1


@triton.jit
def lean_reduce_kernel(
    block_offsets_ptr,
    part_m_ptr,
    part_l_ptr,
    part_acc_ptr,
    out_ptr,
    n_bh,
    n_programs,
    HEAD_DIM: tl.constexpr,
):
    bh = tl.program_id(0)
    total_units = tl.load(block_offsets_ptr + n_bh).to(tl.int64)
    first_unit = tl.load(block_offsets_ptr + bh).to(tl.int64)
    last_unit = tl.load(block_offsets_ptr + bh + 1).to(tl.int64) - 1
    # Program p walks units [p*T//P, (p+1)*T//P); the one holding unit u is ((u+1)*P - 1) // T.
    first_prog = ((first_unit + 1) * n_programs - 1) // total_units
    last_prog = ((last_unit + 1) * n_programs - 1) // total_units
    offs_d = tl.arange(0, HEAD_DIM)

    m_i = tl.full([], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([], dtype=tl.float32)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for prog in range(first_prog, last_prog + 1):
        slot = prog + bh
        # With more programs than units some programs are empty and wrote no partial; the first one of a
        # head never is, so m_i is finite before an empty one contributes exp2(-inf) = 0.
        has_work = (prog + 1) * total_units // n_programs > prog * total_units // n_programs
        m_part = tl.load(part_m_ptr + slot, mask=has_work, other=float("-inf"))
        l_part = tl.load(part_l_ptr + slot, mask=has_work, other=0.0)
        acc_part = tl.load(part_acc_ptr + slot * HEAD_DIM + offs_d, mask=has_work, other=0.0)
        m_new = tl.maximum(m_i, m_part)
        keep = tl.math.exp2(m_i - m_new)
        take = tl.math.exp2(m_part - m_new)
        l_i = l_i * keep + l_part * take
        acc = acc * keep + acc_part * take
        m_i = m_new
    out = acc / l_i
    tl.store(out_ptr + bh.to(tl.int64) * HEAD_DIM + offs_d, out.to(out_ptr.dtype.element_ty))


def tile_grid(*, n_programs: int, **_: Any) -> tuple[int]:
    """(n_programs,): the stream-K kernel's programs are the tiles a swizzle reorders."""
    return (int(n_programs),)


def swizzle_args(
    *, batch: int, heads: int, kv_heads: int | None = None, max_ctx: int, head_dim: int = 128,
    config: LeanConfig | None = None, **_: Any,
) -> tuple[dict[str, int], dict[str, Any]]:
    """Runtime scalars and constexprs a swizzle formula may name at the stream-K kernel's site."""
    cfg = config or default_config()
    args = {"n_bh": batch * heads, "heads": heads, "kv_heads": kv_heads or heads, "max_ctx": max_ctx}
    return args, {"HEAD_DIM": head_dim, "BLOCK_N": cfg.block_n, "NUM_STAGES": cfg.num_stages}


def block_offsets(ctx_lens: torch.Tensor, heads: int, block_n: int) -> torch.Tensor:
    """Prefix sums of key blocks per (batch, head), batch-major, with the total appended (int32, n_bh + 1)."""
    blocks_per_batch = (ctx_lens.to(torch.int64) + block_n - 1) // block_n
    blocks_per_bh = blocks_per_batch[:, None].expand(-1, heads).reshape(-1)
    offsets = torch.zeros(blocks_per_bh.numel() + 1, dtype=torch.int64, device=ctx_lens.device)
    torch.cumsum(blocks_per_bh, dim=0, out=offsets[1:])
    return offsets.to(torch.int32)


def kernel_for(order: Any = None) -> Any:
    """The stream-K jit kernel with `order` (a Formula) at its site; None keeps `pid = tl.program_id(0)`."""
    return apply_swizzle(lean_attention_kernel, order)


def custom_kernel(data: dict[str, Any], order: Any = None, config: LeanConfig | None = None) -> torch.Tensor:
    """Decode attention of data["q"] (batch, heads, dim) over data["k"], data["v"] (batch, kv_heads, max_ctx, dim)."""
    cfg = config or default_config()
    q, k, v, ctx_lens, out = data["q"], data["k"], data["v"], data["ctx_lens"], data["out"]
    batch, heads, head_dim = q.shape
    kv_heads, max_ctx = k.shape[1], k.shape[2]
    n_programs = int(data["n_programs"])
    if heads % kv_heads:
        raise UserError(f"heads={heads} is not a multiple of kv_heads={kv_heads}; pick kv_heads dividing heads")
    if k.shape != v.shape or k.shape[0] != batch or k.shape[3] != head_dim or out.shape != q.shape:
        raise UserError(
            f"lean_attention: expected k, v of shape (batch={batch}, kv_heads, max_ctx, {head_dim}) and out of "
            f"q's shape {tuple(q.shape)}; got k {tuple(k.shape)}, v {tuple(v.shape)}, out {tuple(out.shape)}"
        )
    if not all(t.is_contiguous() for t in (q, k, v, out, ctx_lens)):
        raise UserError("lean_attention: q, k, v, out and ctx_lens must be contiguous; call .contiguous() first")
    n_bh = batch * heads
    offsets = block_offsets(ctx_lens, heads, cfg.block_n)
    # Slots pid + bh along the work staircase: at most n_programs + n_bh - 1 partials.
    n_slots = n_programs + n_bh
    part_m = torch.empty(n_slots, dtype=torch.float32, device=q.device)
    part_l = torch.empty(n_slots, dtype=torch.float32, device=q.device)
    part_acc = torch.empty((n_slots, head_dim), dtype=torch.float32, device=q.device)
    kernel_for(order)[(n_programs,)](
        q, k, v, ctx_lens, offsets, part_m, part_l, part_acc,
        n_bh, heads, kv_heads, max_ctx, data["sm_scale"] * LOG2_E,
        HEAD_DIM=head_dim, BLOCK_N=cfg.block_n, NUM_STAGES=cfg.num_stages, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    lean_reduce_kernel[(n_bh,)](
        offsets, part_m, part_l, part_acc, out, n_bh, n_programs, HEAD_DIM=head_dim, num_warps=4,
    )
    return out
