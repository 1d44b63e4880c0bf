"""GPU check of the swizzle language: every family, spliced into a real kernel and compiled for the GPU,
runs exactly the permutation the numpy evaluator predicts, on grids that are not multiples of 8.

Run on a CUDA machine: PYTHONPATH=src python benchmarks/gpu_swizzle_check/run.py OUTDIR
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from swizzlelab.harness.probe import write_tile_1d, write_tile_2d
from swizzlelab.io import atomic_write_text
from swizzlelab.swizzle import FAMILIES, apply_swizzle, parse_order, to_permutation

GRIDS_2D = [(37, 23), (64, 64), (1, 129), (250, 3)]
GRIDS_1D = [(1003,), (4096,), (1,)]
COMPOSED = ["xcd:NUM_XCDS=8+grouped:GROUP_M=8", "xcd:NUM_XCDS=8+hilbert:SIDE=16", "tiles:TILE_M=8,TILE_N=4"]


def run_case(spec: str, rank: int, grid: tuple[int, ...]) -> dict[str, object]:
    formula = parse_order(spec, rank)
    perm = to_permutation(formula, grid)
    kernel = apply_swizzle(write_tile_2d if rank == 2 else write_tile_1d, formula)
    n = int(np.prod(grid))
    out = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    if rank == 2:
        kernel[(n,)](out, grid[0], grid[1])
    else:
        kernel[(n,)](out, n)
    torch.cuda.synchronize()
    ran = out.cpu().numpy()
    return {"order": spec, "grid": list(grid), "permutation_id": perm.id, "match": bool(np.array_equal(ran, perm.perm))}


def main() -> None:
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "out")
    start = time.time()
    rows = []
    for name, spec in FAMILIES.items():
        rank = 1 if spec.kind == "linear" else 2
        for grid in GRIDS_1D if rank == 1 else GRIDS_2D:
            rows.append(run_case(name, rank, grid))
    for spec in COMPOSED:
        for grid in GRIDS_2D:
            rows.append(run_case(spec, 2, grid))
    record = {
        "check": "emitted Triton swizzle == numpy permutation, compiled for the GPU",
        "command": "PYTHONPATH=src python benchmarks/gpu_swizzle_check/run.py OUTDIR",
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "all_match": all(r["match"] for r in rows),
        "n_cases": len(rows),
        "seconds": round(time.time() - start, 2),
        "rows": rows,
    }
    atomic_write_text(out_dir / "gpu_swizzle_check.json", json.dumps(record, indent=2) + "\n")
    bad = [r for r in rows if not r["match"]]
    print(f"{len(rows) - len(bad)}/{len(rows)} cases match on {record['device']} (measured)")
    for r in bad:
        print("MISMATCH", r)


if __name__ == "__main__":
    main()
