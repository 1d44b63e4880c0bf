"""Reports and the `eval` command on the CPU: leaderboard shape (text), same content as JSON, atomic files,
and one-line errors for GPU-only modes, unknown tasks and bad submissions.

Timings in the rendering test are summaries of seeded random samples built here, not measurements.
"""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from swizzlelab.cli import app
from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.harness.correctness import CaseResult, RunCheck
from swizzlelab.harness.evaluate import BenchRow, Candidate, EvalReport, ExtraBaseline, ProfileRow
from swizzlelab.harness.ncu import parse_ncu_csv
from swizzlelab.fmt import fmt_bytes
from swizzlelab.harness.report import case_line, fmt_duration_ns, render_text, report_dict, write_reports
from swizzlelab.harness.sysinfo import SystemInfo, system_info
from swizzlelab.harness.timing import compare_samples
from swizzlelab.runtime import cuda_available
from test_harness_ncu import RAW_SAMPLE

GPU = SystemInfo(gpu="NVIDIA H100 80GB HBM3", cpu="AMD EPYC 7R13 Processor", runtime="CUDA",
                 platform="Linux-x86_64", torch="2.11.0", triton="3.6.0", cuda="12.8", python="3.11.9")


def _report(mode: str) -> EvalReport:
    rng = np.random.default_rng(0)
    case = {"seed": 11, "m": 4096, "n": 4096, "k": 4096}
    passed = CaseResult(case={"seed": 1, "m": 37, "n": 53, "k": 40},
                        runs=[RunCheck(seed=1, passed=True, message="ok"), RunCheck(seed=99, passed=True, message="ok")])
    failed = CaseResult(case={"seed": 2, "m": 64, "n": 32, "k": 16},
                        runs=[RunCheck(seed=2, passed=False, message="out: 3 of 2048 elements differ", n_bad=3)])
    comparison = compare_samples(rng.normal(1.3, 0.01, 100), rng.normal(1.0, 0.01, 100), "sem", device=GPU.gpu)
    row = BenchRow(case=case, seed=123456, check=CaseResult(case=case, runs=[RunCheck(123456, True, "ok")]),
                   candidate=comparison.b, baseline=comparison.a, comparison=comparison,
                   order={"spec": "grouped:GROUP_M=8", "grid": [32, 32], "permutation_id": "0123456789abcdef"})
    report = EvalReport(task="matmul", mode=mode, candidate=Candidate(fn=lambda d: d, source="task kernel k.py",
                                                                      order_spec="grouped:GROUP_M=8"),
                        system=GPU, command="swizzlelab eval matmul --mode " + mode)
    report.tests = [passed, failed]
    if mode == "ranked":
        report.ranked = [row]
        report.score_ms = row.candidate.mean_ms
    if mode == "benchmark":
        report.benchmarks = [row]
    if mode == "profile":
        report.profiles = [ProfileRow(case=case, kernels=parse_ncu_csv(RAW_SAMPLE), report_path="r.ncu-rep",
                                      check_message="ok", check_passed=True)]
    return report


def test_ranked_text_has_the_leaderboard_shape():
    text = render_text(_report("ranked"))
    lines = text.splitlines()
    assert lines[0] == "> Leaderboard run failed"  # one test failed
    assert "Running on:" in lines and "* GPU: 'NVIDIA H100 80GB HBM3'" in lines and "* Runtime: 'CUDA'" in lines
    assert "## Passed 1/2 tests:" in lines
    assert "seed: 1; m: 37; n: 53; k: 40" in lines
    assert "## Ranked Benchmark:" in lines
    at = lines.index("seed: 123456; m: 4096; n: 4096; k: 4096")
    assert lines[at + 2].startswith("  ⌚ ") and lines[at + 2].endswith(" ms") and " ± " in lines[at + 2]
    assert lines[at + 3].startswith("  ⚡ ") and "🐌" in lines[at + 3]
    assert "measured (NVIDIA H100 80GB HBM3): n=100" in lines[at + 4]
    assert any("baseline" in line for line in lines) and any("speedup vs baseline: 1.3" in l for l in lines)
    assert any(line.startswith("Ranking score") for line in lines)
    assert "Order: grouped:GROUP_M=8" in lines and any("permutation 0123456789abcdef" in l for l in lines)


def test_profile_text_has_ncu_report_per_kernel():
    text = render_text(_report("profile"))
    assert "## Profiling:" in text and "NCU Report:" in text
    assert "Kernel 0: matmul_kernel" in text and "Kernel 1: vectorized_elementwise_kernel" in text
    assert "DRAM_Read           : 1.00 GB" in text
    assert "Duration            : 5.12 ms" in text
    assert "L2_Cache_Hit_Rate   : 81.25%" in text
    assert "SM_Busy             : n/a" in text


def test_json_carries_the_same_content(tmp_path):
    report = _report("benchmark")
    text_path, json_path = write_reports(report, tmp_path)
    assert text_path.name == "matmul-benchmark.txt" and json_path.name == "matmul-benchmark.json"
    data = json.loads(json_path.read_text())
    assert data == json.loads(json.dumps(report_dict(report)))
    assert data["task"] == "matmul" and data["mode"] == "benchmark" and data["order"]["spec"] == "grouped:GROUP_M=8"
    assert data["tests"] == {"passed": 1, "total": 2, "cases": data["tests"]["cases"]}
    bench = data["benchmarks"][0]
    assert bench["candidate"]["n"] == 100 and bench["candidate"]["label"].startswith("measured (NVIDIA H100")
    assert bench["baseline"]["sem_ms"] > 0 and bench["speedup_vs_baseline"]["is_improvement"] is True
    assert data["system"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_formatters():
    assert case_line({"seed": 3, "m": 2}, seed=9) == "seed: 9; m: 2"
    assert fmt_bytes(512 * 1024**2) == "512.00 MB" and fmt_bytes(10) == "10 B"
    assert fmt_duration_ns(2530) == "2.53 us" and fmt_duration_ns(1.58e6) == "1.58 ms"


def test_system_info_on_this_machine():
    info = system_info()
    assert info.torch != "not installed" and info.triton != "not installed"
    if not cuda_available():
        assert info.runtime == "Triton interpreter (CPU)" and "not a GPU timing" in info.measured_label()


def test_eval_command_test_mode_writes_reports(tmp_path):
    result = CliRunner().invoke(app, ["eval", "transpose", "--mode", "test", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "## Passed 6/6 tests:" in result.output  # transpose task.yml: 6 test cases
    data = json.loads((tmp_path / "transpose-test.json").read_text())
    assert data["tests"]["passed"] == 6 and data["success"] is True
    assert (tmp_path / "transpose-test.txt").read_text().startswith("> Testing successful")


def test_eval_command_failing_submission_exits_1(tmp_path):
    sub = tmp_path / "wrong.py"
    sub.write_text("def custom_kernel(data):\n    return data['out'].copy_(data['x'].t() + 1)\n")
    result = CliRunner().invoke(app, ["eval", "transpose", str(sub), "--mode", "test"])
    assert result.exit_code == 1
    assert "## Passed 0/6 tests:" in result.output and "elements differ" in result.output


@pytest.mark.skipif(cuda_available(), reason="checks the CPU-only error")
@pytest.mark.parametrize("mode", ["benchmark", "ranked", "profile"])
def test_gpu_modes_say_they_need_a_gpu(mode):
    result = CliRunner().invoke(app, ["eval", "transpose", "--mode", mode])
    assert isinstance(result.exception, NoGpuError)
    assert "needs a CUDA GPU" in str(result.exception) and "\n" not in str(result.exception)


@pytest.mark.parametrize(
    "args,fragment",
    [(["eval", "no_such_task"], "unknown task"), (["eval", "transpose", "missing_file.py"], "does not exist"),
     (["eval", "transpose", "--mode", "fast"], "unknown --mode")],
)
def test_bad_input_is_one_user_error(args, fragment):
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, UserError) and fragment in str(result.exception)


def test_ranked_text_and_json_carry_the_extra_library_rows():
    rng = np.random.default_rng(1)
    report = _report("ranked")
    extra = compare_samples(rng.normal(0.9, 0.01, 100), rng.normal(1.0, 0.01, 100), "sem", device=GPU.gpu)
    report.ranked[0].extra_baselines = [
        ExtraBaseline(name="cudnn", description="SDPA, cuDNN backend", timing=extra.a, comparison=extra),
        ExtraBaseline(name="other", description="x", error="other not timed: RuntimeError: absent"),
    ]
    lines = render_text(report).splitlines()
    at = lines.index("  baseline cudnn (SDPA, cuDNN backend):")
    assert lines[at + 1].startswith("    ⌚ 0.89") and "measured (NVIDIA H100 80GB HBM3)" in lines[at + 3]
    assert lines[at + 4].startswith("  speedup vs cudnn: 0.90") and "(slower;" in lines[at + 4]
    assert "  other not timed: RuntimeError: absent" in lines
    # The library row comes after the task baseline's own lines: the leaderboard part keeps its shape.
    assert lines.index("  baseline (the task's library implementation):") < at
    extras = report_dict(report)["ranked"]["cases"][0]["extra_baselines"]
    assert extras[0]["name"] == "cudnn" and extras[0]["speedup_vs_baseline"]["is_improvement"] is False
    assert extras[1]["timing"] is None and extras[1]["error"].startswith("other not timed")
