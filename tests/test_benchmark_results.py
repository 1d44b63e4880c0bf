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
