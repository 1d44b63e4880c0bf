"""Analytic access model of `transpose`: per tile, one step that reads a block of x and writes its mirror in out.

Exact: equals the interpreter trace of kernel.py line for line (tests/test_access_models.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.tasks.transpose import kernel
from swizzlelab.trace import AccessTrace, TraceBuilder

ELEM_BYTES = {"float16": 2, "float32": 4}


def access_model(*, m: int, n: int, dtype: str = "float32", config: Any = None, tile_m: int | None = None,
                 tile_n: int | None = None, **_: Any) -> AccessTrace:
    """Tile (pid_m, pid_n) reads x[pid_m*BM:+BM, pid_n*BN:+BN] then writes out[pid_n*BN:+BN, pid_m*BM:+BM]."""
    # Predictions are for the benchmark (GPU) configuration, with the case's tile shape where it names one.
    cfg = kernel.with_tile(config or kernel.GPU_CONFIG, tile_m, tile_n)
    elem_bytes = _elem_bytes(dtype)
    grid = kernel.tile_grid(m=m, n=n, config=cfg)
    builder = TraceBuilder(grid)
    x = builder.tensor("input_ptr", (m, n), elem_bytes)
    out = builder.tensor("output_ptr", (n, m), elem_bytes)
    tile = np.arange(grid[0] * grid[1], dtype=np.int64)
    row0 = (tile // grid[1]) * cfg.block_m
    col0 = (tile % grid[1]) * cfg.block_n
    builder.block(x, tile, 0, (row0, row0 + cfg.block_m), (col0, col0 + cfg.block_n))
    builder.block(out, tile, 0, (col0, col0 + cfg.block_n), (row0, row0 + cfg.block_m), write=True)
    meta = {"task": "transpose", "sizes": f"m={m} n={n} dtype={dtype}", "config": repr(cfg)}
    return builder.build(meta)


def _elem_bytes(dtype: str) -> int:
    if dtype not in ELEM_BYTES:
        raise UserError(f"transpose access model: dtype {dtype!r} unknown; use one of {', '.join(ELEM_BYTES)}")
    return ELEM_BYTES[dtype]


def line_accesses(*, m: int, n: int, dtype: str = "float32", config: Any = None, tile_m: int | None = None,
                  tile_n: int | None = None, **_: Any) -> int:
    """How many line accesses access_model builds (aligned rows; an estimate the scenario checks memory with)."""
    cfg = kernel.with_tile(config or kernel.GPU_CONFIG, tile_m, tile_n)
    elem = ELEM_BYTES.get(dtype, 4)
    rows, cols = kernel.tile_grid(m=m, n=n, config=cfg)
    per_tile = cfg.block_m * -(-cfg.block_n * elem // 128) + cfg.block_n * -(-cfg.block_m * elem // 128)
    return rows * cols * per_tile
