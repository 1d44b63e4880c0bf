"""The leaderboard example submissions (examples/leaderboard/) pass the task tests through `swizzlelab eval`, their
kernel paths agree with the references, and the committed H100 leader run and work logs agree with each other.

On the CPU the submissions run under the Triton interpreter (histogram's CUDA path is tested only on a GPU).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from swizzlelab.cli import app
from swizzlelab.io import load_module
from swizzlelab.runtime import device
from swizzlelab.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "leaderboard"
# The leader runs' summary, kept as test data when the submissions_h100 study left benchmarks/ (its scripts and raw
# files: git 305b79c:benchmarks/submissions_h100, the raw data's manifest there).
LEADER = ROOT / "tests" / "data" / "leader_h100"
WORKLOGS = ROOT / "docs" / "worklogs"


def _load(task: str):
    path = EXAMPLES / task / "submission.py"
    return load_module(path, f"test_leader_{task}", str(path))


@pytest.mark.parametrize("task", ["histogram", "flash_attention"])
def test_submission_passes_eval_test_mode(task, tmp_path):
    path = EXAMPLES / task / "submission.py"
    result = CliRunner().invoke(app, ["eval", task, str(path), "--mode", "test", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / f"{task}-test.json").read_text())
    assert report["success"] and report["tests"]["passed"] == report["tests"]["total"] >= 4
    assert report["kernel"] == str(path)


def test_flash_attention_every_kernel_path_matches_the_reference():
    """Pointer and TMA-descriptor loads, plain and rotated (QK-prefetch) loops, even and ragged sequence
    lengths: each path the GPU autotuner may pick computes the same attention."""
    sub = _load("flash_attention")
    task = load_task("flash_attention")
    # The submission's CPU_CONFIG (descriptors + prefetch) already runs in the eval test above.
    configs = [
        sub.FlashConfig(16, 16, 4, 1, use_desc=False, prefetch_qk=False),
        sub.FlashConfig(16, 16, 4, 1, use_desc=True, prefetch_qk=False),
        sub.FlashConfig(16, 32, 4, 1, use_desc=False, prefetch_qk=True),
    ]
    cases = task.cases("tests")
    for case in (cases[0], cases[2], cases[4]):  # seq 37 (ragged), 48 (even: TMA path), 200 (many blocks)
        for cfg in configs:
            data = task.generate_input(case)
            out = sub.flash_attention(data["q"], data["k"], data["v"], data["out"], data["sm_scale"], cfg)
            result = task.check(data, out)
            assert result.ok, (case, cfg, result.message)


def test_flash_attention_rejects_a_wrong_scale():
    """The check the examples pass is not vacuous: the kernel with a wrong softmax scale fails it."""
    sub = _load("flash_attention")
    task = load_task("flash_attention")
    data = task.generate_input(task.cases("tests")[2])
    out = sub.flash_attention(data["q"], data["k"], data["v"], data["out"], 2 * data["sm_scale"], sub.CPU_CONFIG)
    assert not task.check(data, out).ok


def test_histogram_triton_path_counts_exactly_on_ragged_shapes():
    sub = _load("histogram")
    task = load_task("histogram")
    for rows, channels, block_c in ((300, 13, 4), (129, 40, 16), (1, 1, 4)):
        data = task.generate_input({"seed": rows + channels, "rows": rows, "channels": channels})
        out = sub.histogram_triton(data["x"], data["out"], rows_per_prog=64, block_r=32, block_c=block_c)
        assert task.check(data, out).ok
        assert int(out.sum()) == rows * channels


@pytest.mark.gpu
@pytest.mark.skipif(device() != "cuda", reason="the CUDA path needs a CUDA GPU")
def test_histogram_cuda_path_on_the_gpu():
    sub = _load("histogram")
    task = load_task("histogram")
    for case in list(task.cases("tests")) + [{"seed": 9, "rows": 70000, "channels": 300}]:
        for cfg in (sub.CudaConfig(), sub.CudaConfig(unroll=4, bands=5, flush_atomic=True)):
            data = task.generate_input(case)
            assert task.check(data, sub.histogram_cuda(data["x"], data["out"], cfg)).ok, (case, cfg)


# ---------------------------------------------------------------- the committed H100 run


def _study() -> dict:
    """The study's summary.json: what its raw files (leader runs, reports, logs) hold that these tests read."""
    return json.loads((LEADER / "summary.json").read_text())


def test_leader_json_has_the_rows_the_issue_asks_for():
    """The leader run (leader_h100.json): every row from one run of the isolated ranked evaluator on the H100."""
    doc = _study()["leader"]
    assert doc["device"] == "NVIDIA H100 80GB HBM3"
    assert doc["command"].startswith("python benchmarks/leader_h100/run.py isolated")
    assert doc["runs"] and all(run["passed"] and run["reason"] is None for run in doc["runs"])
    rows = {(r["task"], r["kind"]): r for r in doc["rows"]}
    assert set(rows) == {
        ("histogram", "ours"), ("histogram", "task_kernel"), ("histogram", "baseline:torch"),
        ("flash_attention", "ours"), ("flash_attention", "task_kernel"), ("flash_attention", "baseline:cudnn"),
        ("flash_attention", "baseline:torch"),
    }
    for row in doc["rows"]:
        assert row["mean_ms"] > 0 and 0 < row["ci95_ms"] < row["mean_ms"] and (ROOT / row["submission"]).is_file()
        assert row["check"].startswith("out: all") and row["n"] >= 10
    assert rows[("histogram", "ours")]["submission"] == "examples/leaderboard/histogram/submission.py"
    # Issue 14's histogram target, and where flash attention stands: faster than cuDNN in the same run, and this
    # run's mean (12.85 ms, variant 49) is under the 13.0 ms target, though its interval reaches 13.04 ms
    # (docs/worklogs/flash_attention.md, ranked_runs.json).
    assert rows[("histogram", "ours")]["mean_ms"] < 0.30
    fa_ours = rows[("flash_attention", "ours")]
    assert fa_ours["mean_ms"] < 13.0
    assert fa_ours["mean_ms"] < rows[("flash_attention", "task_kernel")]["mean_ms"]
    cudnn = rows[("flash_attention", "baseline:cudnn")]
    assert fa_ours["mean_ms"] + fa_ours["ci95_ms"] < cudnn["mean_ms"] - cudnn["ci95_ms"]
    assert cudnn["ours_speedup_ci95"][0] > 1.0


def test_leader_variant_check_names_the_first_preferred_variant():
    """The leader run's device call logged the submission's pick on that H100: the first of CUDA_PREFERENCE, whose
    self-check passed (the leader JSON itself does not name the variant)."""
    sub = _load("flash_attention")
    log = _study()["leader_variant_check_log"]
    first = sub.CUDA_PREFERENCE[0]
    assert f"chosen CudaConfig(variant={first})" in log and f"'cuda_checks': {{'{first}': 'ok'}}" in log
    assert first in sub.CUDA_VARIANTS


def test_sustained_leader_run_used_the_cuda_kernel():
    """The earlier in-process leader run logged the submission's autotune: the CUDA kernel was chosen."""
    (tune,) = _study()["sustained_flash_attention_autotune"]
    assert tune["chosen"]["kind"] == "CudaConfig" and all(v == "ok" for v in tune["cuda_checks"].values())


def test_ranked_report_is_the_isolated_evaluation_of_the_submission():
    """The committed ranked report comes from the isolated evaluator on the H100: all tests passed and the
    benchmark case was timed (the isolated evaluator times no extra library rows; the cuDNN comparison is the
    leader run's, checked above)."""
    doc = _study()["ranked_report"]
    case = doc["case"]
    assert doc["success"] and doc["isolated"] and doc["tests"]["passed"] == doc["tests"]["total"] == 5
    assert doc["kernel"] == "examples/leaderboard/flash_attention/submission.py"
    assert case["check_passed"] and case["candidate"]["n"] >= 10
    assert case["candidate"]["device"] == "NVIDIA H100 80GB HBM3"
    assert case["candidate"]["mean_ms"] < case["baseline"]["mean_ms"]
    assert doc["isolation_line"].startswith("Isolation: sandboxed child")


# ---------------------------------------------------------------- work logs trace to the study's raw JSON
# (through summary.json, which check_results.py rebuilds from the raw files wherever they are restored)

JSON_CELL = re.compile(r"^(steps_\d+(_unpaired)?|leader_h100(_sustained|_20261124|_v\d+)?|flash_attention-ranked|ranked_runs)\.json$")
NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def _records(doc: dict, name: str) -> list:
    # Rows are named by their variant, or (the isolated leader run) by "task/kind".
    found = [r for r in doc.get("rows", []) if name in (r.get("name"), r.get("variant"),
                                                         f"{r.get('task')}/{r.get('kind')}")]
    found += [p for p in doc.get("profiles", []) if p.get("name") == name]
    # Paired comparisons (fa_cuda_steps.py --paired) are named "variant vs base".
    found += [p for p in doc.get("paired", []) if name == f"{p.get('variant')} vs {p.get('base')}"]
    return found


def _numbers(value) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return []


def _matches(cell: str, candidates: list[float]) -> bool:
    decimals = len(cell.split(".")[1]) if "." in cell else 0
    shown = float(cell)
    return any(round(x, decimals) == shown for x in candidates)


@pytest.mark.parametrize("log", ["histogram.md", "flash_attention.md"])
def test_every_worklog_table_row_matches_its_json(log):
    text = (WORKLOGS / log).read_text()
    checked = 0
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        files = [c for c in cells if JSON_CELL.match(c)]
        if not files:
            continue
        doc = _study()["files"][files[0]]
        records = _records(doc, cells[0])
        assert records, f"{log}: {cells[0]} is not in {files[0]}"
        candidates = _numbers(records)
        for cell in cells[1:]:
            if NUMBER.match(cell):
                assert _matches(cell, candidates), f"{log}: {cell} for {cells[0]} is not in {files[0]}"
                checked += 1
    assert checked >= 40
