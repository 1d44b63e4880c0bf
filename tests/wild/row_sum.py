"""Row sums of a 2-D fp32 tensor: each program reduces BLOCK_ROWS rows (a 1-D grid). Kept unmodified for
swizzlelab's tests.
"""

import torch

import triton
import triton.language as tl

DEVICE = triton.runtime.driver.active.get_active_torch_device()


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_row,
                   BLOCK_ROWS: tl.constexpr = 4, BLOCK_COLS: tl.constexpr = 256):
    pid = tl.program_id(axis=0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    acc = tl.zeros((BLOCK_ROWS,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_row + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(x, axis=1)
    tl.store(out_ptr + rows, acc, mask=rows < n_rows)


def row_sum(x):
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(n_rows, meta["BLOCK_ROWS"]), )
    row_sum_kernel[grid](x, out, n_rows, n_cols, x.stride(0))
    return out


if __name__ == "__main__":
    x = torch.randn((1000, 3000), device=DEVICE)
    print(torch.allclose(row_sum(x), x.sum(1), atol=1e-3, rtol=1e-4))
