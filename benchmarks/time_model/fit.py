"""Fit the time model on measured rows and report the held-out part: the plan's predictions (plan.py, CPU) joined
with a GPU run's measurements (collect.py), split by case (tasks with one case: by order), fitted on one part.

    python benchmarks/time_model/fit.py benchmarks/time_model/plan_h100.json ROWS.json benchmarks/time_model/time_model_h100.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from scipy.stats import spearmanr

from swizzlelab.hw import get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim.timemodel import Row, TimeModel, Traffic, calibration_for, fit

# A measured speedup's own spread counts at least this much (log): the run's CI is not all of its noise.
LOG_SE_FLOOR = 0.004


def case_key(task: str, sizes: list[str], bench: int) -> str:
    return f"{task} bench:{bench} {' '.join(sizes)}".strip()


def traffic(prediction: dict[str, Any], resources: list[dict[str, Any]] | None) -> Traffic:
    occupancy = min((r["blocks_per_sm"] for r in resources), default=None) if resources else None
    return Traffic(dram_bytes=float(prediction["dram_read_bytes"] + prediction["dram_write_bytes"]),
                   fabric_bytes=float(prediction.get("fabric_bytes", 0)), occupancy=occupancy)


def joined(plan: dict[str, Any], measured: dict[str, Any]) -> list[dict[str, Any]]:
    """Measured rows with the plan's predictions of the order and of the kernel's own order."""
    by_case = {}
    for case in plan["cases"]:
        orders = {o["order"]: o for o in case["orders"]}
        by_case[(case["task"], tuple(case["sizes"]), json.dumps(case["case"], sort_keys=True))] = (case, orders)
    out = []
    for row in measured["rows"]:
        if "speedup" not in row:
            continue
        key = (row["task"], tuple(row.get("sizes", [])), json.dumps(row["case"], sort_keys=True))
        case, orders = by_case[key]
        out.append({**row, "bench": case["bench"], "plan_order": orders[row["order"]], "plan_base": orders["default"],
                    "key": case_key(case["task"], case["sizes"], case["bench"])})
    return out


def assign_sets(rows: list[dict[str, Any]]) -> None:
    """Whole cases alternate between fit and held out within a task; a task with one case alternates its orders."""
    cases_of: dict[str, list[str]] = {}
    for row in rows:
        keys = cases_of.setdefault(row["task"], [])
        if row["key"] not in keys:
            keys.append(row["key"])
    for task, keys in cases_of.items():
        mine = [r for r in rows if r["task"] == task]
        if len(keys) >= 2:
            for r in mine:
                r["set"] = "fit" if keys.index(r["key"]) % 2 == 0 else "held_out"
        else:
            for i, r in enumerate(sorted(mine, key=lambda r: r["order"])):
                r["set"] = "fit" if i % 2 == 0 else "held_out"


def calibration_row(row: dict[str, Any]) -> Row:
    low, high = row["ci95"]
    se = max((math.log(high) - math.log(low)) / (2 * 1.96), LOG_SE_FLOOR) if low > 0 else 1.0
    return Row(base=traffic(row["plan_base"]["prediction"], row.get("base_resources")),
               order=traffic(row["plan_order"]["prediction"], row.get("resources")), base_ms=float(row["base_ms"]),
               measured=float(row["speedup"]), weight=1.0 / se ** 2)


def verdict(predicted: float, measured: float, measured_ci: list[float], noise: float) -> bool:
    """The sign is right, or both are inside noise: the measured speedup within the model's noise band (or its
    CI holding 1), the predicted one within the band."""
    measured_noise = measured_ci[0] <= 1.0 <= measured_ci[1] or abs(math.log(measured)) <= noise
    predicted_noise = abs(math.log(predicted)) <= noise
    if measured_noise or predicted_noise:
        return measured_noise and predicted_noise
    return (predicted > 1.0) == (measured_ci[0] > 1.0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("rows", type=Path, nargs="+")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    plan = json.loads(args.plan.read_text())
    hw = get_model(plan["target"])
    rows: list[dict[str, Any]] = []
    devices = []
    for path in args.rows:
        measured = json.loads(path.read_text())
        devices.append(measured["device"])
        rows += joined(plan, measured)
    assign_sets(rows)
    fitted = fit(hw, [calibration_row(r) for r in rows if r["set"] == "fit"],
                 source=f"benchmarks/time_model/{args.out.name}")
    out_rows = []
    for row in rows:
        model = TimeModel(hw, fitted, traffic(row["plan_base"]["prediction"], row.get("base_resources")),
                          float(row["base_ms"]), anchor=f"anchored on measured {row['base_ms']:.4g} ms")
        pred = model.predict(traffic(row["plan_order"]["prediction"], row.get("resources")))
        bytes_ratio = (traffic(row["plan_base"]["prediction"], None).dram_bytes
                       / max(traffic(row["plan_order"]["prediction"], None).dram_bytes, 1.0))
        out_rows.append({
            "task": row["task"], "case": row["key"], "order": row["order"], "device": row.get("device"),
            "set": row["set"], "predicted_speedup": pred.speedup, "predicted_ci": [pred.low, pred.high],
            "measured_speedup": row["speedup"], "measured_ci": row["ci95"], "base_ms": row["base_ms"],
            "bound": model.bound(), "bytes_ratio": bytes_ratio,
            "registers": [r["n_regs"] for r in row.get("resources") or []],
            "base_registers": [r["n_regs"] for r in row.get("base_resources") or []],
            "sign_right_or_both_noise": verdict(pred.speedup, row["speedup"], row["ci95"], fitted.noise),
            "sign_right_strict": verdict(pred.speedup, row["speedup"], row["ci95"], 0.0),
        })
    summary: dict[str, Any] = {}
    for name in ("fit", "held_out"):
        part = [r for r in out_rows if r["set"] == name]
        if len(part) >= 3:
            rho = spearmanr([r["predicted_speedup"] for r in part], [r["measured_speedup"] for r in part])[0]
            rho_bytes = spearmanr([r["bytes_ratio"] for r in part], [r["measured_speedup"] for r in part])[0]
        else:
            rho = rho_bytes = float("nan")
        summary[name] = {"rows": len(part), "tasks": sorted({r["task"] for r in part}), "spearman": rho,
                         "spearman_of_dram_bytes_alone": rho_bytes,
                         "sign_right_or_both_noise": sum(r["sign_right_or_both_noise"] for r in part) / max(len(part), 1),
                         "sign_right_strict_ci": sum(r["sign_right_strict"] for r in part) / max(len(part), 1)}
    result = {"script": "benchmarks/time_model/fit.py (collect.py measured, plan.py predicted)",
              "command": "python benchmarks/time_model/fit.py " + " ".join(argv), "device": sorted(set(devices)),
              "measured": "measured (" + ", ".join(sorted(set(devices))) + "): interleaved A/B, 95% CI",
              "predicted": f"predicted (time model {hw.name} over the simulator's traffic)",
              "calibration": fitted.__dict__, "summary": summary, "rows": out_rows,
              "targets": {"held_out_spearman": 0.7, "held_out_sign_right_or_both_noise": 0.85, "rows": 60, "tasks": 6}}
    atomic_write_text(args.out, json.dumps(result, indent=1, default=float) + "\n")
    print(json.dumps({"calibration": fitted.__dict__, "summary": summary}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
