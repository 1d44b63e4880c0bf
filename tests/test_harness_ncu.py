"""Nsight Compute CSV parsing and the `ncu` command line, on samples written by hand in the shape ncu prints.

The samples below are hand-written (not captured from a GPU): raw page with a units row, details page, ==PROF== noise.
"""

import pytest

from swizzlelab.errors import ToolMissingError, UserError
from swizzlelab.harness import ncu as ncu_mod
from swizzlelab.harness.ncu import (
    NAMED_METRIC_IDS,
    normalize_unit,
    ncu_profile_command,
    parse_ncu_csv,
    parse_number,
    run_ncu,
)

# Hand-written in the shape of `ncu --import r.ncu-rep --csv --page raw --print-units base` (ncu 2025.x):
# a header row, a units row with empty launch columns, then one row per kernel; thousands separators in values.
RAW_SAMPLE = '''==PROF== Connected to process 4242 (/usr/bin/python3.11)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum","lts__t_sector_hit_rate.pct","l1tex__m_xbar2l1tex_read_bytes.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"
"","","","","","","","","","","","byte","byte","nsecond","%","byte","%"
"0","4242","python3.11","127.0.0.1","matmul_kernel","1","7","(256, 1, 1)","(4096, 1, 1)","0","9.0","1,073,741,824","134,217,728","5,123,456","81.25","4,294,967,296","71.02"
"1","4242","python3.11","127.0.0.1","vectorized_elementwise_kernel","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0","4096","0","2,530","n/a","512","1.20"
'''

# Hand-written in the shape of the details page (`--page details --csv`) with auto-scaled units.
DETAILS_SAMPLE = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","77","python3","host","transpose_kernel","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Mbyte","33.55"
"0","77","python3","host","transpose_kernel","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","12.5"
"0","77","python3","host","transpose_kernel","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics","lts__t_sector_hit_rate.pct","%","44.10"
"1","77","python3","host","transpose_kernel","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","Kbyte","1,024.00"
"1","77","python3","host","transpose_kernel","1","7","(128, 1, 1)","(512, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","1.5"
'''


def test_raw_page_values_units_and_order():
    kernels = parse_ncu_csv(RAW_SAMPLE)
    assert [k.kernel_name for k in kernels] == ["matmul_kernel", "vectorized_elementwise_kernel"]
    assert [k.launch_index for k in kernels] == [0, 1]
    first = kernels[0]
    assert first.values["dram__bytes_read.sum"] == 1073741824
    assert first.units["dram__bytes_read.sum"] == "bytes"
    assert first.values["gpu__time_duration.sum"] == 5123456
    assert first.units["gpu__time_duration.sum"] == "ns"
    assert first.values["lts__t_sector_hit_rate.pct"] == pytest.approx(81.25)
    assert first.grid_size == "(4096, 1, 1)"
    # 'n/a' is absent, not zero
    assert "lts__t_sector_hit_rate.pct" not in kernels[1].values
    named = first.named()
    assert named["Duration"] == 5123456 and named["L2_Cache_Hit_Rate"] == pytest.approx(81.25)
    assert named["L2_to_L1_Traffic"] == 4294967296
    assert named["SM_Busy"] is None  # not in this sample


def test_details_page_groups_rows_by_launch_and_scales_units():
    kernels = parse_ncu_csv(DETAILS_SAMPLE)
    assert len(kernels) == 2
    assert kernels[0].values["dram__bytes_read.sum"] == pytest.approx(33.55e6)
    assert kernels[0].values["gpu__time_duration.sum"] == pytest.approx(12500.0)
    assert kernels[1].values["dram__bytes_read.sum"] == pytest.approx(1.024e6)
    assert kernels[1].values["gpu__time_duration.sum"] == pytest.approx(1.5e6)


def test_no_csv_gives_no_kernels():
    assert parse_ncu_csv("==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n") == []


@pytest.mark.parametrize(
    "unit,value,expected",
    [("byte", 3.0, (3.0, "bytes")), ("Gbyte", 2.0, (2e9, "bytes")), ("usecond", 4.0, (4000.0, "ns")),
     ("%", 50.0, (50.0, "%")), ("Gbyte/second", 1.5, (1.5e9, "bytes_per_s")), ("cycle", 7.0, (7.0, "cycle"))],
)
def test_normalize_unit(unit, value, expected):
    assert normalize_unit(unit, value) == expected


def test_parse_number():
    assert parse_number("1,234.5") == 1234.5
    assert parse_number("n/a") is None
    assert parse_number("") is None
    assert parse_number("abc") is None


def test_named_metrics_are_the_thirteen_summary_lines():
    assert len(NAMED_METRIC_IDS) == 13
    assert "lts__t_sector_hit_rate.pct" in NAMED_METRIC_IDS and "dram__bytes_read.sum" in NAMED_METRIC_IDS


def test_profile_command_line():
    cmd = ncu_profile_command("ncu", ["python", "-m", "x"], ["a.sum", "b.pct"], "/tmp/r", kernel_regex="mm.*",
                              launch_skip=2, launch_count=1, profile_from_start=False)
    assert cmd[:1] == ["ncu"] and cmd[-3:] == ["python", "-m", "x"]
    joined = " ".join(cmd)
    assert "--metrics a.sum,b.pct" in joined and "--kernel-name regex:mm.*" in joined
    assert "--launch-skip 2" in joined and "--launch-count 1" in joined and "--profile-from-start off" in joined
    assert "--export /tmp/r" in joined


def test_missing_ncu_is_one_line_tool_error(monkeypatch):
    monkeypatch.setenv("NCU", "/nonexistent/ncu")
    monkeypatch.setattr(ncu_mod.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu_mod.Path, "glob", lambda self, pattern: iter(()))
    with pytest.raises(ToolMissingError) as info:
        run_ncu(["true"], ["lts__t_sector_hit_rate.pct"])
    assert "\n" not in str(info.value) and "ncu" in str(info.value)


def test_run_ncu_with_a_fake_ncu(tmp_path, monkeypatch):
    """A stand-in `ncu` script: exports a report file, then prints RAW_SAMPLE on --import."""
    sample = tmp_path / "sample.csv"
    sample.write_text(RAW_SAMPLE)
    fake = tmp_path / "ncu"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--import" ]; then cat ' + str(sample) + "; exit 0; fi\n"
        'while [ "$#" -gt 0 ]; do if [ "$1" = "--export" ]; then touch "$2.ncu-rep"; fi; shift; done\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("NCU", str(fake))
    rep = tmp_path / "out" / "case0.ncu-rep"
    kernels = run_ncu(["true"], ["dram__bytes_read.sum", "lts__t_sector_hit_rate.pct"], report_path=rep)
    assert rep.exists()
    assert kernels[0].values["dram__bytes_read.sum"] == 1073741824


def test_run_ncu_failure_is_one_line(tmp_path, monkeypatch):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho '==ERROR== The application returned an error code (1).' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("NCU", str(fake))
    with pytest.raises(UserError) as info:
        run_ncu(["false"], ["dram__bytes_read.sum"])
    assert "application returned an error code" in str(info.value) and "\n" not in str(info.value)


FAKE_NCU = '''#!{python}
"""Stand-in for ncu: runs the profiled command for real, exports an empty report, prints a CSV on --import."""
import pathlib, subprocess, sys
args = sys.argv[1:]
if args[0] == "--import":
    print(pathlib.Path({sample!r}).read_text())
    sys.exit(0)
with_value = {{"--target-processes", "--export", "--metrics", "--profile-from-start", "--kernel-name",
              "--launch-skip", "--launch-count"}}
i, export = 0, None
while args[i].startswith("--"):
    if args[i] == "--export":
        export = args[i + 1]
    i += 2 if args[i] in with_value else 1
code = subprocess.run(args[i:]).returncode
pathlib.Path(export + ".ncu-rep").write_text("fake")
sys.exit(code)
'''


def test_profile_case_end_to_end_with_a_fake_ncu(tmp_path, monkeypatch):
    """The child process runs the transpose kernel (interpreter), checks it, and the parent reads the CSV."""
    import sys

    from swizzlelab.harness.evaluate import make_candidate, profile_case
    from swizzlelab.tasks import load_task

    sample = tmp_path / "sample.csv"
    sample.write_text(RAW_SAMPLE)
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, sample=str(sample)))
    fake.chmod(0o755)
    monkeypatch.setenv("NCU", str(fake))
    task = load_task("transpose")
    row = profile_case(task, make_candidate(task, None, "grouped:GROUP_M=2"), task.cases("tests")[0], tmp_path, 0)
    assert row.check_passed, row.check_message
    assert row.report_path.endswith("transpose-profile-case0.ncu-rep")
    assert [k.kernel_name for k in row.kernels] == ["matmul_kernel", "vectorized_elementwise_kernel"]
    assert len(row.order["permutation_id"]) == 16


def test_profile_child_reports_a_wrong_output(tmp_path, monkeypatch):
    import sys

    from swizzlelab.harness.evaluate import make_candidate, profile_case
    from swizzlelab.tasks import load_task

    sample = tmp_path / "sample.csv"
    sample.write_text(RAW_SAMPLE)
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable, sample=str(sample)))
    fake.chmod(0o755)
    monkeypatch.setenv("NCU", str(fake))
    skipping = tmp_path / "skip.py"
    skipping.write_text("pid = tl.program_id(0)\npid_m = pid // num_pid_n\npid_n = (pid % num_pid_n) // 2 * 2\n")
    task = load_task("transpose")
    candidate = make_candidate(task, None, str(skipping))
    from swizzlelab.harness import evaluate as evaluate_mod

    monkeypatch.setattr(evaluate_mod, "order_info", lambda *a: {"spec": str(skipping)})
    row = profile_case(task, candidate, task.cases("tests")[0], tmp_path, 1)
    assert not row.check_passed and "still poisoned" in row.check_message


@pytest.mark.gpu
def test_profile_on_gpu_with_real_ncu():
    """Real ncu on a small transpose case: kernels come back with a duration and an L2 hit rate."""
    from swizzlelab.harness.evaluate import profile
    from swizzlelab.tasks import load_task

    try:
        ncu_mod.find_ncu()
    except ToolMissingError:
        pytest.skip("ncu is not installed")
    task = load_task("transpose")
    kernels = profile(task, task.cases("tests")[1], "grouped:GROUP_M=2")
    assert kernels and all(k.kernel_name for k in kernels)
    named = kernels[0].named()
    assert named["Duration"] > 0 and 0 <= named["L2_Cache_Hit_Rate"] <= 101
