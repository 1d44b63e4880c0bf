"""The timeline analysis behind benchmarks/sim_validation's coalescer and drift findings: how many slab reads another
program of the same SM, TPC or GPU read just before, and the packed archive it reads the committed timelines from."""

from __future__ import annotations


import numpy as np
import pytest

from benchmarks.lab import timelines
from benchmarks.sim_validation import timeline_analysis


@pytest.fixture(scope="module")
def analysis():
    return timeline_analysis


def test_merged_share_counts_reads_by_scope_and_window(analysis):
    # Four programs of two k-steps: 0 and 1 share row 0 (A) and run on SMs 0 and 1 (one TPC); 2 and 3 share row 1
    # on SMs 2 and 3 (another TPC); columns (B) pair 0 with 2 and 1 with 3 across the TPCs. All read at the same
    # times, so every second reader of a slab is merged: A's 4 within each TPC, B's 4 more across the GPU.
    t = np.array([[0, 800], [0, 800], [0, 800], [0, 800]])
    sm = np.array([0, 1, 2, 3])
    rows, cols = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    assert analysis.merged_share(t, sm, rows, cols, "SM", 1000) == 0.0
    assert analysis.merged_share(t, sm, rows, cols, "TPC", 1000) == pytest.approx(4 / 16)
    assert analysis.merged_share(t, sm, rows, cols, "GPU", 1000) == pytest.approx(8 / 16)
    # Program 1 a microsecond late: its A reads fall outside a 500 ns window.
    late = t + np.array([[0], [1000], [0], [0]])
    assert analysis.merged_share(late, sm, rows, cols, "TPC", 500) == pytest.approx(2 / 16)


def test_packed_archive_round_trips_and_refuses_long_steps(analysis, tmp_path):
    data = {"64x64x128": {"row_major_r0_sm": np.arange(4, dtype=np.int32),
                          "row_major_r0_start": np.array([0, 5, 9, 12], dtype=np.int32),
                          "row_major_r0_step": np.array([[800, 900]] * 4, dtype=np.int32),
                          "row_major_r1_sm": np.arange(4, dtype=np.int32)}}
    path = tmp_path / "packed.npz"
    analysis.pack(data, str(path))
    back = timelines.load_timelines(path)
    assert set(back["64x64x128"]) == {"row_major_r0_sm", "row_major_r0_start", "row_major_r0_step"}  # first run only
    assert back["64x64x128"]["row_major_r0_step"].dtype == np.int16
    np.testing.assert_array_equal(back["64x64x128"]["row_major_r0_start"], data["64x64x128"]["row_major_r0_start"])
    data["64x64x128"]["row_major_r0_step"][0, 0] = 40_000
    with pytest.raises(SystemExit, match="32767"):
        analysis.pack(data, str(tmp_path / "bad.npz"))


def test_start_slope_says_whether_late_starters_run_longer(analysis):
    start = np.array([0.0, 1.0, 2.0, 3.0])
    assert timelines.start_slope(start, 100 + 0.5 * start) == pytest.approx(0.5)
    assert timelines.start_slope(start, 100 - 0.25 * start) == pytest.approx(-0.25)
    assert timelines.start_slope(start, np.full(4, 100.0)) == 0.0
    assert timelines.start_slope(np.zeros(4), start) == 0.0  # all started together: no slope to take
