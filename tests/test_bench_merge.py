"""The GPU studies' JSON joins, run here on their committed results: `python -m benchmarks.suggest.run --merge`
(calls of one device, each user once) and benchmarks/wild_gpu/run.py's reading of each measured order from a
run's lines."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUGGEST = ROOT / "benchmarks" / "suggest"


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _merge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.suggest.run", "--merge", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


def test_suggest_calls_merged_recount_the_summary_and_refuse_a_user_twice(tmp_path: Path) -> None:
    merged = json.loads((SUGGEST / "suggest_h200.json").read_text())
    files = []
    for call, about in enumerate(merged["calls"]):  # the committed file split back into its calls
        rows = [{k: v for k, v in s.items() if k != "call"} for s in merged["submissions"] if s["call"] == call]
        path = tmp_path / about["file"]
        path.write_text(json.dumps({"script": merged["script"], "device": merged["device"], **about,
                                    "submissions": rows, "summary": {"wall_s": about["wall_s"]}}))
        files.append(str(path))
    out = tmp_path / "joined.json"
    done = _merge(*files, "--out", str(out))
    assert done.returncode == 0, done.stderr
    joined = json.loads(out.read_text())
    assert joined["submissions"] == merged["submissions"] and joined["summary"] == merged["summary"]
    summary = joined["summary"]
    gains = [s for s in joined["submissions"] if (s["suggestion"].get("measured") or {}).get("low", 0) > 1]
    assert summary["measured_gains_outside_noise"] == len(gains) >= 1
    assert summary["shown_as_gain_but_not_measured_faster"] == 0
    twice = _merge(files[0], files[0], "--out", str(tmp_path / "x.json"))
    assert twice.returncode != 0 and "more than one call" in twice.stderr and not (tmp_path / "x.json").exists()


def test_wild_gpu_reads_each_measured_order_from_the_runs_lines() -> None:
    told = _module(ROOT / "benchmarks" / "wild_gpu" / "run.py").told
    line = ("iteration 1 (hilbert:SIDE=8>column_major@11x12): evaluated: bijection on grid 64x32: every one of 2048 "
            "tiles runs exactly once; predicted hit 80.7%, DRAM read 1.21 GB (model H200-SXM); speedup 1.003x "
            "[0.840, 1.196] predicted (time model H200-SXM); 1.012x [1.010, 1.013] measured (NVIDIA H200): improvement")
    found = told(["  trace derived from 3 interpreted programs", line, line[:240]])
    assert found["trace_how"] == "derived from 3 interpreted programs"
    # the whole line is read; an older timeline's cut copy (240 characters) holds no measurement and adds none
    assert found["measured_orders"] == [{"iteration": 1, "order": "hilbert:SIDE=8>column_major@11x12",
                                         "speedup": 1.012, "ci95": [1.01, 1.013], "kind": "measured (NVIDIA H200)",
                                         "verdict": "improvement"}]
