"""benchmarks/wild_gpu/run.py (the GPU study of published kernel files, run by hand on an H100) on the CPU with
--small inputs: it runs the command as typed, reads the trace method line and the report, and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wild_gpu_script_smoke(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "wild_gpu" / "run.py"), str(tmp_path), "--only",
                           "t03", "--small", "--budget", "1", "--timeout-s", "300"], capture_output=True, text=True,
                          timeout=400, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (result_file,) = tmp_path.glob("wild_gpu_*.json")
    row = json.loads(result_file.read_text())["runs"]["t03"]
    assert row["rc"] == 0 and not row["timed_out"] and row["wall_s"] > 0
    assert row["command"].startswith("swizzlelab optimize matmul --kernel tests/wild/triton_03_matmul.py")
    assert row["trace_method"] == "traced in this process under the Triton interpreter"
    assert isinstance(row["prediction_separates_orders"], bool) and row["best_order"]["formula"]
    assert row["best_speedup"] is None  # nothing is measured without a GPU
    assert (tmp_path / "t03" / "best_kernel.py").is_file() and (tmp_path / "t03" / "cli.log").is_file()
