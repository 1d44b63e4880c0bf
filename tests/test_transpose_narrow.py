"""Transpose with a narrow tile (case key tile_n): neighbouring tiles share sectors, so orders differ in L2."""

from __future__ import annotations

import pytest

from swizzlelab.errors import UserError
from swizzlelab.sim import CacheGeometry, simulate
from swizzlelab.swizzle import to_permutation
from swizzlelab.tasks import load_task

CASE = {"seed": 1, "m": 65536, "n": 64, "dtype": "float16", "tile_n": 8}


def test_tile_n_narrows_the_tile_grid_and_bad_values_are_one_line_errors():
    task = load_task("transpose")
    config = task.kernel.GPU_CONFIG
    assert task.tile_grid(CASE, config) == (65536 // 64, 64 // 8)
    assert task.swizzle_args(CASE, config)[1]["BLOCK_SIZE_N"] == 8
    assert task.tile_grid({k: v for k, v in CASE.items() if k != "tile_n"}, config) == (1024, 1)
    for bad in (0, 3, "8"):
        with pytest.raises(UserError, match="tile_n"):
            task.tile_grid({**CASE, "tile_n": bad}, config)


def test_narrow_tiles_make_orders_differ_and_dram_reads_come_in_sector_pairs():
    task = load_task("transpose")
    config = task.kernel.GPU_CONFIG
    trace = task.access_model(CASE, config=config)
    grid = task.tile_grid(CASE, config)
    args, consts = task.swizzle_args(CASE, config)
    x_bytes = CASE["m"] * CASE["n"] * 2
    results = {}
    for order in ("row_major", "column_major"):
        perm = to_permutation(task.parse_order(order), grid, args, consts)
        # 4 MB of L2: a column of tiles (65536 rows x one 128-byte line) does not fit, neighbours along n do.
        results[order] = simulate(trace, perm, "h100", geometry=CacheGeometry(capacity_bytes=4 << 20), occupancy=1)
    row, col = results["row_major"], results["column_major"]
    assert row.l2_hit_rate > col.l2_hit_rate + 0.2
    assert row.dram_read_bytes == pytest.approx(x_bytes, rel=0.02)  # each 64-byte pair fetched once
    # Column-major: every tile's 16-byte read misses and fetches a 64-byte pair: 4x the input, as ncu measured.
    assert col.dram_read_bytes == pytest.approx(4 * x_bytes, rel=0.05)
