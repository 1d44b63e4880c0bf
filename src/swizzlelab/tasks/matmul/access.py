"""Analytic access model of `matmul`: per tile, K steps reading an A row block and a B column block, then C.

Exact: equals the interpreter trace of kernel.py line for line, edge tiles (rows/cols wrapped mod M/N) included.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swizzlelab.tasks.matmul import kernel
from swizzlelab.trace import AccessTrace, TraceBuilder

ELEM_BYTES = 2  # fp16 A, B and C


def access_model(*, m: int, n: int, k: int, config: Any = None, **_: Any) -> AccessTrace:
    """Tile (pid_m, pid_n), step s reads A[rows, s*BK:+BK] and B[s*BK:+BK, cols]; the last step writes C.

    Rows of edge tiles wrap modulo M (cols modulo N) as in the kernel; K is masked, C's edges are masked.
    """
    cfg = config or kernel.GPU_CONFIG  # predictions are for the benchmark (GPU) configuration
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    grid = kernel.tile_grid(m=m, n=n, config=cfg)
    n_steps = -(-k // bk)
    builder = TraceBuilder(grid)
    a = builder.tensor("a_ptr", (m, k), ELEM_BYTES)
    b = builder.tensor("b_ptr", (k, n), ELEM_BYTES)
    c = builder.tensor("c_ptr", (m, n), ELEM_BYTES)
    tile = np.arange(grid[0] * grid[1], dtype=np.int64)
    pid_m, pid_n = tile // grid[1], tile % grid[1]
    step = np.arange(n_steps, dtype=np.int64)
    k0 = step * bk

    a_edge = pid_m * bm + bm > m
    full = tile[~a_edge][:, None]
    row0 = (pid_m[~a_edge] * bm)[:, None]
    builder.block(a, full, step[None, :], (row0, row0 + bm), (k0, k0 + bk))
    _wrapped_gather(builder, a, tile[a_edge], pid_m[a_edge] * bm, bm, m, step, bk, k, rows_wrap=True)

    b_edge = pid_n * bn + bn > n
    full = tile[~b_edge][:, None]
    col0 = (pid_n[~b_edge] * bn)[:, None]
    builder.block(b, full, step[None, :], (k0, k0 + bk), (col0, col0 + bn))
    _wrapped_gather(builder, b, tile[b_edge], pid_n[b_edge] * bn, bn, n, step, bk, k, rows_wrap=False)

    builder.block(c, tile, n_steps - 1, (pid_m * bm, pid_m * bm + bm), (pid_n * bn, pid_n * bn + bn), write=True)
    meta = {"task": "matmul", "sizes": f"m={m} n={n} k={k}", "config": repr(cfg)}
    return builder.build(meta)


def _wrapped_gather(
    builder: TraceBuilder, tensor: Any, tiles: np.ndarray, start: np.ndarray, block: int, size: int,
    step: np.ndarray, bk: int, k: int, rows_wrap: bool,
) -> None:
    """Edge tiles: the wrapped index set is not a rectangle, so list its elements (one op per tile and step)."""
    if tiles.size == 0:
        return
    wrapped = (start[:, None] + np.arange(block)[None, :]) % size  # (tiles, block)
    ks = step[:, None] * bk + np.arange(bk)[None, :]  # (steps, bk)
    ks_ok = ks < k
    if rows_wrap:  # A[wrapped, ks]: index = row * k + col
        index = wrapped[:, None, :, None] * k + ks[None, :, None, :]
        valid = np.broadcast_to(ks_ok[None, :, None, :], index.shape)
    else:  # B[ks, wrapped]: index = row * n + col
        index = ks[None, :, :, None] * size + wrapped[:, None, None, :]
        valid = np.broadcast_to(ks_ok[None, :, :, None], index.shape)
    tile_b = np.broadcast_to(tiles[:, None, None, None], index.shape)
    step_b = np.broadcast_to(step[None, :, None, None], index.shape)
    builder.gather(tensor, tile_b[valid], step_b[valid], index[valid])


def line_accesses(*, m: int, n: int, k: int, config: Any = None, **_: Any) -> int:
    """How many line accesses access_model builds (aligned rows; an estimate the scenario checks memory with)."""
    cfg = config or kernel.GPU_CONFIG
    rows, cols = kernel.tile_grid(m=m, n=n, config=cfg)
    per_step = cfg.block_m * -(-cfg.block_k * ELEM_BYTES // 128) + cfg.block_k * -(-cfg.block_n * ELEM_BYTES // 128)
    write = cfg.block_m * -(-cfg.block_n * ELEM_BYTES // 128)
    return rows * cols * (-(-k // cfg.block_k) * per_step + write)
