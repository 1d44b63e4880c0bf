"""Per matmul row of the validation table: the share of requested sectors looked up again at a far L2 partition,
as ncu counts it and as the model predicts it, to locate the grouped-16 miss (issue 15).

    python -m benchmarks.sim_validation.fabric_check benchmarks/sim_validation/fabric_check.json
Measured: lts__t_sectors_srcunit_ltcfabric.sum of each row's first ncu run (sim_ncu_rows_*.json) over the sectors the
model says the kernel requests; predicted: the fitted point's lookup_bytes_per_requested - 1 (sim_validation.json).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.lab.validation import point_label
from swizzlelab.io import atomic_write_text

FOLDER = Path(__file__).resolve().parent
FIRST_RUNS = ("sim_ncu_rows_nvidia_h100_80gb_hbm3.json", "sim_ncu_rows_nvidia_h200.json")
SECTOR = 32
# validate.Point's fields as sim_validation.json names its fitted values (older tables have no capacity scale).
FITTED = (("step_cv", 0.0), ("hit_speedup", 0.0), ("drift_decay", 0.0), ("lrc_window", 0.0), ("gpc_bound", 0.0),
          ("dram_saturation", 0.0), ("miss_gain", 0.0), ("capacity_scale", 1.0))


def key(row: dict) -> tuple[str, str, str]:
    return row["device"], json.dumps(row["case"], sort_keys=True), row["order"]


def main(out_path: str) -> int:
    table = json.loads((FOLDER / "sim_validation.json").read_text())
    fitted = point_label(tuple(table.get(f"fitted_{name}", default) for name, default in FITTED))
    counters = {key(r): r["counters"] for name in FIRST_RUNS
                for r in json.loads((FOLDER / name).read_text())["rows"] if r.get("counters")}
    rows = []
    for r in table["rows"]:
        c = counters.get(key(r))
        if r["task"] != "matmul" or not c or "lts__t_sectors_srcunit_ltcfabric.sum" not in c:
            continue
        p = r["sweep"][fitted]
        requested = p["requested_bytes"] / SECTOR
        rows.append({"device": r["device"], "case": r["case"], "order": r["order"], "set": r["set"],
                     "measured_fabric_per_requested": c["lts__t_sectors_srcunit_ltcfabric.sum"] / requested,
                     "predicted_fabric_per_requested": p["lookup_bytes_per_requested"] - 1,
                     "measured_l2_hit_pct": r["measured_l2_hit_pct"],
                     "predicted_l2_hit_pct": r["predicted_l2_hit_pct"]})
        x = rows[-1]
        print(r["device"][7:11], "{m}x{n}x{k}".format(**r["case"]).ljust(17), r["order"][:18].ljust(18),
              f"fabric/requested measured {x['measured_fabric_per_requested']:.3f} predicted "
              f"{x['predicted_fabric_per_requested']:.3f}  hit {x['measured_l2_hit_pct']:.1f} / "
              f"{x['predicted_l2_hit_pct']:.1f}")
    atomic_write_text(out_path, json.dumps({
        "script": "benchmarks/sim_validation/fabric_check.py",
        "command": "python -m benchmarks.sim_validation.fabric_check " + out_path,
        "device": "NVIDIA H100 80GB HBM3 and NVIDIA H200 (ncu counters of each row's first run); predictions CPU",
        "label": f"measured (ncu lts__t_sectors_srcunit_ltcfabric.sum) against predicted (model of each GPU, point "
                 f"{fitted})", "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
