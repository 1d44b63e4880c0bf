"""simulate(schedule=): a given order of steps (a measured timeline) replayed through the cache model in place of the
progress model; the model's own schedule replayed gives its own result, and schedules it cannot replay are refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.sim import CacheGeometry, Schedule, SimParams, kernels, simulate
from swizzlelab.sim.schedule import domain_seed_of
from swizzlelab.tasks import load_task
from tests.test_sim import LINE, make_trace, read_steps, tiny_model


def _model_schedule(trace, perm, n_slots, cv, seed, n_partitions=1) -> Schedule:
    """The schedule the progress model runs (kernels.schedule_domain), as a Schedule."""
    steps, near, start = kernels.schedule_domain(
        np.asarray(trace.step_ptr), np.asarray(trace.tile_step_ptr), np.asarray(perm, dtype=np.int64),
        np.int64(n_slots), np.int64(n_partitions), np.float64(cv), np.uint64(domain_seed_of(seed, 0)), np.zeros(0, np.float64),
        np.float64(0.0))
    return Schedule(steps=steps, near=near, start=start)


@pytest.mark.parametrize("cv", [0.0, 0.5])
def test_replaying_the_models_own_schedule_gives_its_result(cv):
    # A small matmul on the H100 model with a shrunken L2, so that the order of steps decides the hits.
    task = load_task("matmul")
    case = {"seed": 1, "m": 512, "n": 512, "k": 256}
    trace = task.access_model(case, config=task.kernel.GPU_CONFIG)
    model = get_model("h100")
    perm = np.random.default_rng(3).permutation(np.asarray(trace.tile_step_ptr).size - 1)
    kw = dict(occupancy=1, geometry=CacheGeometry(capacity_bytes=256 * 1024))
    own = simulate(trace, perm, model, SimParams(progress="random_walk", step_cv=cv, seed=7, lrc_window=0.5), **kw)
    sched = _model_schedule(trace, perm, model.units_per_domain, cv, 7, model.l2_partitions)
    replayed = simulate(trace, perm, model, SimParams(seed=7, lrc_window=0.5), schedule=sched, **kw)
    assert replayed.replayed and not own.replayed
    for name in ("l2_hit_rate", "dram_read_bytes", "dram_write_bytes", "fabric_bytes", "coalesced_bytes",
                 "requested_bytes"):
        assert getattr(replayed, name) == getattr(own, name), name
    assert replayed.to_dict()["kind"] == "predicted (model H100-SXM, replaying a given schedule)"


def test_the_order_of_a_given_schedule_decides_the_hits():
    # Two programs each read lines 0..8 once through an 8-line LRU. One after the other, the second finds each line
    # evicted by the first's later reads and misses every time; interleaved step by step it hits every line.
    lines = list(range(9))
    trace = make_trace([read_steps(lines), read_steps(lines)])
    model = tiny_model(8)
    n = len(lines)
    apart = Schedule(steps=np.arange(2 * n, dtype=np.int64), near=np.zeros(2 * n, np.int8),
                     start=np.arange(2 * n, dtype=np.float64))
    together = np.ravel(np.column_stack([np.arange(n), n + np.arange(n)])).astype(np.int64)
    inter = Schedule(steps=together, near=np.zeros(2 * n, np.int8), start=np.repeat(np.arange(n), 2).astype(float))
    a = simulate(trace, np.arange(2), model, schedule=apart)
    b = simulate(trace, np.arange(2), model, schedule=inter)
    assert a.l2_hit_rate == 0.0 and a.dram_read_bytes == 2 * n * LINE
    assert b.l2_hit_rate == pytest.approx(0.5) and b.dram_read_bytes == n * LINE


def _ok(n):
    return dict(steps=np.arange(n, dtype=np.int64), near=np.zeros(n, np.int8), start=np.arange(n, dtype=np.float64))


@pytest.mark.parametrize("change, message", [
    (lambda s: {**s, "steps": s["steps"][:-1], "near": s["near"][:-1], "start": s["start"][:-1]}, "exactly once"),
    (lambda s: {**s, "steps": np.r_[s["steps"][:-1], 0]}, "exactly once"),
    (lambda s: {**s, "steps": s["steps"].astype(np.int32)}, "int64 steps"),
    (lambda s: {**s, "near": s["near"] + 1}, "near partitions must lie"),
    (lambda s: {**s, "start": s["start"][::-1].copy()}, "non-decreasing"),
    (lambda s: {**s, "start": np.r_[s["start"][:-1], np.nan]}, "finite"),
    (lambda s: {**s, "near": s["near"][:-1]}, "one length"),
])
def test_bad_schedules_are_refused_with_one_line(change, message):
    trace = make_trace([read_steps(range(4)), read_steps(range(4))])
    with pytest.raises(UserError, match=message):
        simulate(trace, np.arange(2), tiny_model(8), schedule=Schedule(**change(_ok(8))))


@pytest.mark.parametrize("kwargs, message", [
    ({"params": SimParams(hit_speedup=0.1)}, "replaces the progress model"),
    ({"params": SimParams(drift_decay=0.01)}, "replaces the progress model"),
    ({"engine": "list"}, "set-partitioned CPU engine"),
    ({"geometry": CacheGeometry(assoc=None)}, "set-partitioned CPU engine"),
])
def test_a_schedule_with_progress_options_or_other_engines_is_refused(kwargs, message):
    trace = make_trace([read_steps(range(4)), read_steps(range(4))])
    with pytest.raises(UserError, match=message):
        simulate(trace, np.arange(2), tiny_model(8), schedule=Schedule(**_ok(8)), **kwargs)


def test_a_multi_domain_model_is_refused():
    trace = make_trace([read_steps(range(4)), read_steps(range(4))])
    with pytest.raises(UserError, match="one L2 domain"):
        simulate(trace, np.arange(2), replace(tiny_model(8, domains=2)), schedule=Schedule(**_ok(8)))
    with pytest.raises(UserError, match="must be a Schedule"):
        simulate(trace, np.arange(2), tiny_model(8), schedule=(1, 2, 3))
