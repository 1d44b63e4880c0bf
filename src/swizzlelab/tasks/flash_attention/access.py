"""Analytic access model of `flash_attention`: per tile, a Q block, then one K and one V block per key step.

Exact: equals the interpreter trace of kernel.py line for line (the output store lands in the last step).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from swizzlelab.tasks.flash_attention import kernel
from swizzlelab.trace import AccessTrace, TraceBuilder

ELEM_BYTES = 2  # fp16 q, k, v, out


def access_model(*, batch: int, heads: int, seq: int, head_dim: int = 128, config: Any = None, **_: Any) -> AccessTrace:
    """Tile (bh, query block j): step 0 reads q[bh, j*BM:+BM]; step s reads k and v[bh, s*BN:+BN]; out last.

    Size: tiles x steps x 2 x BN x ceil(head_dim*2/128) line accesses (batch 4, heads 64, seq 8192, dim 128
    with 128 x 64 blocks: 537M accesses, ~5.4 GB).
    """
    cfg = config or kernel.GPU_CONFIG  # predictions are for the benchmark (GPU) configuration
    grid = kernel.tile_grid(batch=batch, heads=heads, seq=seq, head_dim=head_dim, config=cfg)
    n_bh, n_qblocks = grid
    bm, bn = cfg.block_m, cfg.block_n
    n_steps = -(-seq // bn)
    builder = TraceBuilder(grid)
    shape = (n_bh, seq, head_dim)
    q, k, v, out = (builder.tensor(name, shape, ELEM_BYTES) for name in ("q_ptr", "k_ptr", "v_ptr", "out_ptr"))
    tile = np.arange(n_bh * n_qblocks, dtype=np.int64)
    bh, qblock = tile // n_qblocks, tile % n_qblocks
    builder.block(q, tile, 0, (qblock * bm, qblock * bm + bm), (0, head_dim), lead=(bh,))
    key0 = np.arange(n_steps, dtype=np.int64)[None, :] * bn
    for cache in (k, v):
        builder.block(cache, tile[:, None], key0 // bn, (key0, key0 + bn), (0, head_dim), lead=(bh[:, None],))
    builder.block(out, tile, n_steps - 1, (qblock * bm, qblock * bm + bm), (0, head_dim), lead=(bh,), write=True)
    meta = {"task": "flash_attention", "sizes": f"batch={batch} heads={heads} seq={seq} head_dim={head_dim}", "config": repr(cfg)}
    return builder.build(meta)


def line_accesses(*, batch: int, heads: int, seq: int, head_dim: int = 128, config: Any = None, **_: Any) -> int:
    """How many line accesses access_model builds (tiles x steps x 2 x BN x lines per row, plus q and out)."""
    cfg = config or kernel.GPU_CONFIG
    rows, cols = kernel.tile_grid(batch=batch, heads=heads, seq=seq, head_dim=head_dim, config=cfg)
    per_row = -(-head_dim * ELEM_BYTES // 128)
    steps = -(-seq // cfg.block_n)
    return rows * cols * per_row * (2 * cfg.block_m + steps * 2 * cfg.block_n)
