"""Inputs, fp32 reference, correctness check and library baseline (torch SDPA) of the lean_attention task.

Decode attention: one fp16 query per (batch, head) over a per-batch-element KV cache of seeded random length.
"""

from __future__ import annotations

from typing import Any

import torch

from swizzlelab.errors import UserError
from swizzlelab.runtime import device
from swizzlelab.tasks.checking import CheckResult, compare, tolerance_for

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)


def validate_sizes(batch: int, heads: int, kv_heads: int, head_dim: int, min_ctx: int, max_ctx: int, n_programs: int) -> None:
    """Raise UserError naming the first size the kernel cannot run."""
    for name, value in (("batch", batch), ("heads", heads), ("kv_heads", kv_heads), ("min_ctx", min_ctx), ("n_programs", n_programs)):
        if int(value) < 1:
            raise UserError(f"lean_attention: {name}={value} must be >= 1")
    if heads % kv_heads:
        raise UserError(f"lean_attention: heads={heads} must be a multiple of kv_heads={kv_heads}")
    if max_ctx < min_ctx:
        raise UserError(f"lean_attention: max_ctx={max_ctx} is below min_ctx={min_ctx}; swap them")
    if int(head_dim) not in SUPPORTED_HEAD_DIMS:
        raise UserError(f"lean_attention: head_dim={head_dim} is not supported; use one of {SUPPORTED_HEAD_DIMS}")


def generate_input(
    seed: int,
    *,
    batch: int,
    heads: int,
    max_ctx: int,
    n_programs: int,
    kv_heads: int | None = None,
    min_ctx: int = 1,
    head_dim: int = 128,
    **_: Any,
) -> dict[str, Any]:
    """Seeded q (batch, heads, dim), KV cache (batch, kv_heads, max_ctx, dim), ctx lengths uniform in [min, max].

    Cache rows past a sequence's length hold random values too, so a kernel that reads them gives a wrong answer.
    """
    kv_heads = int(kv_heads or heads)
    validate_sizes(batch, heads, kv_heads, head_dim, min_ctx, max_ctx, n_programs)
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    ctx_gen = torch.Generator().manual_seed(int(seed))
    ctx_lens = torch.randint(int(min_ctx), int(max_ctx) + 1, (int(batch),), generator=ctx_gen, dtype=torch.int32)
    cache_shape = (int(batch), kv_heads, int(max_ctx), int(head_dim))
    return {
        "q": torch.randn((batch, heads, head_dim), generator=gen, device=dev, dtype=torch.float16),
        "k": torch.randn(cache_shape, generator=gen, device=dev, dtype=torch.float16),
        "v": torch.randn(cache_shape, generator=gen, device=dev, dtype=torch.float16),
        "ctx_lens": ctx_lens.to(dev),
        # Host copy, so the reference and the baseline need no device->host sync.
        "ctx_lens_list": [int(n) for n in ctx_lens.tolist()],
        "n_programs": int(n_programs),
        "sm_scale": float(head_dim) ** -0.5,
        # NaN poison: an element the kernel does not write fails the check.
        "out": torch.full((batch, heads, head_dim), float("nan"), device=dev, dtype=torch.float16),
    }


def ref_kernel(data: dict[str, Any]) -> torch.Tensor:
    """Per batch element softmax(q k[:ctx]^T * sm_scale) v[:ctx] in fp32; returns fp32 (batch, heads, dim)."""
    q, k, v = data["q"], data["k"], data["v"]
    batch, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    out = torch.empty((batch, heads, head_dim), device=q.device, dtype=torch.float32)
    for b, ctx_len in enumerate(data["ctx_lens_list"]):
        # Query heads h*group .. h*group+group-1 share KV head h.
        q_b = q[b].float().reshape(kv_heads, group, head_dim)
        k_b = k[b, :, :ctx_len].float()
        v_b = v[b, :, :ctx_len].float()
        probs = torch.softmax(torch.bmm(q_b, k_b.transpose(1, 2)) * data["sm_scale"], dim=-1)
        out[b] = torch.bmm(probs, v_b).reshape(heads, head_dim)
    return out


def check(data: dict[str, Any], output: Any) -> CheckResult:
    """Compare an fp16 output with the fp32 reference rounded to fp16, within task.yml's tolerance."""
    return compare(output, ref_kernel(data).to(torch.float16), tolerance_for(__file__))


def baseline(data: dict[str, Any]) -> torch.Tensor:
    """The library implementation: torch SDPA per batch element on its valid cache prefix (GQA when needed)."""
    q, k, v = data["q"], data["k"], data["v"]
    gqa = k.shape[1] != q.shape[1]
    rows = []
    for b, ctx_len in enumerate(data["ctx_lens_list"]):
        rows.append(
            torch.nn.functional.scaled_dot_product_attention(
                q[b : b + 1, :, None, :], k[b : b + 1, :, :ctx_len], v[b : b + 1, :, :ctx_len],
                scale=data["sm_scale"], enable_gqa=gqa,
            )
        )
    out = data["out"]
    torch.cat(rows, dim=0, out=out.view(out.shape[0], out.shape[1], 1, out.shape[2]))
    return out
