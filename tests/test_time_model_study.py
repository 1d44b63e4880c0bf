"""benchmarks/time_model as commands on small synthetic inputs: fit.py joins collect.py's rows (controls, repeats)
with a plan, keeps a variant by the fit rows alone, reports held-out, cross-validated and ceiling figures, and refits
the same from its own summary (--rows-from); collect.py's order list with controls and repeats."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from swizzlelab.hw import get_model
from swizzlelab.sim.timemodel import TimeModel, Traffic, calibration_for

ROOT = Path(__file__).resolve().parents[1]
FIT = ROOT / "benchmarks" / "time_model" / "fit.py"
sys.path.insert(0, str(ROOT / "benchmarks" / "time_model"))
from collect import OWN_ORDER_SPLICED, SAME_KERNEL, todo_orders  # noqa: E402

H100 = get_model("h100")
ORDERS = ("a", "b", "c", "d", "e")
ROW_MAJOR = "pid = tl.program_id(0)\npid_m = pid // num_pid_n\npid_n = pid % num_pid_n\n"
COLUMN_MAJOR = "pid = tl.program_id(0)\npid_m = pid % num_pid_m\npid_n = pid // num_pid_m\n"


def _prediction(dram: float) -> dict:
    return {"dram_read_bytes": int(dram * 0.9), "dram_write_bytes": int(dram * 0.1), "fabric_bytes": int(dram / 2)}


def synthetic(tmp_path: Path) -> tuple[Path, Path]:
    """A plan of two tasks with two cases each, and collect.py rows made by a known model with noise, plus one
    control row per case and one repeated order."""
    rng = np.random.default_rng(7)
    truth = calibration_for(H100)
    plan_cases, rows = [], []
    for task in ("alpha", "beta"):
        for bench in (0, 1):
            base_gb = rng.uniform(1, 6)
            orders = [{"order": "default", "prediction": _prediction(base_gb * 1e9), "permutation_id": "own",
                       "formula": ROW_MAJOR}]
            orders += [{"order": o, "prediction": _prediction(base_gb * 1e9 * rng.uniform(0.3, 2.0)),
                        "permutation_id": o, "formula": COLUMN_MAJOR if i % 2 else ROW_MAJOR}
                       for i, o in enumerate(ORDERS)]
            case = {"seed": bench, "n": 64 * (bench + 1)}
            plan_cases.append({"task": task, "bench": bench, "sizes": [], "case": case, "orders": orders,
                               "grid": [16, 16], "occupancy": 2})
            base = Traffic(orders[0]["prediction"]["dram_read_bytes"] + orders[0]["prediction"]["dram_write_bytes"])
            base_ms = 1e3 * TimeModel(H100, truth, base).memory_s(base) * rng.uniform(1.1, 3.0)
            model = TimeModel(H100, truth, base, base_ms)
            for o in orders[1:] + [{"order": SAME_KERNEL, "prediction": orders[0]["prediction"]}]:
                p = o["prediction"]
                speedup = model.predict(Traffic(p["dram_read_bytes"] + p["dram_write_bytes"])).speedup
                for _ in range(2 if o["order"] == "a" else 1):
                    measured = speedup * math.exp(rng.normal(0, 0.01))
                    rows.append({"task": task, "case": case, "sizes": [], "order": o["order"], "speedup": measured,
                                 "ci95": [measured * 0.99, measured * 1.01], "base_ms": base_ms, "device": "test GPU",
                                 "resources": [{"n_regs": 64, "blocks_per_sm": 2}],
                                 "base_resources": [{"n_regs": 64, "blocks_per_sm": 2}]})
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"target": "h100", "cases": plan_cases}))
    measured = tmp_path / "rows.json"
    measured.write_text(json.dumps({"device": "test GPU", "rows": rows}))
    return plan, measured


def run_fit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(FIT), *args], capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.slow  # over 15 s on CI's 2 cores: run with -m slow
def test_fit_keeps_a_variant_by_the_fit_rows_and_refits_the_same_from_its_summary(tmp_path: Path):
    plan, measured = synthetic(tmp_path)
    first = tmp_path / "first.json"
    done = run_fit(str(plan), str(measured), str(first))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(first.read_text())
    rows = result["rows"]
    assert len(rows) == 4 * len(ORDERS)  # controls apart, the repeated order merged
    repeated = [r for r in rows if r["order"] == "a"]
    assert all(len(r["repeats"]) == 2 for r in repeated)
    assert {r["set"] for r in rows} == {"fit", "held_out"}
    assert result["kept_variant"] in result["variants"]
    kept = result["variants"][result["kept_variant"]]
    assert kept["fit_leave_one_case_out"]["spearman"] == max(
        v["fit_leave_one_case_out"]["spearman"] for v in result["variants"].values())
    assert kept["all_leave_one_task_out"]["rows"] == len(rows)
    # rows made by the model itself: ranked well held out, and every sign right
    assert result["summary"]["held_out"]["spearman"] > 0.8
    control = result["controls"][SAME_KERNEL]
    assert len(control["rows"]) == 4 and control["max_abs_log"] < 0.05
    ceilings = result["ceilings_held_out"]
    assert ceilings["rows"] == result["summary"]["held_out"]["rows"]
    assert ceilings["one_remeasurement_with_log_sd"]["0.005"] > ceilings["one_remeasurement_with_log_sd"]["0.030"]
    assert set(result["residual_terms_fit"]) >= {"index_ops", "far_l2_bytes", "registers"}

    again = tmp_path / "again.json"
    done = run_fit(str(plan), "--rows-from", str(first), str(again))
    assert done.returncode == 0, done.stderr[-2000:]
    refit = json.loads(again.read_text())
    assert refit["calibration"]["dram_efficiency"] == result["calibration"]["dram_efficiency"]
    assert [r["set"] for r in refit["rows"]] == [r["set"] for r in rows]
    assert refit["summary"]["held_out"] == result["summary"]["held_out"]


def test_fit_refuses_rows_of_another_plan_in_one_line(tmp_path: Path):
    plan, _ = synthetic(tmp_path)
    summary = tmp_path / "other.json"
    summary.write_text(json.dumps({"device": ["test GPU"], "rows": [
        {"task": "gamma", "case": "gamma bench:0", "order": "a", "measured_speedup": 1.0,
         "measured_ci": [0.99, 1.01], "base_ms": 1.0}]}))
    done = run_fit(str(plan), "--rows-from", str(summary), str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: gamma bench:0: not a case of the plan; give the plan the rows were "
                                   "measured from")


def test_index_ops_counts_run_time_divisions_and_folds_constants():
    from fit import RUNTIME_DIVISION_OPS, index_ops

    assert index_ops("pid = tl.program_id(0)\n") == 0
    assert index_ops(ROW_MAJOR) == 2 * RUNTIME_DIVISION_OPS
    # a division by a constant is one operator; the constant's own arithmetic folds away
    assert index_ops("pid = tl.program_id(0)\nS = 4 * 4\npid = pid // S + 1\n") == 2


def test_collect_measures_controls_first_and_repeats_every_order():
    record = {"orders": [{"order": "default", "permutation_id": "own"}, {"order": "x", "permutation_id": "px"},
                         {"order": "y", "permutation_id": "py"}]}
    assert [o["order"] for o in todo_orders(record)] == ["x", "y"]
    todo = todo_orders(record, controls=True, repeat=2)
    assert [o["order"] for o in todo] == [SAME_KERNEL, OWN_ORDER_SPLICED, "x", "y"] * 2
    assert [o["pass"] for o in todo] == [0] * 4 + [1] * 4
    assert todo[0]["permutation_id"] == "own"
