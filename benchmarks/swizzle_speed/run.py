"""Benchmark: evaluate + prove + identify formulas on a 1,000,000-program grid (target: < 1 s each on CI's CPU).

Run: python benchmarks/swizzle_speed/run.py [--out benchmarks/swizzle_speed/swizzle_speed_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from swizzlelab.io import atomic_write_text
from swizzlelab.swizzle import parse_order, to_permutation

CASES = {
    "grouped:GROUP_M=8 on 1000x1000": ("grouped:GROUP_M=8", (1000, 1000)),
    "xcd+grouped on 1000x1000": ("xcd:NUM_XCDS=8+grouped:GROUP_M=8", (1000, 1000)),
    "hilbert:SIDE=16 on 1000x1000": ("hilbert:SIDE=16", (1000, 1000)),
    "morton:SIDE=16 on 1000x1000": ("morton:SIDE=16", (1000, 1000)),
    "xcd on 1000000": ("xcd:NUM_XCDS=8", (1_000_000,)),
}


def best_of(repeats: int, spec: str, grid: tuple[int, ...]) -> float:
    formula = parse_order(spec, len(grid))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        to_permutation(formula, grid)  # evaluate + prove bijection + permutation id
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/swizzle_speed/swizzle_speed_cpu.json")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    rows = []
    for label, (spec, grid) in CASES.items():
        seconds = best_of(options.repeats, spec, grid)
        rows.append({"case": label, "order": spec, "grid": list(grid), "best_seconds": round(seconds, 4)})
        print(f"{label:36s} {seconds * 1000:8.1f} ms (measured, CPU, best of {options.repeats})")
    record = {
        "benchmark": "evaluate + prove + permutation id, 1,000,000 programs",
        "command": "python benchmarks/swizzle_speed/run.py",
        "device": f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "rows": rows,
    }
    atomic_write_text(options.out, json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
