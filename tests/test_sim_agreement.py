"""Agreement rules of predictions with measurements (swizzlelab.sim.agreement), the occupancy choice
(swizzlelab.hw.measured_occupancy), and a dry run of benchmarks/sim_validation/run.py as a command (its child,
benchmarks/lab/ncu_launch.py, started as the GPU run starts it under ncu)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swizzlelab.hw import measured_occupancy
from swizzlelab.sim import agreement as script
from swizzlelab.sim.agreement import agreement_by_predicted_gap, below_resolution

ROOT = Path(__file__).resolve().parents[1]


def test_kendall_tau_and_ranks():
    assert script.kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert script.kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    assert script.kendall_tau([1, 2, 3], [10, 30, 20]) == pytest.approx(1 / 3)
    assert script.ranks([58.0, 83.0, 70.0]) == [2, 0, 1]


def test_summary_error_and_ranking():
    rows = [
        {"predicted_l2_hit_pct": 62.0, "measured_l2_hit_pct": 58.0,
         "predicted_dram_read_bytes": 4.36e9, "measured_dram_read_bytes": 4.4e9},
        {"predicted_l2_hit_pct": 81.0, "measured_l2_hit_pct": 83.0,
         "predicted_dram_read_bytes": 1.75e9, "measured_dram_read_bytes": 1.55e9},
    ]
    summary = script.summarize(rows)
    assert summary["mae_pp"] == pytest.approx(3.0)
    assert summary["ranking_matches"] is True and summary["kendall_tau_dram"] == 1.0
    rows[1]["measured_l2_hit_pct"] = 50.0
    assert script.summarize(rows)["ranking_matches"] is False
    rows[1]["predicted_l2_hit_pct"] = 62.5  # a near-tie in the prediction: no pair to judge
    assert script.summarize(rows)["ranking_matches"] is None
    assert script.pair_agreement([1, 5, 9], [2, 8, 4], 1.0) == (2, 1)
    rows[0]["measured_l2_hit_pct"] = None
    assert script.summarize(rows)["mae_pp"] is None


def test_occupancy_prefers_ncu_then_compiled_kernel_then_given():
    resources = {"n_regs": 168, "shared_bytes": 98304, "num_warps": 8}
    assert measured_occupancy([2.0, 2.0, 8.0, 32.0], resources, 3) == (2, "ncu launch__occupancy_limit_*")
    assert measured_occupancy([None, 0.0], resources, 3) == (1, "compiled kernel")
    assert measured_occupancy([], None, 3) == (3, "given (--occupancy)")


def test_validation_rows_dry_run_writes_a_record(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.sim_validation.run", str(tmp_path), "--dry-run", "--only", "transpose"],
        capture_output=True, text=True, cwd=ROOT, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "sim_ncu_rows_cpu_dry_run_no_measurement.json").read_text())
    assert record["device"].startswith("cpu (dry run") and not record["failures"]
    assert record["rows"] and all(r["task"] == "transpose" and r["output_correct"] for r in record["rows"])
    assert len({r["order"] for r in record["rows"]}) == len(record["rows"]) > 1
    assert all(r["measured_l2_hit_pct"] is None and r["kernel_name"] is None for r in record["rows"])


def test_agreement_by_predicted_gap_bins_pairs_by_how_far_apart_the_model_puts_them():
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
