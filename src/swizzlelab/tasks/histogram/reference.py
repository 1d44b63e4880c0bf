"""Reference side of `histogram`: seeded 8-bit inputs, the trusted counts, the check and the torch baseline.

Each channel gets its own random mean and spread, so counts are uneven (real data is not uniform noise).
"""

from __future__ import annotations

from typing import Any

import torch

from swizzlelab.runtime import device
from swizzlelab.tasks.checking import CheckResult, compare, tolerance_for

N_BINS = 256
# Generate in bands of rows so the float temporaries of the 1M x 512 benchmark stay small.
ROWS_PER_BAND = 65536


def generate_input(seed: int, rows: int, channels: int) -> dict[str, Any]:
    """x: uint8 [rows, channels] on the kernel device; out: int32 [channels, 256] preallocated (-1-filled)."""
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(seed)
    mean = torch.rand(channels, generator=gen, device=dev) * 255
    spread = 4 + torch.rand(channels, generator=gen, device=dev) * 60
    x = torch.empty((rows, channels), dtype=torch.uint8, device=dev)
    for start in range(0, rows, ROWS_PER_BAND):
        stop = min(rows, start + ROWS_PER_BAND)
        noise = torch.randn((stop - start, channels), generator=gen, device=dev)
        x[start:stop] = (mean + spread * noise).round_().clamp_(0, N_BINS - 1).to(torch.uint8)
    out = torch.full((channels, N_BINS), -1, dtype=torch.int32, device=dev)
    return {"x": x, "out": out}


def ref_kernel(data: dict[str, Any]) -> torch.Tensor:
    """Counts by scatter-adding ones per channel, one band of channels at a time."""
    x = data["x"]
    rows, channels = x.shape
    counts = torch.zeros((channels, N_BINS), dtype=torch.int64, device=x.device)
    band = max(1, (1 << 26) // max(rows, 1))  # keep the int64 index temporaries near 512 MiB
    for start in range(0, channels, band):
        values = x[:, start : start + band].t().long()
        counts[start : start + band].scatter_add_(1, values, torch.ones_like(values))
    return counts.to(torch.int32)


def check(data: dict[str, Any], output: Any) -> CheckResult:
    """Exact comparison of the counts (tolerance 0 in task.yml)."""
    return compare(output, ref_kernel(data), tolerance_for(__file__))


def baseline(data: dict[str, Any]) -> torch.Tensor:
    """torch.bincount over channel * 256 + value, reshaped to [channels, 256], copied into data['out']."""
    x = data["x"]
    rows, channels = x.shape
    keys = x.to(torch.int32) + torch.arange(channels, dtype=torch.int32, device=x.device) * N_BINS
    counts = torch.bincount(keys.view(-1), minlength=channels * N_BINS)
    return data["out"].copy_(counts.view(channels, N_BINS))
