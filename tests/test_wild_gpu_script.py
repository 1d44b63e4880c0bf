"""python -m benchmarks.wild_gpu.run (the GPU study of published kernel files, run by hand on a GPU) on the CPU with
--small inputs: one kernel per call, the command as typed, the trace method line, when each phase ended, the
report, a JSON per call, and --merge joining the calls' JSONs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.wild_gpu.run", *args], capture_output=True, text=True,
                          timeout=400, check=False, cwd=ROOT)


def test_wild_gpu_script_one_kernel_per_call_then_merged(tmp_path: Path) -> None:
    for name in ("t03", "t06"):
        done = _run(str(tmp_path), "--only", name, "--small", "--budget", "1", "--timeout-s", "300")
        assert done.returncode == 0, done.stdout + done.stderr
    t03_file, t06_file = (tmp_path / f"wild_gpu_no-gpu_{name}_small.json" for name in ("t03", "t06"))
    row = json.loads(t03_file.read_text())["runs"]["t03"]
    assert row["rc"] == 0 and not row["timed_out"] and row["wall_s"] > 0 and row["timeout_s"] == 300
    assert row["command"].startswith("swizzlelab optimize matmul --kernel tests/wild/triton_03_matmul.py")
    # --small: 6 programs, too few to derive from a sample; the line says so and where it was traced
    assert row["trace_method"].startswith("interpreted every one of its 6 programs")
    assert row["trace_method"].endswith("; in this process under the Triton interpreter")
    assert isinstance(row["prediction_separates_orders"], bool) and row["best_order"]["formula"]
    assert row["separation"].startswith("the predictions ")
    assert row["best_speedup"] is None  # nothing is measured without a GPU
    # when each phase ended, in the order the run goes through them, none later than the command's end
    ends = [row["phases"][p]["at_s"] for p in ("traced", "baseline", "first_sweep", "stopped_or_done")]
    assert ends == sorted(ends) and ends[-1] <= row["wall_s"] and row["phases"]["traced"]["own_s"] > 0
    assert any("trace method:" in line for _, line in row["timeline"])
    assert (tmp_path / "t03" / "best_kernel.py").is_file() and (tmp_path / "t03" / "cli.log").is_file()

    merged_file = tmp_path / "wild_gpu_merged.json"
    done = _run("--merge", str(t03_file), str(t06_file), "--out", str(merged_file))
    assert done.returncode == 0, done.stderr
    merged = json.loads(merged_file.read_text())
    assert list(merged["runs"]) == ["t03", "t06"] and merged["device"] == "no-gpu"
    assert merged["runs"]["t03"] == row and len(merged["script"]) == 2
    # a merge refuses files of two devices in one line; a kernel's later call replaces its earlier one
    other = json.loads(t06_file.read_text())
    other["device"] = "NVIDIA H200"
    (tmp_path / "other.json").write_text(json.dumps(other))
    refused = _run("--merge", str(t03_file), str(tmp_path / "other.json"), "--out", str(tmp_path / "x.json"))
    assert refused.returncode == 2 and "2 devices" in refused.stderr and not (tmp_path / "x.json").exists()
    later = json.loads(t03_file.read_text())
    later["runs"]["t03"]["wall_s"] = -1.0
    (tmp_path / "later.json").write_text(json.dumps(later))
    twice = _run("--merge", str(t03_file), str(t06_file), str(tmp_path / "later.json"), "--out", str(tmp_path / "x.json"))
    assert twice.returncode == 0 and "later.json: its t03 replaces the earlier call's" in twice.stdout
    assert json.loads((tmp_path / "x.json").read_text())["runs"]["t03"]["wall_s"] == -1.0
