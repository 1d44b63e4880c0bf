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
    """Query rows and keys per tile, warps, pipeline depth, TMA descriptors, Hopper warp specialisation,
    QK prefetch (issue the next block's QK^T before this block's softmax) and a register cap per thread."""

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 3
    use_desc: bool = True
    warp_spec: bool = False
    prefetch_qk: bool = False
    maxnreg: int | None = None


# Candidates the GPU path autotunes over on its first call per shape (steps_1/steps_2 in benchmarks/leader_h100
# time each on the H100): the step-1 winner, and the two changes of step 2 (QK prefetch; a 128-register cap
# so two 8-warp programs share an SM and one's softmax overlaps the other's matrix products).
GPU_CANDIDATES = (
    FlashConfig(128, 64, 8, 3, True, False, False, None),
    FlashConfig(128, 64, 8, 3, True, False, True, None),
    FlashConfig(128, 64, 8, 2, True, False, False, 128),
    FlashConfig(128, 64, 8, 2, True, False, True, 128),
    FlashConfig(128, 128, 8, 3, True, False, True, None),
)
# The interpreter runs each program in numpy: small tiles keep the CPU tests quick and exercise the masks.
CPU_CONFIG = FlashConfig(block_m=16, block_n=16, num_warps=4, num_stages=1, use_desc=True, prefetch_qk=True)


@triton.jit
def _load_kv(ptr, desc, row0, start_n, offs_n0, offs_d, seq_len, HEAD_DIM: tl.constexpr, USE_DESC: tl.constexpr):
    """One (BLOCK_N, HEAD_DIM) tile of K or V of this head: a TMA copy, or masked pointer loads."""
    if USE_DESC:
        tile = desc.load([(row0 + start_n).to(tl.int32), 0])
    else:
        offs_n = start_n + offs_n0
        tile = tl.load(ptr + (row0 + offs_n[:, None]) * HEAD_DIM + offs_d[None, :],
                       mask=(offs_n < seq_len)[:, None], other=0.0)
    return tile


@triton.jit
def _online_softmax_step(qk, v, acc, m_i, l_i, qk_scale, start_n, offs_n0, seq_len, EVEN: tl.constexpr):
    """Fold one block of scores (unscaled q k^T) and its V tile into the running max, sum and output."""
    if not EVEN:
        qk = tl.where(((start_n + offs_n0) < seq_len)[None, :], qk, float("-inf"))
    # Maximum of the unscaled scores times the (positive) scale = maximum of the scaled scores; one
    # multiply-subtract per score then puts them in log2 units relative to the running maximum.
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(tl.float16), v, acc)  # accumulates in place (wgmma with the fp32 accumulator)
    return acc, m_new, l_i


@triton.jit
def _flash_fwd(
    q_ptr, k_ptr, v_ptr, o_ptr,
    desc_q, desc_k, desc_v, desc_o,
    seq_len, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    EVEN: tl.constexpr, USE_DESC: tl.constexpr, WARP_SPEC: tl.constexpr, PREFETCH_QK: tl.constexpr,
):
    start_m = tl.program_id(0)  # query block: fastest, so the programs running together share one head's K, V
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

    if PREFETCH_QK:
        # Rotated loop: the scores of block j+1 are issued before block j's softmax, so the tensor cores
        # have work while the exp2 / max / sum of block j run (FA3's intra-warpgroup overlap).
        k = _load_kv(k_ptr, desc_k, row0, 0, offs_n0, offs_d, seq_len, HEAD_DIM, USE_DESC)
        qk = tl.dot(q, tl.trans(k))
        for start_n in tl.range(BLOCK_N, seq_len, BLOCK_N, warp_specialize=WARP_SPEC):
            k = _load_kv(k_ptr, desc_k, row0, start_n, offs_n0, offs_d, seq_len, HEAD_DIM, USE_DESC)
            qk_next = tl.dot(q, tl.trans(k))
            v = _load_kv(v_ptr, desc_v, row0, start_n - BLOCK_N, offs_n0, offs_d, seq_len, HEAD_DIM, USE_DESC)
            acc, m_i, l_i = _online_softmax_step(qk, v, acc, m_i, l_i, qk_scale, start_n - BLOCK_N, offs_n0,
                                                 seq_len, EVEN)
            qk = qk_next
        last = tl.cdiv(seq_len, BLOCK_N) * BLOCK_N - BLOCK_N
        v = _load_kv(v_ptr, desc_v, row0, last, offs_n0, offs_d, seq_len, HEAD_DIM, USE_DESC)
        acc, m_i, l_i = _online_softmax_step(qk, v, acc, m_i, l_i, qk_scale, last, offs_n0, seq_len, EVEN)
    else:
        for start_n in tl.range(0, seq_len, BLOCK_N, warp_specialize=WARP_SPEC):
            k = _load_kv(k_ptr, desc_k, row0, start_n, offs_n0, offs_d, seq_len, HEAD_DIM, USE_DESC)
            v = _load_kv(v_ptr, desc_v, row0, start_n, offs_n0, offs_d, seq_len, HEAD_DIM, USE_DESC)
            qk = tl.dot(q, tl.trans(k))
            acc, m_i, l_i = _online_softmax_step(qk, v, acc, m_i, l_i, qk_scale, start_n, offs_n0, seq_len, EVEN)

    out = (acc / l_i[:, None]).to(tl.float16)
    if USE_DESC:
        desc_o.store([(row0 + start_m * BLOCK_M).to(tl.int32), 0], out)
    else:
        tl.store(o_ptr + (row0 + offs_m[:, None]) * HEAD_DIM + offs_d[None, :], out, mask=row_ok[:, None])


def _check_tensors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
    for name, tensor in (("q", q), ("k", k), ("v", v), ("out", out)):
        if tensor.shape != q.shape or not tensor.is_contiguous() or tensor.dtype != torch.float16:
            raise ValueError(f"{name} must be a contiguous fp16 tensor of shape {tuple(q.shape)}")


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, sm_scale: float,
                    config: FlashConfig) -> torch.Tensor:
    """Launch the kernel with one configuration on contiguous (batch, heads, seq, head_dim) fp16 tensors."""
    cfg = config
    batch, heads, seq, head_dim = q.shape
    _check_tensors(q, k, v, out)
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
    extra = {"maxnreg": cfg.maxnreg} if cfg.maxnreg and q.is_cuda else {}
    _flash_fwd[grid](
        q, k, v, out, desc_q, desc_k, desc_v, desc_o, seq, sm_scale * LOG2_E,
        HEAD_DIM=head_dim, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, EVEN=even, USE_DESC=use_desc,
        WARP_SPEC=cfg.warp_spec and use_desc, PREFETCH_QK=cfg.prefetch_qk,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **extra,
    )
    return out


_best: dict[tuple[Any, ...], FlashConfig] = {}
# Each autotune: shape, device and every candidate's do_bench median in ms (None: did not run), for the logs.
AUTOTUNE_LOG: list[dict[str, Any]] = []
# Below this many score elements (batch*heads*seq*seq) a launch takes well under a millisecond: the first
# candidate runs without autotuning, so small test shapes cost one compile each instead of five.
AUTOTUNE_MIN_SCORES = 1 << 30


def _pick_config(data: dict[str, Any]) -> FlashConfig:
    """On the GPU, time each candidate once per shape (triton.testing.do_bench, median) and keep the fastest;
    a candidate that fails to compile (e.g. out of shared memory on another GPU) is skipped."""
    q = data["q"]
    if not q.is_cuda:
        return CPU_CONFIG
    batch, heads, seq, _ = q.shape
    if batch * heads * seq * seq < AUTOTUNE_MIN_SCORES:
        return GPU_CANDIDATES[0]
    key = (tuple(q.shape), torch.cuda.get_device_name(q.device))
    if key not in _best:
        timed = []
        entry: dict[str, Any] = {"shape": list(q.shape), "device": key[1], "method": "triton.testing.do_bench "
                                 "median (warm L2, no flush)", "candidates": []}
        for cfg in GPU_CANDIDATES:
            try:
                ms = triton.testing.do_bench(
                    lambda cfg=cfg: flash_attention(q, data["k"], data["v"], data["out"], data["sm_scale"], cfg),
                    warmup=25, rep=100, return_mode="median")
            except Exception as err:  # noqa: BLE001 - a candidate this GPU cannot run is simply not chosen
                entry["candidates"].append({"config": cfg.__dict__, "ms": None, "error": str(err).splitlines()[0][:200]})
                continue
            entry["candidates"].append({"config": cfg.__dict__, "ms": ms})
            timed.append((ms, cfg))
        if not timed:
            raise RuntimeError("flash_attention: no candidate configuration ran on this GPU")
        _best[key] = min(timed, key=lambda item: item[0])[1]
        entry["chosen"] = _best[key].__dict__
        AUTOTUNE_LOG.append(entry)
    return _best[key]


def custom_kernel(data: dict[str, Any]) -> torch.Tensor:
    """Attention of data["q"], data["k"], data["v"] with data["sm_scale"], written into data["out"]."""
    return flash_attention(data["q"], data["k"], data["v"], data["out"], data["sm_scale"], _pick_config(data))
