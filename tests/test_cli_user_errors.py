"""What a new user meets on the command line: bad input is exit code 2 and one line (never a traceback or a
misleading hint), short commands start without torch/triton, piped output is one record per line."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from swizzlelab.cli.main import main
from swizzlelab.optimize import Options, read_jsonl, run
from swizzlelab.scenario import load_scenario
from swizzlelab.sim import simulate
from swizzlelab.sim.gpu import unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
SMALL_MATMUL = ["--size", "m=256", "--size", "n=256", "--size", "k=64"]


def cli(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """Run the console entry point in this process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["swizzlelab", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


def one_error_line(code: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_optimize_out_that_cannot_be_written(monkeypatch, capsys) -> None:
    line = one_error_line(*cli(["optimize", "matmul", *SMALL_MATMUL, "--target", "h100", "--budget", "1",
                                "--out", "/proc/swizzlelab-x"], monkeypatch, capsys)[::2])
    assert "--out /proc/swizzlelab-x" in line and "writable folder" in line


@pytest.mark.parametrize("given", ["soon", "-3m", "0", "inf", "3 weeks"])
def test_optimize_time_budget_that_is_not_a_duration(given: str, monkeypatch, capsys) -> None:
    line = one_error_line(*cli(["optimize", "matmul", *SMALL_MATMUL, "--target", "h100", "--budget", "1",
                                "--time-budget", given], monkeypatch, capsys)[::2])
    assert f"--time-budget {given!r}" in line and "3m" in line


def test_durations_people_type() -> None:
    from swizzlelab.cli.common import parse_duration

    assert parse_duration("3m", "--x") == 180 and parse_duration("90s", "--x") == 90
    assert parse_duration("1.5min", "--x") == 90 and parse_duration(" 120 ", "--x") == 120
    assert parse_duration("1h", "--x") == 3600 and parse_duration(None, "--x") is None


def test_optimize_out_that_is_a_file(tmp_path: Path, monkeypatch, capsys) -> None:
    existing = tmp_path / "notes.txt"
    existing.write_text("mine\n")
    line = one_error_line(*cli(["optimize", "matmul", *SMALL_MATMUL, "--target", "h100", "--budget", "1",
                                "--out", str(existing)], monkeypatch, capsys)[::2])
    assert "is a file" in line and existing.read_text() == "mine\n"


def test_optimize_sim_engine_unknown_or_without_a_gpu(tmp_path: Path, monkeypatch, capsys) -> None:
    line = one_error_line(*cli(["optimize", "matmul", *SMALL_MATMUL, "--target", "h100", "--sim-engine", "tpu",
                                "--out", str(tmp_path / "o")], monkeypatch, capsys)[::2])
    assert "--sim-engine 'tpu' is unknown: use one of auto, cpu, gpu" in line
    reason = unavailable_reason()
    if reason is None:
        return  # a GPU here: --sim-engine gpu runs
    line = one_error_line(*cli(["optimize", "matmul", *SMALL_MATMUL, "--target", "h100", "--budget", "1",
                                "--sim-engine", "gpu", "--out", str(tmp_path / "p")], monkeypatch, capsys)[::2])
    assert line == f"error: simulator engine gpu cannot run here: {reason}"
    assert not (tmp_path / "p" / "iterations.jsonl").exists() or not read_jsonl(tmp_path / "p" / "iterations.jsonl")[1]


def test_zero_size_names_the_size_not_the_grid(monkeypatch, capsys) -> None:
    line = one_error_line(*cli(["simulate", "matmul", "--size", "m=0"], monkeypatch, capsys)[::2])
    assert "--size m=0" in line and "--grid" not in line


def test_sizes_joined_by_commas_get_the_spelling_that_works(monkeypatch, capsys) -> None:
    line = one_error_line(*cli(["simulate", "matmul", "--size", "m=4096,n=4096"], monkeypatch, capsys)[::2])
    assert "expected a whole number" in line and "one NAME=VALUE per --size" in line


def test_serve_with_bad_options_writes_nothing(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error_line(*cli(["serve", "--db", "bogus://x", "--port", "0"], monkeypatch, capsys)[::2])
    assert "'bogus' is not supported" in line
    line = one_error_line(*cli(["serve", "--workers", "many", "--port", "0"], monkeypatch, capsys)[::2])
    assert "--workers 'many'" in line
    assert list(tmp_path.iterdir()) == []  # no data folder, no admin token, no database


def test_serve_refuses_a_bad_or_taken_port_before_it_says_it_is_up(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_error_line(*cli(["serve", "--port", "99999"], monkeypatch, capsys)[::2])
    assert "--port 99999 is out of range" in line
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, out, err = cli(["serve", "--port", str(taken.getsockname()[1]), "--workers", "0"], monkeypatch, capsys)
    assert "the port is taken" in one_error_line(code, err) and "leaderboard on" not in out + err
    line = one_error_line(*cli(["serve", "--port", "0", "--host-mem-gib", "100000"], monkeypatch, capsys)[::2])
    assert "--host-mem-gib 100000" in line
    line = one_error_line(*cli(["serve", "--port", "0", "--disk-gib", "0"], monkeypatch, capsys)[::2])
    assert "--disk-gib 0" in line
    assert list(tmp_path.iterdir()) == []


def test_submit_a_folder_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("SWIZZLELAB_TOKEN", raising=False)
    line = one_error_line(*cli(["submit", "histogram", str(tmp_path)], monkeypatch, capsys)[::2])
    assert "is a folder" in line


def test_case_out_of_range_suggests_the_spelling_it_accepts(monkeypatch, capsys) -> None:
    line = one_error_line(*cli(["trace", "matmul", "--case", "test:99"], monkeypatch, capsys)[::2])
    assert "test:0 to test:3" in line and "tests:" not in line


def test_a_scenario_too_big_for_memory_is_refused_up_front(monkeypatch, capsys) -> None:
    line = one_error_line(*cli(["simulate", "matmul", "--size", "m=1000000", "--size", "n=1000000"],
                               monkeypatch, capsys)[::2])
    assert re.search(r"needs about [\d.]+ (GB|TB) of memory", line) and "available" in line


def test_a_second_launch_axis_is_refused_for_a_1d_launch(tmp_path: Path, monkeypatch, capsys) -> None:
    formula = tmp_path / "two_d.py"
    formula.write_text("pid_m = tl.program_id(0)\npid_n = tl.program_id(1)\n")
    line = one_error_line(*cli(["simulate", "matmul", *SMALL_MATMUL, "--order", str(formula)], monkeypatch,
                               capsys)[::2])
    assert "tl.program_id(1)" in line and "1-D grid" in line


@pytest.mark.parametrize("command", ["simulate", "eval"])
def test_unknown_names_are_explained_without_options_the_command_lacks(command, tmp_path: Path, monkeypatch,
                                                                        capsys) -> None:
    formula = tmp_path / "uses_m.py"
    formula.write_text("pid = tl.program_id(0)\npid = (pid + GROUP) % tl.num_programs(0)\n")
    line = one_error_line(*cli([command, "spmv", "--order", str(formula)], monkeypatch, capsys)[::2])
    assert "GROUP" in line and "--arg" not in line and "--const" not in line


def test_simulate_defaults_to_the_kernels_own_order_and_names_occupancy(monkeypatch, capsys) -> None:
    code, out, _ = cli(["simulate", "matmul", *SMALL_MATMUL, "--target", "h100"], monkeypatch, capsys)
    assert code == 0
    assert "order the kernel's own order" in out
    assert "occupancy 2 program(s) per SM/CU (the kernel's, measured by ncu on an H100)" in out


def test_simulate_names_its_progress_model_and_refuses_an_unknown_one(monkeypatch, capsys) -> None:
    code, out, _ = cli(["simulate", "matmul", *SMALL_MATMUL, "--target", "h100"], monkeypatch, capsys)
    assert code == 0 and "progress model       contention" in out and "GPC-bound share 0.35" in out
    code, out, _ = cli(["simulate", "matmul", *SMALL_MATMUL, "--target", "h100", "--progress", "random_walk"],
                       monkeypatch, capsys)
    assert code == 0 and "progress model       random walk, step time spread (cv) 0.5" in out
    code, out, _ = cli(["simulate", "matmul", *SMALL_MATMUL, "--target", "h100", "--progress", "contention"],
                       monkeypatch, capsys)
    assert code == 0 and "progress model       contention" in out and "hot-line load 8" in out
    line = one_error_line(*cli(["simulate", "matmul", *SMALL_MATMUL, "--progress", "lockstep"], monkeypatch,
                               capsys)[::2])
    assert "progress must be one of saturating, contention, random_walk" in line


def test_simulate_runs_several_orders_side_by_side_as_one_by_one_and_refuses_an_unknown_engine(monkeypatch,
                                                                                              capsys) -> None:
    orders = ["--order", "grouped:GROUP_M=2", "--order", "row_major", "--order", "column_major"]
    sizes = ["--size", "m=512", "--size", "n=512", "--size", "k=256"]
    code, out, _ = cli(["simulate", "matmul", *sizes, "--target", "h100", *orders, "--json"], monkeypatch, capsys)
    assert code == 0
    together = json.loads(out)["orders"]
    scenario = load_scenario("matmul", sizes=sizes[1::2], target="h100", gpu_name="")
    for spec, row in zip(orders[1::2], together):
        perm = scenario.permutation(spec)
        alone = simulate(scenario.trace, perm, scenario.model, occupancy=scenario.occupancy.programs)
        assert row["order"] == spec and row["permutation_id"] == perm.id
        assert (row["l2_hit_rate"], row["dram_read_bytes"]) == (alone.l2_hit_rate, alone.dram_read_bytes)
    assert len({row["l2_hit_rate"] for row in together}) == 3  # three different orders, three different answers
    line = one_error_line(*cli(["simulate", "matmul", *SMALL_MATMUL, "--engine", "cuda"], monkeypatch, capsys)[::2])
    assert "engine must be one of auto, sets, list, gpu" in line


def test_simulate_names_the_pairs_below_the_models_resolution(monkeypatch, capsys) -> None:
    # Square matmul past the L2's size: row- and column-major are mirror images to the model, grouped-8 reads 10% more.
    sizes = ["--size", "m=4096", "--size", "n=4096", "--size", "k=4096"]
    orders = ["--order", "row_major", "--order", "column_major", "--order", "grouped:GROUP_M=8"]
    code, out, _ = cli(["simulate", "matmul", *sizes, "--target", "h100", *orders, "--json"], monkeypatch, capsys)
    record = json.loads(out)
    rows = {r["order"]: r for r in record["orders"]}
    close = abs(rows["row_major"]["dram_read_bytes"] / rows["column_major"]["dram_read_bytes"] - 1) < 0.02
    assert code == 0 and close
    assert record["below_resolution"] == [["row_major", "column_major"]]
    code, out, _ = cli(["simulate", "matmul", *sizes, "--target", "h100", *orders], monkeypatch, capsys)
    assert code == 0 and "below the model's resolution" in out and "row_major ~ column_major;" in out
    code, out, _ = cli(["simulate", "matmul", *sizes, "--target", "h100", "--order", "row_major", "--order",
                        "grouped:GROUP_M=8"], monkeypatch, capsys)
    assert code == 0 and "below the model's resolution" not in out


def test_the_same_occupancy_rule_in_simulate_analyze_and_optimize(monkeypatch, capsys) -> None:
    _, simulated, _ = cli(["simulate", "matmul", *SMALL_MATMUL, "--target", "h100", "--json"], monkeypatch, capsys)
    record = json.loads(simulated)
    _, analyzed, _ = cli(["analyze", "matmul", *SMALL_MATMUL, "--target", "h100"], monkeypatch, capsys)
    scenario = load_scenario("matmul", sizes=SMALL_MATMUL[1::2], target="h100", gpu_name="")
    assert record["occupancy"] == scenario.occupancy.programs == 2
    assert record["occupancy_source"] == scenario.occupancy.source
    assert scenario.occupancy.text() in analyzed


def test_simulate_takes_outputs_like_check(tmp_path: Path, monkeypatch, capsys) -> None:
    formula = tmp_path / "own_names.py"
    formula.write_text("pid = tl.program_id(0)\nnew_pid = tl.num_programs(0) - 1 - pid\n")
    code, out, err = cli(["simulate", "spmv", "--size", "rows=4096", "--order", str(formula), "--outputs",
                          "new_pid", "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out)["orders"][0]["order"] == str(formula)


def test_short_commands_do_not_import_torch_or_triton() -> None:
    probe = (
        "import sys\nfrom swizzlelab.cli.main import main\n"
        "sys.argv = ['swizzlelab'] + sys.argv[1:]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED=' + ','.join(m for m in ('torch', 'triton') if m in sys.modules))\n"
    )
    for argv in (["version"], ["families"], ["check", "examples/xcd_chunked.py", "--grid", "1003"]):
        done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == "LOADED=", (argv, done.stdout[-300:])


def test_optimize_resumed_with_a_smaller_budget_and_piped_output(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "swizzlelab.cli", "optimize", "matmul", *SMALL_MATMUL, "--target", "h100",
               "--screen-s", "20", "--out", str(out)]
    first = subprocess.run(command + ["--budget", "3"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    # Piped: every iteration line is one line that names its order.
    lines = [ln for ln in first.stdout.splitlines() if re.match(r"iteration \d+ \(", ln)]
    assert len(lines) == 3 and all(": evaluated:" in ln or ": duplicate:" in ln for ln in lines), first.stdout
    assert any("predicted hit" in ln and "(model H100-SXM)" in ln for ln in lines)
    again = subprocess.run(command + ["--budget", "1"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    for done, total in re.findall(r"\b(\d+)/(\d+)\b", again.stdout + again.stderr):
        assert int(done) <= int(total), again.stdout
    _, attempts = read_jsonl(out / "iterations.jsonl")
    assert [a.iteration for a in attempts] == [0, 1, 2, 3]


def test_a_corrupt_line_in_the_middle_of_the_log_loses_nothing_else(tmp_path: Path) -> None:
    scenario = load_scenario("matmul", sizes=["m=256", "n=256", "k=64"], target="h100", gpu_name="")
    run(scenario, Options(out_dir=tmp_path, budget=3, screen_s=20), measurer=None)
    path = tmp_path / "iterations.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 5  # header, baseline, 3 iterations
    kept = {json.loads(line)["iteration"]: json.loads(line) for line in lines[1:] if '"iteration": 1,' not in line}
    lines[2] = lines[2][: len(lines[2]) // 2] + "#corrupted#"  # iteration 1, in the middle of the file
    path.write_text("\n".join(lines) + "\n")

    notes: list[str] = []
    result = run(scenario, Options(out_dir=tmp_path, budget=4, screen_s=20), measurer=None, on_note=notes.append)
    assert any("line 3 is not a valid record" in note for note in notes)
    warnings: list[str] = []
    _, attempts = read_jsonl(path, warnings)
    assert len(warnings) == 1
    numbers = [a.iteration for a in attempts]
    assert numbers == sorted(set(numbers)) and numbers[:3] == [0, 2, 3]  # nothing re-run, nothing twice
    for attempt in attempts:
        if attempt.iteration in kept:
            assert json.loads(json.dumps(attempt.to_dict())) == kept[attempt.iteration]
    assert len(result.state.attempts) - 1 == 4


@pytest.mark.parametrize("argv, reason", [
    (["simulate", "matmul", *SMALL_MATMUL, "--k-dir", "sideways"], "--k-dir 'sideways' unknown"),
    (["simulate", "histogram", "--k-dir", "alternate"], "no K-direction switch"),
    (["optimize", "spmv", "--k-dir", "alternate", "--budget", "1"], "no K-direction switch"),
    (["simulate", "--kernel", "tests/wild/tutorial_matmul.py", "--k-dir", "alternate"], "not to a --kernel file"),
    (["optimize", "--kernel", "tests/wild/tutorial_matmul.py", "--k-dir", "alternate"], "not to a --kernel file"),
])
def test_k_dir_refusals_are_one_line(argv, reason, monkeypatch, capsys) -> None:
    line = one_error_line(*cli(argv, monkeypatch, capsys)[::2])
    assert reason in line


def test_k_dir_alternate_is_in_the_simulate_record(monkeypatch, capsys) -> None:
    """--k-dir alternate reaches the prediction: on a grid larger than one wave (1024 tiles against 264), with A and
    B (64 MB) larger than L2, the predicted reads differ from forwards."""
    sizes = ["--size", "m=4096", "--size", "n=4096", "--size", "k=4096"]
    records = []
    for k_dir in ("forward", "alternate"):
        code, out, _ = cli(["simulate", "matmul", *sizes, "--target", "h100", "--json", "--k-dir", k_dir],
                           monkeypatch, capsys)
        assert code == 0
        records.append(json.loads(out)["orders"][0])
    assert records[0]["dram_read_bytes"] != records[1]["dram_read_bytes"]
