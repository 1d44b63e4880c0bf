"""benchmarks/sim_calibration/run.py, run as a command on a small synthetic measurement file: re-prediction,
fit/held-out split, MAE; and the agreement rules it shares with sim_vs_ncu (swizzlelab.sim.agreement)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swizzlelab.hw import get_model
from swizzlelab.sim import SimParams, simulate
from swizzlelab.swizzle import to_permutation
from swizzlelab.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "sim_calibration" / "run.py"
ORDERS = ("row_major", "column_major", "grouped:GROUP_M=2")


def calibrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=600)


def measured_file(tmp_path: Path) -> Path:
    """A sim_vs_ncu-shaped file for two small matmul cases; 'measured' values are arbitrary inputs."""
    task = load_task("matmul")
    config = task.kernel.GPU_CONFIG
    rows = []
    for m, base in ((512, 70.0), (384, 60.0)):
        case = {"seed": 1, "m": m, "n": m, "k": 256}
        grid = task.tile_grid(case, config)
        args, consts = task.swizzle_args(case, config)
        for i, order in enumerate(ORDERS):
            perm = to_permutation(task.parse_order(order), grid, args, consts)
            rows.append({
                "task": "matmul", "case": case, "order": order, "permutation_id": perm.id, "occupancy": 2,
                "predicted_l2_hit_pct": base + 5.0, "measured_l2_hit_pct": base - 3.0 * i,
                "predicted_dram_read_bytes": 1e6, "measured_dram_read_bytes": 2e6 + 1e5 * i,
                "predicted_l2_lookup_sectors": 100, "measured_l2_sectors": 90,
                "measured_by": "measured (test input)",
            })
    path = tmp_path / "sim_vs_ncu_test.json"
    path.write_text(json.dumps({"device": "test", "model": "H100-SXM", "rows": rows}))
    return path


def test_calibration_repredicts_every_row_and_splits_fit_from_held_out(tmp_path):
    out = tmp_path / "cal.json"
    done = calibrate("--measured", str(measured_file(tmp_path)), "--out", str(out), "--fit-grid", "0,0.5",
                     "--fit-set", "matmul:512")
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    rows = record["rows"]
    assert len(rows) == 2 * len(ORDERS)
    assert [r["set"] for r in rows] == ["fit"] * 3 + ["held_out"] * 3

    # new predictions are the current simulator's random walk at the measured occupancy
    task = load_task("matmul")
    config = task.kernel.GPU_CONFIG
    row = rows[4]
    trace = task.access_model(row["case"], config=config)
    perm = to_permutation(task.parse_order(row["order"]), task.tile_grid(row["case"], config),
                          *task.swizzle_args(row["case"], config))
    direct = simulate(trace, perm, get_model("h100"), SimParams(progress="random_walk"), occupancy=2)
    assert row["new_predicted_l2_hit_pct"] == pytest.approx(100 * direct.l2_hit_rate)
    assert row["new_predicted_dram_read_bytes"] == direct.dram_read_bytes
    lockstep = simulate(trace, perm, get_model("h100"), SimParams(progress="random_walk", step_cv=0.0), occupancy=2)
    assert row["lockstep_new_counting_l2_hit_pct"] == pytest.approx(100 * lockstep.l2_hit_rate)

    summary = record["summary"]
    for name in ("fit", "held_out"):
        errors = [abs(r["new_predicted_l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in rows if r["set"] == name]
        assert summary["new_mae_pp"][name] == pytest.approx(sum(errors) / len(errors))
        old = [abs(r["old_predicted_l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in rows if r["set"] == name]
        assert summary["old_mae_pp"][name] == pytest.approx(sum(old) / len(old))
    # the sweep covers only the fit set, and its lockstep point equals the lockstep column there
    fit_rows = [r for r in rows if r["set"] == "fit"]
    assert all(set(r["sweep_l2_hit_pct"]) == {"cv=0", "cv=0.5"} for r in fit_rows)
    assert all(r["sweep_l2_hit_pct"]["cv=0"] == r["lockstep_new_counting_l2_hit_pct"] for r in fit_rows)
    lockstep_errors = [abs(r["lockstep_new_counting_l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in fit_rows]
    assert summary["fit_sweep_mae_pp"]["0"] == pytest.approx(sum(lockstep_errors) / 3)
    assert all(r["sweep_l2_hit_pct"] == {} for r in rows if r["set"] == "held_out")
    assert {c["set"] for c in record["cases"]} == {"fit", "held_out"}


def test_calibration_refuses_rows_whose_order_changed(tmp_path):
    path = measured_file(tmp_path)
    record = json.loads(path.read_text())
    record["rows"][0]["permutation_id"] = "0" * 16
    path.write_text(json.dumps(record))
    done = calibrate("--measured", str(path), "--out", str(tmp_path / "cal.json"), "--only", "matmul")
    assert done.returncode != 0 and "differs from the measured" in done.stderr


def test_agreement_by_predicted_gap_bins_pairs_by_how_far_apart_the_model_puts_them():
    from swizzlelab.sim.agreement import agreement_by_predicted_gap, below_resolution

    def row(pred_dram, meas_dram, pred_hit, meas_hit):
        return {"predicted_dram_read_bytes": pred_dram, "measured_dram_read_bytes": meas_dram,
                "predicted_l2_hit_pct": pred_hit, "measured_l2_hit_pct": meas_hit}

    # DRAM: a-b predicted 1% apart and measured reversed; a-c 20% apart, measured alike; b-c 19%, measured 0.5%.
    # Hit: a-b predicted 0.2 pp apart and measured 2 pp the same way; a-c and b-c over 2 pp apart, measured alike.
    case = [row(100, 110, 80.0, 79.0), row(101, 100, 80.2, 81.0), row(122, 110.5, 70.0, 70.5)]
    got = agreement_by_predicted_gap([case])
    dram = {b["predicted_gap_from"]: (b["concordant"], b["discordant"], b["measured_tie"]) for b in got["dram_read"]}
    assert dram == {0.0: (0, 1, 0), 0.02: (0, 0, 0), 0.05: (0, 0, 0), 0.1: (1, 0, 1)}
    hit = {b["predicted_gap_from"]: (b["concordant"], b["discordant"], b["measured_tie"]) for b in got["l2_hit"]}
    assert hit == {0.0: (1, 0, 0), 0.5: (0, 0, 0), 1.0: (0, 0, 0), 2.0: (2, 0, 0)}
    assert below_resolution(["a", "b", "c"], [100, 101, 122], [80.0, 80.2, 70.0]) == [("a", "b")]
    assert below_resolution(["a", "b"], [100, 101], [80.0, 81.0]) == []  # 1 pp of hit apart: resolved
