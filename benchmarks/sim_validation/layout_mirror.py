"""What the simulator predicts for the operand layouts placement_probe.py measured: matmul with a and b as the task
stores them, or mirrored (a as [k, m], b as [n, k]), row- against column-major, per GPU model and L2 set map.

    python benchmarks/sim_validation/layout_mirror.py OUT.json [--m 16384 --n 16384 --k 4096] [--set-maps hash,permute]

CPU (--engine auto) or GPU engine (--engine gpu). The model point is the validation table's (contention progress, step_cv 0.3,
dram_saturation 0.3, miss_gain 0.02, coalescer window 0.1, the model's GPC share, occupancy 2 as ncu measured).
A hashed set map sees every line alike, so it can tell the layouts apart only by chance; the permuted map is exact on
contiguous lines and random on strided ones, as the dup_probe sweeps found the GPUs to be.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from swizzlelab.hw import get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import CacheGeometry, SimParams, footprint_of, simulate
from swizzlelab.sim.params import (AGE_PRIORITY, DRAM_SATURATION, HOT_LOAD, LRC_WINDOW, SATURATION_MISS_GAIN,
                                     START_JITTER, STEP_TIME_CV_SATURATING)
from swizzlelab.swizzle import to_permutation
from swizzlelab.tasks import load_task
from swizzlelab.tasks.matmul import kernel
from swizzlelab.trace import AccessTrace, TraceBuilder

ELEM_BYTES = 2
# The validation table's point, which is the simulator's default: named here so the file records it.
POINT = {"progress": "contention", "dram_saturation": DRAM_SATURATION, "miss_gain": SATURATION_MISS_GAIN,
         "age_priority": AGE_PRIORITY, "hot_load": HOT_LOAD, "start_jitter": START_JITTER,
         "step_cv": STEP_TIME_CV_SATURATING, "lrc_window": LRC_WINDOW}
OCCUPANCY = kernel.H100_OCCUPANCY  # ncu's, the table's occupancy on both GPUs
ORDERS = ("row_major", "column_major")


def mirrored_trace(m: int, n: int, k: int, layout: str) -> AccessTrace:
    """The kernel's accesses with a and b stored as `layout` says ("default": [m, k], [k, n]; "mirror": [k, m],
    [n, k]); sizes must be multiples of the tile (no wrapped edge tiles)."""
    cfg = kernel.GPU_CONFIG
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    if m % bm or n % bn or k % bk:
        raise SystemExit(f"m, n, k must be multiples of {bm}, {bn}, {bk}")
    grid = kernel.tile_grid(m=m, n=n, config=cfg)
    builder = TraceBuilder(grid)
    mirror = layout == "mirror"
    a = builder.tensor("a_ptr", (k, m) if mirror else (m, k), ELEM_BYTES)
    b = builder.tensor("b_ptr", (n, k) if mirror else (k, n), ELEM_BYTES)
    c = builder.tensor("c_ptr", (m, n), ELEM_BYTES)
    tile = np.arange(grid[0] * grid[1], dtype=np.int64)
    pid_m, pid_n = tile // grid[1], tile % grid[1]
    step = np.arange(k // bk, dtype=np.int64)
    k_range = (step * bk, step * bk + bk)
    rows = ((pid_m * bm)[:, None], (pid_m * bm + bm)[:, None])
    cols = ((pid_n * bn)[:, None], (pid_n * bn + bn)[:, None])
    # The A load comes before the B load in each step, as in the kernel.
    builder.block(a, tile[:, None], step[None, :], *((k_range, rows) if mirror else (rows, k_range)))
    builder.block(b, tile[:, None], step[None, :], *((cols, k_range) if mirror else (k_range, cols)))
    builder.block(c, tile, len(step) - 1, (pid_m * bm, pid_m * bm + bm), (pid_n * bn, pid_n * bn + bn), write=True)
    # matmul's task.yml declares it L2-bound (programs keep their SM's pace), as the task's own trace carries.
    return replace(builder.build({"task": "matmul", "sizes": f"m={m} n={n} k={k}", "layout": layout}),
                   l2_bound=load_task("matmul").spec.l2_bound)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--m", type=int, default=16384)
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--set-maps", default="hash,permute")
    parser.add_argument("--models", default="h200,h100")
    parser.add_argument("--engine", default="auto", help="the simulator engine: auto (CPU sets) or gpu")
    parser.add_argument("--capacity-scales", default="1.0", help="modelled L2 bytes over the model's, comma-separated")
    parser.add_argument("--layouts", default="default,mirror")
    args = parser.parse_args(argv)
    start = time.time()
    task = load_task("matmul")
    case = {"m": args.m, "n": args.n, "k": args.k}
    grid = task.tile_grid(case, kernel.GPU_CONFIG)
    sw_args, consts = task.swizzle_args(case, kernel.GPU_CONFIG)
    perms = {o: to_permutation(task.parse_order(o), grid, sw_args, consts) for o in ORDERS}
    rows: list[dict[str, Any]] = []
    doc = {"script": "benchmarks/sim_validation/layout_mirror.py",
           "command": " ".join(["python", "benchmarks/sim_validation/layout_mirror.py", *argv]),
           "device": f"predicted on the {args.engine} engine (no measurement)", "case": case, "point": POINT,
           "occupancy": OCCUPANCY, "rows": rows}
    for layout in args.layouts.split(","):
        trace = mirrored_trace(args.m, args.n, args.k, layout)
        footprint = footprint_of(trace)
        for name in args.models.split(","):
            for set_map, scale in itertools.product(args.set_maps.split(","), map(float,
                                                                                  args.capacity_scales.split(","))):
                model = replace(get_model(name), l2_set_map=set_map)
                for order in ORDERS:
                    t0 = time.time()
                    capacity = int(model.l2_effective_bytes_per_domain * scale)
                    res = simulate(trace, perms[order], model, SimParams(gpc_bound=model.gpc_bound, **POINT),
                                   args.engine, geometry=CacheGeometry(capacity_bytes=capacity), occupancy=OCCUPANCY,
                                   footprint=footprint)
                    rows.append({"layout": layout, "model": model.name, "set_map": set_map, "capacity_scale": scale,
                                 "order": order,
                                 "predicted_l2_hit_pct": 100 * res.l2_hit_rate,
                                 "predicted_dram_read_bytes": int(res.dram_read_bytes), "elapsed_s": time.time() - t0})
                    print(f"{layout} {model.name} {set_map} x{scale} {order}: predicted {100 * res.l2_hit_rate:.2f}% hit, "
                          f"{res.dram_read_bytes / 1e9:.3f} GB DRAM read ({time.time() - t0:.0f} s)", flush=True)
                    doc["elapsed_s"] = time.time() - start
                    atomic_write_text(args.out, json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
