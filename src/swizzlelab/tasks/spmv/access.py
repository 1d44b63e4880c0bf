"""Analytic access model of `spmv`: per row, the row pointers, then per BLOCK nonzeros col_idx, values, x[col].

Exact (equals the interpreter trace of kernel.py); needs the matrix: the case's seed, or row_ptr and col_idx.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.tasks.spmv import kernel, reference
from swizzlelab.trace import AccessTrace, TraceBuilder


def access_model(
    *,
    rows: int,
    cols: int,
    avg_nnz: float = 0,
    communities: int = 1,
    seed: int | None = None,
    row_ptr: Any = None,
    col_idx: Any = None,
    config: Any = None,
    **_: Any,
) -> AccessTrace:
    """Row r: step 0 reads row_ptr[r], row_ptr[r+1]; step j reads col_idx and values of nonzeros
    start+j*B : +B and gathers x at their columns; y[r] is written in the last step (step 0 for empty rows)."""
    cfg = config or kernel.GPU_CONFIG  # predictions are for the benchmark (GPU) configuration
    if row_ptr is None or col_idx is None:
        if seed is None:
            raise UserError("spmv access model needs the matrix: pass seed=case['seed'] (or row_ptr and col_idx)")
        data = reference.generate_input(int(seed), rows=rows, cols=cols, avg_nnz=avg_nnz, communities=communities)
        row_ptr, col_idx = data["row_ptr"], data["col_idx"]
        del data  # values, x and the CSR view are not needed: free them before the trace is built
    ptr = _as_numpy(row_ptr)
    col = _as_numpy(col_idx)
    if ptr.size != rows + 1 or ptr[0] != 0 or ptr[-1] != col.size or np.any(np.diff(ptr) < 0):
        raise UserError(f"spmv access model: row_ptr must be {rows + 1} non-decreasing offsets from 0 to nnz")
    index_bytes = _as_itemsize(row_ptr)
    block = cfg.block
    builder = TraceBuilder((rows,))
    ptr_t = builder.tensor("row_ptr", (rows + 1,), index_bytes)
    col_t = builder.tensor("col_idx", (max(col.size, 1),), _as_itemsize(col_idx))
    val_t = builder.tensor("values", (max(col.size, 1),), 4)
    x_t = builder.tensor("x_ptr", (cols,), 4)
    y_t = builder.tensor("y_ptr", (rows,), 4)

    row = np.arange(rows, dtype=np.int64)
    lengths = np.diff(ptr)
    n_chunks = -(-lengths // block)
    builder.span(ptr_t, row, 0, row, row + 1)
    builder.span(ptr_t, row, 0, row + 1, row + 2)
    chunk_row = np.repeat(row, n_chunks)
    chunk_first = np.arange(chunk_row.size, dtype=np.int64) - np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks)
    chunk_start = ptr[:-1][chunk_row] + chunk_first * block
    chunk_stop = np.minimum(chunk_start + block, ptr[1:][chunk_row])
    builder.span(col_t, chunk_row, chunk_first, chunk_start, chunk_stop)
    builder.span(val_t, chunk_row, chunk_first, chunk_start, chunk_stop)
    nnz_row = np.repeat(row, lengths)
    nnz_step = (np.arange(col.size, dtype=np.int64) - ptr[:-1][nnz_row]) // block
    builder.gather(x_t, nnz_row, nnz_step, col)
    builder.span(y_t, row, np.maximum(n_chunks - 1, 0), row, row + 1, write=True)
    meta = {"task": "spmv", "sizes": f"rows={rows} cols={cols} nnz={col.size}", "config": repr(cfg)}
    return builder.build(meta)


def _as_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.int64).reshape(-1)


def _as_itemsize(values: Any) -> int:
    if hasattr(values, "element_size"):
        return int(values.element_size())
    return int(np.asarray(values).dtype.itemsize)


def line_accesses(*, rows: int, cols: int, avg_nnz: float = 0, config: Any = None, **_: Any) -> int:
    """An estimate of access_model's line accesses from the sizes alone: per row two row_ptr reads and the y
    write; per nonzero one x gather; col_idx and values read by blocks (up to two lines each)."""
    cfg = config or kernel.GPU_CONFIG
    nnz = int(rows * max(avg_nnz, 0))
    return 3 * rows + nnz + 4 * -(-nnz // cfg.block)
