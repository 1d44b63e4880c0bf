"""benchmarks/sim_validation/replay_launch.py's pieces: pairing ncu's launches with the probe's stamped runs, the chip
layout read from SM pace, and which orders of a pair each model ranks as measured."""

from __future__ import annotations


import numpy as np
import pytest

from benchmarks.lab import chips, timelines
from benchmarks.sim_validation import replay_launch, schedule_parts


@pytest.fixture(scope="module")
def rl():
    return replay_launch


def test_stamped_runs_pair_with_their_own_launch_and_a_count_mismatch_is_refused(rl):
    probe = {"rows": [{"case": "c", "order": "a", "launches": ["plain", "stamped", "stamped_r0", "stamped_r1"]},
                      {"case": "c", "order": "b", "launches": ["plain", "stamped_r0"]}]}
    launches = [{"dram__bytes_read.sum": float(i)} for i in range(6)]
    paired = timelines.stamped_counters(probe, launches)
    assert paired == {("c", "a", "r0"): {"dram__bytes_read.sum": 2.0}, ("c", "a", "r1"): {"dram__bytes_read.sum": 3.0},
                      ("c", "b", "r0"): {"dram__bytes_read.sum": 5.0}}
    with pytest.raises(SystemExit, match="cannot pair"):
        timelines.stamped_counters(probe, launches[:5])


def test_stamp_effect_splits_plain_from_stamped_launches_per_order(rl):
    probe = {"rows": [{"case": "c", "order": "a", "launches": ["plain", "plain", "stamped_r0", "stamped_r1"]},
                      {"case": "c", "order": "b", "launches": ["plain", "plain", "stamped_r0", "stamped_r1"]}]}
    launches = [{"dram__bytes_read.sum": v} for v in (10.0, 12.0, 9.0, 9.0, 5.0, 5.0, 6.0, 4.0)]
    rows = rl.stamp_effect({"device": "GPU", "probe": probe, "launches": launches})
    assert [(r["order"], r["plain_dram_read_bytes"], r["stamped_dram_read_bytes"], r["stamped_over_plain"])
            for r in rows] == [("a", 11.0, 9.0, 0.8182), ("b", 5.0, 5.0, 1.0)]
    assert rows[0]["plain_sd"] == pytest.approx(2 ** 0.5) and rows[0]["stamped_launches"] == 2
    with pytest.raises(SystemExit, match="ncu profiled 7"):
        rl.stamp_effect({"device": "GPU", "probe": probe, "launches": launches[:7]})


def _chip_arrays(fast_ids, fast_pace, seed=0):
    """Two grouped runs on 132 SMs: programs on `fast_ids` take `fast_pace` of the others' time (+-1% noise)."""
    rng = np.random.default_rng(seed)
    out = {}
    for run in ("r0", "r1"):
        sm = np.tile(np.arange(132), 20)
        start = np.sort(rng.integers(0, 1_000_000, sm.size))
        duration = 100_000 * np.where(np.isin(sm, fast_ids), fast_pace, 1.0) * rng.uniform(0.99, 1.01, sm.size)
        stem = f"1x1x1__grouped_GROUP_M8_{run}"
        out[f"{stem}_sm"], out[f"{stem}_start"] = sm.astype(np.int16), start.astype(np.int32)
        out[f"{stem}_duration"] = duration.astype(np.int32)
    out["1x1x1__row_major_r0_duration"] = np.full(132, 1, dtype=np.int32)  # not grouped: not read

    class Arrays(dict):
        files = property(lambda self: list(self))

    return Arrays(out)


def test_chip_layout_reads_whole_small_gpcs_and_their_pace(rl):
    two = chips.chip_layout(_chip_arrays(list(range(24)), 0.8636), 132, 8)
    assert two["found"] and two["fast_sms"] == 24 and two["fast_sm_ids"] == list(range(24))
    assert two["gpc_sms"] == [12, 12, 18, 18, 18, 18, 18, 18]
    # 12-SM GPCs at 0.8636 of 18-SM ones: 1 - b + b 12/16.5 = 0.8636 (1 - b + b 18/16.5) at b ~ 0.39.
    assert two["gpc_bound"] == pytest.approx(0.39, abs=0.02)
    one = chips.chip_layout(_chip_arrays(list(range(40, 52)), 0.84), 132, 8)
    assert one["gpc_sms"] == [12, 16, 16, 16, 18, 18, 18, 18]
    odd = chips.chip_layout(_chip_arrays(list(range(10)), 0.84), 132, 8)
    assert not odd["found"] and "whole GPCs" in odd["why"]
    # The fastest SMs within 2% of the rest and no whole GPCs among them: a chip without GPC pace (share 0).
    flat = chips.chip_layout(_chip_arrays(list(range(10)), 0.99), 132, 8)
    assert flat["found"] and flat["gpc_sms"] is None and flat["gpc_bound"] == 0.0


def test_pairs_rank_each_model_against_the_measured_mean_and_ties_stay_out(rl):
    def row(order, run, measured, replayed, model):
        return {"case": "c", "order": order, "run": run, "measured_dram_read_bytes": measured,
                "replayed_dram_read_bytes": replayed, "model_dram_read_bytes": model,
                "chip_model_dram_read_bytes": None}

    rows = [row("a", "r0", 100, 101, 100), row("a", "r1", 102, 103, 100), row("b", "r0", 110, 112, 100),
            row("b", "r1", 112, 111, 100), row("c", "r0", 101.5, 90, 120)]
    summary = rl.summarize(rows)
    pairs = {tuple(p["orders"]): p for p in summary["pairs"]}
    assert pairs[("a", "b")]["replay_agrees"] is True
    assert pairs[("a", "b")]["model_agrees"] is False  # the model sees the two as one
    assert pairs[("a", "c")]["measured_tie"] and pairs[("a", "c")]["replay_agrees"] is None
    assert summary["pairs_untied"] == 2 and summary["pairs_replay_agrees"] == 2 and summary["pairs_model_agrees"] == 0
    assert summary["replay_dram_mean_rel_error"] == pytest.approx(np.mean([0.01, 1 / 102, 2 / 110, 1 / 112, 11.5 / 101.5]), abs=1e-4)
    assert summary["chip_model_dram_mean_rel_error"] is None


def test_schedule_parts_evens_the_models_own_steps_without_moving_its_reads():
    # The model's schedule of a small matmul, replayed with each program's steps evenly spaced between its first and
    # last step: the programs and their spans stay, so the reads stay within a few percent (a schedule rebuilt in
    # the wrong order or with the wrong programs would read far more or less).
    from swizzlelab.hw import get_model
    from swizzlelab.sim import footprint_of
    from swizzlelab.tasks import load_task

    task = load_task("matmul")
    trace = task.access_model({"seed": 1, "m": 2048, "n": 2048, "k": 512}, config=task.kernel.GPU_CONFIG)
    perm = np.arange(256)
    own, evened = schedule_parts.model_even(trace, perm, get_model("h100"), footprint_of(trace), 0.3, 512 // 64)
    assert own > 0 and evened == pytest.approx(own, rel=0.05)
