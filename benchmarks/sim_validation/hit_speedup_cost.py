"""What hit-dependent step times (simulate's hit_speedup) cost in time and change in prediction, per engine:
orders of validation cases (benchmarks/sim_validation) on the H100 model, timed on this host.

    python benchmarks/sim_validation/hit_speedup_cost.py OUT_JSON [--hit 0.05] [--reps 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from swizzlelab.hw import get_model  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.sim import SimParams, default_workers, footprint_of, simulate  # noqa: E402
from swizzlelab.sim.params import HIT_PASSES  # noqa: E402
from swizzlelab.swizzle import to_permutation  # noqa: E402
from swizzlelab.tasks import load_task  # noqa: E402

# (task, case, order, occupancy) as in the validation rows: two matmul orders whose programs share a panel that
# does not fit in L2, and the histogram, the case the linked-list engine is slowest on.
CASES = [("matmul", {"seed": 12, "m": 8192, "n": 8192, "k": 8192}, "row_major", 2),
         ("matmul", {"seed": 16, "m": 16384, "n": 16384, "k": 4096}, "row_major", 2),
         ("histogram", {"seed": 11, "rows": 1048576, "channels": 512}, "column_major", 2)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--hit", type=float, default=0.05, help="hit_speedup to time against 0")
    parser.add_argument("--reps", type=int, default=1, help="timed runs per setting (the fastest is kept)")
    args = parser.parse_args(argv)
    model = get_model("h100")
    rows = []
    compiled: set[tuple[str, bool]] = set()
    for name, case, order, occupancy in CASES:
        task = load_task(name)
        config = task.kernel.GPU_CONFIG
        trace = task.access_model(case, config=config)
        footprint = footprint_of(trace)
        perm = to_permutation(task.parse_order(order), task.tile_grid(case, config), *task.swizzle_args(case, config))
        settings = [("sets", 0.0), ("list", 0.0), ("list", args.hit), ("sets", args.hit)]
        for engine, hit in settings:
            # Not timed: a first run that compiles the kernels or, on the set engine, splits this trace by sets
            # (cached per trace: a search over orders pays it once).
            warm = engine == "sets" or (engine, hit > 0) not in compiled
            compiled.add((engine, hit > 0))
            times = []
            for rep in range(args.reps + 1 if warm else args.reps):
                t0 = time.perf_counter()
                res = simulate(trace, perm, model, SimParams(progress="random_walk", hit_speedup=hit), engine,
                               occupancy=occupancy, footprint=footprint)
                if rep or not warm:
                    times.append(time.perf_counter() - t0)
            rows.append({"task": name, "case": case, "order": order, "occupancy": occupancy, "engine": engine,
                         "hit_speedup": hit,
                         "passes": HIT_PASSES if engine == "sets" and hit > 0 else 1, "seconds": min(times),
                         "predicted_l2_hit_pct": 100 * res.l2_hit_rate,
                         "predicted_dram_read_bytes": res.dram_read_bytes,
                         "kind": f"predicted (model {model.name}, step_cv {res.step_cv})"})
            print(json.dumps(rows[-1]), flush=True)
        del trace
    record = {"script": "benchmarks/sim_validation/hit_speedup_cost.py",
              "command": " ".join(["python", "benchmarks/sim_validation/hit_speedup_cost.py", *argv]),
              "device": f"this host's CPU ({platform.machine()}, {default_workers()} CPUs): simulator timings, no GPU",
              "host": {"cpus": default_workers(), "machine": platform.machine(), "processor": platform.processor(),
                       "load_avg": os.getloadavg()},
              "rows": rows}
    atomic_write_text(args.out, json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
