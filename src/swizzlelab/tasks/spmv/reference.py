"""Reference side of `spmv`: a seeded clustered CSR matrix, an fp64 reference, the check, torch.sparse baseline.

See task.yml for the matrix structure (lognormal row lengths, columns clustered by community).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from swizzlelab.errors import UserError
from swizzlelab.runtime import device
from swizzlelab.tasks.checking import CheckResult, compare, tolerance_for

ROW_LENGTH_SIGMA = 1.0


def _row_lengths(gen: torch.Generator, rows: int, avg_nnz: float, max_len: int, dev: str) -> torch.Tensor:
    """Lognormal row lengths whose sum is exactly round(rows * avg_nnz) (within what max_len allows), whatever
    the seed: every input of a case has the same array sizes, so an evaluator's buffers fit every seed and each
    timed call does the same amount of work."""
    # exp(N(mu, s)) has mean exp(mu + s^2 / 2): choose mu so the mean row length is avg_nnz.
    mu = math.log(avg_nnz) - ROW_LENGTH_SIGMA**2 / 2
    draw = torch.exp(mu + ROW_LENGTH_SIGMA * torch.randn(rows, generator=gen, device=dev))
    lengths = draw.round_().clamp_(0, max_len).to(torch.int64)
    target = min(int(round(rows * avg_nnz)), rows * max_len)
    for _ in range(64):  # each pass moves min(|excess|, eligible rows) by one; a few passes at most in practice
        excess = int(lengths.sum()) - target
        if excess == 0:
            break
        step = -1 if excess > 0 else 1
        # Rows that stay non-empty and under max_len: the empty rows the draw made stay empty (kernels must write
        # them), so the adjustment only moves lengths of rows that have entries.
        eligible = torch.nonzero(lengths > 1 if step < 0 else (lengths > 0) & (lengths < max_len)).flatten()
        if eligible.numel() == 0:
            eligible = torch.nonzero(lengths > 0 if step < 0 else lengths < max_len).flatten()
        if eligible.numel() == 0:
            break
        pick = eligible[torch.randperm(eligible.numel(), generator=gen, device=dev)[: min(abs(excess), eligible.numel())]]
        lengths[pick] += step
    return lengths


def generate_input(seed: int, rows: int, cols: int, avg_nnz: float, communities: int) -> dict[str, Any]:
    """CSR arrays (row_ptr, col_idx, values), x, a torch CSR view of A, and out: y [rows] (NaN-filled)."""
    if communities < 1 or cols < communities:
        raise UserError(f"spmv: communities={communities} must be between 1 and cols={cols}")
    dev = device()
    gen = torch.Generator(device=dev).manual_seed(seed)
    width = cols // communities  # the last community also takes the remainder columns
    lengths = _row_lengths(gen, rows, float(avg_nnz), min(width, max(1, 64 * int(avg_nnz))), dev)
    row_of_nnz = torch.repeat_interleave(torch.arange(rows, device=dev), lengths)
    community = row_of_nnz % communities
    block_start = community * width
    block_width = torch.where(community == communities - 1, cols - block_start, torch.full_like(block_start, width))
    offset = (torch.rand(row_of_nnz.numel(), generator=gen, device=dev, dtype=torch.float64) * block_width).long()
    columns = block_start + torch.minimum(offset, block_width - 1)
    # Sort columns within each row (as CSR producers do); row-major key keeps rows in order.
    columns = (row_of_nnz * cols + columns).sort().values - row_of_nnz * cols
    nnz = columns.numel()
    index_dtype = torch.int32 if max(nnz, cols) < 2**31 else torch.int64
    row_ptr = torch.zeros(rows + 1, dtype=torch.int64, device=dev)
    row_ptr[1:] = torch.cumsum(lengths, 0)
    row_ptr = row_ptr.to(index_dtype)
    col_idx = columns.to(index_dtype)
    values = torch.randn(nnz, generator=gen, device=dev)
    x = torch.randn(cols, generator=gen, device=dev)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        csr = torch.sparse_csr_tensor(row_ptr, col_idx, values, size=(rows, cols), check_invariants=False)
    out = torch.full((rows,), float("nan"), dtype=torch.float32, device=dev)
    return {"row_ptr": row_ptr, "col_idx": col_idx, "values": values, "x": x, "csr": csr, "out": out}


def ref_kernel(data: dict[str, Any]) -> torch.Tensor:
    """Row sums of values * x[col] accumulated in fp64, rounded once to fp32."""
    row_ptr = data["row_ptr"].long()
    rows = row_ptr.numel() - 1
    row_of_nnz = torch.repeat_interleave(torch.arange(rows, device=row_ptr.device), row_ptr.diff())
    products = data["values"].double() * data["x"].double()[data["col_idx"].long()]
    y = torch.zeros(rows, dtype=torch.float64, device=row_ptr.device).index_add_(0, row_of_nnz, products)
    return y.to(torch.float32)


def check(data: dict[str, Any], output: Any) -> CheckResult:
    """Element-wise comparison with the fp64 reference within task.yml's tolerance."""
    return compare(output, ref_kernel(data), tolerance_for(__file__))


def baseline(data: dict[str, Any]) -> torch.Tensor:
    """torch.sparse CSR matrix-vector product (cuSPARSE on the GPU), copied into data['out']."""
    return data["out"].copy_(torch.mv(data["csr"], data["x"]))
