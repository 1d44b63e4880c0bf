"""Tests of swizzlelab.optimize on the CPU: the loop, its gates, resume, the cache, outputs and the CLI."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from swizzlelab.errors import KernelSiteError, UserError
from swizzlelab.io import load_module
from swizzlelab.optimize import Options, assess, loop, read_jsonl, run
from swizzlelab.optimize.records import BaselineTiming, Measurement, NcuFigures, Speedup
from swizzlelab.optimize.reasons import hit_change
from swizzlelab.optimize.state import load_or_start, traffic_of
from swizzlelab.scenario import load_scenario
from swizzlelab.sim.timemodel import TimeModel, Traffic, calibration_for
from swizzlelab.optimize.measure import MeasureCache
from swizzlelab.optimize.records import (
    DUPLICATE,
    EVALUATED,
    NOT_BIJECTIVE,
    UNPARSABLE,
    Proposal,
)
from swizzlelab.optimize.report import best_kernel_source
from swizzlelab.optimize.search import coarse_candidates, neighbours
from swizzlelab.swizzle import family

SMALL_MATMUL = {"seed": 11, "m": 1024, "n": 1024, "k": 512}  # 8 x 8 tiles of 128 on the GPU config


def small_problem(target: str = "mi300x", **kwargs):
    return load_scenario("matmul", dict(SMALL_MATMUL), target=target, gpu_name="", **kwargs)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "iterations.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_optimize_mi300x_budget_20_is_all_predicted(tmp_path: Path) -> None:
    from swizzlelab.cli import app

    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["optimize", "matmul", "--target", "mi300x", "--budget", "20", "--out", str(out),
         "--size", "m=2048", "--size", "n=2048", "--size", "k=512"],
    )
    assert result.exit_code == 0, result.output
    assert "every figure is a prediction" in result.output
    for name in ("log.txt", "iterations.jsonl", "report.json", "report.html", "best_kernel.py"):
        assert (out / name).is_file(), name
    iterations = [r for r in records(out) if r["type"] == "iteration"]
    assert [r["iteration"] for r in iterations] == list(range(21))
    assert all("permutation_id" in r for r in iterations)
    evaluated = [r for r in iterations if r["status"] == EVALUATED]
    ids = [r["permutation_id"] for r in evaluated]
    assert len(ids) == len(set(ids)), "two iterations share a permutation"
    for r in evaluated:
        assert r["prediction"]["kind"] == "predicted (model MI300X)"
        assert r["measurement"] is None
        assert r["proof"]["is_bijection"]
    log = (out / "log.txt").read_text()
    assert "measured (" not in log
    for heading in ("Code optimization reasoning:", "Reason why old was slow:", "Summary of optimization:",
                    "Reason why new should be better:", "Swizzling formula:", "--- PROFILING ITERATION 20 ---",
                    "L2 Cache Locality Improvement:", "Performance Gain: not measured"):
        assert heading in log
    # The reasons dict of the last iteration has one entry per earlier iteration, baseline first.
    last = iterations[-1]["reasons_old"]
    assert list(last) == ["baseline"] + [f"iteration {i}" for i in range(1, 20)]
    assert "predicted" in last["iteration 1"] and "(model MI300X)" in last["iteration 1"]
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 3
    report = json.loads((out / "report.json").read_text())
    assert report["measured"] is False and report["device"] is None
    # A and B (4 MB) overflow an XCD's 4 MB L2: the orders' predicted hit rates differ, and the run says so
    assert report["prediction_separates_orders"] is True
    assert "the predictions separate the orders" in result.output and report["separation"] in result.output


def test_cli_kernel_file_without_site_is_one_line_error(tmp_path: Path) -> None:
    from swizzlelab.cli import app

    bad = tmp_path / "bad_kernel.py"
    bad.write_text(
        "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr):\n"
        "    tl.store(x_ptr + tl.program_id(0), 1)\n"
    )
    result = CliRunner().invoke(app, ["optimize", "matmul", "--kernel", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0
    assert isinstance(result.exception, KernelSiteError)
    assert "no @triton.jit function with a swizzle site" in str(result.exception)
    assert "\n" not in str(result.exception)


def test_user_kernel_file_with_site_is_used(tmp_path: Path) -> None:
    from swizzlelab.tasks.matmul import kernel as matmul_kernel

    mine = tmp_path / "my_matmul.py"
    shutil.copy(matmul_kernel.__file__, mine)
    problem = load_scenario("matmul", dict(SMALL_MATMUL), target="h100", kernel_file=str(mine), gpu_name="")
    assert problem.kernel.is_user_file and problem.kernel.name == "matmul_kernel"
    result = run(problem, Options(out_dir=tmp_path / "o", budget=2, screen_s=30), measurer=None)
    assert len(result.state.attempts) == 3
    assert str(mine) in (tmp_path / "o" / "best_kernel.py").read_text()


def test_unknown_target_and_bad_budget() -> None:
    with pytest.raises(UserError, match="--target"):
        small_problem(target="a100")
    with pytest.raises(UserError, match="--budget"):
        Options(out_dir=Path("x"), budget=0)
    with pytest.raises(UserError, match="--proposer"):
        Options(out_dir=Path("x"), proposer="random")


def test_target_auto_without_gpu_says_h100() -> None:
    problem = load_scenario("matmul", dict(SMALL_MATMUL), target="auto", gpu_name="")
    assert problem.target.model.name == "H100-SXM"
    assert "no CUDA GPU" in problem.target.note and not problem.target.can_measure


# ------------------------------------------------------------------------------------------------ gates


def _state(tmp_path: Path, problem=None):
    state = loop.RunState(problem or small_problem(), Options(out_dir=tmp_path, budget=3))
    load_or_start(state)
    cache = MeasureCache.open(tmp_path / "cache.json")
    base = loop.evaluate(state, 0, loop.baseline_proposal(state.scenario), None, cache)
    state.attempts.append(base)
    return state, cache


def test_non_bijective_and_unparsable_are_never_simulated(tmp_path: Path, monkeypatch) -> None:
    state, cache = _state(tmp_path)
    calls = []
    real_predict = assess.predict
    monkeypatch.setattr(assess, "predict", lambda scenario, perm, *rest: calls.append(perm) or real_predict(scenario, perm, *rest))

    broken = Proposal("pid = tl.program_id(0)\npid_m = pid // num_pid_n\npid_n = pid % 2\n", "h", "test", "broken")
    attempt = loop.evaluate(state, 1, broken, None, cache)
    assert attempt.status == NOT_BIJECTIVE
    assert attempt.proof.n_missing > 0 and attempt.proof.n_duplicated > 0
    assert attempt.prediction is None and attempt.permutation_id

    for text in ("pid_m = import_me(3)\npid_n = 0\n", "pid_m = tl.program_id(0) // q\npid_n = 0\n", "while True: pass"):
        bad = loop.evaluate(state, 1, Proposal(text, "h", "test", "bad"), None, cache)
        assert bad.status == UNPARSABLE and bad.message and bad.prediction is None
    undefined = Proposal("pid = tl.program_id(0)\npid_m = pid // WIDTH\npid_n = pid % WIDTH\n", "h", "test", "u")
    assert loop.evaluate(state, 1, undefined, None, cache).status == UNPARSABLE
    assert calls == []


def test_duplicate_text_of_seen_order_is_detected(tmp_path: Path) -> None:
    state, cache = _state(tmp_path)
    # The family's text differs from the kernel's own site, its permutation (grouped, GROUP_M=8) does not.
    same_as_baseline = family("grouped", GROUP_M=8).normalized_source()
    attempt = loop.evaluate(state, 1, Proposal(same_as_baseline, "h", "test", "grouped8"), None, cache)
    assert attempt.status == DUPLICATE and attempt.duplicate_of == 0
    assert attempt.permutation_id == state.baseline.permutation_id
    assert "same permutation as iteration 0" in loop.why_old_was_slow(attempt, state.baseline, None, "amd")


def test_reason_for_evaluated_order_is_computed_from_data(tmp_path: Path) -> None:
    state, cache = _state(tmp_path)
    # Not column-major: on a grid of <= 8 tile rows it is the kernel's own grouped (GROUP_M=8) order.
    proposal = Proposal(family("identity").normalized_source(), "h", "test", "identity")
    attempt = loop.evaluate(state, 1, proposal, None, cache)
    assert attempt.status == EVALUATED
    reason = loop.why_old_was_slow(attempt, state.baseline, None, "amd")
    base_hit = 100 * state.baseline.prediction.l2_hit_rate
    new_hit = 100 * attempt.prediction.l2_hit_rate
    assert f"predicted hit rate {hit_change(base_hit / 100, new_hit / 100)} vs the baseline" in reason
    assert f"{attempt.wave.sharing:.2f}x" in reason and "of 8 XCDs" in reason
    assert hit_change(0.805, 0.805) == "stayed at 80.5%" and hit_change(0.805, 0.8052) == "stayed at 80.5%"
    assert hit_change(0.412, 0.48) == "rose from 41.2% to 48.0% (+6.8 points)"
    assert hit_change(0.8, 0.70) == "fell from 80.0% to 70.0% (-10.0 points)"


def test_wave_stats_match_a_direct_count(tmp_path: Path) -> None:
    problem = small_problem("h100")
    perm = np.random.default_rng(5).permutation(problem.n_tiles)
    stats = assess.wave_stats(problem, perm)
    trace = problem.trace
    wave = perm[: problem.target.model.units_per_domain]
    sets = [set(trace.tile_lines(int(t)).tolist()) for t in wave]
    union = set().union(*sets)
    assert stats.distinct_bytes == len(union) * trace.line_bytes
    assert stats.sharing == pytest.approx(sum(len(s) for s in sets) / len(union))
    assert stats.rows == len({int(t) // problem.grid[1] for t in wave})


# ------------------------------------------------------------------------------------------------ search


def test_search_candidates_cover_families_and_refine() -> None:
    cands = coarse_candidates((32, 32), n_domains=8)
    families = {c.family for c in cands}
    assert {"grouped", "tiles", "hilbert", "morton", "diagonal", "serpentine", "column_major"} <= families
    assert any(c.xcd == 8 for c in cands) and any(c.xcd == 0 for c in cands)
    grouped8 = next(c for c in cands if c.spec == "grouped:GROUP_M=8")
    near = {n.spec for n in neighbours(grouped8, (32, 32), 8)}
    assert {"grouped:GROUP_M=7", "grouped:GROUP_M=9", "grouped:GROUP_M=16", "xcd:NUM_XCDS=8+grouped:GROUP_M=8"} <= near
    one_d = coarse_candidates((264,), n_domains=1)
    assert one_d[0].family == "identity1d" and any(c.spec == "xcd:NUM_XCDS=8" for c in one_d)
    assert any(c.spec == "stride:STRIDE=128" for c in one_d)
    hinted = [c.spec for c in coarse_candidates((264,), n_domains=8, periods=(12,))]
    assert hinted[2:4] == ["stride:STRIDE=12", "xcd:NUM_XCDS=8+stride:STRIDE=12"]  # right after the launch orders


def test_search_follows_the_sharing_period_of_a_1d_trace(tmp_path: Path) -> None:
    # 16 row communities numbered round-robin: rows r and r + 16 gather the same x lines. On MI300X the
    # classes must also stay on one XCD, so the period order behind XCD chunking is the first proposal.
    case = {"seed": 1, "rows": 32768, "cols": 4194304, "avg_nnz": 32, "communities": 16}
    problem = load_scenario("spmv", case, target="mi300x", gpu_name="")
    result = run(problem, Options(out_dir=tmp_path, budget=1, screen_s=60), measurer=None)
    assert result.state.sharing_periods() == (16,)
    base, first = result.state.attempts
    assert first.label == "xcd:NUM_XCDS=8+stride:STRIDE=16"
    # L2 read misses: on MI300X the Infinity Cache (256 MB) holds x, so DRAM reads are the same for both.
    assert first.prediction.l2_miss_read_bytes < 0.97 * base.prediction.l2_miss_read_bytes
    assert "multiple of 16 indices apart" in (tmp_path / "log.txt").read_text()


def test_search_on_a_1d_task(tmp_path: Path) -> None:
    case = {"seed": 1, "rows": 4096, "cols": 65536, "avg_nnz": 8, "communities": 8}
    problem = load_scenario("spmv", case, target="h100", gpu_name="")
    result = run(problem, Options(out_dir=tmp_path, budget=4, screen_s=30), measurer=None)
    ids = [a.permutation_id for a in result.state.attempts if a.status == EVALUATED]
    assert len(ids) == len(set(ids)) == 5
    assert all(a.prediction.kind == "predicted (model H100-SXM)" for a in result.state.attempts)


# ------------------------------------------------------------------------------------------------ GPU path (test double)


class RecordingMeasurer:
    """A test double for the GPU: a memory-bound kernel whose time is the time model's memory time of its
    predicted DRAM bytes (plus `fixed_ms`), so orders differ reproducibly."""

    device = "TestGPU (test double, not a GPU)"

    def __init__(self, state_problem, fixed_ms: float = 1e-5) -> None:
        self.problem = state_problem
        self.calls = 0
        self.fixed_ms = fixed_ms

    def _ms(self, prediction) -> float:
        model = TimeModel(self.problem.model, calibration_for(self.problem.model), Traffic(0.0))
        return 1e3 * model.memory_s(traffic_of(prediction)) + self.fixed_ms

    def measure_baseline(self) -> Measurement:
        self.calls += 1
        return Measurement(device=self.device,
                           timing=BaselineTiming(mean_ms=self._ms(baseline_prediction(self.problem)), sem_ms=1e-6, n=40),
                           ncu=NcuFigures(l2_hit_rate_pct=50.0, dram_read_bytes=1e9))

    def measure(self, formula) -> Measurement:
        self.calls += 1
        checked = self.problem.check(formula)
        pred = assess.predict(self.problem, checked.perm)
        ms = self._ms(pred)
        base = self._ms(baseline_prediction(self.problem))
        speedup = base / ms
        comparison = Speedup(speedup=speedup, ci95=(speedup - 0.01, speedup + 0.01), baseline_ms=base,
                             candidate_ms=ms, baseline_sem_ms=0.001, candidate_sem_ms=0.001, n_pairs=50,
                             method="test", is_improvement=speedup - 0.01 > 1)
        return Measurement(device=self.device, passed=True, check_message="ok", comparison=comparison,
                           ncu=NcuFigures(l2_hit_rate_pct=100 * pred.l2_hit_rate, dram_read_bytes=pred.dram_read_bytes))


def baseline_prediction(problem):
    checked = problem.check(problem.default_order())
    return assess.predict(problem, checked.perm)


def test_measured_run_labels_device_and_cache_skips_known(tmp_path: Path) -> None:
    problem = small_problem("mi300x")  # orders differ in traffic at this size (4 MB of L2 per XCD)
    measurer = RecordingMeasurer(problem)
    result = run(problem, Options(out_dir=tmp_path, budget=4, screen_s=30), measurer=measurer)
    assert measurer.calls == 5
    log = (tmp_path / "log.txt").read_text()
    assert "Performance Gain: Achieved" in log and "measured (TestGPU (test double, not a GPU))" in log
    assert "95% CI" in log
    best = result.state.best()
    if best.iteration:
        assert best.comparison.ci95[0] > 1.0
    # A new run in a new folder sharing the cache measures nothing it already knows ...
    again = RecordingMeasurer(problem)
    opts = Options(out_dir=tmp_path / "second", budget=4, screen_s=30, cache_path=tmp_path / "measure-cache.json")
    run(problem, opts, measurer=again)
    assert again.calls == 0
    assert "from the measurement cache" in (tmp_path / "second" / "log.txt").read_text()
    # ... unless asked to.
    forced = RecordingMeasurer(problem)
    opts = Options(out_dir=tmp_path / "third", budget=2, screen_s=30, cache_path=tmp_path / "measure-cache.json",
                   remeasure=True)
    run(problem, opts, measurer=forced)
    assert forced.calls == 3


# ------------------------------------------------------------------------------------------------ resume


def test_resume_after_interruption_loses_nothing(tmp_path: Path) -> None:
    problem = small_problem("mi300x")
    measurer = RecordingMeasurer(problem)
    run(problem, Options(out_dir=tmp_path, budget=3, screen_s=30), measurer=measurer)
    lines = (tmp_path / "iterations.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 4
    # Simulate Ctrl-C in the middle of iteration 3's append: its line is torn.
    kept = lines[:4]
    (tmp_path / "iterations.jsonl").write_text("\n".join(kept) + "\n" + lines[4][: len(lines[4]) // 2])
    before = {json.loads(l)["iteration"]: json.loads(l) for l in kept[1:]}

    resumed = RecordingMeasurer(problem)
    result = run(problem, Options(out_dir=tmp_path, budget=6, screen_s=30), measurer=resumed)
    header, attempts = read_jsonl(tmp_path / "iterations.jsonl")
    assert header is not None and [a.iteration for a in attempts] == list(range(7))
    for k, record in before.items():
        assert json.loads(json.dumps(attempts[k].to_dict())) == record  # iterations 0..2 unchanged
    # Iteration 3 was measured before the interruption: the cache answers it, only 4..6 are new.
    assert resumed.calls == 3
    ids = [a.permutation_id for a in attempts if a.status == EVALUATED]
    assert len(ids) == len(set(ids))
    assert any("resumed from" in note for note in result.state.notes)


def test_resume_refuses_a_different_problem(tmp_path: Path) -> None:
    run(small_problem("h100"), Options(out_dir=tmp_path, budget=1, screen_s=30), measurer=None)
    with pytest.raises(UserError, match="different scenario"):
        run(small_problem("mi300x"), Options(out_dir=tmp_path, budget=1, screen_s=30), measurer=None)


# ------------------------------------------------------------------------------------------------ best kernel


def test_best_kernel_file_imports_and_computes_correctly(tmp_path: Path) -> None:
    problem = small_problem("h100")
    text = family("grouped", GROUP_M=3).normalized_source()
    source = best_kernel_source(problem, text, "# test header\n")
    assert "swz_GROUP_M = 3" in source and "# swizzle: begin" in source
    path = tmp_path / "best_kernel.py"
    path.write_text(source)
    module = load_module(path, "swizzlelab_test_best_kernel", str(path))
    task = problem.task
    case = dict(task.cases("tests")[0])
    data = task.generate_input(case)
    output = module.custom_kernel(data)
    verdict = task.check(data, output)
    assert verdict.ok, verdict.message


# ------------------------------------------------------------------------------------------------ GPU glue


class _FakeCuda:
    @staticmethod
    def get_device_name(index: int) -> str:
        return "FakeH100 (test double)"

    @staticmethod
    def current_device() -> int:
        return 0


class _FakeTorch:
    cuda = _FakeCuda()


@pytest.mark.parametrize("keep_going", [True, False])
def test_gpu_measurer_glue_with_harness_doubles(tmp_path: Path, monkeypatch, keep_going: bool) -> None:
    """GpuMeasurer wires the harness (correctness, interleaved timing, ncu) into records the log understands.

    The harness's CUDA parts are replaced by doubles fed with seeded random samples; everything else is real.
    The doubles' times make the kernel compute-bound, so the time model predicts no gain: the measured search
    races the first sweep anyway, confirms its leader alone and finds the gain; with --keep-going it goes on
    refining until the budget."""
    from swizzlelab import harness
    from swizzlelab.harness import timing
    from swizzlelab.harness.correctness import CaseResult, RunCheck
    from swizzlelab.harness.ncu import KernelMetrics
    from swizzlelab.harness.race import RaceResult
    from swizzlelab.optimize import measure as measure_module
    from swizzlelab.optimize.measure import GpuMeasurer

    rng = np.random.default_rng(7)
    monkeypatch.setattr(timing, "require_cuda", lambda: _FakeTorch())
    wrong = {"formula": None}

    def fake_check(task, fn, case, recheck=True, seed=None):
        ok = wrong["formula"] is None
        return CaseResult(case=dict(case), runs=[RunCheck(seed=1, passed=ok, message="ok" if ok else "3 bad")])

    def fake_compare(fn_a, fn_b, data_a, data_b=None, budget_s=1.0, **kw):
        a = 2.0 + rng.normal(0, 0.01, 40)
        b = 1.6 + rng.normal(0, 0.01, 40)
        return timing.compare_samples(a, b, "sem", device="FakeH100 (test double)")

    def fake_time(fn, data, budget_s=1.0, **kw):
        return timing.summarize(2.0 + rng.normal(0, 0.01, 40), "sem", device="FakeH100 (test double)")

    def fake_profile(task, case, order=None, out_dir=None):
        hit = 40.0 if order is None else 60.0
        values = {"lts__t_sector_hit_rate.pct": hit, "dram__bytes_read.sum": 1e9 * (1 - hit / 100),
                  "gpu__time_duration.sum": 2e6}
        return [KernelMetrics(kernel_name="matmul_kernel", launch_index=0, values=values)]

    def fake_race(reference, variants, data, plan, check=None, options=None):
        comparisons = {name: timing.compare_samples(2.0 + rng.normal(0, 0.01, 20), 1.6 + rng.normal(0, 0.01, 20),
                                                    "resolved", device="FakeH100 (test double)") for name in variants}
        return RaceResult(comparisons, {}, 20, 0.1, "resolved", "FakeH100 (test double)")

    monkeypatch.setattr(measure_module, "race", fake_race)
    monkeypatch.setattr(harness, "check_correctness", fake_check)
    monkeypatch.setattr(harness, "compare_interleaved", fake_compare)
    monkeypatch.setattr(harness, "time_fn", fake_time)
    monkeypatch.setattr(harness, "profile", fake_profile)
    monkeypatch.setattr(harness.correctness, "check_correctness", fake_check, raising=False)
    problem = small_problem("h100")
    measurer = GpuMeasurer(problem, budget_s=0.1)
    result = run(problem, Options(out_dir=tmp_path, budget=2, screen_s=30, stop_without_gain=not keep_going),
                 measurer=measurer)
    log = (tmp_path / "log.txt").read_text()
    assert "raced 1.2" in log and "confirmed alone: 1.2" in log
    assert len(result.state.attempts) - 1 == 2 or not keep_going
    assert "measured (FakeH100 (test double), ncu)" in log
    assert "Successfully improved L2 cache hit rate by 20.00 percentage points, from 40.0% to 60.0%" in log
    import re

    assert re.search(r"Performance Gain: Achieved 1\.2\dx speedup with execution time reduced from (2\.00|1\.99)\dms "
                     r"to 1\.(60|59)\dms \(\d+\.\d% faster; 95% CI", log)
    best = result.state.best()
    assert best.iteration > 0 and best.comparison.ci95[0] > 1.0
    # A wrong output is recorded as such and never timed.
    wrong["formula"] = "any"
    record = measurer.measure(parse_for(problem, family("column_major").normalized_source()))
    assert record.passed is False and record.comparison is None


def parse_for(problem, text):
    return problem.formula(text)


def test_keyboard_interrupt_then_rerun_continues(tmp_path: Path) -> None:
    problem = small_problem("mi300x")

    def interrupt(attempt) -> None:
        if attempt.iteration == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(problem, Options(out_dir=tmp_path, budget=5, screen_s=30), measurer=None, on_iteration=interrupt)
    _, first = read_jsonl(tmp_path / "iterations.jsonl")
    assert [a.iteration for a in first] == [0, 1, 2]
    result = run(problem, Options(out_dir=tmp_path, budget=5, screen_s=30), measurer=None)
    assert [a.iteration for a in result.state.attempts] == list(range(6))
    assert [a.permutation_id for a in result.state.attempts[:3]] == [a.permutation_id for a in first]


def test_a_gain_without_a_locality_change_says_so() -> None:
    from swizzlelab.optimize.logtext import locality_line
    from swizzlelab.optimize.reasons import measured_clause
    from swizzlelab.optimize.records import Attempt

    def attempt(iteration: int, hit: float, dram: float, comparison: Speedup | None) -> Attempt:
        measurement = Measurement(device="TestGPU", comparison=comparison,
                                  ncu=NcuFigures(l2_hit_rate_pct=hit, dram_read_bytes=dram))
        return Attempt(iteration, EVALUATED, "search", "x", "pid = tl.program_id(0)\n", "", measurement=measurement)

    small_win = Speedup(speedup=1.008, ci95=(1.002, 1.014), baseline_ms=3.45, candidate_ms=3.42)
    base = attempt(0, 0.10, 10.42e9, None)
    same = attempt(1, 0.11, 10.43e9, small_win)
    assert "does not come from L2 locality" in measured_clause(same.measurement, same, same, base.ncu)
    assert "L2 cache hit rate unchanged at 0.1% (+0.01 percentage points)" in locality_line(same, base)
    better = attempt(2, 68.0, 0.41e9, small_win)
    assert "L2 locality" not in measured_clause(better.measurement, better, better, base.ncu)
    assert "Successfully improved L2 cache hit rate by 67.90" in locality_line(better, base)


@pytest.mark.slow  # over 15 s on CI's 2 cores: run with -m slow
def test_ctrl_c_on_the_command_then_the_same_command_resumes(tmp_path: Path) -> None:
    import os
    import signal
    import time

    out = tmp_path / "run"
    budget = 12
    command = [sys.executable, "-c", "from swizzlelab.cli import main; main()", "optimize", "matmul", "--target",
               "mi300x", "--budget", str(budget), "--out", str(out), "--size", "m=2048", "--size", "n=2048", "--size",
               "k=512"]
    env = {**os.environ, "COLUMNS": "500"}  # rich wraps long paths otherwise
    # A shell without job control starts background jobs with SIGINT ignored, and Python keeps an inherited
    # SIG_IGN: the child gets Ctrl-C's default back, as a terminal's foreground process has it.
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    jsonl = out / "iterations.jsonl"
    deadline = time.monotonic() + 120
    while (not jsonl.exists() or len(jsonl.read_text().splitlines()) < 4) and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    stdout, stderr = child.communicate(timeout=60)
    assert child.returncode == 130 and "Traceback" not in stderr
    _, kept = read_jsonl(jsonl)
    assert 3 <= len(kept) < budget + 1 and f"interrupted: {len(kept)} iteration(s)" in " ".join(stdout.split())
    again = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr
    assert f"resumed from {jsonl}: {len(kept)} iteration(s)" in " ".join(again.stdout.split())
    _, final = read_jsonl(jsonl)
    assert [a.iteration for a in final] == list(range(budget + 1))
    assert [a.to_dict() for a in final[: len(kept)]] == [a.to_dict() for a in kept]
    ids = [a.permutation_id for a in final if a.status == EVALUATED]
    assert len(ids) == len(set(ids))


def test_screening_on_threads_ranks_as_one_thread(tmp_path: Path) -> None:
    results = []
    for workers in (1, 2):
        problem = small_problem("mi300x")
        options = Options(out_dir=tmp_path / f"w{workers}", budget=4, screen_s=60, workers=workers)
        results.append(run(problem, options, measurer=None).state.attempts)
    assert [(a.label, a.permutation_id, a.prediction) for a in results[0]] == [
        (a.label, a.permutation_id, dataclasses.replace(a.prediction, sim_s=results[0][i].prediction.sim_s))
        for i, a in enumerate(results[1])
    ]
    with pytest.raises(UserError, match="--workers 0"):
        Options(out_dir=tmp_path, workers=0)


def test_occupancy_defaults_to_the_kernels_measured_one_on_nvidia() -> None:
    h100 = small_problem("h100")
    assert (h100.occupancy.programs, h100.occupancy.source) == (2, "the kernel's, measured by ncu on an H100")
    mi300x = small_problem("mi300x").occupancy
    assert mi300x.programs == 1 and "set --occupancy" in mi300x.source
    given = small_problem("h100", occupancy=5)
    assert (given.occupancy.programs, given.occupancy.source) == (5, "given with --occupancy")
    spmv = load_scenario("spmv", {"seed": 1, "rows": 64, "cols": 256, "avg_nnz": 4, "communities": 2},
                        target="h100", gpu_name="")
    assert spmv.occupancy.programs == 32


def test_a_predicted_best_within_the_models_resolution_says_so(tmp_path: Path) -> None:
    from dataclasses import replace

    from swizzlelab.optimize.state import describe_best

    state, cache = _state(tmp_path)
    base = state.baseline
    assert base.prediction is not None and not state.device

    def predicted(iteration: int, dram_factor: float, hit_delta: float) -> Attempt:
        pred = replace(base.prediction, dram_read_bytes=int(base.prediction.dram_read_bytes * dram_factor),
                       l2_hit_rate=base.prediction.l2_hit_rate + hit_delta)
        return replace(base, iteration=iteration, label=f"x{iteration}", permutation_id=f"p{iteration}",
                       prediction=pred)

    state.attempts.append(predicted(1, 0.99, 0.001))  # 1% fewer DRAM reads, 0.1 pp more hits: a coin's odds
    assert state.best().iteration == 1 and "below the model's resolution" in describe_best(state)
    state.attempts.append(predicted(2, 0.90, 0.02))  # 10% fewer reads: resolved
    assert state.best().iteration == 2 and "below the model's resolution" not in describe_best(state)


def test_available_memory_honours_the_process_limit(monkeypatch) -> None:
    from swizzlelab import runtime

    machine = runtime.machine_available_bytes()
    monkeypatch.delenv(runtime.MEM_LIMIT_ENV, raising=False)
    assert runtime.memory_limit_bytes() is None and runtime.available_memory_bytes() > 0
    rss = runtime.resident_bytes()
    assert rss > 10 << 20  # this interpreter's VmRSS, read from /proc
    monkeypatch.setenv(runtime.MEM_LIMIT_ENV, str(rss + (64 << 20)))
    assert runtime.available_memory_bytes() <= min(64 << 20, machine)
    monkeypatch.setenv(runtime.MEM_LIMIT_ENV, str(rss // 2))  # already over the limit: nothing is available
    assert runtime.available_memory_bytes() == 0
    for bad in ("", "lots", "-5", "0"):
        monkeypatch.setenv(runtime.MEM_LIMIT_ENV, bad)
        assert runtime.memory_limit_bytes() is None


def test_screening_threads_are_capped_by_the_memory_limit(tmp_path: Path, monkeypatch) -> None:
    """A search whose orders would not fit under the process limit screens on fewer threads, and says so; without
    the limit the same search screens on every thread asked for. Each order is taken to need 1 GiB (as on a trace
    of ~250M accesses; the small matmul's own floor is 32 MiB) so that the limit leaves room for the rest."""
    from swizzlelab import runtime
    from swizzlelab.optimize.state import RunState
    from swizzlelab.sim import setup

    monkeypatch.delenv(runtime.MEM_LIMIT_ENV, raising=False)
    free = run(small_problem("h100"), Options(out_dir=tmp_path / "free", budget=2, screen_s=60, workers=4),
               measurer=None)
    assert not [n for n in free.state.notes if "screening on" in n], free.state.notes
    floor = setup.ORDER_MIN_BYTES
    monkeypatch.setattr(setup, "ORDER_MIN_BYTES", 1 << 30)
    # Room for one order at once, not for two
    monkeypatch.setenv(runtime.MEM_LIMIT_ENV, str(runtime.resident_bytes() + (3 << 29)))
    capped = run(small_problem("h100"), Options(out_dir=tmp_path / "capped", budget=2, screen_s=60, workers=4),
                 measurer=None)
    said = [n for n in capped.state.notes if "screening on" in n]
    assert len(said) == 1 and said[0].startswith("search: screening on 1 thread of 4 (memory: "), capped.state.notes
    assert said[0].endswith(", 1.00 GB per order screened at once)"), said[0]
    assert [a.permutation_id for a in capped.state.attempts] == [a.permutation_id for a in free.state.attempts]
    state = RunState(small_problem("h100"), Options(out_dir=tmp_path / "direct", workers=4))
    notes: list[str] = []
    assert loop.screening_threads(state, 4, notes.append) == 1 and len(notes) == 1
    monkeypatch.setattr(setup, "ORDER_MIN_BYTES", floor)
    monkeypatch.delenv(runtime.MEM_LIMIT_ENV)
    assert loop.screening_threads(state, 4, notes.append) == 4 and len(notes) == 1
