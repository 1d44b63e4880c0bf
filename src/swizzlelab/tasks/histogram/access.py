"""Analytic access model of `histogram`: per tile, BLOCK_R-row slices of its channel group, then counter atomics.

Exact per channel load by default: each of the BLOCK_C one-byte loads of a row block is its own L2 lookup, as ncu
counts them (H100/H200: lts__t_sectors = 32 lookups per row sector, L1 does not absorb them; hit rates 94-97% for
row-major, and 21x the input read from DRAM column-major, where each program holds a whole line per row for one
sector while the other channel groups run later: benchmarks/sim_validation). per_channel_loads=False merges the
BLOCK_C loads of a row block into one (32x fewer accesses: a quick estimate that misses both effects).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swizzlelab.tasks.histogram import kernel
from swizzlelab.trace import AccessTrace, TraceBuilder


def access_model(
    *, rows: int, channels: int, config: Any = None, per_channel_loads: bool = True, **_: Any
) -> AccessTrace:
    """Tile (band, group): for each BLOCK_R rows of the band read x[rows, group*BC:+BC] (one load per channel
    with per_channel_loads, one step each, as the kernel issues them), then atomically add counts[chans, :]."""
    cfg = config or kernel.GPU_CONFIG  # predictions are for the benchmark (GPU) configuration
    grid = kernel.tile_grid(rows=rows, channels=channels, config=cfg)
    n_bands, n_groups = grid
    rpp, br, bc = cfg.rows_per_prog, cfg.block_r, cfg.block_c
    builder = TraceBuilder(grid)
    x = builder.tensor("x_ptr", (rows, channels), 1)
    counts = builder.tensor("counts_ptr", (channels, kernel.N_BINS), 4)
    tile = np.arange(n_bands * n_groups, dtype=np.int64)
    band, group = tile // n_groups, tile % n_groups
    row_begin = band * rpp
    row_end = np.minimum(row_begin + rpp, rows)
    n_row_blocks = -(-rpp // br)
    rb = np.arange(n_row_blocks, dtype=np.int64)[None, :]
    r0 = row_begin[:, None] + rb * br
    r1 = np.minimum(r0 + br, row_end[:, None])
    c_first = (group * bc)[:, None]
    tile_row_blocks = -(-(row_end - row_begin) // br)  # the kernel's loop count; the last band may be short
    if per_channel_loads:
        for c in range(bc):
            builder.block(x, tile[:, None], rb * bc + c, (r0, r1), (c_first + c, c_first + c + 1))
        last_step = tile_row_blocks * bc - 1
    else:
        builder.block(x, tile[:, None], rb, (r0, r1), (c_first, c_first + bc))
        last_step = tile_row_blocks - 1
    builder.block(counts, tile, last_step, (group * bc, group * bc + bc), (0, kernel.N_BINS), write=True)
    meta = {
        "task": "histogram",
        "sizes": f"rows={rows} channels={channels}",
        "config": repr(cfg),
        "loads": "per channel (exact)" if per_channel_loads else "per row block (channel loads merged: L1 hits)",
    }
    return builder.build(meta)


def line_accesses(*, rows: int, channels: int, config: Any = None, per_channel_loads: bool = True, **_: Any) -> int:
    """An upper bound of access_model's line accesses: every row of a band read once per channel (merged: once
    per channel group; a row slice may straddle two lines), then the group's counts."""
    cfg = config or kernel.GPU_CONFIG
    n_bands, n_groups = kernel.tile_grid(rows=rows, channels=channels, config=cfg)
    per_row = cfg.block_c if per_channel_loads else -(-cfg.block_c // 128) + 1
    counts = cfg.block_c * -(-kernel.N_BINS * 4 // 128)
    return rows * n_groups * per_row + n_bands * n_groups * counts
