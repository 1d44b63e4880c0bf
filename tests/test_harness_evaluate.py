"""The benchmark / ranked flow on the CPU: correctness before timing, ranked inputs from a re-derived seed,
wrong kernels not timed, score = geometric mean. The shared request loop runs with the host clock in place of
CUDA events (real CPU wall times of the interpreter, labelled as such), since the flow, not the GPU, is under test.
"""

import pytest

from swizzlelab.harness import evaluate as evaluate_mod
from swizzlelab.harness.timers import HOST_CLOCK_DEVICE, HostClock
from swizzlelab.harness.correctness import derive_seed
from swizzlelab.harness.evaluate import Candidate, run_benchmarks
from swizzlelab.harness.requests import MIN_TIMED_REPS, time_requests
from swizzlelab.harness.timing import geometric_mean
from test_harness_correctness import AffineTask, affine


class BenchAffineTask(AffineTask):
    """AffineTask with two benchmark cases and a record of the seeds its inputs were generated from."""

    def __init__(self):
        self.seeds_seen = []

    def cases(self, kind="tests"):
        if kind == "benchmarks":
            return ({"seed": 21, "m": 16, "n": 24}, {"seed": 22, "m": 24, "n": 16})
        return super().cases(kind)

    def case_label(self, case):
        return str(case)

    def generate_input(self, case):
        self.seeds_seen.append(int(case["seed"]))
        return super().generate_input(case)

    def baseline(self, data):
        return 2.0 * data["x"] + 1.0


def cpu_time_requests(*args, **kwargs):
    """The shared request loop with the host clock standing in for CUDA events (real CPU wall times)."""
    return time_requests(*args, clock=HostClock(), **kwargs)


@pytest.fixture
def cpu_timer(monkeypatch):
    monkeypatch.setattr(evaluate_mod, "time_requests", cpu_time_requests)


def test_ranked_uses_derived_seeds_and_checks_before_timing(cpu_timer):
    task = BenchAffineTask()
    rows = run_benchmarks(task, Candidate(fn=affine(0), source="test"), budget_s=0.1, salt="ranked")
    expected = [derive_seed(21, "ranked"), derive_seed(22, "ranked")]
    assert [row.seed for row in rows] == expected
    assert 21 not in task.seeds_seen and 22 not in task.seeds_seen
    assert all(row.check.passed and row.candidate is not None and row.baseline is not None for row in rows)
    assert rows[0].candidate.n >= MIN_TIMED_REPS and rows[0].candidate.label == f"measured ({HOST_CLOCK_DEVICE})"
    assert rows[0].comparison is not None and rows[0].comparison.method == evaluate_mod.TRUSTED_UNPAIRED_METHOD
    score = geometric_mean([row.candidate.mean_ms for row in rows])
    assert min(r.candidate.mean_ms for r in rows) <= score <= max(r.candidate.mean_ms for r in rows)


def test_benchmark_uses_the_case_seed(cpu_timer):
    task = BenchAffineTask()
    rows = run_benchmarks(task, Candidate(fn=affine(1), source="test"), budget_s=0.1)
    assert [row.seed for row in rows] == [21, 22]


def test_wrong_kernel_is_not_timed(cpu_timer):
    task = BenchAffineTask()
    rows = run_benchmarks(task, Candidate(fn=affine(1), source="test"), budget_s=0.1, salt="ranked")
    assert all(not row.check.passed and row.candidate is None for row in rows)
    assert all(row.error == "not timed: the output is wrong" for row in rows)


def test_failing_baseline_still_times_the_candidate(cpu_timer):
    task = BenchAffineTask()

    def unsupported(data):
        raise RuntimeError("no kernel image for this case")

    task.baseline = unsupported
    rows = run_benchmarks(task, Candidate(fn=affine(0), source="test"), budget_s=0.1)
    assert all(row.candidate is not None and row.baseline is None for row in rows)
    assert rows[0].baseline_error == "baseline not timed: RuntimeError: no kernel image for this case"


class ExtraBaselineTask(BenchAffineTask):
    """BenchAffineTask with two further library rows: one that runs, one that cannot run the case."""

    def __init__(self):
        super().__init__()
        self.extra_calls = 0

    def extra_baselines(self):
        def library(data):
            self.extra_calls += 1
            return 2.0 * data["x"] + 1.0

        def missing(data):
            raise RuntimeError("no cuDNN attention on this machine")

        return {"fastlib": ("a faster library", library), "missing": ("absent library", missing)}


def test_ranked_times_the_extra_library_rows(cpu_timer):
    task = ExtraBaselineTask()
    rows = run_benchmarks(task, Candidate(fn=affine(0), source="test"), budget_s=0.1, salt="ranked")
    for row in rows:
        fast, missing = row.extra_baselines
        assert fast.name == "fastlib" and fast.timing is not None and fast.timing.n >= MIN_TIMED_REPS
        assert fast.comparison.b is row.candidate and fast.comparison.speedup > 0 and not fast.error
        assert missing.timing is None
        assert missing.error == "missing not timed: RuntimeError: no cuDNN attention on this machine"
        as_dict = row.to_dict()["extra_baselines"]
        # CPU timings on a loaded machine can put the CI's lower end below 0; what the row must carry is a CI
        # around its own speedup.
        speedup = as_dict[0]["speedup_vs_baseline"]
        assert as_dict[0]["timing"]["n"] == fast.timing.n and speedup["ci95"][0] <= speedup["speedup"] <= speedup["ci95"][1]
        assert as_dict[1]["error"].startswith("missing not timed")
    assert task.extra_calls >= 2 * MIN_TIMED_REPS


def test_benchmark_mode_skips_the_extra_library_rows(cpu_timer):
    task = ExtraBaselineTask()
    rows = run_benchmarks(task, Candidate(fn=affine(0), source="test"), budget_s=0.1)
    assert all(row.extra_baselines == [] for row in rows) and task.extra_calls == 0


def test_wrong_kernel_gets_no_extra_library_rows(cpu_timer):
    task = ExtraBaselineTask()
    rows = run_benchmarks(task, Candidate(fn=affine(1), source="test"), budget_s=0.1, salt="ranked")
    assert all(row.extra_baselines == [] for row in rows) and task.extra_calls == 0


def test_flash_attention_declares_the_cudnn_row():
    from swizzlelab.tasks import load_task

    extras = load_task("flash_attention").extra_baselines()
    assert list(extras) == ["cudnn"] and "cuDNN" in extras["cudnn"][0]
    assert load_task("matmul").extra_baselines() == {}
