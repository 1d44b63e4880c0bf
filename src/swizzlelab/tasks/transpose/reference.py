"""Reference side of `transpose`: seeded inputs, the trusted output, the check and the torch baseline.

Inputs are standard-normal values in the case's dtype; the output buffer starts as NaN so unwritten tiles fail.
"""

from __future__ import annotations

from typing import Any

import torch

from swizzlelab.errors import UserError
from swizzlelab.runtime import device
from swizzlelab.tasks.checking import CheckResult, compare, tolerance_for

DTYPES = {"float16": torch.float16, "float32": torch.float32}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a case's dtype name; UserError for names this task does not support."""
    if name not in DTYPES:
        raise UserError(f"transpose: dtype {name!r} is not supported; use one of {', '.join(DTYPES)}")
    return DTYPES[name]


def generate_input(seed: int, m: int, n: int, dtype: str = "float32", tile_m: int | None = None,
                   tile_n: int | None = None) -> dict[str, Any]:
    """x: [m, n] random normal on the kernel device; out: [n, m] preallocated (NaN-filled); a case's tile_m and
    tile_n (the kernel's tile shape) travel with the data."""
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(seed)
    x = torch.randn((m, n), generator=gen, device=dev, dtype=torch.float32).to(torch_dtype(dtype))
    out = torch.full((n, m), float("nan"), dtype=x.dtype, device=dev)
    data = {"x": x, "out": out}
    for name, value in (("tile_m", tile_m), ("tile_n", tile_n)):
        if value is not None:
            data[name] = int(value)
    return data


def ref_kernel(data: dict[str, Any]) -> torch.Tensor:
    """x.T as a fresh contiguous tensor (exact: a transpose only moves values)."""
    return data["x"].t().contiguous()


def check(data: dict[str, Any], output: Any) -> CheckResult:
    """Bitwise-equal comparison (tolerance 0 in task.yml) with the reference."""
    return compare(output, ref_kernel(data), tolerance_for(__file__))


def baseline(data: dict[str, Any]) -> torch.Tensor:
    """torch's own strided copy kernel writing x.T into the preallocated output."""
    return data["out"].copy_(data["x"].t())
