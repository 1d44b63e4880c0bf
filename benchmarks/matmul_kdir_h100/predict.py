"""The simulator's predictions for every K-direction row measured by run.py (matmul 8192^3 on the H100): the same
order with odd waves walking K backwards (swizzlelab.trace.kdir), next to ncu's DRAM reads and L2 hit rate.

    python -m benchmarks.matmul_kdir_h100.predict [OUT_JSON]   (default: benchmarks/matmul_kdir_h100/matmul_kdir_sim.json)
Each (order, wave) is simulated once with the H100 model at the task's occupancy and the model's default step
spread; wave 0 = every program walks K forwards. Takes a few minutes on 2 cores (the trace transform of 135 M
accesses takes ~14 s and ~9 GB).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from benchmarks.lab.kdir import h100_setup  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.sim import SimParams, simulate  # noqa: E402
from swizzlelab.sim.agreement import kendall_tau  # noqa: E402
from swizzlelab.sim.params import STEP_TIME_CV  # noqa: E402
from swizzlelab.swizzle import to_permutation  # noqa: E402
from swizzlelab.trace.kdir import alternate_by_wave  # noqa: E402

HERE = Path(__file__).resolve().parent
MEASURED = ("matmul_kdir_h100.json", "matmul_kdir_sweep_h100.json")
DEFAULT_WAVE = 264  # run.py's WAVE: rows of the first study carry no wave


def measured_rows() -> list[dict[str, Any]]:
    rows = []
    for name in MEASURED:
        doc = json.loads((HERE / name).read_text())
        for row in doc["rows"]:
            if not row.get("output_ok") or not row["metrics"].get("dram__bytes_read.sum"):
                continue
            wave = int(row.get("wave") or DEFAULT_WAVE) if row["reverse"] else 0
            rows.append({"file": name, "order": row["order"], "wave": wave,
                         "measured_dram_read_bytes": row["metrics"]["dram__bytes_read.sum"],
                         "measured_l2_hit_pct": row["metrics"]["lts__t_sector_hit_rate.pct"]})
    return rows


def main(argv: list[str]) -> int:
    out_path = Path(argv[0]) if argv else HERE / "matmul_kdir_sim.json"
    case = json.loads((HERE / MEASURED[0]).read_text())["case"]
    task, model, occupancy, trace, footprint, grid, args, consts = h100_setup(case)
    rows = measured_rows()
    predictions: dict[tuple[str, int], dict[str, Any]] = {}
    started = time.time()
    for order, wave in sorted({(r["order"], r["wave"]) for r in rows}):
        t0 = time.time()
        perm = to_permutation(task.parse_order(order), grid, args, consts)
        variant = alternate_by_wave(trace, perm, wave)
        res = simulate(variant, perm, model, SimParams(progress="random_walk"), occupancy=occupancy,
                       footprint=footprint)
        del variant
        predictions[(order, wave)] = {"predicted_dram_read_bytes": int(res.dram_read_bytes),
                                      "predicted_l2_hit_pct": 100 * res.l2_hit_rate}
        print(f"{order:34s} wave {wave:3d}: predicted {res.dram_read_bytes / 1e9:.3f} GB, {100 * res.l2_hit_rate:.1f}% "
              f"({time.time() - t0:.0f} s)", flush=True)
    for row in rows:
        row.update(predictions[(row["order"], row["wave"])])
        row["dram_rel_error"] = row["predicted_dram_read_bytes"] / row["measured_dram_read_bytes"] - 1
    # K alternation's effect per order and study: predicted vs measured ratio alternating / forward.
    effects = []
    for name in MEASURED:
        fwd = {r["order"]: r for r in rows if r["file"] == name and r["wave"] == 0}
        for r in rows:
            if r["file"] == name and r["wave"] and r["order"] in fwd:
                base = fwd[r["order"]]
                effects.append({"file": name, "order": r["order"], "wave": r["wave"],
                                "measured_ratio": r["measured_dram_read_bytes"] / base["measured_dram_read_bytes"],
                                "predicted_ratio": r["predicted_dram_read_bytes"] / base["predicted_dram_read_bytes"]})
    sweep = [r for r in rows if r["file"] == MEASURED[1]]
    errors = [abs(r["dram_rel_error"]) for r in rows]
    summary = {
        "rows": len(rows),
        "dram_read_mean_abs_rel_error": sum(errors) / len(errors),
        "l2_hit_mae_pp": sum(abs(r["predicted_l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in rows) / len(rows),
        "kendall_tau_dram_sweep": kendall_tau([r["predicted_dram_read_bytes"] for r in sweep],
                                              [r["measured_dram_read_bytes"] for r in sweep]),
        "alternation_direction_agrees": sum((e["measured_ratio"] < 1) == (e["predicted_ratio"] < 1) for e in effects),
        "alternation_effects": len(effects),
    }
    doc = {"study": "matmul_kdir_h100 predicted", "script": "benchmarks/matmul_kdir_h100/predict.py",
           "command": "python -m benchmarks.matmul_kdir_h100.predict", "case": case,
           "device": "predictions on this machine's CPU (model H100-SXM)",
           "measured_device": "NVIDIA H100 80GB HBM3",
           "predicted_by": f"predicted (model {model.name}, occupancy {occupancy}, random-walk progress model, step_cv {STEP_TIME_CV})",
           "measured_by": "measured (NVIDIA H100 80GB HBM3, ncu dram__bytes_read.sum, lts__t_sector_hit_rate.pct; "
                          + ", ".join(MEASURED) + ")",
           "rows": rows, "alternation_effects": effects, "summary": summary,
           "elapsed_s": time.time() - started}
    atomic_write_text(out_path, json.dumps(doc, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
