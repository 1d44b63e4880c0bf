"""Leaderboard submission for `flash_attention`: an FA3-style CUDA kernel for the H100 (sm_90a), Triton elsewhere.

softmax(q k^T * sm_scale) v for fp16 (batch, heads, seq, head_dim).

On an sm_90 GPU with head_dim 128 and seq a multiple of 128, a CUDA C++ kernel built once with nvcc (loaded with ctypes)
(docs/worklogs/flash_attention.md has the measurements behind each choice, and why Triton 3.6 could not get
there): CTAs of three warpgroups, one per SM, each walking tiles of 128 query rows (persistent grid; variant 49
of CUDA_VARIANTS, the first of CUDA_PREFERENCE that passes a self-check). Warpgroup 0 is the producer: after
`setmaxnreg` gives its registers away, one thread issues TMA copies of Q and of each 192-key block of K and V into
a two-stage shared-memory ring guarded by full/empty mbarriers (the next tile's first K block before its Q, and
that Q prefetched into L2 four blocks before the tile ends; a head's short block, 8192 = 42 x 192 + 128, comes
first). Warpgroups 1 and 2 are consumers of 64 query rows each (240 registers): S = Q K^T and O += P V are
asynchronous wgmma (m64n192k16 and m64n128k16 from shared memory, P from registers), block j's QK^T issued together
with block j-1's P V, the softmax computed in place in the score registers, and named barriers make the two
consumers take turns issuing, so one's softmax (exp2 and max, the row max as four short chains; the row sums from
the packed fp16 P in fp16 pairs) overlaps the other's matrix products. In the source, as in FA3, a consumer's
softmax also runs under its own P V and O is rescaled in the QK^T's shadow; in the machine code ptxas moves the wait
for that P V ahead of the softmax and the rescale ahead of the QK^T issue (work log, step 18). At a tile's end the
second consumer hands the turn back right after issuing its last P V.

Everywhere else (CPU interpreter, other head dims or sequence lengths, other GPUs, no compiler) the FA2-style
Triton kernel below runs:
* Grid (query blocks, batch*heads) with the query block fastest: the ~132 programs resident at once cover
  one or two heads, whose K and V (4 MiB at seq 8192) stay in L2 while all their query blocks read them.
* The softmax runs in base 2: sm_scale * log2(e) is folded into one multiply-subtract on the score tile, the
  row maximum is taken on the unscaled scores, and exp2 replaces exp.
* The P V product accumulates straight into the fp32 accumulator (`tl.dot(p, v, acc)`).
* On the GPU, K and V tiles come through TMA tensor descriptors when seq is a multiple of the blocks; other
  shapes and the CPU interpreter use pointer loads with masks.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
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


# Candidates the GPU path autotunes over on its first call per shape (steps_1/steps_2 in git 305b79c:benchmarks/submissions_h100
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



# ---------------------------------------------------------------- CUDA (sm_90a) path


def _operands(nreg):
    regs = ", ".join(f"%{i}" for i in range(nreg))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    return regs, outs

def wgmma_ss(n):
    """m64nNk16 f32 += f16 * f16, A and B K-major from shared memory (descriptors)."""
    nreg = n // 2
    regs, outs = _operands(nreg)
    return f'''
DEV void wgmma_ss_n{n}(float* d, uint64_t da, uint64_t db, int scale_d) {{
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nreg + 2}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, %{nreg}, %{nreg + 1}, p, 1, 1, 0, 0;\\n}}\\n"
    : {outs}
    : "l"(da), "l"(db), "r"(scale_d));
}}
'''

def wgmma_rs(n, trans_b=1, name=None):
    """m64nNk16 f32 (+)= f16 * f16, A from registers, B from shared memory: MN-major (transposed, trans_b=1)
    or K-major (trans_b=0)."""
    nreg = n // 2
    regs, outs = _operands(nreg)
    a = ", ".join(f"%{nreg + i}" for i in range(4))
    return f'''
DEV void {name or f"wgmma_rs_n{n}"}(float* d, const uint32_t* a, uint64_t db, int scale_d = 1) {{
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nreg + 5}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{regs}}}, {{{a}}}, %{nreg + 4}, p, 1, 1, {trans_b};\\n}}\\n"
    : {outs}
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}}
'''

KERNEL = r'''
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <cstdio>

#define DEV __device__ __forceinline__

DEV uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

DEV void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
DEV void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" :: "r"(bar), "r"(bytes) : "memory");
}
DEV void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(bar) : "memory");
}
DEV void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
DEV void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// Pull a box into L2 only (no shared memory, no barrier): the next tile's Q, so its real copy later hits L2.
DEV void tma_prefetch_l2(const CUtensorMap* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               :: "l"((uint64_t)map), "r"(c0), "r"(c1) : "memory");
}
// The same copy multicast to the CTAs of ctamask in the cluster: each gets the box at the same shared offset
// and a complete_tx on its own mbarrier at the same offset.
DEV void tma_load_2d_mc(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, uint16_t ctamask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;"
               :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "h"(ctamask) : "memory");
}
// The shared::cluster address of the same shared-memory offset in CTA `rank` of the cluster.
DEV uint32_t map_peer(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// Arrive on an mbarrier of another CTA of the cluster. Every thread arrives, unpredicated: a predicated or
// branched arrive between wgmma issue and wait makes ptxas serialize the wgmmas (warning C7513).
DEV void mbar_arrive_remote(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(cluster_addr) : "memory");
}
DEV uint32_t cluster_rank() { uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
DEV void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
DEV uint32_t ex2_h2(uint32_t x) { uint32_t y; asm("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x)); return y; }
DEV uint32_t add_h2(uint32_t a, uint32_t b) { uint32_t y; asm("add.rn.f16x2 %0, %1, %2;" : "=r"(y) : "r"(a), "r"(b)); return y; }
DEV float sum_h2(uint32_t x) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&x));
  return f.x + f.y;
}
DEV void named_sync(int id) { asm volatile("bar.sync %0, 256;" :: "r"(id) : "memory"); }
DEV void named_arrive(int id) { asm volatile("bar.arrive %0, 256;" :: "r"(id) : "memory"); }
DEV void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
DEV void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> DEV void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
DEV void fence_f(float& x) { asm volatile("" : "+f"(x) :: "memory"); }
DEV void fence_u(uint32_t& x) { asm volatile("" : "+r"(x) :: "memory"); }
DEV float ex2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
// exp2 on the FMA pipes, to take part of the softmax's exponentials off the MUFU unit (16 per clock per SM): round
// to nearest with the 1.5 * 2^23 trick, 2^f on [-0.5, 0.5] by a degree-3 fit (coefficients fitted here by
// reweighted least squares; max relative error 7.5e-5, below fp16's half ulp), the exponent added to the bits.
// x >= -125 keeps the result a normal float (what is cut off is 0 in fp16 anyway).
DEV float ex2_fma(float x) {
  x = fmaxf(x, -125.f);
  const float j = x + 12582912.f;
  const float f = x - (j - 12582912.f);
  const float p = fmaf(fmaf(fmaf(0.055171654f, f, 0.24261113f), f, 0.69326097f), f, 0.99992806f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(j) << 23));
}
// Two floats to one f16x2 register, lo in the low half (the lower column of the fragment).
DEV uint32_t pack_h2(float lo, float hi) { uint32_t r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }

// Shared-memory matrix descriptor, 128-byte swizzle (tiles written by TMA with CU_TENSOR_MAP_SWIZZLE_128B).
DEV uint64_t gdesc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

@@WGMMA@@

// Tile geometry: 128 query rows per CTA (64 per consumer warpgroup), 128 keys per block, head dim 128.
// A 128 x 128 fp16 tile is two 128 x 64 halves (16 KiB each, 128-byte rows, swizzled), one per TMA box.
constexpr int TILE = 32768;
constexpr int HALF_TILE = 16384;

// S = Q K^T for this warpgroup's 64 rows: 8 k-steps of 16 over head dim (4 per 128-byte swizzle row).
// QREG: A = Q from registers (fragments loaded once per tile), so the tensor cores read only K from shared memory.
// BN keys per block: K's two 64-column halves are BN * 128 bytes apart (Q's 16 KiB).
// NB: keys the product covers (the first NB of the block's BN rows).
template <int QREG, int BN, int NB>
DEV void gemm_qk(float* S, uint32_t qa, const uint32_t* Qr, uint32_t kb) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const uint32_t off = (kk >> 2) * HALF_TILE + (kk & 3) * 32, koff = (kk >> 2) * (BN * 128) + (kk & 3) * 32;
    if constexpr (QREG) {
      wgmma_rs_kmajor_nBN<NB>(S, Qr + 4 * kk, gdesc(kb + koff, 16, 1024), kk > 0 ? 1 : 0);
    } else {
      wgmma_ss_nBN<NB>(S, gdesc(qa + off, 16, 1024), gdesc(kb + koff, 16, 1024), kk > 0 ? 1 : 0);
    }
  }
}

// This thread's A fragments of its warpgroup's 64 Q rows (rows r, r+8; columns 2q, 2q+1 and 8+2q, 8+2q+1 of
// each 16-column step), read from the TMA tile through its 128-byte swizzle: 16-byte chunk k of row r sits
// at chunk k ^ (r % 8).
DEV void load_q_frag(uint32_t* Qr, uint32_t sQ, int c, int warp, int lane) {
  const int r0 = c * 64 + warp * 16 + (lane >> 2);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = r0 + ((i & 1) ? 8 : 0);
      const int d = kk * 16 + ((i & 2) ? 8 : 0) + 2 * (lane & 3);
      const int b = (d & 63) * 2;
      const uint32_t addr = sQ + (d >> 6) * HALF_TILE + r * 128 + ((((b >> 4) ^ (r & 7))) << 4) + (b & 15);
      asm volatile("ld.shared.b32 %0, [%1];" : "=r"(Qr[kk * 4 + i]) : "r"(addr) : "memory");
    }
  }
}

// O += P V: P (64 x BN keys, fp16 registers), V (BN keys x 128 dims, row-major = MN-major for B), its two
// 64-column halves BN * 128 bytes apart.
// NB: keys of the product (the first NB of the block's BN rows).
template <int PVMODE, int BN, int NB>
DEV void gemm_pv(float* O, const uint32_t* P, uint32_t vb) {
  constexpr uint32_t HALF = BN * 128;
#pragma unroll
  for (int kk = 0; kk < NB / 16; ++kk) {
    const uint32_t b = vb + kk * 2048;  // 16 key rows of 128 bytes
    if (PVMODE == 0) {  // n128: the two 64-column halves apart by the leading offset, key groups 1 KiB
      wgmma_rs_n128(O, P + 4 * kk, gdesc(b, HALF, 1024));
    } else if (PVMODE == 1) {  // the same with the two offsets' roles exchanged
      wgmma_rs_n128(O, P + 4 * kk, gdesc(b, 1024, HALF));
    } else {
      // 64 columns = one swizzle row: only the 8-row step between key groups matters, so both offsets
      // carry it (the MN-major descriptor's field order is then irrelevant).
      wgmma_rs_n64(O, P + 4 * kk, gdesc(b, 1024, 1024));
      wgmma_rs_n64(O + 32, P + 4 * kk, gdesc(b + HALF, 1024, 1024));
    }
  }
}

// Keys at or past `valid` in this block (the last block of a head when BN does not divide seq; the TMA box
// reads on into the next head, or zeros past the tensor) get score -inf, so exp2 makes their P exactly 0.
template <int NJ>
DEV void mask_keys(float* S, int valid, int lane) {
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int col = 8 * j + 2 * (lane & 3);
    if (col >= valid) S[4 * j] = S[4 * j + 2] = -INFINITY;
    if (col + 1 >= valid) S[4 * j + 1] = S[4 * j + 3] = -INFINITY;
  }
}

// The running row maxima of rows r and r+8 over a new score block (the four lanes of a quad hold a row), the
// new maxima n0, n1 (scaled) and the factors a0, a1 that rescale what was summed under the old ones.
// ILP: four partial maxima per row (chains of 4 instead of 16), since each scheduler holds only one warp of each
// consumer and cannot hide a long dependent chain (ILP 2: two partials, chains of 8 at 128 keys). LAZY: the running maximum is only raised when the block's
// exceeds it by more than 8 (log2 units), so P <= 2^8 (safe in fp16) and O, l need rescaling only then; the
// normalisation at the end uses the same stale maximum, so the result is unchanged.
template <int ILP = 0, int LAZY = 0, int NJ = 16>
DEV void row_max_update(const float* S, float& m0, float& m1, float& a0, float& a1, float scale, float& n0,
                        float& n1) {
  float x0 = S[0], x1 = S[2];
  if (ILP == 2) {
    float p0[2], p1[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      p0[q] = fmaxf(S[4 * q], S[4 * q + 1]);
      p1[q] = fmaxf(S[4 * q + 2], S[4 * q + 3]);
    }
#pragma unroll
    for (int j = 2; j < NJ; ++j) {
      p0[j & 1] = fmaxf(p0[j & 1], fmaxf(S[4 * j], S[4 * j + 1]));
      p1[j & 1] = fmaxf(p1[j & 1], fmaxf(S[4 * j + 2], S[4 * j + 3]));
    }
    x0 = fmaxf(p0[0], p0[1]);
    x1 = fmaxf(p1[0], p1[1]);
  } else if (ILP) {
    float p0[4], p1[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      p0[q] = fmaxf(S[4 * q], S[4 * q + 1]);
      p1[q] = fmaxf(S[4 * q + 2], S[4 * q + 3]);
    }
#pragma unroll
    for (int j = 4; j < NJ; ++j) {
      p0[j & 3] = fmaxf(p0[j & 3], fmaxf(S[4 * j], S[4 * j + 1]));
      p1[j & 3] = fmaxf(p1[j & 3], fmaxf(S[4 * j + 2], S[4 * j + 3]));
    }
    x0 = fmaxf(fmaxf(p0[0], p0[1]), fmaxf(p0[2], p0[3]));
    x1 = fmaxf(fmaxf(p1[0], p1[1]), fmaxf(p1[2], p1[3]));
  } else {
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      x0 = fmaxf(x0, fmaxf(S[4 * j], S[4 * j + 1]));
      x1 = fmaxf(x1, fmaxf(S[4 * j + 2], S[4 * j + 3]));
    }
  }
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffff, x0, 1));
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffff, x0, 2));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffff, x1, 1));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffff, x1, 2));
  if (LAZY) {
    // m0 = -inf on the first block: always taken there (a0 = ex2(-inf) = 0 on empty O, l).
    n0 = x0 * scale > m0 + 8.f ? x0 * scale : m0;
    n1 = x1 * scale > m1 + 8.f ? x1 * scale : m1;
  } else {
    n0 = fmaxf(m0, x0 * scale);
    n1 = fmaxf(m1, x1 * scale);
  }
  a0 = ex2(m0 - n0);
  a1 = ex2(m1 - n1);
  m0 = n0;
  m1 = n1;
}

// Online softmax of one 64 x 128 score block held as the wgmma accumulator layout: this thread owns rows
// r and r+8 (S[4j], S[4j+1] and S[4j+2], S[4j+3] for column pair j). Writes P (fp16 pairs) and the rescale.
// NOPN: the same online softmax, the probabilities left in S as fp32 (packed to fp16 once the previous P V
// product, which still reads P, has finished): no second P buffer, 32 registers fewer.
// EMU: the exponentials of column pairs j % EMU == EMU - 1 on the FMA pipes (ex2_fma); 0 = all on MUFU.
// NOSUM: l0, l1 only rescaled here; the caller adds the block's row sums (from the packed P, in fp16 pairs).
template <int ILP = 0, int LAZY = 0, int EMU = 0, int NJ = 16, int NOSUM = 0>
DEV void softmax_inplace(float* S, float& m0, float& m1, float& l0, float& l1, float& a0, float& a1, float scale) {
  float n0, n1;
  row_max_update<ILP, LAZY, NJ>(S, m0, m1, a0, a1, scale, n0, n1);
  float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    if (EMU && j % (EMU ? EMU : 1) == (EMU ? EMU : 1) - 1) {
      S[4 * j] = ex2_fma(fmaf(S[4 * j], scale, -n0));
      S[4 * j + 1] = ex2_fma(fmaf(S[4 * j + 1], scale, -n0));
      S[4 * j + 2] = ex2_fma(fmaf(S[4 * j + 2], scale, -n1));
      S[4 * j + 3] = ex2_fma(fmaf(S[4 * j + 3], scale, -n1));
    } else {
      S[4 * j] = ex2(fmaf(S[4 * j], scale, -n0));
      S[4 * j + 1] = ex2(fmaf(S[4 * j + 1], scale, -n0));
      S[4 * j + 2] = ex2(fmaf(S[4 * j + 2], scale, -n1));
      S[4 * j + 3] = ex2(fmaf(S[4 * j + 3], scale, -n1));
    }
    if (NOSUM) continue;
    const int q = ILP == 1 ? (j & 3) : ILP == 2 ? (j & 1) : 0;
    s0[q] += S[4 * j] + S[4 * j + 1];
    s1[q] += S[4 * j + 2] + S[4 * j + 3];
  }
  if (NOSUM) {
    l0 *= a0;
    l1 *= a1;
  } else if (ILP == 2) {
    l0 = l0 * a0 + (s0[0] + s0[1]);
    l1 = l1 * a1 + (s1[0] + s1[1]);
  } else {
    l0 = l0 * a0 + ((s0[0] + s0[1]) + (s0[2] + s0[3]));
    l1 = l1 * a1 + ((s1[0] + s1[1]) + (s1[2] + s1[3]));
  }
}

template <int EXPH2, int NJ = 16>
DEV void softmax_block(float* S, uint32_t* P, float& m0, float& m1, float& l0, float& l1, float& a0, float& a1,
                       float scale) {
  float n0, n1;
  row_max_update<0, 0, NJ>(S, m0, m1, a0, a1, scale, n0, n1);
  float s0 = 0.f, s1 = 0.f;
  if (EXPH2) {
    // exp2 of two fp16 arguments per MUFU instruction; P is wanted in fp16 anyway. Row sums in fp16 pairs,
    // four partial sums per row (at most 8 terms of <= 1 each), then fp32.
    uint32_t h0[2] = {0u, 0u}, h1[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const uint32_t p01 = ex2_h2(pack_h2(fmaf(S[4 * j], scale, -n0), fmaf(S[4 * j + 1], scale, -n0)));
      const uint32_t p23 = ex2_h2(pack_h2(fmaf(S[4 * j + 2], scale, -n1), fmaf(S[4 * j + 3], scale, -n1)));
      P[2 * j] = p01;
      P[2 * j + 1] = p23;
      h0[j & 1] = add_h2(h0[j & 1], p01);
      h1[j & 1] = add_h2(h1[j & 1], p23);
    }
    s0 = sum_h2(h0[0]) + sum_h2(h0[1]);
    s1 = sum_h2(h1[0]) + sum_h2(h1[1]);
  } else {
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const float p0 = ex2(fmaf(S[4 * j], scale, -n0)), p1 = ex2(fmaf(S[4 * j + 1], scale, -n0));
      const float p2 = ex2(fmaf(S[4 * j + 2], scale, -n1)), p3 = ex2(fmaf(S[4 * j + 3], scale, -n1));
      s0 += p0 + p1;
      s1 += p2 + p3;
      P[2 * j] = pack_h2(p0, p1);
      P[2 * j + 1] = pack_h2(p2, p3);
    }
  }
  l0 = l0 * a0 + s0;
  l1 = l1 * a1 + s1;
}

// One CTA of three warpgroups computes tiles of 128 query rows of one (batch, head): one tile (grid = tiles), or
// PERSIST: one CTA per SM walks the tiles with a stride of the grid, so a tile's epilogue and the next tile's
// Q load overlap the K/V stream. Warpgroup 0 = producer (one thread issues TMA copies of Q and of the K, V
// blocks into a STAGES-deep ring guarded by full/empty mbarriers); warpgroups 1, 2 = consumers, 64 rows each.
// PINGPONG: named barriers 1, 2 make the consumers take turns issuing their wgmmas, so one's softmax runs while
// the other's matrix products occupy the tensor cores. PERSIST 2: the producer fetches the next tile's first K
// block before its Q (PERSIST 1: Q first). CLUSTER 2: the two CTAs of a cluster (neighbouring query tiles of
// one head) each fetch half of every K and V block and multicast it to both, halving L2->SM traffic; a stage
// is free once the consumers of both CTAs released it. EXPH2: exp2 on fp16 pairs (two per MUFU instruction).
// MODE bit 0 (NOPN): softmax in place in S, no second P buffer; bit 1 (QREG): Q fragments in registers.
// BN: keys per K/V block (FA3 takes 176 for head dim 128): a K or V stage is BN x 128, two BN x 64 TMA boxes; when
// BN does not divide seq the last block of each head is masked (mask_keys).
template <int STAGES, int PINGPONG, int PVMODE, int PERSIST, int CLUSTER, int EXPH2, int MODE, int BN>
__global__ void __launch_bounds__(384, 1)
fa_fwd_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
              const __grid_constant__ CUtensorMap tv, __half* __restrict__ out, int seq, int nbh, float scale) {
  static_assert(BN % 16 == 0 && BN <= 256 && (CLUSTER == 1 || BN == 128), "BN: 16..256 keys; clusters split 128");
  constexpr uint32_t KV_TILE = BN * 256, KV_HALF = BN * 128;
  constexpr int NJ = BN / 8;  // column pairs of the score accumulator per thread
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint32_t base = smem_u32(smem_raw);
  base += (1024 - (base & 1023)) & 1023;
  const uint32_t sQ = base, sK = base + TILE, sV = sK + STAGES * KV_TILE, bars = sV + STAGES * KV_TILE;
  const uint32_t qfull = bars, qempty = bars + 8;
  auto kfull = [&](int s) { return bars + 16 + 8 * s; };
  auto kempty = [&](int s) { return bars + 16 + 8 * STAGES + 8 * s; };
  auto vfull = [&](int s) { return bars + 16 + 16 * STAGES + 8 * s; };
  auto vempty = [&](int s) { return bars + 16 + 24 * STAGES + 8 * s; };

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const int nq = seq >> 7;  // query tiles per head
  const int nkb = (seq + BN - 1) / BN, last_valid = seq - (nkb - 1) * BN;  // key blocks per head; keys in the last
  const int total = nq * nbh;
  const int t_first = PERSIST ? (int)blockIdx.x : (int)(blockIdx.y * nq + blockIdx.x);
  const int t_step = PERSIST ? (int)gridDim.x : total;

  if (tid == 0) {
    mbar_init(qfull, 1);
    mbar_init(qempty, 256);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(kfull(s), 1);
      mbar_init(vfull(s), 1);
      // Releases: every consumer thread of this CTA (and of the peer CTA in a cluster).
      mbar_init(kempty(s), 256 * CLUSTER);
      mbar_init(vempty(s), 256 * CLUSTER);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (CLUSTER == 1) {
    __syncthreads();
  } else {
    cluster_sync();  // the peer multicasts into our ring and arrives on our barriers: both must be initialised
  }
  const uint32_t rank = CLUSTER == 1 ? 0u : cluster_rank();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (tid == 0) {
      int it = 0, tc = 0;
      for (int t = t_first; t < total; t += t_step, ++tc) {
        const int row0 = (t / nq) * seq;
        for (int j = 0; j < nkb; ++j, ++it) {
          const int s = it % STAGES;
          const uint32_t ph = ((it / STAGES) & 1) ^ 1;
          // SHORT: block 0 is the head's last last_valid (<= 128) keys, then the full blocks from the start.
          const int krow = (MODE & 64) ? (j == 0 ? row0 + seq - last_valid : row0 + (j - 1) * BN) : row0 + j * BN;
          if (j == 0 && PERSIST != 2) {
            mbar_wait(qempty, (tc & 1) ^ 1);
            mbar_expect_tx(qfull, TILE);
            tma_load_2d(sQ, &tq, qfull, 0, row0 + (t % nq) * 128);
            tma_load_2d(sQ + HALF_TILE, &tq, qfull, 64, row0 + (t % nq) * 128);
          }
          mbar_wait(kempty(s), ph);
          mbar_expect_tx(kfull(s), KV_TILE);  // out-of-range rows of a box are zero-filled and counted too
          if (CLUSTER == 1) {
            tma_load_2d(sK + s * KV_TILE, &tk, kfull(s), 0, krow);
            tma_load_2d(sK + s * KV_TILE + KV_HALF, &tk, kfull(s), 64, krow);
          } else {  // our 64 of the 128 key rows, into both CTAs
            tma_load_2d_mc(sK + s * TILE + rank * 8192, &tk, kfull(s), 0, krow + rank * 64, 3);
            tma_load_2d_mc(sK + s * TILE + HALF_TILE + rank * 8192, &tk, kfull(s), 64, krow + rank * 64, 3);
          }
          if (j == 0 && PERSIST == 2) {
            mbar_wait(qempty, (tc & 1) ^ 1);
            mbar_expect_tx(qfull, TILE);
            tma_load_2d(sQ, &tq, qfull, 0, row0 + (t % nq) * 128);
            tma_load_2d(sQ + HALF_TILE, &tq, qfull, 64, row0 + (t % nq) * 128);
          }
          mbar_wait(vempty(s), ph);
          mbar_expect_tx(vfull(s), KV_TILE);
          if (CLUSTER == 1) {
            tma_load_2d(sV + s * KV_TILE, &tv, vfull(s), 0, krow);
            tma_load_2d(sV + s * KV_TILE + KV_HALF, &tv, vfull(s), 64, krow);
          } else {
            tma_load_2d_mc(sV + s * TILE + rank * 8192, &tv, vfull(s), 0, krow + rank * 64, 3);
            tma_load_2d_mc(sV + s * TILE + HALF_TILE + rank * 8192, &tv, vfull(s), 64, krow + rank * 64, 3);
          }
          // MODE bit 10: a few blocks before the tile ends, the next tile's Q into L2. Its copy into shared memory
          // can only start once both consumers released Q, near the tile's end; from L2 rather than DRAM, less of
          // its latency reaches into the next tile's first QK^T. (A hint: none where nkb < 4.)
          if ((MODE & 1024) && j == nkb - 4 && t + t_step < total) {
            const int tn = t + t_step, qrow = (tn / nq) * seq + (tn % nq) * 128;
            tma_prefetch_l2(&tq, 0, qrow);
            tma_prefetch_l2(&tq, 64, qrow);
          }
        }
      }
    }
    if (CLUSTER > 1) cluster_sync();  // stay until the peer is done multicasting to us and arriving on our barriers
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    const int c = wg - 1;
    const int t = tid & 127, warp = t >> 5, lane = t & 31;
    const uint32_t qa = sQ + c * 8192;  // this warpgroup's 64 rows inside each Q half tile
    const int my_bar = 1 + c, other_bar = 2 - c;
    const uint32_t peer_delta = CLUSTER == 1 ? 0u : map_peer(bars, rank ^ 1u) - bars;
    auto release = [&](uint32_t bar) {
      mbar_arrive(bar);
      if (CLUSTER > 1) mbar_arrive_remote(bar + peer_delta);
    };
    constexpr bool NOPN = (MODE & 1) != 0, QREG = (MODE & 2) != 0;
    // ILP: bit 2 = four partial chains in the row max and sum, with bit 14 two.
    constexpr int ILP = (MODE & 4) ? ((MODE & 16384) ? 2 : 1) : 0, LAZY = (MODE & 8) ? 1 : 0;
    constexpr int EMU = (MODE & 16) ? 4 : (MODE & 32) ? 2 : 0;  // 1 in 4 or 1 in 2 exponentials on the FMA pipes
    constexpr bool SHORT = (MODE & 64) != 0;  // the head's short block (<= 128 keys) first, as 128-key products
    // MERGE: a tile's last P V and the next tile's first QK^T issued together (persistent grid, softmax in place).
    constexpr bool MERGE = (MODE & 128) != 0;
    static_assert(!MERGE || (PERSIST && NOPN && !QREG), "the merged step needs the persistent grid and NOPN");
    // EARLY (FA3's order): O is rescaled by the previous block's factors after this block's QK^T is issued and
    // before the P V that accumulates into it, so the rescale runs in the shadow of QK^T instead of between the
    // softmax and the next issue turn.
    constexpr bool EARLY = (MODE & 256) != 0;
    // HANDOVER: consumer 1 hands the issue turn back right after its tile's last P V, not after its output store,
    // so consumer 0's next first QK^T can queue behind that P V instead of waiting out consumer 1's epilogue.
    constexpr bool HANDOVER = (MODE & 512) != 0;
    static_assert(!EARLY || (!LAZY && !MERGE), "the early rescale is written for the eager rescale, unmerged");
    // PIN: ptxas hoists the wait for the P V product (wait_group 0) above the softmax, so a consumer's softmax never
    // runs under its own P V (only under the other consumer's products). A shared store of the row sums, predicated
    // off at run time, placed before that wait keeps the whole softmax ahead of it (the store needs every
    // exponential; ptxas keeps the wait behind the store).
    constexpr bool PIN = (MODE & 2048) != 0;
    // HSUM: the row sums from the packed P in fp16 pairs (half the adds), after the wait for P V.
    constexpr bool HSUM = (MODE & 8192) != 0;
    static_assert(!PIN || (NOPN && !LAZY), "the pinned softmax is written for the in-place, eager softmax");
    static_assert(!HSUM || (NOPN && !LAZY && !PIN && !EMU && !MERGE), "fp16-pair sums: in-place softmax, unpinned");
    float S[BN / 2], O[64];
    uint32_t P[BN / 4], Pn[NOPN ? 1 : BN / 4], Qr[QREG ? 32 : 1];
    // Register fences around the asynchronous wgmmas: the accumulators (O and P, or the scores S) may not be read
    // or written across them.
    auto fence_op = [&]() {
#pragma unroll
      for (int i = 0; i < 64; ++i) fence_f(O[i]);
#pragma unroll
      for (int i = 0; i < BN / 4; ++i) fence_u(P[i]);
    };
    auto fence_s = [&]() {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) fence_f(S[i]);
    };
    int it0 = 0, tc = 0;
    // MERGE: the running state carries over tiles (the merged step below starts the next tile's softmax).
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f, a0 = 0.f, a1 = 0.f;
    // O *= the factors of the last softmax (rows r, r+8).
    auto rescale_o = [&]() {
#pragma unroll
      for (int jj = 0; jj < 16; ++jj) {
        O[4 * jj] *= a0;
        O[4 * jj + 1] *= a0;
        O[4 * jj + 2] *= a1;
        O[4 * jj + 3] *= a1;
      }
    };
    // The tile's normalised output, rows r and r+8 of this thread.
    auto store_o = [&](const int tile, float s0, float s1) {
      s0 += __shfl_xor_sync(0xffffffff, s0, 1);
      s0 += __shfl_xor_sync(0xffffffff, s0, 2);
      s1 += __shfl_xor_sync(0xffffffff, s1, 1);
      s1 += __shfl_xor_sync(0xffffffff, s1, 2);
      const float i0 = 1.f / s0, i1 = 1.f / s1;
      const size_t r = (size_t)(tile / nq) * seq + (tile % nq) * 128 + c * 64 + warp * 16 + (lane >> 2);
      uint32_t* o0 = reinterpret_cast<uint32_t*>(out + r * 128 + 2 * (lane & 3));
      uint32_t* o1 = reinterpret_cast<uint32_t*>(out + (r + 8) * 128 + 2 * (lane & 3));
#pragma unroll
      for (int jj = 0; jj < 16; ++jj) {
        o0[4 * jj] = pack_h2(O[4 * jj] * i0, O[4 * jj + 1] * i0);
        o1[4 * jj] = pack_h2(O[4 * jj + 2] * i1, O[4 * jj + 3] * i1);
      }
    };
    for (int tile = t_first; tile < total; tile += t_step, ++tc, it0 += nkb) {
      // The tile's first block in the ring's sequence (PIN: from tc, one register fewer across the key loop).
      const int it = PIN ? tc * nkb : it0;
     if (!MERGE || tile == t_first) {
#pragma unroll
      for (int i = 0; i < 64; ++i) O[i] = 0.f;
      m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

      mbar_wait(qfull, tc & 1);
      if (QREG) {
        load_q_frag(Qr, sQ, c, warp, lane);
        // Q now lives in registers: the producer may fetch the next tile's Q at once (persistent grid).
        mbar_arrive(qempty);
      }
      if (PINGPONG && c == 1 && (!HANDOVER || tc == 0)) named_arrive(1);

      // Block 0: scores only.
      {
        const int s = it % STAGES;
        mbar_wait(kfull(s), (it / STAGES) & 1);
        if (PINGPONG) named_sync(my_bar);
        fence_s();
        wg_fence();
        if constexpr (SHORT) {
          gemm_qk<QREG, BN, 128>(S, qa, Qr, sK + s * KV_TILE);
        } else {
          gemm_qk<QREG, BN, BN>(S, qa, Qr, sK + s * KV_TILE);
        }
        wg_commit();
        if (PINGPONG) named_arrive(other_bar);
        wg_wait<0>();
        fence_s();
        release(kempty(s));
        if constexpr (SHORT) {
          // The head's short block (its last <= 128 keys) comes first: 128-key products, P zero past them, so the
          // first P V (over BN keys) adds nothing from the rows the box read beyond (next head's, or zero fill).
          if (last_valid < 128) mask_keys<16>(S, last_valid, lane);
          softmax_block<EXPH2, 16>(S, P, m0, m1, l0, l1, a0, a1, scale);
#pragma unroll
          for (int i = 32; i < BN / 4; ++i) P[i] = 0u;
        } else {
          if (BN != 128 && nkb == 1) mask_keys<NJ>(S, last_valid, lane);
          softmax_block<EXPH2, NJ>(S, P, m0, m1, l0, l1, a0, a1, scale);
        }
      }

     }

      // Key block j >= 1: QK^T of block j and P V of block j - 1 in flight together, then block j's softmax.
      // NB: keys block j's products cover.
      auto kv_step = [&](const int j, auto nb_tag) {
        constexpr int NB = decltype(nb_tag)::value;
        const int s = (it + j) % STAGES, sp = (it + j - 1) % STAGES;
        mbar_wait(kfull(s), ((it + j) / STAGES) & 1);
        mbar_wait(vfull(sp), ((it + j - 1) / STAGES) & 1);
        if (PINGPONG) named_sync(my_bar);
        fence_op();
        wg_fence();
        gemm_qk<QREG, BN, NB>(S, qa, Qr, sK + s * KV_TILE);
        wg_commit();
        if constexpr (EARLY) {
          rescale_o();
          fence_op();
          wg_fence();
        }
        gemm_pv<PVMODE, BN, BN>(O, P, sV + sp * KV_TILE);
        wg_commit();
        if (PINGPONG) named_arrive(other_bar);
        wg_wait<1>();
        fence_s();
        release(kempty(s));
        if (BN != 128 && !SHORT && j == nkb - 1) mask_keys<NB / 8>(S, last_valid, lane);
        if (NOPN) {
          softmax_inplace<ILP, LAZY, EMU, NB / 8, HSUM ? 1 : 0>(S, m0, m1, l0, l1, a0, a1, scale);
        } else {
          softmax_block<EXPH2, NB / 8>(S, Pn, m0, m1, l0, l1, a0, a1, scale);
        }
        if constexpr (PIN) {  // never stores: nbh > 0
          asm volatile("{\n.reg .pred p;\nsetp.lt.s32 p, %3, 0;\n@p st.shared.v2.f32 [%0], {%1, %2};\n}\n"
                       :: "r"(bars), "f"(l0), "f"(l1), "r"(nbh) : "memory");
        }
        wg_wait<0>();
        fence_op();
        release(vempty(sp));
        // LAZY: a warp skips the rescale when none of its rows raised its maximum (most blocks after the first).
        if (!EARLY && (!LAZY || __any_sync(0xffffffff, a0 != 1.f || a1 != 1.f))) rescale_o();
        if (NOPN) {
#pragma unroll
          for (int i = 0; i < NB / 4; ++i) P[i] = pack_h2(S[2 * i], S[2 * i + 1]);
          if constexpr (HSUM) {
            // Row r's pairs are P[2j], row r+8's P[2j+1]: two fp16-pair chains per row (each half at most NB / 16
            // terms of <= 1), then fp32.
            uint32_t h0[2] = {P[0], P[2]}, h1[2] = {P[1], P[3]};
#pragma unroll
            for (int j = 2; j < NB / 8; ++j) {
              h0[j & 1] = add_h2(h0[j & 1], P[2 * j]);
              h1[j & 1] = add_h2(h1[j & 1], P[2 * j + 1]);
            }
            l0 += sum_h2(h0[0]) + sum_h2(h0[1]);
            l1 += sum_h2(h1[0]) + sum_h2(h1[1]);
          }
        } else {
#pragma unroll
          for (int i = 0; i < NB / 4; ++i) P[i] = Pn[NOPN ? 0 : i];
        }
      };
      for (int j = 1; j < nkb; ++j) kv_step(j, std::integral_constant<int, BN>{});

      // The tile's last read of Q is done: the producer may load the next tile's Q. (Arriving inside the loop,
      // under a branch, makes ptxas serialize the wgmmas: warning C7513.)
      if (!QREG) mbar_arrive(qempty);

      const int sl = (it + nkb - 1) % STAGES;
      if (MERGE && tile + t_step < total) {
        // Merged step: the last block's P V with the next tile's first QK^T (its Q is loaded once both consumers
        // released this one), so the tensor cores are not left idle between tiles; then this tile's output.
        const int s = (it + nkb) % STAGES;
        mbar_wait(kfull(s), ((it + nkb) / STAGES) & 1);
        mbar_wait(vfull(sl), ((it + nkb - 1) / STAGES) & 1);
        mbar_wait(qfull, (tc + 1) & 1);
        if (PINGPONG) named_sync(my_bar);
        fence_op();
        wg_fence();
        if constexpr (SHORT) {
          gemm_qk<QREG, BN, 128>(S, qa, Qr, sK + s * KV_TILE);
        } else {
          gemm_qk<QREG, BN, BN>(S, qa, Qr, sK + s * KV_TILE);
        }
        wg_commit();
        gemm_pv<PVMODE, BN, BN>(O, P, sV + sl * KV_TILE);
        wg_commit();
        if (PINGPONG) named_arrive(other_bar);
        wg_wait<1>();
        fence_s();
        release(kempty(s));
        const float done0 = l0, done1 = l1;
        m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
        if constexpr (SHORT) {
          if (last_valid < 128) mask_keys<16>(S, last_valid, lane);
          softmax_inplace<ILP, LAZY, EMU, 16>(S, m0, m1, l0, l1, a0, a1, scale);
        } else {
          if (BN != 128 && nkb == 1) mask_keys<NJ>(S, last_valid, lane);
          softmax_inplace<ILP, LAZY, EMU, NJ>(S, m0, m1, l0, l1, a0, a1, scale);
        }
        wg_wait<0>();
        fence_op();
        release(vempty(sl));
        store_o(tile, done0, done1);
#pragma unroll
        for (int i = 0; i < 64; ++i) O[i] = 0.f;
        constexpr int NP = SHORT ? 32 : BN / 4;
#pragma unroll
        for (int i = 0; i < NP; ++i) P[i] = pack_h2(S[2 * i], S[2 * i + 1]);
#pragma unroll
        for (int i = NP; i < BN / 4; ++i) P[i] = 0u;
      } else {
        // Last block's P V.
        mbar_wait(vfull(sl), ((it + nkb - 1) / STAGES) & 1);
        if (PINGPONG) named_sync(my_bar);
        if constexpr (EARLY) rescale_o();
        fence_op();
        wg_fence();
        gemm_pv<PVMODE, BN, BN>(O, P, sV + sl * KV_TILE);
        wg_commit();
        // Consumer 1 waits for consumer 0's turn; consumer 0 waits for consumer 1's at its next tile's start (or,
        // HANDOVER, already here).
        if (PINGPONG && (c == 0 || (HANDOVER && tile + t_step < total))) named_arrive(other_bar);
        wg_wait<0>();
        fence_op();
        release(vempty(sl));
        store_o(tile, l0, l1);
      }
    }
    if (CLUSTER > 1) cluster_sync();
  }
}

typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static EncodeTiled encode_fn() {
  static EncodeTiled fn = nullptr;
  if (!fn) {
    cudaDriverEntryPointQueryResult qres;
    void* p = nullptr;
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &qres);
    if (err != cudaSuccess || qres != cudaDriverEntryPointSuccess || !p)
      throw std::runtime_error("flash_attention: cuTensorMapEncodeTiled is not available");
    fn = reinterpret_cast<EncodeTiled>(p);
  }
  return fn;
}

// (rows, 128) fp16 row-major view; boxes of 128 rows x 64 columns (128 bytes), 128-byte swizzle.
static CUtensorMap make_map(void* ptr, uint64_t rows, uint32_t box_rows) {
  CUtensorMap m;
  cuuint64_t dims[2] = {128, rows};
  cuuint64_t strides[1] = {128 * 2};
  cuuint32_t box[2] = {64, box_rows};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = encode_fn()(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, ptr, dims, strides, box, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("flash_attention: cuTensorMapEncodeTiled failed: " + std::to_string((int)r));
  return m;
}

template <int STAGES, int PINGPONG, int PVMODE, int PERSIST, int CLUSTER, int EXPH2, int MODE, int BN>
static void fa_launch(const CUtensorMap& tq, const CUtensorMap& tk, const CUtensorMap& tv, __half* o, int bh,
                      int seq, float scale, cudaStream_t stream) {
  const int smem = TILE + 2 * STAGES * BN * 256 + 8 * (2 + 4 * STAGES) + 1024;
  auto kern = fa_fwd_kernel<STAGES, PINGPONG, PVMODE, PERSIST, CLUSTER, EXPH2, MODE, BN>;
  static_assert(CLUSTER == 1 || PERSIST == 0, "clusters pair neighbouring tiles of the plain grid");
  cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) throw std::runtime_error(std::string("flash_attention: smem attribute: ") + cudaGetErrorString(err));
  const int tiles = (seq / 128) * bh;
  dim3 grid(seq / 128, bh);
  if (PERSIST) {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    grid = dim3(sms < tiles ? sms : tiles, 1);
  }
  if (CLUSTER == 1) {
    kern<<<grid, 384, smem, stream>>>(tq, tk, tv, o, seq, bh, scale);
    err = cudaGetLastError();
  } else {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(384);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    err = cudaLaunchKernelEx(&cfg, kern, tq, tk, tv, o, seq, (int)bh, scale);
  }
  if (err != cudaSuccess) throw std::runtime_error(std::string("flash_attention: launch: ") + cudaGetErrorString(err));
}

void fa_fwd(int64_t q, int64_t k, int64_t v, int64_t o, int64_t bh, int64_t seq, double scale, int64_t stream,
            int64_t variant) {
  if (seq % 128 != 0 || seq <= 0) throw std::runtime_error("flash_attention: seq must be a positive multiple of 128");
  const uint64_t rows = (uint64_t)bh * seq;
  if (rows * 128 >= (1ull << 31)) throw std::runtime_error("flash_attention: tensor too large for 32-bit rows");
  // K, V boxes: 128 rows, or 64 (each CTA of a 2-CTA cluster fetches half a block).
  CUtensorMap tq = make_map((void*)q, rows, 128);
  CUtensorMap tk = make_map((void*)k, rows, 128), tv = make_map((void*)v, rows, 128);
  CUtensorMap tk2 = make_map((void*)k, rows, 64), tv2 = make_map((void*)v, rows, 64);
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
  switch (variant) {
@@CASES@@
    default: throw std::runtime_error("flash_attention: variant " + std::to_string(variant) + " was not built");
  }
}

// C entry point for ctypes: 0 on success, else 1 with the message in fa_error().
static char g_error[512];
extern "C" const char* fa_error() { return g_error; }
extern "C" int fa_fwd_c(int64_t q, int64_t k, int64_t v, int64_t o, int64_t bh, int64_t seq, double scale,
                        int64_t stream, int64_t variant) {
  try {
    fa_fwd(q, k, v, o, bh, seq, scale, stream, variant);
    return 0;
  } catch (const std::exception& e) {
    snprintf(g_error, sizeof(g_error), "%s", e.what());
    return 1;
  }
}
'''

def _wgmma_for(n: int) -> str:
    """The two m64nNk16 score products for N keys per block and their template names (gemm_qk picks by BN)."""
    return (wgmma_ss(n) + wgmma_rs(n, 0, f"wgmma_rs_kmajor_n{n}")
            + f"template <> DEV void wgmma_ss_nBN<{n}>(float* d, uint64_t da, uint64_t db, int sc) "
              f"{{ wgmma_ss_n{n}(d, da, db, sc); }}\n"
            + f"template <> DEV void wgmma_rs_kmajor_nBN<{n}>(float* d, const uint32_t* a, uint64_t db, int sc) "
              f"{{ wgmma_rs_kmajor_n{n}(d, a, db, sc); }}\n")


def cuda_source(variants: dict[int, tuple[int, ...]]) -> str:
    """variants: {id: (stages, pingpong, pvmode, persistent[, cluster, exp_h2, mode, keys per block])} -> the CUDA
    source instantiating exactly those kernels (cluster defaults to 1, exp_h2 and mode to 0, keys to 128)."""
    full = {vid: tuple(v) + (1, 0, 0, 128)[len(v) - 4:] for vid, v in variants.items()}
    cases = []
    for vid, (s, pp, pv, ps, cl, eh, md, bn) in full.items():
        if bn != 128:  # K, V boxes of bn rows; mode bit 6 (short block first) only where that block has <= 128 keys
            launch = (f"fa_launch<{s}, {pp}, {pv}, {ps}, 1, {eh}, {{}}, {bn}>(tq, make_map((void*)k, rows, {bn}), "
                      f"make_map((void*)v, rows, {bn}), (__half*)o, (int)bh, (int)seq, (float)scale, st);")
            if md & 64:
                cases.append(f"    case {vid}: if (seq - (seq + {bn} - 1) / {bn} * {bn} + {bn} <= 128) "
                             + launch.format(md) + " else " + launch.format(md & ~64) + " break;")
            else:
                cases.append(f"    case {vid}: " + launch.format(md) + " break;")
            continue
        # Clusters pair neighbouring query tiles: with an odd number of tiles per head the variant runs unclustered.
        cases.append(
            f"    case {vid}: if ({cl} == 1 || (seq / 128) % 2 != 0) fa_launch<{s}, {pp}, {pv}, {ps}, 1, {eh}, {md}, 128>"
            f"(tq, tk, tv, (__half*)o, (int)bh, (int)seq, (float)scale, st); else fa_launch<{s}, {pp}, {pv}, {ps}, {cl}, "
            f"{eh}, {md}, 128>(tq, tk2, tv2, (__half*)o, (int)bh, (int)seq, (float)scale, st); break;")
    wg = ("template <int N> DEV void wgmma_ss_nBN(float* d, uint64_t da, uint64_t db, int sc);\n"
          "template <int N> DEV void wgmma_rs_kmajor_nBN(float* d, const uint32_t* a, uint64_t db, int sc);\n"
          + wgmma_rs(128) + wgmma_rs(64)
          + "".join(_wgmma_for(n) for n in sorted({128} | {v[7] for v in full.values()})))
    return KERNEL.replace("@@WGMMA@@", wg).replace("@@CASES@@", "\n".join(cases))


# Kernel variants built into the module: id -> (pipeline stages, ping-pong between the consumers, P V form:
# 0/1 = one m64n128k16 per 16 keys with the descriptor's two offsets one way or the other, 2 = two m64n64k16;
# persistent grid of one CTA per SM: 0 no, 1 next Q fetched first, 2 next K first; [cluster size 1 or 2;
# exp2 on fp16 pairs 0 or 1; mode: bit 0 softmax in place, bit 1 Q fragments in registers; keys per K/V block]).
CUDA_VARIANTS: dict[int, tuple[int, ...]] = {
    0: (2, 1, 2, 0), 1: (2, 1, 0, 0), 2: (2, 1, 1, 0), 3: (2, 0, 2, 0), 4: (3, 1, 2, 0), 5: (2, 1, 2, 1),
    6: (2, 1, 0, 1),
    # steps_4: exp2 on fp16 pairs; 2-CTA clusters with K/V multicast; both; persistent with K before Q.
    7: (2, 1, 0, 0, 1, 1), 8: (2, 1, 0, 0, 2, 0), 9: (2, 1, 0, 0, 2, 1), 10: (2, 1, 0, 2, 1, 0),
    # steps_5: softmax in place (no second P buffer); plus Q fragments in registers; both with clusters.
    11: (2, 1, 0, 0, 1, 0, 1), 12: (2, 1, 0, 0, 1, 0, 3), 13: (2, 1, 0, 0, 2, 0, 1), 14: (2, 1, 0, 0, 2, 0, 3),
    # steps_6: mode bit 2 = short dependency chains in the row max and sum (4 partials per row); bit 3 = lazy
    # rescale (the running max is raised only by more than 8, so most blocks skip the O rescale).
    15: (2, 1, 0, 0, 1, 0, 5), 16: (2, 1, 0, 0, 1, 0, 9), 17: (2, 1, 0, 0, 1, 0, 13), 18: (2, 1, 0, 0, 1, 0, 15),
    19: (2, 1, 0, 2, 1, 0, 13),  # 17 on the persistent grid, next tile's K before its Q (as 10)
    # steps_7: three stages (224 KiB: the K/V prefetch distance from one block to two) for 11, 15 and 15 on the
    # persistent K-first grid.
    20: (3, 1, 0, 0, 1, 0, 1), 21: (3, 1, 0, 0, 1, 0, 5), 22: (3, 1, 0, 2, 1, 0, 5),
    # steps_8, around 22: without the short chains; Q in registers (released at once); lazy rescale; Q first.
    23: (3, 1, 0, 2, 1, 0, 1), 24: (3, 1, 0, 2, 1, 0, 7), 25: (3, 1, 0, 2, 1, 0, 13), 26: (3, 1, 0, 1, 1, 0, 5),
    # steps_9, on 22: a quarter / half of the exponentials on the FMA pipes (mode bits 4, 5).
    27: (3, 1, 0, 2, 1, 0, 21), 28: (3, 1, 0, 2, 1, 0, 37),
    # steps_10, on 22: K/V blocks of 176 keys (FA3's choice for head dim 128; only two stages fit), also on the plain
    # grid; 192 and 160 keys; and 22 with two stages, to separate the block size from the ring depth.
    29: (2, 1, 0, 2, 1, 0, 5, 176), 30: (2, 1, 0, 0, 1, 0, 5, 176), 31: (2, 1, 0, 2, 1, 0, 5, 192),
    32: (2, 1, 0, 2, 1, 0, 5, 160), 33: (2, 1, 0, 2, 1, 0, 5),
    # steps_11, on 31 (192 keys): mode bit 6 = a short block of <= 128 keys (seq 8192 = 42 x 192 + 128) first, its
    # QK^T as 128-key products (the loop's masked last block did 64 keys of wasted work, 0.8%).
    34: (2, 1, 0, 2, 1, 0, 69, 192), 35: (2, 1, 0, 0, 1, 0, 69, 192),
    # steps_13: mode bit 7 = a tile's last P V issued with the next tile's first QK^T (no idle tensor cores between
    # tiles), on 34 and 22.
    36: (2, 1, 0, 2, 1, 0, 197, 192), 37: (3, 1, 0, 2, 1, 0, 133),
    # steps_15, on 34 (barrier stalls 1.41 against v22's 0.79): without the ping-pong; with the lazy rescale; on the
    # persistent grid that fetches the next Q before K; a quarter of the exponentials on the FMA pipes.
    38: (2, 0, 0, 2, 1, 0, 69, 192), 39: (2, 1, 0, 2, 1, 0, 77, 192), 40: (2, 1, 0, 1, 1, 0, 69, 192),
    41: (2, 1, 0, 2, 1, 0, 85, 192),
    # steps_16, on 34: mode bit 9 = consumer 1 hands the issue turn back right after its tile's last P V, bit 10 = the
    # next tile's Q prefetched into L2 four blocks before the tile ends (both at the tile boundary); bit 8 = O
    # rescaled in the shadow of the QK^T (FA3's order); all three.
    42: (2, 1, 0, 2, 1, 0, 69 | 512 | 1024, 192), 43: (2, 1, 0, 2, 1, 0, 69 | 256, 192),
    44: (2, 1, 0, 2, 1, 0, 69 | 256 | 512 | 1024, 192),
    # steps_18, on 44: bit 11 = the softmax pinned ahead of the wait for its own P V (ptxas had hoisted that wait above
    # it), which at 192 keys fits the registers only with the row max and sum as one chain (no bit 2) or two (bit 2 +
    # bit 14); with and without bit 8. Bit 13 = the row sums from the packed P in fp16 pairs (unpinned).
    45: (2, 1, 0, 2, 1, 0, 65 | 256 | 512 | 1024 | 2048, 192), 46: (2, 1, 0, 2, 1, 0, 65 | 512 | 1024 | 2048, 192),
    47: (2, 1, 0, 2, 1, 0, 69 | 256 | 512 | 1024 | 2048 | 16384, 192),
    48: (2, 1, 0, 2, 1, 0, 69 | 512 | 1024 | 2048 | 16384, 192),
    49: (2, 1, 0, 2, 1, 0, 69 | 256 | 512 | 1024 | 8192, 192),
}
CUDA_BUILD_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC"]

_cuda_state: dict[str, Any] = {}


def _build_dir() -> Path:
    """Where built libraries are cached: TORCH_EXTENSIONS_DIR (the evaluator points it into its sandbox) or
    ~/.cache/torch_extensions, like torch's own extension builds."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                  "torch_extensions")
    return Path(root)


def _cuda_module() -> Any:
    """Build the CUDA library once (plain nvcc, cached by a hash of source and flags) and load it with ctypes;
    None if that fails. No torch C++ headers: the build takes seconds rather than a minute."""
    if "module" not in _cuda_state:
        try:
            from torch.utils.cpp_extension import CUDA_HOME

            source = cuda_source({vid: CUDA_VARIANTS[vid] for vid in BUILD_VARIANTS})
            digest = hashlib.sha256((source + " ".join(CUDA_BUILD_FLAGS)).encode()).hexdigest()[:16]
            out_dir = _build_dir() / "swizzlelab_flash_sm90a"
            lib_path = out_dir / f"fa_{digest}.so"
            if not lib_path.exists():
                out_dir.mkdir(parents=True, exist_ok=True)
                src_path = out_dir / f"fa_{digest}.cu"
                src_path.write_text(source)
                nvcc = os.path.join(CUDA_HOME, "bin", "nvcc") if CUDA_HOME else "nvcc"
                tmp = out_dir / f"fa_{digest}.{os.getpid()}.so"
                proc = subprocess.run([nvcc, *CUDA_BUILD_FLAGS, "-o", str(tmp), str(src_path)],
                                      capture_output=True, text=True, timeout=300)
                if proc.returncode != 0:
                    raise RuntimeError("nvcc failed: " + (proc.stderr or proc.stdout).strip()[-2000:])
                if "warning" in proc.stderr:  # e.g. ptxas serializing wgmmas (C7513): kept for the step logs
                    _cuda_state["warnings"] = proc.stderr.strip()[-2000:]
                os.replace(tmp, lib_path)  # atomic: a concurrent process sees the whole library or none
            lib = ctypes.CDLL(str(lib_path))
            lib.fa_fwd_c.argtypes = [ctypes.c_int64] * 6 + [ctypes.c_double, ctypes.c_int64, ctypes.c_int64]
            lib.fa_fwd_c.restype = ctypes.c_int
            lib.fa_error.restype = ctypes.c_char_p
            _cuda_state["module"] = lib
        except Exception as err:  # noqa: BLE001 - no nvcc / not sm_90: the Triton path serves
            _cuda_state["module"] = None
            _cuda_state["error"] = f"{type(err).__name__}: {err}"[:2000]
            print(f"flash_attention: CUDA path unavailable, Triton runs ({_cuda_state['error'].splitlines()[0][:200]})",
                  file=sys.stderr)
    return _cuda_state["module"]


def cuda_eligible(q: torch.Tensor) -> bool:
    """The CUDA kernel's domain: fp16 (.., seq, 128) on an sm_90 GPU, seq a multiple of 128, 32-bit row offsets."""
    if not (q.is_cuda and q.dtype == torch.float16 and q.dim() == 4 and q.shape[-1] == 128):
        return False
    batch, heads, seq, _ = q.shape
    return (seq % 128 == 0 and batch * heads * seq * 128 < 2**31
            and torch.cuda.get_device_capability(q.device) == (9, 0))


def flash_attention_cuda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, sm_scale: float,
                         variant: int = 0) -> torch.Tensor:
    """Launch the sm_90a kernel (one of CUDA_VARIANTS) on contiguous fp16 (batch, heads, seq, 128) tensors."""
    _check_tensors(q, k, v, out)
    if not cuda_eligible(q):
        raise ValueError("flash_attention_cuda needs fp16 (batch, heads, seq % 128 == 0, 128) tensors on an sm_90 GPU")
    module = _cuda_module()
    if module is None:
        raise RuntimeError(f"flash_attention: the CUDA module did not build ({_cuda_state.get('error')})")
    batch, heads, seq, _ = q.shape
    status = module.fa_fwd_c(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), batch * heads, seq,
                             sm_scale * LOG2_E, torch.cuda.current_stream(q.device).cuda_stream, variant)
    if status != 0:
        raise RuntimeError(module.fa_error().decode(errors="replace"))
    return out


def cuda_self_check(variant: int, device: torch.device) -> str | None:
    """Run one variant on small seeded problems against an fp32 reference: None if it agrees, else why not. The
    second shape has more query tiles than an H100 has SMs, so persistent CTAs walk two tiles (the merged step)."""
    for shape in ((2, 3, 384, 128), (1, 16, 2048, 128)):
        gen = torch.Generator(device=device).manual_seed(1234 + variant + shape[2])
        q, k, v = (torch.randn(shape, generator=gen, device=device, dtype=torch.float16) for _ in range(3))
        out = torch.full(shape, float("nan"), device=device, dtype=torch.float16)
        scale = 128 ** -0.5
        try:
            flash_attention_cuda(q, k, v, out, scale, variant)
            torch.cuda.synchronize(device)
        except Exception as err:  # noqa: BLE001 - reported and the variant skipped
            return f"{type(err).__name__}: {err}".splitlines()[0][:300]
        ref = torch.softmax((q.float() @ k.float().transpose(-1, -2)) * scale, dim=-1) @ v.float()
        err = (out.float() - ref).abs().max().item()
        if not err < 2e-2:  # NaN fails too
            return f"max abs error {err:.3g} against the fp32 reference at shape {shape}"
    return None

@dataclass(frozen=True)
class CudaConfig:
    """One variant of the sm_90a kernel (a key of CUDA_VARIANTS)."""

    variant: int = 0


# The CUDA variants the GPU path self-checks, fastest first by paired (interleaved) timing on the H100
# (git 305b79c:benchmarks/submissions_h100/steps_18.json: 49 is 1.35% faster than 44; steps_16.json: 44 is 0.7% faster than 34;
# steps_12.json: 34 is 1.3% faster than 22, 31 0.9%; steps_7.json: 22 is 2.0% faster than 11, 15 0.8%); in the ranked
# path 34 and 22 are alike within the run-to-run spread (ranked_runs.json). The first that passes its self-check runs.
# A fixed order rather than a do_bench autotune: the differences (1-2%) are smaller than what an unpaired first-call
# timing can tell apart while the card's clock drifts.
CUDA_PREFERENCE = (49, 44, 34, 31, 22, 15)
# What the submission builds (the step scripts set this to every variant of CUDA_VARIANTS).
BUILD_VARIANTS: tuple[int, ...] = CUDA_PREFERENCE

_best: dict[tuple[Any, ...], FlashConfig | CudaConfig] = {}
# Each autotune: shape, device and every candidate's do_bench median in ms (None: did not run), for the logs.
AUTOTUNE_LOG: list[dict[str, Any]] = []
# Below this many score elements (batch*heads*seq*seq) a launch takes well under a millisecond: the first
# candidate runs without autotuning, so small test shapes cost one compile each instead of five.
AUTOTUNE_MIN_SCORES = 1 << 30


def _run(cfg: FlashConfig | CudaConfig, data: dict[str, Any]) -> torch.Tensor:
    if isinstance(cfg, CudaConfig):
        return flash_attention_cuda(data["q"], data["k"], data["v"], data["out"], data["sm_scale"], cfg.variant)
    return flash_attention(data["q"], data["k"], data["v"], data["out"], data["sm_scale"], cfg)


def _cuda_candidates(q: torch.Tensor, entry: dict[str, Any]) -> list[CudaConfig]:
    """The CUDA variants that built and pass the self-check on this GPU (each checked once per process)."""
    if not cuda_eligible(q) or _cuda_module() is None:
        entry["cuda"] = _cuda_state.get("error", "not eligible")
        return []
    checks = _cuda_state.setdefault("checks", {})
    passed = []
    for vid in CUDA_PREFERENCE:
        if vid not in checks:
            checks[vid] = cuda_self_check(vid, q.device)
        if checks[vid] is None:
            passed.append(CudaConfig(vid))
            break  # the first that passes runs: no need to check the rest
    entry["cuda_checks"] = {str(k): v or "ok" for k, v in checks.items()}
    return passed


def _pick_config(data: dict[str, Any]) -> FlashConfig | CudaConfig:
    """On an sm_90 GPU the first CUDA variant of CUDA_PREFERENCE that passes its self-check; elsewhere time each
    Triton candidate once per shape (triton.testing.do_bench, median) and keep the fastest; a candidate that fails
    to compile (e.g. out of shared memory on another GPU) is skipped."""
    q = data["q"]
    if not q.is_cuda:
        return CPU_CONFIG
    batch, heads, seq, _ = q.shape
    key = (tuple(q.shape), torch.cuda.get_device_name(q.device))
    if key in _best:
        return _best[key]
    entry: dict[str, Any] = {"shape": list(q.shape), "device": key[1], "candidates": []}
    cuda = _cuda_candidates(q, entry)
    if cuda:
        # CUDA_PREFERENCE is ordered by paired timing; the Triton kernels are 15-20% slower there (steps_3-9.json).
        _best[key] = cuda[0]
        entry.update(method="the first of CUDA_PREFERENCE that passes its self-check",
                     chosen={"kind": "CudaConfig", "variant": cuda[0].variant})
        AUTOTUNE_LOG.append(entry)
        return _best[key]
    entry["method"] = "triton.testing.do_bench median (warm L2, no flush)"
    if batch * heads * seq * seq < AUTOTUNE_MIN_SCORES:
        _best[key] = GPU_CANDIDATES[0]
        return _best[key]
    candidates: list[FlashConfig | CudaConfig] = list(GPU_CANDIDATES)
    timed = []
    for cfg in candidates:
        try:
            ms = triton.testing.do_bench(lambda cfg=cfg: _run(cfg, data), warmup=25, rep=100, return_mode="median")
        except Exception as err:  # noqa: BLE001 - a candidate this GPU cannot run is simply not chosen
            entry["candidates"].append({"config": {"kind": type(cfg).__name__, **cfg.__dict__}, "ms": None,
                                        "error": str(err).splitlines()[0][:200]})
            continue
        entry["candidates"].append({"config": {"kind": type(cfg).__name__, **cfg.__dict__}, "ms": ms})
        timed.append((ms, cfg))
    if not timed:
        raise RuntimeError("flash_attention: no candidate configuration ran on this GPU")
    _best[key] = min(timed, key=lambda item: item[0])[1]
    entry["chosen"] = {"kind": type(_best[key]).__name__, **_best[key].__dict__}
    AUTOTUNE_LOG.append(entry)
    return _best[key]


def custom_kernel(data: dict[str, Any]) -> torch.Tensor:
    """Attention of data["q"], data["k"], data["v"] with data["sm_scale"], written into data["out"]."""
    return _run(_pick_config(data), data)
