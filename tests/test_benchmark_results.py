"""The committed GPU results say what the issues claim of them: benchmarks/check_results.py finds no problem."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest

from swizzlelab.io import load_module
from swizzlelab.sim import simulate
from swizzlelab.swizzle import to_permutation
from swizzlelab.tasks import load_task

CHECKER = Path(__file__).resolve().parents[1] / "benchmarks" / "check_results.py"


@pytest.fixture(scope="module")
def checker():
    return load_module(CHECKER, "check_results", str(CHECKER))


def test_every_check_passes(checker):
    problems = {check.__name__: check() for check in checker.CHECKS}
    assert not any(problems.values()), problems


def test_the_evaluator_check_can_fail(checker, monkeypatch, tmp_path):
    """A fooled exploit in a copy of the results is reported."""
    for name in ("exploits_h100", "eval_overhead_h100"):
        shutil.copytree(checker.ROOT / name, tmp_path / name)
    path = tmp_path / "exploits_h100" / "exploits_h100.json"
    doc = json.loads(path.read_text())
    row = next(r for r in doc["rows"] if r["kind"] == "exploit")
    row["fooled"] = True
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(checker, "ROOT", tmp_path)
    assert any(row["name"] in problem for problem in checker.evaluator_h100())


def test_the_validation_row_check_can_fail(checker, monkeypatch, tmp_path):
    """A validation row without a measured hit rate, or with a hit rate outside 0..100, is reported."""
    shutil.copytree(checker.ROOT / "sim_validation", tmp_path / "sim_validation")
    path = tmp_path / "sim_validation" / "sim_validation.json"
    doc = json.loads(path.read_text())
    del doc["rows"][3]["measured_l2_hit_pct"]
    doc["rows"][5]["predicted_l2_hit_pct"] = 140.0
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(checker, "ROOT", tmp_path)
    problems = checker.sim_validation()
    assert any(p.startswith("row 3: measured_l2_hit_pct") for p in problems)
    assert any(p.startswith("row 5: predicted_l2_hit_pct") for p in problems)


def test_the_order_study_check_can_fail(checker, monkeypatch, tmp_path):
    """A best_dram_read_bytes that is not its best order's measured mean is reported."""
    shutil.copytree(checker.ROOT / "optimize_matmul_h100", tmp_path / "optimize_matmul_h100")
    path = tmp_path / "optimize_matmul_h100" / "optimize_matmul_orders_h100.json"
    doc = json.loads(path.read_text())
    doc["best_dram_read_bytes"] *= 0.5
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(checker, "ROOT", tmp_path)
    assert any("best_order" in p for p in checker.optimize_matmul_orders())


def test_the_speed_check_can_fail(checker, monkeypatch, tmp_path):
    """A GPU batch under 1 G accesses/s, or one whose result differs from the CPU engine's, is reported."""
    shutil.copytree(checker.ROOT / "sim_speed", tmp_path / "sim_speed")
    path = tmp_path / "sim_speed" / "sim_speed_gpuhost_h100.json"
    doc = json.loads(path.read_text())
    row = next(r for r in doc["stages"]["gpu_batch"] if r["default_concurrency"])
    row["accesses_per_s"] = 0.9e9
    next(iter(doc["stages"]["gpu_batch"]))["equal_to_cpu_engine"]["grouped:GROUP_M=8"] = False
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(checker, "ROOT", tmp_path)
    problems = checker.sim_speed()
    assert any("under 1 G" in p for p in problems)
    assert any("differs from the CPU engine" in p for p in problems)


def test_the_committed_validation_table_is_the_current_models():
    """sim_validation.json was fitted at the simulator's defaults and predicts as it does today: its fitted values are
    the defaults, and two rows of an L2-bound kernel (SM pace on each GPU's GPC layout) simulate to the same numbers."""
    simulate_module = importlib.import_module("swizzlelab.sim.simulate")
    doc = json.loads((CHECKER.parent / "sim_validation" / "sim_validation.json").read_text())
    assert (doc["fitted_step_cv"], doc["fitted_dram_saturation"], doc["fitted_miss_gain"], doc["fitted_lrc_window"]) \
        == (simulate_module.STEP_TIME_CV_SATURATING, simulate_module.DRAM_SATURATION,
            simulate_module.SATURATION_MISS_GAIN, simulate_module.LRC_WINDOW)
    assert doc["fitted_gpc_bound"] == "model" and doc["progress_model"] == simulate_module.DEFAULT_PROGRESS
    task = load_task("matmul")
    config = task.kernel.GPU_CONFIG
    for gpu in ("H100", "H200"):
        row = next(r for r in doc["rows"] if gpu in r["device"] and r["task"] == "matmul"
                   and r["case"]["m"] == r["case"]["n"] == r["case"]["k"] == 4096 and r["order"] == "row_major")
        case = row["case"]
        args, consts = task.swizzle_args(case, config)
        perm = to_permutation(task.parse_order(row["order"]), task.tile_grid(case, config), args, consts)
        res = simulate(task.access_model(case, config=config), perm, gpu.lower(), occupancy=int(row["occupancy"]))
        assert (100 * res.l2_hit_rate, res.dram_read_bytes) == pytest.approx(
            (row["predicted_l2_hit_pct"], row["predicted_dram_read_bytes"]), rel=1e-12), gpu
