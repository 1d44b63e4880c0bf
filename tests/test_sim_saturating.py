"""The saturating progress model and its contention form (simulate's default on NVIDIA models with known GPCs): slots
keep their SM's pace while DRAM is idle and lose it as DRAM saturates; hand-worked schedules of the kernel, the exact
case where it equals lockstep, and its refusals."""

from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.sim import CacheGeometry, Engine, SimParams, kernels, own_schedule, simulate
from swizzlelab.sim.params import (AGE_PRIORITY, DEFAULT_PROGRESS, HOT_LOAD, START_JITTER, STEP_TIME_CV,
                                   STEP_TIME_CV_SATURATING)
from swizzlelab.sim.schedule import slot_speeds
from swizzlelab.sim.setup import set_index_array
from swizzlelab.tasks import load_task
from tests.test_sim import make_trace, read_steps


def _schedule(trace, speeds, share, gain=0.0, cv=0.0, age=0.0, hot=0.0, queue_cv=False):
    """kernels.schedule_saturating over one fully sampled 4-way set, programs in launch order, one slot each (with
    the contention terms `age`, `hot` (hot_load; window 1 step, power 8) and `queue_cv` where given)."""
    lines = np.asarray(trace.lines)
    n_programs = np.asarray(trace.tile_step_ptr).size - 1
    sample = kernels.sample_accesses(np.asarray(trace.step_ptr), lines, np.asarray(trace.is_write),
                                     set_index_array(lines, 1, 1, 1), np.int64(0), np.int64(1), np.int64(1), np.int64(4))
    return kernels.schedule_saturating(
        np.asarray(trace.tile_step_ptr), np.arange(n_programs, dtype=np.int64), np.int64(len(speeds)), np.int64(1),
        np.float64(cv), np.uint64(1), np.asarray(speeds, dtype=np.float64), *sample, np.int64(4), np.int64(4),
        np.float64(share), np.float64(2.0), np.float64(gain), np.float64(age), np.float64(hot), np.float64(1.0),
        np.float64(8.0), queue_cv, np.zeros(0, dtype=np.float64), np.float64(0.0))


def test_idle_dram_lets_each_slot_keep_its_pace():
    # Two programs of 4 steps on slots of pace 1 and 0.5 (its SM twice as fast), no saturation in sight: slot 1 runs
    # two steps to slot 0's one. Starts: slot 0 at 0, 1, 2, 3; slot 1 at 0, 0.5, 1, 1.5 (ties: lower slot first).
    trace = make_trace([read_steps([0, 1, 2, 3]), read_steps([4, 5, 6, 7])])
    steps, near, start = _schedule(trace, [1.0, 0.5], share=1e9)
    assert steps.tolist() == [0, 4, 5, 1, 6, 7, 2, 3]
    assert start.tolist() == [0.0, 0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 3.0]
    assert near.tolist() == [0] * 8


def test_saturated_dram_takes_the_pace_away():
    # Every read misses and DRAM saturates at any miss share: from the second step on every step takes one mean
    # step time whatever its slot's pace (the first runs before any miss is seen, at its slot's pace), so the two
    # programs alternate as in lockstep.
    trace = make_trace([read_steps([0, 1, 2, 3]), read_steps([4, 5, 6, 7])])
    steps, _, start = _schedule(trace, [1.0, 0.5], share=1e-9)
    assert steps.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert start.tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]


def test_behind_a_saturated_dram_a_step_costs_its_own_misses():
    # Program 1 re-reads the lines program 0 reads (one 4-way set keeps them). Saturated, with miss_gain 1, a step
    # costs its misses / the recent miss share (window 2 steps: each step keeps half the running sums), at most 4:
    # step 4 hits line 0 (cost 0), step 5 misses line 1 at a recent share of 1/3 (cost 3), step 1 hits it, step 2
    # misses line 2 (3), step 6 hits it, step 7 misses line 3, step 3 hits it. Without the gain: lockstep.
    trace = make_trace([read_steps([0, 1, 2, 3]), read_steps([0, 1, 2, 3])])
    lock, _, _ = _schedule(trace, [1.0, 1.0], share=1e-9, gain=0.0)
    steps, _, start = _schedule(trace, [1.0, 1.0], share=1e-9, gain=1.0)
    assert lock.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert steps.tolist() == [0, 4, 5, 1, 2, 6, 7, 3]
    assert start.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 4.0]


def test_crowded_lines_take_the_pace_away():
    # Both programs read lines 0-3 in step: from the second read on every read finds its line read by the other a
    # moment ago (decayed count 2 against hot_load 1), the L2 slice sets the pace, and slot 1 (pace 0.5) runs in
    # lockstep with slot 0. The first step runs before any read is seen. Off (hot 0), slot 1 keeps its pace.
    crowded = make_trace([read_steps([0, 1, 2, 3]), read_steps([0, 1, 2, 3])])
    steps, _, start = _schedule(crowded, [1.0, 0.5], share=1e9, hot=1.0)
    assert steps.tolist() == [0, 4, 1, 5, 2, 6, 3, 7] and start.tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    steps, _, start = _schedule(crowded, [1.0, 0.5], share=1e9)
    assert start.tolist() == [0.0, 0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 3.0]
    # Programs apart on their own lines keep their pace under the same gate (each read counts once: (1/8)^8 ~ 0).
    apart = make_trace([read_steps([0, 1, 2, 3]), read_steps([4, 5, 6, 7])])
    _, _, gated = _schedule(apart, [1.0, 0.5], share=1e9, hot=8.0)
    _, _, free = _schedule(apart, [1.0, 0.5], share=1e9)
    assert np.allclose(gated, free, atol=1e-6)


def test_older_programs_go_first_while_l2_bound():
    # Age priority 0.5 on equal slots: programs 0 (2 steps) and 1 (4 steps) start together (none older: each step
    # 1 - 0.5); program 2 takes slot 0 at 1.0, younger than program 1 (each step 1 + 0.5), which stays at 0.5.
    trace = make_trace([read_steps([0, 1]), read_steps([2, 3, 4, 5]), read_steps([6, 7])])
    steps, _, start = _schedule(trace, [1.0, 1.0], share=1e9, age=0.5)
    assert steps.tolist() == [0, 2, 1, 3, 6, 4, 5, 7]
    assert start.tolist() == [0.0, 0.0, 0.5, 0.5, 1.0, 1.0, 1.5, 2.5]


def test_queue_cv_spreads_the_dram_queue_only():
    # With DRAM idle a step takes its slot's pace whatever step_cv: the draw spreads only the time spent behind a
    # saturated DRAM, so the L2-bound schedule is the lockstep one.
    trace = make_trace([read_steps([0, 1, 2, 3]), read_steps([4, 5, 6, 7])])
    lock = _schedule(trace, [1.0, 0.5], share=1e9)
    spread = _schedule(trace, [1.0, 0.5], share=1e9, cv=0.5, queue_cv=True)
    assert all(np.array_equal(a, b) for a, b in zip(lock, spread))
    assert not np.array_equal(_schedule(trace, [1.0, 0.5], share=1e9, cv=0.5)[2], lock[2])
    # Saturated from the first miss on, the draws come back.
    saturated = _schedule(trace, [1.0, 0.5], share=1e-9, cv=0.5, queue_cv=True)
    assert not np.array_equal(saturated[2], lock[2])


def test_the_contention_model_runs_where_the_saturating_one_does():
    task = load_task("matmul")
    trace = task.access_model({"seed": 1, "m": 512, "n": 512, "k": 256}, config=task.kernel.GPU_CONFIG)
    perm = np.arange(np.asarray(trace.tile_step_ptr).size - 1)
    kw = dict(occupancy=1, geometry=CacheGeometry(capacity_bytes=512 * 1024))
    plain = simulate(trace, perm, "h100", SimParams(progress="saturating"), **kw)
    contention = simulate(trace, perm, "h100", SimParams(progress="contention"), **kw)
    assert plain.progress == "saturating" and plain.hot_load == 0.0
    # The default since stop 35 (the fresh test, benchmarks/sim_validation/fresh).
    default = simulate(trace, perm, "h100", **kw)
    assert DEFAULT_PROGRESS == "contention" and default.progress == "contention"
    assert (default.l2_hit_rate, default.dram_read_bytes) == (contention.l2_hit_rate, contention.dram_read_bytes)
    assert (contention.progress, contention.age_priority, contention.hot_load, contention.start_jitter) == (
        "contention", AGE_PRIORITY, HOT_LOAD, START_JITTER)
    assert "hot-line load" in contention.text() and "hot-line" not in plain.text()
    # Its terms name it: passing one picks it; every figure stays a prediction of the same trace's lines.
    named = simulate(trace, perm, "h100", SimParams(hot_load=HOT_LOAD), **kw)
    assert named.progress == "contention" and named.dram_read_bytes == contention.dram_read_bytes
    assert contention.requested_bytes == plain.requested_bytes
    assert contention.dram_read_bytes >= contention.compulsory_read_bytes
    # All terms off and no jitter is the saturating schedule with step_cv on the DRAM queue only.
    off = simulate(trace, perm, "h100",
                   SimParams(progress="contention", step_cv=0.0, age_priority=0.0, hot_load=1e6, start_jitter=0.0),
                   **kw)
    lock = simulate(trace, perm, "h100", SimParams(progress="saturating", step_cv=0.0), **kw)
    assert (off.dram_read_bytes, off.l2_hit_rate) == (lock.dram_read_bytes, lock.l2_hit_rate)


@pytest.mark.parametrize("kw, message", [
    ({"progress": "saturating", "age_priority": 0.02}, "belongs to the contention"),
    ({"progress": "random_walk", "hot_load": 8.0}, "belongs to the contention"),
    ({"hot_load": 0.0}, "hot_load"),
    ({"age_priority": 1.5}, "age_priority"),
    ({"start_jitter": -1.0}, "start_jitter"),
    ({"progress": "contention", "drift_decay": 0.1}, "contention progress model cannot run with drift_decay"),
])
def test_bad_contention_requests_are_refused(kw, message):
    trace = make_trace([read_steps([0, 1, 2, 3])])
    with pytest.raises(UserError, match=message):
        simulate(trace, np.arange(1), get_model("h100"), SimParams(**kw))


def test_sampled_accesses_are_the_watched_sets_in_trace_order():
    # Every 4th set index of 64 sets over 2 partitions: the kept accesses are those whose set index is 0 mod 4, each
    # step's in trace order, based at (set // 4 * 2 + home) * ways; reads flagged as reads.
    rng = np.random.default_rng(5)
    lines = rng.integers(0, 5000, size=400).astype(np.int64)
    writes = rng.random(400) < 0.3
    step_ptr = np.array([0, 7, 7, 150, 151, 400], dtype=np.int64)
    set_home = set_index_array(lines, 64, 2, 1)
    ptr, base, line, read = kernels.sample_accesses(step_ptr, lines, writes, set_home, np.int64(1), np.int64(4),
                                                    np.int64(2), np.int64(16))
    keep = [a for a in range(400) if (int(set_home[a]) >> 1) % 4 == 0]
    assert 0 < len(keep) < 400
    assert line.tolist() == lines[keep].tolist() and read.tolist() == (~writes[keep]).tolist()
    assert base.tolist() == [((int(set_home[a]) >> 1) // 4 * 2 + (int(set_home[a]) & 1)) * 16 for a in keep]
    assert ptr.tolist() == [sum(1 for a in keep if a < end) for end in step_ptr]


def test_equal_gpcs_with_no_miss_gain_are_lockstep():
    # Every SM in a GPC of one size: every slot keeps pace 1, and with step_cv 0 and miss_gain 0 the saturating model
    # runs what the random walk runs at step_cv 0 (lockstep), on a real trace with a shrunken L2.
    task = load_task("matmul")
    trace = task.access_model({"seed": 1, "m": 512, "n": 512, "k": 256}, config=task.kernel.GPU_CONFIG)
    model = replace(get_model("h100"), gpc_sms=(33, 33, 33, 33))
    perm = np.random.default_rng(3).permutation(np.asarray(trace.tile_step_ptr).size - 1)
    kw = dict(occupancy=1, geometry=CacheGeometry(capacity_bytes=256 * 1024))
    walk = simulate(trace, perm, model, SimParams(progress="random_walk", step_cv=0.0, lrc_window=0.3), **kw)
    saturating = simulate(trace, perm, model, SimParams(progress="saturating", step_cv=0.0, lrc_window=0.3,
                                                        gpc_bound=0.5, miss_gain=0.0), **kw)
    assert saturating.gpc_bound == 0.5 and walk.gpc_bound == 0.0
    assert (saturating.progress, walk.progress) == ("saturating", "random_walk")
    for name in ("l2_hit_rate", "dram_read_bytes", "fabric_bytes", "coalesced_bytes"):
        assert getattr(saturating, name) == getattr(walk, name), name
    assert "GPC-bound share 0.5" in saturating.text()


def test_slot_speeds_follow_gpc_sizes():
    model = get_model("h100")
    speeds = slot_speeds(model, 2 * model.units_per_domain, 0.6, 7)
    assert speeds.shape == (264,)
    assert np.array_equal(speeds[:132], speeds[132:])  # two slots of one SM share its pace
    per_unit = speeds[:132]
    # The 24 SMs of the two smallest GPCs (12 each) are the fastest (least time a step), the 108 of the 18-SM GPCs
    # the slowest, and the unit-weighted mean pace is 1.
    assert model.gpc_sms == (12, 12, 18, 18, 18, 18, 18, 18)
    assert np.sum(per_unit == per_unit.min()) == 24 and np.sum(per_unit == per_unit.max()) == 108
    assert per_unit.mean() == pytest.approx(1.0)
    assert np.all(slot_speeds(model, 264, 0.0, 7) == 1.0)


@pytest.mark.parametrize("kw, message", [
    ({"gpc_bound": 1.0}, "gpc_bound"),
    ({"gpc_bound": -0.1}, "gpc_bound"),
    ({"gpc_bound": 0.5, "dram_saturation": 0.0}, "dram_saturation"),
    ({"gpc_bound": 0.5, "miss_gain": 1.5}, "miss_gain"),
    ({"gpc_bound": 0.5, "engine": "list"}, "engine 'list'"),
    ({"gpc_bound": 0.5, "hit_speedup": 0.1}, "hit_speedup"),
    ({"gpc_bound": 0.5, "progress": "random_walk"}, "belongs to the saturating"),
    ({"progress": "saturating", "drift_decay": 0.1}, "drift_decay"),
    ({"progress": "lockstep"}, "progress must be one of"),
])
def test_bad_saturating_requests_are_refused(kw, message):
    trace = make_trace([read_steps([0, 1, 2, 3])])
    engine = kw.pop("engine", "auto")
    with pytest.raises(UserError, match=message):
        simulate(trace, np.arange(1), get_model("h100"), SimParams(**kw), engine)


def test_models_without_known_gpcs_refuse_it():
    trace = make_trace([read_steps([0, 1, 2, 3])])
    with pytest.raises(UserError, match="no known GPCs"):
        simulate(trace, np.arange(1), get_model("mi300x"), SimParams(gpc_bound=0.5))


def test_gpc_layouts_belong_to_their_unit_count():
    # A study's smaller variant of a GPU has GPCs nobody measured: none are assumed. An empty GPC is refused.
    assert replace(get_model("h100"), n_units=8, units_per_domain=8).gpc_sms == ()
    # Each GPU keeps the layout and GPC share its measured chips show (hw: H100 two small GPCs, the H200 nearly one
    # pace).
    assert (get_model("h100").gpc_bound, get_model("h200").gpc_bound) == (0.35, 0.05)
    assert get_model("h200").gpc_sms == (12, 16, 16, 16, 18, 18, 18, 18)
    with pytest.raises(UserError, match="at least one SM"):
        replace(get_model("h100"), gpc_sms=(0, 132))
    for share in (1.0, -0.1):
        with pytest.raises(UserError, match="gpc_bound must be a share"):
            replace(get_model("h100"), gpc_bound=share)


def test_the_default_progress_model_follows_the_model_and_the_kernel():
    # NVIDIA models with known GPCs run the contention model (the saturating one with its contention terms); SM pace
    # only for a trace of an L2-bound kernel
    # (task.yml swizzle.l2_bound, carried by the trace); models without GPCs and requests it cannot serve (a barrier
    # between waves) fall back to the random walk.
    task = load_task("matmul")
    assert task.spec.l2_bound and not load_task("spmv").spec.l2_bound
    trace = task.access_model({"seed": 1, "m": 256, "n": 256, "k": 128}, config=task.kernel.GPU_CONFIG)
    assert trace.l2_bound
    perm = np.arange(np.asarray(trace.tile_step_ptr).size - 1)
    paced = simulate(trace, perm, "h100", occupancy=1)
    unpaced = simulate(replace(trace, l2_bound=False), perm, "h100", occupancy=1)
    assert (paced.progress, paced.gpc_bound, paced.step_cv) == ("contention", 0.35, STEP_TIME_CV_SATURATING)
    assert simulate(trace, perm, "h200", occupancy=1).gpc_bound == 0.05
    assert (unpaced.progress, unpaced.gpc_bound) == ("contention", 0.0)
    assert simulate(trace, perm, "mi300x", occupancy=1).progress == "random_walk"
    synced = simulate(trace, perm, "h100", occupancy=1, wave_sync=132)
    assert (synced.progress, synced.step_cv) == ("random_walk", STEP_TIME_CV)
    assert "contention" in paced.text() and "GPC-bound share" in paced.text() and "GPC-bound" not in unpaced.text()


def test_a_sampled_estimate_runs_the_exact_schedule(tmp_path):
    # set_fraction < 1 simulates a share of the sets under the same schedule; the trace's l2_bound flag survives a
    # save and load.
    task = load_task("matmul")
    trace = task.access_model({"seed": 1, "m": 512, "n": 512, "k": 256}, config=task.kernel.GPU_CONFIG)
    loaded = type(trace).load(trace.save(tmp_path / "t.npz"))
    assert loaded.l2_bound
    perm = np.random.default_rng(4).permutation(np.asarray(trace.tile_step_ptr).size - 1)
    kw = dict(occupancy=1, geometry=CacheGeometry(capacity_bytes=512 * 1024))
    exact = simulate(trace, perm, "h100", **kw)
    estimate = simulate(loaded, perm, "h100", engine=Engine(set_fraction=0.5), **kw)
    assert estimate.progress == DEFAULT_PROGRESS and estimate.set_fraction == 0.5
    assert abs(estimate.l2_hit_rate - exact.l2_hit_rate) < 0.03


def test_the_grouped_coalescer_counts_as_the_serial_one_under_start_jitter(monkeypatch):
    # The contention model's start jitter moves the first steps before time 0. The coalescer that counts a set group
    # at a time (kernels.coalesce_groups, in a core's cache) keeps two epochs of reads; it once took a fixed epoch
    # for "none yet", so reads of negative times shared one table and joined across more than a window. It must
    # count what the serial coalescer (kernels.coalesce_reads, taken when a table is too small) counts.
    engines_module = importlib.import_module("swizzlelab.sim.engines")
    task = load_task("matmul")
    trace = task.access_model({"seed": 1, "m": 1024, "n": 1024, "k": 1024}, config=task.kernel.GPU_CONFIG)
    perm = np.arange(np.asarray(trace.tile_step_ptr).size - 1)
    params = SimParams(progress="contention", hot_load=1e6, age_priority=0.0)
    grouped = simulate(trace, perm, "h100", params, "sets", occupancy=2)
    monkeypatch.setattr(engines_module, "COALESCE_TABLE_SLOTS", 2)
    serial = simulate(trace, perm, "h100", params, "sets", occupancy=2)
    assert grouped.coalesced_bytes > 0 and grouped.coalesced_bytes == serial.coalesced_bytes
    assert grouped.l2_hit_rate == serial.l2_hit_rate


def test_page_share_counts_the_lines_a_step_reads_from_each_dram_page():
    # Pages of 8 lines, every set sampled. Step 0 reads rows of two lines (0, 1 | 16, 17): each shares its page with
    # one other read, 1 - 1/2. Step 1 reads lines 8 pages apart: alone in their pages, 0. Step 2 reads a whole page and
    # one line of the next: 7/8 each, then 0.
    lines = np.array([0, 1, 16, 17, 0, 64, 128, *range(24, 32), 32], dtype=np.int64)
    step_ptr = np.array([0, 4, 7, 16], dtype=np.int64)
    set_home = np.zeros(lines.size, dtype=np.int64)
    sample_ptr = kernels.sample_accesses(step_ptr, lines, np.zeros(lines.size, dtype=np.bool_), set_home, np.int64(0),
                                         np.int64(1), np.int64(1), np.int64(4))[0]
    share = kernels.sample_page_share(step_ptr, lines, set_home, np.int64(0), np.int64(1), np.int64(8), sample_ptr)
    assert share.tolist() == [0.5] * 4 + [0.0] * 3 + [7 / 8] * 8 + [0.0]


def _paged(trace, noise, page, program_cv=0.0, saturation_share=1e9):
    """_schedule's run with step_cv 0 and every step's sampled accesses given the page share `page`; `program_cv` a
    program's own pace, `saturation_share` the miss share at which DRAM saturates (1e9: never)."""
    lines = np.asarray(trace.lines)
    n_programs = np.asarray(trace.tile_step_ptr).size - 1
    sample = kernels.sample_accesses(np.asarray(trace.step_ptr), lines, np.asarray(trace.is_write),
                                     set_index_array(lines, 1, 1, 1), np.int64(0), np.int64(1), np.int64(1),
                                     np.int64(4))
    return kernels.schedule_saturating(
        np.asarray(trace.tile_step_ptr), np.arange(n_programs, dtype=np.int64), np.int64(2), np.int64(1),
        np.float64(0.0), np.uint64(1), np.ones(2), *sample, np.int64(4), np.int64(4), np.float64(saturation_share),
        np.float64(2.0), np.float64(0.0), np.float64(0.0), np.float64(0.0), np.float64(1.0), np.float64(8.0), True,
        np.full(sample[1].size, page), np.float64(noise), np.float64(program_cv))


def test_page_noise_spreads_only_steps_whose_misses_read_pages_densely():
    # Two programs that miss on every step, in lockstep at step_cv 0. Misses alone in their pages (share 0) leave the
    # lockstep whatever page_noise is; misses in dense pages (share 0.5) draw their step times (mean 1): the programs
    # drift apart and the starts stop being whole numbers. page_noise 0 keeps the lockstep on dense pages too.
    trace = make_trace([read_steps(list(range(0, 40, 4))), read_steps(list(range(100, 140, 4)))])
    lockstep = _paged(trace, 0.0, 0.5)
    assert lockstep[2].tolist() == [float(i // 2) for i in range(20)]
    sparse = _paged(trace, 0.9, 0.0)
    assert sparse[0].tolist() == lockstep[0].tolist() and sparse[2].tolist() == lockstep[2].tolist()
    dense = _paged(trace, 0.9, 0.5)
    assert sorted(dense[0].tolist()) == sorted(lockstep[0].tolist())
    assert dense[2].tolist() != lockstep[2].tolist() and any(t != round(t) for t in dense[2].tolist())


def test_page_noise_belongs_to_the_contention_model_and_is_bounded():
    trace = make_trace([read_steps([0, 1, 2, 3])])
    with pytest.raises(UserError, match="page_noise belongs to the contention progress model"):
        simulate(trace, np.array([0]), get_model("h100"), SimParams(progress="saturating", page_noise=0.5))
    with pytest.raises(UserError, match="page_noise"):
        simulate(trace, np.array([0]), get_model("h100"), SimParams(page_noise=1.5))


def test_a_programs_own_pace_holds_through_its_steps_while_l2_bound_only():
    # Two programs of 10 steps that miss on every step, at step_cv 0. L2-bound (DRAM never saturates), each runs every
    # step at its own pace, one draw per program: constant within a program, different between the two. Behind a
    # saturated DRAM (from the second step on, once a miss share is known) both wait on the queue alike: steps of 1.
    trace = make_trace([read_steps(list(range(0, 40, 4))), read_steps(list(range(100, 140, 4)))])

    def intervals(run):
        steps, _, start = run
        tile = steps // 10
        return [np.diff(start[tile == t]) for t in (0, 1)]

    free = intervals(_paged(trace, 0.0, 0.0, 0.5))
    assert all(np.allclose(d, d[0]) for d in free) and abs(free[0][0] - free[1][0]) > 0.01
    lockstep = intervals(_paged(trace, 0.0, 0.0, 0.0))
    assert all(np.allclose(d, 1.0) for d in lockstep)
    queued = intervals(_paged(trace, 0.0, 0.0, 0.5, 1e-9))
    assert all(np.allclose(d[1:], 1.0) for d in queued)


def test_program_cv_belongs_to_the_contention_model_and_is_bounded():
    trace = make_trace([read_steps([0, 1, 2, 3])])
    with pytest.raises(UserError, match="program_cv belongs to the contention progress model"):
        simulate(trace, np.array([0]), get_model("h100"), SimParams(progress="saturating", program_cv=0.1))
    with pytest.raises(UserError, match="program_cv"):
        simulate(trace, np.array([0]), get_model("h100"), SimParams(program_cv=-0.1))
    assert simulate(trace, np.array([0]), get_model("h100"), SimParams(program_cv=0.2)).program_cv == 0.2


def test_own_schedule_rebuilds_the_schedule_a_result_ran_on():
    # Replaying the rebuilt schedule through the cache model gives the result's own counts, for both progress
    # models that have a schedule (page noise and program pace included); a random-walk result has none to rebuild.
    task = load_task("matmul")
    trace = task.access_model({"seed": 1, "m": 2048, "n": 2048, "k": 512}, config=task.kernel.GPU_CONFIG)
    perm = np.random.default_rng(3).permutation(256)
    model = get_model("h200")
    for kw in ({"progress": "saturating"}, {"progress": "contention", "page_noise": 0.9, "program_cv": 0.05}):
        result = simulate(trace, perm, model, SimParams(**kw), occupancy=2)
        replayed = simulate(trace, perm, model, occupancy=2, schedule=own_schedule(trace, perm, model, result))
        assert (replayed.dram_read_bytes, replayed.l2_hit_rate) == (result.dram_read_bytes, result.l2_hit_rate)
    with pytest.raises(UserError, match="own_schedule needs a saturating or contention result"):
        own_schedule(trace, perm, model, simulate(trace, perm, model, SimParams(progress="random_walk")))
