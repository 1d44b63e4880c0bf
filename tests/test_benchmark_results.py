"""The committed GPU results say what the issues claim of them: benchmarks/check_results.py finds no problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from swizzlelab.io import load_module

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
