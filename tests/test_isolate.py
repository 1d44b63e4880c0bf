"""The isolated evaluator on the CPU: bad arguments, the sandbox, the exploit suite in test mode under the
interpreter, the timed flow with CPU clocks (parent wall clock vs the child's figure), limits, and the CLI.

Exploit files carry their expected verdicts in their first line: `# exploit: WHAT | gpu: V | cpu: V [| slow]`.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from leaderboard_support import processes_with_argument
from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.harness.timers import GATE_NS, GATE_NS_PER_CALL
from swizzlelab.harness.isolate import Limits, evaluate_isolated, secret_seed, time_library_ahead
from swizzlelab.harness.isolate import reaper
from swizzlelab.harness.isolate.limits import seccomp_program
from swizzlelab.harness.isolate.clock_stats import Calibration, clock_verdict, residual_ci_ok
from swizzlelab.harness.isolate.sandbox import ChildProcess, _Tail, private_root_works
from swizzlelab.runtime import MEM_LIMIT_ENV, cuda_available, host_mem_share, host_memory_bytes

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "tests" / "fixtures" / "submissions"
SMALL_TASK = ROOT / "tests" / "data" / "matmul_small"
HEADER = re.compile(r"^# (exploit|honest): (?P<what>.+?) \| gpu: (?P<gpu>\w+) \| cpu: (?P<cpu>\w+)(?P<slow> \| slow)?$")
CPU_LIMITS = Limits(compile_s=90, run_s=60, host_mem_bytes=3 << 30)
# Run in every CI build (with the dedicated tests below, which cover the patched checker and the early exit
# with a fake report): what issue 11 asks the CPU to reject, a sandbox proof and an honest kernel; the rest of
# the suite runs under `-m slow` (each run is a fresh child importing torch: seconds each on a small box).
FAST = {"sys_exit_import", "non_bijective_order", "env_secret_snoop", "triton_kernel", "read_host_secrets",
        "outlive_evaluator"}
# The suite's runs get a small disk quota: fill_disk fills it in a second.
SUITE_LIMITS = Limits(compile_s=90, run_s=20, host_mem_bytes=2 << 30, disk_bytes=256 << 20)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox uses Linux facilities")


def header(path: Path) -> dict[str, str]:
    match = HEADER.match(path.read_text().splitlines()[0])
    assert match, f"{path.name}: first line must be '# exploit: WHAT | gpu: V | cpu: V [| slow]'"
    return match.groupdict()


def suite() -> list:
    params = []
    for path in sorted(SOLUTIONS.glob("*/*.py")):
        meta = header(path)
        marks = []
        if meta["cpu"] == "skip":
            marks.append(pytest.mark.skip(reason="needs a GPU (runs in benchmarks/exploits_h100)"))
        if meta["slow"] or path.stem not in FAST:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(path, id=f"{path.parent.name}/{path.stem}", marks=marks))
    return params


def run(path: Path, mode: str = "test", task: str | Path = "matmul", **kwargs):
    return evaluate_isolated(task, path.read_text(), mode, filename=path.name, limits=kwargs.pop("limits", CPU_LIMITS),
                             **kwargs)


# ---------------------------------------------------------------- the suite as data


def test_suite_is_large_and_labelled():
    wrong = sorted((SOLUTIONS / "wrong").glob("*.py"))
    assert len(wrong) >= 20
    for path in wrong + sorted((SOLUTIONS / "honest").glob("*.py")):
        meta = header(path)
        assert meta["gpu"] in ("rejected", "honest_time") and meta["cpu"] in ("rejected", "pass", "skip")
    covered = " ".join(header(p)["what"] for p in wrong)
    for word in ("side stream", "CUDA graph", "elapsed_time", "check", "reference", "harness", "exits", "raises",
                 "never returns", "fork bomb", "host memory", "device memory", "per shape", "pointers", "id()",
                 "hash", "every later call", "lazy", "input", "alias", "objects", "disk", "environment",
                 "network", "L2", "NaN", "half of the rows", "not a bijection", "end mark", "start mark",
                 "batching across calls"):
        assert word in covered, f"no exploit covers {word!r}"


@pytest.mark.parametrize("path", suite())
def test_exploit_suite_on_cpu(path, monkeypatch, tmp_path):
    meta = header(path)
    # Bait for the snooping exploits: a secret in the parent's environment and a canary file in /tmp.
    monkeypatch.setenv("SWIZZLELAB_SECRET_SEED", "1234")
    monkeypatch.setenv("LEADERBOARD_DATABASE_URL", "postgresql://user:password@localhost/db")
    canary = Path("/tmp/swizzlelab-canary.txt")
    canary.write_text("the reference output\n")
    try:
        result = run(path, limits=SUITE_LIMITS)
    finally:
        canary.unlink(missing_ok=True)
    assert "LEAKED" not in result.stdout_tail, result.stdout_tail[-500:]
    # Nothing of the run outlives it: no process (of the sandbox's program, or one it started), no folder.
    assert not [pid for pid, parent in reaper.sandboxed_processes().items() if parent == os.getpid()]
    assert not processes_with_argument("4242.5")
    assert not glob.glob(os.path.join(tempfile.gettempdir(), f"swizzlelab-isolate-{os.getpid()}-*"))
    if meta["cpu"] == "rejected":
        assert not result.passed, f"{path.name} passed: {result.report_text}"
        assert result.score_ms is None and result.reason
        assert "Testing failed" in result.report_text and result.reason in result.report_text
    else:
        assert result.passed, f"{path.name}: {result.reason}\n{result.stderr_tail[-2000:]}"


def test_early_exit_prints_a_fake_report_but_fails():
    result = run(SOLUTIONS / "wrong" / "early_exit_fake_output.py")
    assert not result.passed
    assert "exited with code 0" in result.reason
    assert "0.001 ms" in result.stdout_tail  # what it printed is kept, as its output, not as the verdict
    assert result.report_text.startswith("> Testing failed")
    assert result.report["success"] is False and result.report["isolated"] is True


def test_patched_checker_fails_at_the_first_case():
    result = run(SOLUTIONS / "wrong" / "patched_checker.py")
    assert not result.passed and result.reason.startswith("test 0:")
    assert result.verdicts[0]["passed"] is False and "differ" in result.verdicts[0]["reason"]


def test_sandbox_is_reported():
    result = run(SOLUTIONS / "honest" / "torch_matmul.py")
    applied = " ".join(result.isolation["sandbox"]["applied"])
    assert result.passed
    assert "RLIMIT_CPU" in applied and "RLIMIT_FSIZE" in applied
    assert "Isolation: sandboxed child" in result.report_text
    assert result.report["tests"]["passed"] == result.report["tests"]["total"] == 4


# The signal attacks are run only where the child gets a PID namespace of its own: never against the test machine.
needs_namespaces = pytest.mark.skipif(not private_root_works(),
                                      reason="no PID and mount namespaces on this machine: the signal attacks are not run")


@needs_namespaces
def test_signal_attacks_reach_nothing_outside_the_child():
    sentinels = [subprocess.Popen(["sleep", "600"])]
    if os.geteuid() == 0:  # a process of the uid the child runs as, too
        sentinels.append(subprocess.Popen(["sleep", "600"], user=65534, group=65534))
    try:
        # getppid() is 0 in its namespace, so kill(getppid()) is kill(0): its own process group, where it is PID 1
        # and unkillable from inside; kill(-1) finds nothing else there. Both go on to compute honestly, and this
        # process (their evaluator's parent) and the sentinels live on.
        for name in ("kill_parent.py", "kill_everything.py"):
            result = run(SOLUTIONS / "wrong" / name)
            assert result.passed, f"{name}: {result.reason}\n{result.stderr_tail[-1500:]}"
            applied = " ".join(result.isolation["sandbox"]["applied"])
            assert "own PID namespace" in applied and "own mount namespace" in applied
            if os.geteuid() == 0:
                assert "uid/gid 65534" in applied
        assert [s.poll() for s in sentinels] == [None] * len(sentinels)
    finally:
        for sentinel in sentinels:
            sentinel.kill()
            sentinel.wait()


@needs_namespaces
def test_child_sees_no_host_secret_and_no_other_process(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, subprocess\n"
        "print('ids', os.getpid(), os.getppid(), os.getuid())\n"
        "print('shadow', os.path.exists('/etc/shadow'), os.path.exists('/etc/passwd'))\n"
        "print('work', os.path.exists('" + str(ROOT) + "/README.md'))\n"
        "print('sh', subprocess.run(['/bin/sh', '-c', 'echo ran'], capture_output=True, text=True).stdout.strip())\n"
        "def custom_kernel(data):\n    return data['a'] @ data['b']\n")
    result = run(probe)
    assert result.passed, f"{result.reason}\n{result.stderr_tail[-1500:]}"
    lines = dict(line.split(" ", 1) for line in result.stdout_tail.splitlines() if " " in line)
    pid, ppid, uid = lines["ids"].split()
    assert (pid, ppid) == ("1", "0")
    assert lines["shadow"] == "False True" and lines["work"] == "False" and lines["sh"] == "ran"
    if os.geteuid() == 0:
        assert uid == "65534"


def test_kept_caches_seed_only_the_same_code_and_never_follow_links(tmp_path):
    # A submission's Triton cache is kept for its next run (its secret run reuses what its public run built);
    # one that plants links to host files there finds nothing of them, and no host file changes owner.
    shadow = Path("/etc/shadow")
    before = shadow.stat() if shadow.exists() else None
    path = SOLUTIONS / "wrong" / "cache_link_plant.py"
    first = run(path, kept_caches=tmp_path / "kept")
    second = run(path, kept_caches=tmp_path / "kept")
    assert first.passed and second.passed, (first.reason, second.reason)
    assert "LEAKED" not in second.stdout_tail
    kept = list((tmp_path / "kept").glob("code-*"))
    assert len(kept) == 1 and not any(p.is_symlink() for p in kept[0].rglob("*"))
    if before is not None:
        after = shadow.stat()
        assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)


# ---------------------------------------------------------------- the timed flow with CPU clocks


def test_timed_flow_scores_an_honest_kernel():
    result = run(SOLUTIONS / "honest" / "torch_matmul.py", "ranked", SMALL_TASK, budget_s=0.2, cpu_timing=True)
    assert result.passed, result.reason
    assert result.score_ms is not None and result.score_ms > 0
    bench = [v for v in result.verdicts if v["kind"] == "benchmark"]
    assert bench and bench[0]["n"] >= 10 and bench[0]["clocks"]["n_checked"] >= 2
    assert "Ranking score" in result.report_text
    # The library row ran through the same isolated loop (a child of its own) and is compared unpaired.
    case = result.report["ranked"]["cases"][0]
    assert case["baseline"]["n"] >= 10 and case["baseline"]["mean_ms"] > 0
    assert "same isolated loop" in result.report_text and "speedup vs baseline" in result.report_text


def test_secret_phase_in_the_same_child_and_library_rows_kept(tmp_path):
    """A ranked run with a secret phase: the same child times the benchmark again on the secret's inputs, its
    output never reaches the public run's tails; a second run of the same evaluating process reuses the library
    rows it timed."""
    from swizzlelab.harness.correctness import case_sizes
    from swizzlelab.tasks import load_task

    secret = (123456789).to_bytes(8, "big")
    path = SOLUTIONS / "honest" / "prints_input_digest.py"
    first = run(path, "ranked", SMALL_TASK, budget_s=0.2, cpu_timing=True, secret_phase=secret,
                kept_caches=tmp_path / "kept")
    assert first.passed, first.reason
    hidden = first.secret_run
    assert hidden is not None and hidden.passed, hidden and hidden.reason
    assert hidden.score_ms is not None and hidden.score_ms > 0 and hidden.isolation["secret_phase"]
    task = load_task(SMALL_TASK)
    case = task.cases("benchmarks")[0]
    seed = secret_seed(secret, case["seed"], "ranked")
    assert [v["seed"] for v in hidden.verdicts if v["kind"] == "benchmark"] == [seed]
    assert [v["kind"] for v in first.verdicts].count("benchmark") == 1  # the public run's own verdicts only
    a = task.generate_input({"seed": seed, **case_sizes(case)})["a"]
    digest = f"digest {float(a.double().sum()):.12e}"
    assert digest in hidden.stdout_tail and digest not in first.stdout_tail
    assert "digest" in first.stdout_tail  # the public part's own prints are its author's
    assert first.isolation["library_rows"] == "timed in this run"
    second = run(path, "ranked", SMALL_TASK, budget_s=0.2, cpu_timing=True, kept_caches=tmp_path / "kept")
    assert second.passed and second.secret_run is None
    assert "kept by this evaluating process" in second.isolation["library_rows"]
    row = second.report["ranked"]["cases"][0]
    assert row["baseline"] == first.report["ranked"]["cases"][0]["baseline"]
    # An idle worker's timing ahead: nothing to do while the rows are kept; a fresh process times them.
    assert time_library_ahead(SMALL_TASK, "ranked", limits=CPU_LIMITS, budget_s=0.2, kept_caches=tmp_path / "kept",
                              cpu_timing=True) == 0
    assert time_library_ahead(SMALL_TASK, "ranked", limits=CPU_LIMITS, budget_s=0.2, kept_caches=tmp_path / "new",
                              cpu_timing=True) == 1
    third = run(path, "ranked", SMALL_TASK, budget_s=0.2, cpu_timing=True, kept_caches=tmp_path / "new")
    assert third.passed and "kept by this evaluating process" in third.isolation["library_rows"]


def test_low_priority_work_gives_way_at_once_and_keeps_nothing(tmp_path):
    """Library rows timed ahead inside a GiveWay scope: cancelling it (a submission's job came in) kills the child
    now, not after its 30 s budget, and the killed rows are not kept (the next idle worker times them again)."""
    import threading
    import time

    from swizzlelab.harness.isolate.preempt import GiveWay, giving_way

    scope = GiveWay("gave way to a submission's job")
    timer = threading.Timer(4.0, scope.cancel)
    started = time.monotonic()
    timer.start()
    with giving_way(scope):
        time_library_ahead(SMALL_TASK, "ranked", limits=CPU_LIMITS, budget_s=30, kept_caches=tmp_path / "kept",
                           cpu_timing=True)
    took = time.monotonic() - started
    timer.join()
    assert scope.cancelled and took < 20, took
    # outside any scope nothing is killed, and the rows the cancelled child was timing were not kept
    assert time_library_ahead(SMALL_TASK, "ranked", limits=CPU_LIMITS, budget_s=0.2, kept_caches=tmp_path / "kept",
                              cpu_timing=True) == 1


@pytest.mark.parametrize("name", ["work_after_end_mark", pytest.param("patched_child_clock", marks=pytest.mark.slow),
                                  pytest.param("work_before_start_mark", marks=pytest.mark.slow)])
def test_timed_flow_refuses_work_outside_the_interval(name):
    result = run(SOLUTIONS / "wrong" / f"{name}.py", "ranked", SMALL_TASK, budget_s=0.2, cpu_timing=True)
    assert not result.passed and result.score_ms is None
    # Work after the end mark leaves the output unfinished when the seal samples it; the rest shows in the
    # wall clock's growth per call.
    expected = "changed after the call returned" if name == "work_after_end_mark" else "disagree"
    assert expected in result.reason, result.reason


@pytest.mark.slow
@pytest.mark.parametrize("name", ["timing_detection", "cache_across_calls"])
def test_timed_flow_checks_timed_outputs(name):
    result = run(SOLUTIONS / "wrong" / f"{name}.py", "ranked", SMALL_TASK, budget_s=0.2, cpu_timing=True)
    assert not result.passed and result.score_ms is None


# ---------------------------------------------------------------- limits


@pytest.mark.slow
def test_hang_is_killed_at_the_run_limit():
    result = run(SOLUTIONS / "wrong" / "hang.py", limits=Limits(compile_s=90, run_s=3))
    assert not result.passed and "timed out" in result.reason


@pytest.mark.slow
def test_host_memory_limit():
    result = run(SOLUTIONS / "wrong" / "huge_host_memory.py", limits=Limits(compile_s=90, run_s=60, host_mem_bytes=1 << 30))
    assert not result.passed and ("memory" in result.reason.lower())


def test_each_breach_names_its_limit():
    """The watcher's verdicts name what was broken: a fork bomb (a small process limit here, so it is quick) the
    process limit; memory spread over forked processes, each under its own limit, the host memory limit (the
    processes' shares, not their resident sizes, which count shared pages again); a full folder the disk quota."""
    bomb = run(SOLUTIONS / "wrong" / "fork_bomb.py", limits=Limits(compile_s=90, run_s=20, n_procs=128,
                                                                   host_mem_bytes=2 << 30))
    assert not bomb.passed and "hit the process limit" in bomb.reason and "limit is 128" in bomb.reason, bomb.reason
    spread = run(SOLUTIONS / "wrong" / "memory_across_processes.py",
                 limits=Limits(compile_s=90, run_s=20, host_mem_bytes=1 << 30))
    assert not spread.passed and "exceeded the host memory limit" in spread.reason, spread.reason
    full = run(SOLUTIONS / "wrong" / "fill_disk.py", limits=SUITE_LIMITS)
    assert not full.passed and "exceeded the disk quota" in full.reason, full.reason
    applied = " ".join(full.isolation["sandbox"]["applied"] + full.isolation["sandbox"]["skipped"])
    assert "disk quota 0.2 GiB" in applied


def test_output_is_bounded():
    code = "import sys\nsys.stdout.write('x' * 300000)\nsys.stdout.flush()\ndef custom_kernel(data):\n    return data['out'].zero_()\n"
    result = evaluate_isolated("matmul", code, "test", limits=Limits(output_bytes=20000))
    assert not result.passed
    assert len(result.stdout_tail) < 12000 and "earlier bytes dropped" in result.stdout_tail


# ---------------------------------------------------------------- arguments and helpers


def test_bad_arguments_raise_user_errors():
    with pytest.raises(UserError, match="unknown mode"):
        evaluate_isolated("matmul", "", "fast")
    with pytest.raises(UserError, match="unknown task"):
        evaluate_isolated("no_such_task", "", "test")
    with pytest.raises(UserError, match="plain name"):
        evaluate_isolated("matmul", "", "test", filename="../x.py")
    if not cuda_available():
        with pytest.raises(NoGpuError):
            evaluate_isolated("matmul", "", "ranked")


def test_secret_seeds_depend_on_the_secret():
    assert secret_seed(b"a", 11, "ranked") == secret_seed(b"a", 11, "ranked")
    assert secret_seed(b"a", 11, "ranked") != secret_seed(b"b", 11, "ranked")
    assert secret_seed(b"a", 11, "rep1") != secret_seed(b"a", 11, "rep2")
    assert 0 <= secret_seed(b"a", 11, "x") < 2**31


def test_seccomp_program_shape():
    program = seccomp_program()
    assert len(program) % 8 == 0 and len(program) // 8 < 64
    assert len(seccomp_program(profiling=True)) < len(program)


def _requests(per_call: float, fixed: float, pad=lambda k: 0.0, seed: int = 0):
    """Wall times of timed requests of k = 1..16 calls (two shuffled rounds) with 20 us of host jitter: each
    call costs `per_call` plus 20 us between calls (its seal), each request `fixed` beyond its calls, plus the
    trusted gate before the first call (GATE_NS + GATE_NS_PER_CALL x k)."""
    rng = np.random.default_rng(seed)
    ks = [int(k) for _ in range(2) for k in rng.permutation(np.arange(1, 17))]
    walls = [fixed + (GATE_NS + GATE_NS_PER_CALL * k) / 1e6 + (per_call + 0.02) * k + pad(k) + rng.normal(0, 0.02)
             for k in ks]
    return ks, walls


# Trusted busy requests: 20 us between calls, 0.5 ms per request beyond the calls' figures.
CAL = Calibration(slope_ms=0.02, intercept_ms=0.5, tail_ms=0.01, n=32)


def test_clock_verdict_accepts_an_honest_kernel():
    ks, walls = _requests(0.2295, 0.6)  # a 0.23 ms kernel, 0.1 ms more per request than the trusted ones
    clocks, error = clock_verdict(ks, walls, [0.2295 * k for k in ks], CAL, on_gpu=True)
    assert error is None, error
    assert abs(clocks["residual_slope_ms"] - 0.02) < 0.01


def test_clock_verdict_refuses_a_forged_figure():
    # The clock patched to 1 us per call, the harness steps skipped (the fixed part falls: harmless).
    ks, walls = _requests(0.2295, 0.2)
    error = clock_verdict(ks, walls, [0.001 * k for k in ks], CAL, on_gpu=True)[1]
    assert "each call adds" in error and "work outside the measured interval" in error
    # A third of the kernel moved before the start mark: figures a third low.
    ks, walls = _requests(0.2295, 0.6)
    assert "each call adds" in clock_verdict(ks, walls, [0.67 * 0.2295 * k for k in ks], CAL, on_gpu=True)[1]


def test_clock_verdict_refuses_a_wall_clock_too_noisy_to_vouch():
    # Measured on an H100: a child that skipped its synchronize left the parent's wall clock +-0.14 ms per call.
    ks, walls = _requests(0.2295, 0.6)
    rng = np.random.default_rng(1)
    noisy = [w + rng.normal(0, 0.3) * k / 4 for w, k in zip(walls, ks)]
    clocks, error = clock_verdict(ks, noisy, [0.2295 * k for k in ks], CAL, on_gpu=True)
    assert "varies too much" in error or "each call adds" in error, (clocks, error)


def test_timing_goes_on_while_the_interval_is_too_wide_to_judge():
    # Few requests with 0.3 ms of host jitter: the residual's growth is not pinned down yet, so the loop must keep
    # timing rather than refuse; with four times the requests at the usual 20 us jitter it is.
    rng = np.random.default_rng(3)
    ks = [int(k) for k in rng.permutation(np.arange(1, 17))]
    walls = [0.6 + 0.2295 * k + 0.02 * k + rng.normal(0, 0.3) for k in ks]
    assert not residual_ci_ok(ks, walls, [0.2295 * k for k in ks], on_gpu=True)
    ks, walls = _requests(0.2295, 0.6)
    more_ks = ks * 4
    more_walls = walls + [w + rng.normal(0, 0.005) for w in walls * 3]
    assert residual_ci_ok(more_ks, more_walls, [0.2295 * k for k in more_ks], on_gpu=True)
    assert not residual_ci_ok([4, 4], [1.0, 1.0], [0.9, 0.9], on_gpu=True)


def test_clock_verdict_refuses_padding_that_flattens_the_slope():
    # Reports 1 us per call and sleeps so that every request lasts as long as the longest: the residual's
    # growth per call looks right, but each request costs far more than a trusted one beyond its figures.
    ks, walls = _requests(0.2295, 0.6, pad=lambda k: 0.2285 * (16 - k))
    clocks, error = clock_verdict(ks, walls, [0.001 * k for k in ks], CAL, on_gpu=True)
    assert abs(clocks["residual_slope_ms"] - 0.0215) < 0.02
    assert "more wall time than a trusted one" in error
    assert "all had the same size" in clock_verdict([4, 4, 4], [1.0, 1.0, 1.0], [0.9] * 3, CAL, on_gpu=True)[1]


def test_tail_keeps_the_last_bytes():
    tail = _Tail(10)
    for chunk in (b"abcdef", b"ghijkl", b"mn"):
        tail.add(chunk)
    assert tail.text().endswith("efghijklmn") and "4 earlier bytes dropped" in tail.text()


# ---------------------------------------------------------------- the command line


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "swizzlelab.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_cli_eval_is_isolated_and_fails_an_exit_at_import():
    done = _cli("eval", "matmul", str(SOLUTIONS / "wrong" / "sys_exit_import.py"))
    assert done.returncode == 1
    assert "Testing failed" in done.stdout and "SystemExit" in done.stdout and "Isolation: sandboxed child" in done.stdout


def test_cli_trusted_exit_at_import_is_a_one_line_error():
    done = _cli("eval", "matmul", str(SOLUTIONS / "wrong" / "sys_exit_import.py"), "--trusted")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "SystemExit" in done.stderr


def test_the_host_memory_limit_is_sized_to_the_host_and_its_gpus() -> None:
    gib = 1 << 30
    assert host_mem_share(1, total=int(23.5 * gib)) == int(23.5 * gib * 0.75) - 2 * gib  # 15.6 GiB, not 32
    assert host_mem_share(8, total=560 * gib) == 420 * gib // 8 - 2 * gib
    assert host_mem_share(64, total=8 * gib) == gib  # never below 1 GiB
    assert Limits().host_mem_bytes == host_mem_share() < host_memory_bytes()


def test_a_child_is_told_its_memory_limit(tmp_path: Path) -> None:
    """The child's memory checks (runtime.available_memory_bytes) read the limit its watcher kills at."""
    limited = ChildProcess(Limits(host_mem_bytes=3 << 30), False, tmp_path, None)
    assert limited.env()[MEM_LIMIT_ENV] == str(3 << 30)
    assert MEM_LIMIT_ENV not in ChildProcess(Limits(host_mem_bytes=None), False, tmp_path, None).env()
