"""Reference side of `matmul`: seeded fp16 inputs, an fp64 reference, the check and the torch baseline.

Inputs are normal with variance 1/sqrt(K) each, so every output is ~N(0, 1) whatever K is (no fp16 overflow).
"""

from __future__ import annotations

from typing import Any

import torch

from swizzlelab.runtime import device
from swizzlelab.tasks.checking import CheckResult, compare, tolerance_for


def generate_input(seed: int, m: int, n: int, k: int) -> dict[str, Any]:
    """a: [m, k], b: [k, n] fp16 on the kernel device; out: [m, n] fp16 preallocated (NaN-filled)."""
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(seed)
    scale = float(k) ** -0.25
    a = (torch.randn((m, k), generator=gen, device=dev) * scale).to(torch.float16)
    b = (torch.randn((k, n), generator=gen, device=dev) * scale).to(torch.float16)
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device=dev)
    return {"a": a, "b": b, "out": out}


def ref_kernel(data: dict[str, Any]) -> torch.Tensor:
    """A @ B accumulated in fp64 (exact products of fp16 values), rounded once to fp16."""
    return (data["a"].double() @ data["b"].double()).to(torch.float16)


def check(data: dict[str, Any], output: Any) -> CheckResult:
    """Element-wise comparison with the fp64 reference within task.yml's tolerance."""
    return compare(output, ref_kernel(data), tolerance_for(__file__))


def baseline(data: dict[str, Any]) -> torch.Tensor:
    """torch.matmul (cuBLAS on the GPU) writing into the preallocated output."""
    return torch.matmul(data["a"], data["b"], out=data["out"])
