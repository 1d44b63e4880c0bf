"""How matmul's K=8192 rows of the validation table move when the modelled L2 holds more (capacity_bytes x 1.2, x 1.4
of the model's): whether grouped-16's over-predicted DRAM reads are a matter of what the L2 keeps (issue 15).

    python benchmarks/sim_validation/capacity_probe.py benchmarks/sim_validation/capacity_probe.json
CPU only: predictions of the default model of each row's GPU, against the rows' measured means in sim_validation.json.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from swizzlelab.hw import get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import CacheGeometry, footprint_of, simulate
from swizzlelab.swizzle import to_permutation
from swizzlelab.tasks import load_task

SCALES = (1.0, 1.2, 1.4)
VALIDATION = Path(__file__).resolve().parent / "sim_validation.json"


def main(out_path: str) -> int:
    table = json.loads(VALIDATION.read_text())
    by_case: dict[str, list[dict]] = defaultdict(list)
    for r in table["rows"]:
        if r["task"] == "matmul" and r["case"]["k"] == 8192:
            by_case[json.dumps(r["case"], sort_keys=True)].append(r)
    task = load_task("matmul")
    config = task.kernel.GPU_CONFIG
    out = []
    for key, rows in by_case.items():
        case = json.loads(key)
        trace = task.access_model(case, config=config)
        footprint = footprint_of(trace)
        grid = task.tile_grid(case, config)
        args, consts = task.swizzle_args(case, config)
        for r in rows:
            perm = to_permutation(task.parse_order(r["order"]), grid, args, consts)
            model = get_model("h100" if "H100" in r["device"] else "h200")
            row = {"device": r["device"], "case": case, "order": r["order"],
                   "measured_l2_hit_pct": r["measured_l2_hit_pct"],
                   "measured_dram_read_bytes": r["measured_dram_read_bytes"], "measured_runs": r["measured_runs"],
                   "predicted": []}
            for scale in SCALES:
                res = simulate(trace, perm, model,
                               geometry=CacheGeometry(capacity_bytes=int(model.l2_effective_bytes_per_domain * scale)),
                               occupancy=int(r["occupancy"]), footprint=footprint)
                row["predicted"].append({"capacity_scale": scale, "l2_hit_pct": 100 * res.l2_hit_rate,
                                         "dram_read_bytes": res.dram_read_bytes})
            out.append(row)
            print(row["device"][:11], case["m"], case["n"], r["order"],
                  [(p["capacity_scale"], round(p["l2_hit_pct"], 1), round(p["dram_read_bytes"] / 1e9, 2))
                   for p in row["predicted"]], flush=True)
    atomic_write_text(out_path, json.dumps({
        "script": "benchmarks/sim_validation/capacity_probe.py",
        "command": "python benchmarks/sim_validation/capacity_probe.py " + out_path,
        "device": "CPU only (predictions); measured values are the ncu means of sim_validation.json",
        "label": "predicted (default model of each row's GPU, capacity_bytes scaled) against measured means",
        "rows": out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
