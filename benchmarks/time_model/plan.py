"""The time model's study plan: for each task case and a spread of orders, the simulator's predictions (CPU) that
the GPU run (collect.py) then measures against the kernel's own order.

    python benchmarks/time_model/plan.py benchmarks/time_model/plan_h100.json --target h100
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from swizzlelab.io import atomic_write_text
from swizzlelab.optimize.assess import predict, wave_stats
from swizzlelab.scenario import load_scenario

ORDERS_2D = ["identity", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=32", "hilbert:SIDE=16", "diagonal",
             "tiles:TILE_M=8,TILE_N=8", "morton:SIDE=8", "serpentine>column_major@11x8"]
ORDERS_1D = ["identity1d", "stride:STRIDE=2", "stride:STRIDE=8", "stride:STRIDE=32", "stride:STRIDE=64",
             "stride:STRIDE=256", "xcd:NUM_XCDS=8", "xcd:NUM_XCDS=32"]
# (task, benchmark case index or None, size overrides): square and rectangular matmuls, every other task's cases.
CASES = [
    ("matmul", 0, []), ("matmul", 1, []), ("matmul", 2, []),
    ("matmul", 0, ["m=4096", "n=16384", "k=4096"]), ("matmul", 0, ["m=16384", "n=4096", "k=2048"]),
    ("spmv", 0, []), ("transpose", 0, []), ("transpose", 1, []),
    ("lean_attention", 0, []), ("lean_attention", 1, []), ("flash_attention", 0, []), ("histogram", 0, []),
]


# Orders a case's plan takes at most (simulating flash attention's trace takes minutes an order on two cores).
MAX_ORDERS = {"flash_attention": 5}


def plan_case(task: str, index: int, sizes: list[str], target: str) -> dict:
    scenario = load_scenario(task, f"bench:{index}", sizes, target)
    orders = (ORDERS_2D if scenario.rank == 2 else ORDERS_1D)[:MAX_ORDERS.get(task)]
    rows, seen = [], {}
    base = scenario.check(scenario.default_order())
    for spec in ["default", *orders]:
        started = time.perf_counter()
        try:
            checked = base if spec == "default" else scenario.check(scenario.parse_order(spec))
        except Exception as err:  # a family that does not fit this grid: left out, with why
            print(f"  {spec}: skipped ({err})", flush=True)
            continue
        if not checked.proof.is_bijection:
            print(f"  {spec}: not a bijection here, skipped", flush=True)
            continue
        if checked.permutation_id in seen:
            print(f"  {spec}: same permutation as {seen[checked.permutation_id]}", flush=True)
            continue
        seen[checked.permutation_id] = spec
        pred = predict(scenario, checked.perm)
        wave = wave_stats(scenario, checked.perm)
        rows.append({"order": spec, "permutation_id": checked.permutation_id, "prediction": pred.to_dict(),
                     "wave": wave.to_dict(), "formula": checked.formula.normalized_source(),
                     "outputs": list(checked.formula.outputs)})
        print(f"  {spec}: DRAM {pred.dram_bytes / 1e9:.3f} GB, far {pred.fabric_bytes / 1e9:.3f} GB "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
    return {"task": task, "bench": index, "sizes": sizes, "case": scenario.case, "grid": list(scenario.grid),
            "occupancy": scenario.occupancy.programs, "model": scenario.model.name, "orders": rows}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--target", default="h100")
    parser.add_argument("--only", default="", help="comma-separated task names")
    args = parser.parse_args(argv)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").is_file() else "unknown CPU"
    done = json.loads(args.out.read_text()) if args.out.is_file() else {
        "script": "benchmarks/time_model/plan.py", "command": "python benchmarks/time_model/plan.py " + " ".join(argv),
        "device": f"{cpu} (CPU: every figure here is predicted by the simulator)", "target": args.target, "cases": []}
    have = {(c["task"], c["bench"], tuple(c["sizes"])) for c in done["cases"]}
    for task, index, sizes in CASES:
        if (args.only and task not in args.only.split(",")) or (task, index, tuple(sizes)) in have:
            continue
        print(f"{task} bench:{index} {' '.join(sizes)}", flush=True)
        done["cases"].append(plan_case(task, index, sizes, args.target))
        atomic_write_text(args.out, json.dumps(done, indent=1))  # resumable: a case at a time
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
