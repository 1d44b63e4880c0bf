"""The time model (sim.timemodel): anchored predictions, the unanchored interval, occupancy, the fit, the stop rule
and what an optimize run learns from its own measurements (optimize.learn)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from swizzlelab.hw import get_model
from swizzlelab.optimize import Options, run
from swizzlelab.optimize.learn import Correction
from swizzlelab.sim.timemodel import Row, TimeModel, Traffic, calibration_for, fit, stop_reason
from test_optimize import RecordingMeasurer, small_problem

H100 = get_model("h100")
GB = 1e9


def _model(base_gb: float, base_ms: float | None) -> TimeModel:
    return TimeModel(H100, calibration_for(H100), Traffic(base_gb * GB), base_ms, anchor="test anchor")


def test_memory_bound_kernel_gains_what_its_bytes_lose():
    model = _model(8.0, None)
    streaming = 1e3 * model.memory_s(Traffic(8.0 * GB))
    anchored = _model(8.0, streaming)  # measured exactly at the calibrated bandwidth: all memory
    pred = anchored.predict(Traffic(2.0 * GB))
    assert anchored.bound() == "memory-bound"
    assert pred.speedup == pytest.approx(4.0, rel=0.02) and pred.low < pred.speedup < pred.high


def test_compute_bound_kernel_gains_nothing_measurable_and_the_run_is_told_why():
    memory_ms = 1e3 * _model(1.6, None).memory_s(Traffic(1.6 * GB))
    model = _model(1.6, 4 * memory_ms)  # the kernel takes 4x its memory time: compute-bound
    preds = [model.predict(Traffic(gb * GB)).speedup for gb in (1.2, 1.4, 1.5)]
    assert model.bound() == "compute-bound" and max(preds) < 1.0 + model.cal.noise
    reason = stop_reason(model, preds)
    assert reason.startswith(f"compute-bound: predicted gain < {model.cal.noise:.0%} for every untried order")
    assert stop_reason(model, [1.2]) is None


def test_without_a_measurement_the_interval_spans_both_extremes():
    pred = _model(4.0, None).predict(Traffic(2.0 * GB))
    assert pred.low <= 1.0 and pred.high >= 2.0 and "compute share unknown" in pred.anchor
    assert stop_reason(_model(4.0, None), [1.0]) is None  # no verdict without an anchor


def test_fewer_programs_per_sm_cost_time():
    memory_ms = 1e3 * _model(1.0, None).memory_s(Traffic(1.0 * GB))
    model = TimeModel(H100, calibration_for(H100), Traffic(1.0 * GB, occupancy=2), 3 * memory_ms)
    same = model.predict(Traffic(1.0 * GB, occupancy=2)).speedup
    halved = model.predict(Traffic(1.0 * GB, occupancy=1)).speedup
    # An order with the kernel's own traffic differs only by the calibrated cost of replacing its index code.
    assert same == pytest.approx(model.cal.splice_bias) and halved < 0.7


def test_fit_recovers_the_constants_rows_were_made_with():
    truth = replace(calibration_for(H100), dram_efficiency=0.7, fabric_s_per_gb=0.05, overlap=3.0, splice_bias=1.0)
    rng = np.random.default_rng(3)
    rows = []
    for _ in range(60):
        base = Traffic(rng.uniform(0.5, 8) * GB, rng.uniform(0.2, 4) * GB)
        order = Traffic(base.dram_bytes * rng.uniform(0.3, 1.5), base.fabric_bytes * rng.uniform(0.3, 1.5))
        memory_ms = 1e3 * TimeModel(H100, truth, base).memory_s(base)
        base_ms = memory_ms * rng.uniform(1.05, 3.0)
        speedup = TimeModel(H100, truth, base, base_ms).predict(order).speedup
        rows.append(Row(base, order, base_ms, speedup * math.exp(rng.normal(0, 0.002)), weight=1.0))
    fitted = fit(H100, rows)
    assert fitted.dram_efficiency == pytest.approx(0.7, rel=0.1)
    assert fitted.overlap == pytest.approx(3.0, rel=0.2) and fitted.sigma < 0.01 and fitted.rows == 60


def test_a_family_that_measured_slower_is_excluded_and_the_correction_learns():
    learn = Correction(sigma=0.02)
    assert learn.adjust(1.2) is None
    learn.observe(1.2, 0.9, (0.88, 0.92), "hilbert")
    assert learn.excluded("hilbert") and not learn.excluded("grouped")
    assert learn.adjust(1.2) < 1.2 and "hilbert (0.900x)" in learn.describe()


def test_optimize_stops_on_a_compute_bound_kernel_after_one_check(tmp_path: Path):
    problem = small_problem("mi300x")
    measurer = RecordingMeasurer(problem, fixed_ms=5.0)  # milliseconds of compute behind microseconds of traffic
    result = run(problem, Options(out_dir=tmp_path, budget=4, screen_s=30), measurer=measurer)
    # the kernel's own order, then its best untried order once (no gain: the same 5 ms), then the stop
    assert measurer.calls == 2
    assert any("one check first: the best untried order" in note for note in result.state.notes)
    assert any(note.startswith("compute-bound: predicted gain <") for note in result.state.notes)
    assert "nothing measurable to gain" in (tmp_path / "log.txt").read_text()


def test_optimize_measures_a_memory_bound_kernel_and_labels_predicted_speedups(tmp_path: Path):
    problem = small_problem("mi300x")
    measurer = RecordingMeasurer(problem)
    result = run(problem, Options(out_dir=tmp_path, budget=2, screen_s=30), measurer=measurer)
    assert measurer.calls == 3
    measured = [a for a in result.state.attempts[1:] if a.time is not None]
    assert measured and all(a.time.kind == "predicted (time model MI300X)" for a in measured)
    assert "speedup " in measured[0].message and "predicted (time model MI300X)" in measured[0].message
