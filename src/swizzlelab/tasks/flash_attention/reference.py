"""Inputs, fp32 reference, correctness check and library baseline (torch SDPA) of the flash_attention task.

Non-causal forward attention softmax(q k^T * sm_scale) v on fp16 tensors of shape (batch, heads, seq, head_dim).
"""

from __future__ import annotations

from typing import Any

import torch

from swizzlelab.errors import UserError
from swizzlelab.runtime import device
from swizzlelab.tasks.checking import CheckResult, compare, tolerance_for

# Score matrices of the fp32 reference are built a few heads at a time to bound memory (bytes per chunk).
REFERENCE_CHUNK_BYTES = 1 << 30
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)


def validate_sizes(batch: int, heads: int, seq: int, head_dim: int) -> None:
    """Raise UserError naming the first size the kernel cannot run."""
    for name, value in (("batch", batch), ("heads", heads), ("seq", seq)):
        if int(value) < 1:
            raise UserError(f"flash_attention: {name}={value} must be >= 1")
    if int(head_dim) not in SUPPORTED_HEAD_DIMS:
        raise UserError(f"flash_attention: head_dim={head_dim} is not supported; use one of {SUPPORTED_HEAD_DIMS}")


def generate_input(seed: int, *, batch: int, heads: int, seq: int, head_dim: int = 128, **_: Any) -> dict[str, Any]:
    """Seeded standard-normal fp16 q, k, v on the run device and an uninitialised fp16 output buffer."""
    validate_sizes(batch, heads, seq, head_dim)
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    shape = (int(batch), int(heads), int(seq), int(head_dim))
    q, k, v = (torch.randn(shape, generator=gen, device=dev, dtype=torch.float16) for _ in range(3))
    return {
        "q": q,
        "k": k,
        "v": v,
        "sm_scale": float(head_dim) ** -0.5,
        # NaN poison: an element the kernel does not write fails the check.
        "out": torch.full(shape, float("nan"), device=dev, dtype=torch.float16),
    }


def ref_kernel(data: dict[str, Any]) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v computed in fp32 from the fp16 inputs; returns fp32 (batch, heads, seq, dim)."""
    q, k, v = data["q"], data["k"], data["v"]
    batch, heads, seq, head_dim = q.shape
    q3, k3, v3 = (t.reshape(batch * heads, seq, head_dim) for t in (q, k, v))
    out = torch.empty((batch * heads, seq, head_dim), device=q.device, dtype=torch.float32)
    heads_per_chunk = max(1, REFERENCE_CHUNK_BYTES // (seq * seq * 4))
    for first in range(0, batch * heads, heads_per_chunk):
        part = slice(first, first + heads_per_chunk)
        scores = torch.bmm(q3[part].float(), k3[part].float().transpose(1, 2)) * data["sm_scale"]
        out[part] = torch.bmm(torch.softmax(scores, dim=-1), v3[part].float())
    return out.reshape(batch, heads, seq, head_dim)


def check(data: dict[str, Any], output: Any) -> CheckResult:
    """Compare an fp16 output with the fp32 reference rounded to fp16, within task.yml's tolerance."""
    return compare(output, ref_kernel(data).to(torch.float16), tolerance_for(__file__))


def baseline(data: dict[str, Any]) -> torch.Tensor:
    """The library implementation: torch SDPA (flash / cuDNN / efficient backend as torch picks it).

    SDPA has no `out=`, so this returns its own tensor rather than paying for a copy into data["out"].
    """
    return torch.nn.functional.scaled_dot_product_attention(data["q"], data["k"], data["v"], scale=data["sm_scale"])


def baseline_cudnn(data: dict[str, Any]) -> torch.Tensor:
    """SDPA restricted to its cuDNN backend (fails where cuDNN attention is unavailable, e.g. on the CPU)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(data["q"], data["k"], data["v"], scale=data["sm_scale"])


# Library rows a ranked run times besides `baseline`: where a submission stands against the fastest library.
EXTRA_BASELINES = {"cudnn": ("SDPA, cuDNN backend", baseline_cudnn)}
