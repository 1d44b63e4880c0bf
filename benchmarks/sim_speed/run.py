"""Speed of the L2 simulator (line accesses per second) and end-to-end trace + simulate time for matmul.

Usage: python benchmarks/sim_speed/run.py [OUT_JSON] [--big]   (default OUT_JSON: benchmarks/sim_speed/sim_speed_cpu.json)
--big adds matmul 8192^3 (135M line accesses, ~12 GB peak memory) and prints it next to reference figures
measured by others on an H100 (row-major ~58% L2 hit, ~4.4 GB DRAM read; grouped GROUP_M=8 ~83%, ~1.55 GB).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

REFERENCE_8192_H100 = {
    "row_major": {"l2_hit_pct": 58.0, "dram_read_bytes": 4.4e9},
    "grouped:GROUP_M=8": {"l2_hit_pct": 83.0, "dram_read_bytes": 1.55e9},
    "note": "measured by others on an H100 (Triton 3.6, fp16 128x128x64, 8 warps, 3 stages), given in the brief",
}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_case(task, size: int, orders: list[str], targets: list[str], occupancies: list[int]) -> dict:
    from swizzlelab.hw import get_model
    from swizzlelab.scenario import load_scenario
    from swizzlelab.sim import footprint_of, simulate

    scenario = load_scenario(task, {"m": size, "n": size, "k": size})
    t0 = time.perf_counter()
    trace = scenario.trace
    trace_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    footprint = footprint_of(trace)
    footprint_s = time.perf_counter() - t0
    runs = []
    for spec in orders:
        perm = scenario.permutation(spec)
        for target in targets:
            for occupancy in occupancies:
                t0 = time.perf_counter()
                result = simulate(trace, perm, get_model(target), occupancy=occupancy, footprint=footprint)
                wall_s = time.perf_counter() - t0
                runs.append({
                    "order": spec, "target": result.model, "occupancy": occupancy,
                    "l2_hit_pct": 100 * result.l2_hit_rate, "dram_read_bytes": result.dram_read_bytes,
                    "dram_write_bytes": result.dram_write_bytes, "line_accesses": result.line_accesses,
                    "sim_s": result.elapsed_s, "wall_s": wall_s,
                    "line_accesses_per_s": result.accesses_per_s,
                    "label": f"predicted (model {result.model})",
                })
    n_access = int(trace.lines.size)
    del trace
    return {"task": "matmul", "m": size, "n": size, "k": size, "config": repr(config), "line_accesses": n_access,
            "trace_s": trace_s, "footprint_s": footprint_s, "runs": runs}


def run_screening(task, size: int, orders: list[str], target: str) -> dict:
    """Throughput of ranking several orders, as the optimizer's search does: one thread, then one per CPU."""
    from concurrent.futures import ThreadPoolExecutor

    from swizzlelab.hw import get_model
    from swizzlelab.sim import footprint_of, simulate
    from swizzlelab.sim.simulate import default_workers
    from swizzlelab.scenario import load_scenario

    scenario = load_scenario(task, {"m": size, "n": size, "k": size})
    trace = scenario.trace
    footprint = footprint_of(trace)
    perms = [scenario.permutation(spec) for spec in orders]
    model = get_model(target)
    threads = default_workers()

    def one(perm):
        return simulate(trace, perm, model, footprint=footprint, workers=1)

    t0 = time.perf_counter()
    serial = [one(perm) for perm in perms]
    serial_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        threaded = list(pool.map(one, perms))
    threaded_s = time.perf_counter() - t0
    same = all(a.l2_hit_rate == b.l2_hit_rate and a.dram_read_bytes == b.dram_read_bytes
               for a, b in zip(serial, threaded))
    total = sum(r.line_accesses for r in serial)
    return {"task": "matmul", "m": size, "n": size, "k": size, "target": model.name, "orders": orders,
            "threads": threads, "serial_s": serial_s, "threaded_s": threaded_s,
            "serial_line_accesses_per_s": total / serial_s, "threaded_line_accesses_per_s": total / threaded_s,
            "results_identical": same}


def main(argv: list[str]) -> int:
    from swizzlelab.io import atomic_write_text
    from swizzlelab.sim import simulate
    from swizzlelab.hw import get_model
    from swizzlelab.tasks import load_task

    big = "--big" in argv
    paths = [a for a in argv if not a.startswith("--")]
    out = Path(paths[0]) if paths else Path(__file__).with_name("sim_speed_cpu.json")
    task = load_task("matmul")

    # Compile (or load from numba's cache) outside the timings.
    t0 = time.perf_counter()
    small = task.access_model({"m": 256, "n": 256, "k": 128}, config=task.kernel.GPU_CONFIG)
    import numpy as np

    simulate(small, np.arange(small.tile_step_ptr.size - 1), get_model("h100"))
    warmup_s = time.perf_counter() - t0

    cases = [run_case(task, 4096, ["row_major", "grouped:GROUP_M=8"], ["h100", "mi300x"], [1, 2])]
    if big:
        cases.append(run_case(task, 8192, ["row_major", "grouped:GROUP_M=8", "column_major"], ["h100"], [1, 2]))
    screen_orders = ["row_major", "grouped:GROUP_M=8", "column_major", "hilbert:SIDE=8"]
    screening = [run_screening(task, 4096, screen_orders, "h100")]
    if big:
        screening.append(run_screening(task, 8192, screen_orders, "h100"))
    rates = [r["line_accesses_per_s"] for c in cases for r in c["runs"]]
    record = {
        "script": "benchmarks/sim_speed/run.py",
        "command": " ".join(["python", "benchmarks/sim_speed/run.py", *argv]),
        "device": f"{cpu_name()}, {os.cpu_count()} cores (CPU only; the simulator runs on the host)",
        "note": "all hit rates and bytes are predictions of the simulator; times are measured on this CPU",
        "warmup_compile_s": warmup_s,
        "median_line_accesses_per_s": float(np.median(rates)),
        "min_line_accesses_per_s": float(min(rates)),
        "cases": cases,
        "screening": screening,
        "reference_8192_h100": REFERENCE_8192_H100 if big else None,
    }
    atomic_write_text(out, json.dumps(record, indent=2))
    print(f"simulator speed on {record['device']}")
    print(f"{'case':<14}{'order':<20}{'target':<10}{'occ':>4}{'hit % (pred)':>14}{'DRAM rd GB (pred)':>19}"
          f"{'sim s':>8}{'M acc/s':>9}")
    for c in cases:
        for r in c["runs"]:
            print(f"{c['m']}^3{'':<8}{r['order']:<20}{r['target']:<10}{r['occupancy']:>4}{r['l2_hit_pct']:>14.1f}"
                  f"{r['dram_read_bytes'] / 1e9:>19.2f}{r['sim_s']:>8.2f}{r['line_accesses_per_s'] / 1e6:>9.1f}")
        print(f"  trace build {c['trace_s']:.1f} s, footprint {c['footprint_s']:.1f} s, "
              f"{c['line_accesses'] / 1e6:.1f} M line accesses (measured on this CPU)")
    for r in screening:
        print(f"ranking {len(r['orders'])} orders of {r['m']}^3 on {r['target']}: one thread "
              f"{r['serial_line_accesses_per_s'] / 1e6:.1f} M acc/s, {r['threads']} threads "
              f"{r['threaded_line_accesses_per_s'] / 1e6:.1f} M acc/s (identical results: {r['results_identical']})")
    print(f"median {record['median_line_accesses_per_s'] / 1e6:.1f} M line accesses/s; wrote {out}")
    if big:
        print("reference (measured by others on an H100, 8192^3): row-major ~58% / 4.4 GB, grouped ~83% / 1.55 GB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
