"""Drift decay in the progress model: off (0) gives the simulator's earlier results exactly; on, each slot's clock is
pulled back toward its lockstep clock, so slots stay a bounded number of steps apart however long the kernel runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.sim import Engine, SimParams, kernels, simulate
from tests.test_sim import SECTOR, make_trace, read_steps, reference, tiny_model
from tests.test_sim_hit_speedup import BEFORE, _matmul


@pytest.mark.parametrize("engine", ["sets", "list"])
def test_drift_decay_zero_gives_the_earlier_results(engine):
    # BEFORE: matmul 1024x768x512 column-major, H100 with a 256 KB L2, step_cv 0.5, pinned before drift decay existed.
    trace, perm = _matmul()
    small = replace(get_model("h100"), l2_bytes_per_domain=256 * 1024, l2_effective_bytes_per_domain=256 * 1024)
    result = simulate(trace, perm, small,
                      SimParams(progress="random_walk", step_cv=0.5, drift_decay=0.0, lrc_window=0.0),
                      Engine(engine, workers=1), occupancy=2)
    got = (sum(d.hit_sectors for d in result.per_domain), sum(d.lookup_sectors for d in result.per_domain),
           sum(d.dram_read_bytes for d in result.per_domain), result.dram_write_bytes)
    assert got == BEFORE["h100"]
    assert result.drift_decay == 0.0
    decayed = simulate(trace, perm, small, SimParams(step_cv=0.5, drift_decay=0.05, lrc_window=0.0),
                       Engine(engine, workers=1), occupancy=2)
    assert decayed.drift_decay == 0.05
    assert decayed.dram_read_bytes != result.dram_read_bytes  # the parameter reaches this engine


@pytest.mark.parametrize("seed", range(4))
def test_matches_python_reference_with_drift_decay(seed):
    rng = np.random.default_rng(100 + seed)
    tiles = [[[(int(rng.integers(0, 60)), int(rng.integers(1, 16)), bool(rng.random() < 0.2))
               for _ in range(int(rng.integers(0, 4)))] for _ in range(int(rng.integers(0, 12)))]
             for _ in range(int(rng.integers(10, 40)))]
    trace = make_trace(tiles)
    perm = rng.permutation(len(tiles))
    model = tiny_model(int(rng.integers(2, 30)), units=int(rng.integers(1, 4)), domains=int(rng.choice([1, 3])))
    for decay in (0.05, 0.5, 1.0):
        got = simulate(trace, perm, model, SimParams(step_cv=0.8, seed=seed, drift_decay=decay), occupancy=2)
        want = reference(trace, perm, model, 2, step_cv=0.8, seed=seed, drift_decay=decay)
        assert got.dram_read_bytes == want["read"] * SECTOR
        assert sum(d.line_hits for d in got.per_domain) == want["line_hits"]
        assert got.l2_hit_rate == pytest.approx(want["hit"] / want["req"] if want["req"] else 0.0)


def _slot_drift(step_cv: float, decay: float, n_slots: int = 8, n_steps: int = 4000) -> np.ndarray:
    """|start time - lockstep start time| of every step when `n_slots` programs of `n_steps` steps run at once."""
    step_ptr = np.arange(n_slots * n_steps + 1, dtype=np.int64)
    tile_step_ptr = np.arange(0, n_slots * n_steps + 1, n_steps, dtype=np.int64)
    steps, _, start = kernels.schedule_domain(step_ptr, tile_step_ptr, np.arange(n_slots, dtype=np.int64),
                                              np.int64(n_slots), np.int64(1), np.float64(step_cv), np.uint64(7),
                                              np.zeros(0), np.float64(decay))
    return np.abs(start - steps % n_steps)


def test_drift_decay_bounds_the_drift_that_step_cv_alone_lets_grow():
    walk = _slot_drift(0.5, 0.0)
    pulled = _slot_drift(0.5, 0.05)
    # A random walk of 4000 steps of spread 0.5 is ~30 steps from lockstep at the end (0.5 x sqrt(4000)); pulled
    # back by 5% a step, the drift stays near 0.5 / sqrt(2 x 0.05) ~ 1.6 steps, with Exp(1) tails.
    assert walk[-800:].max() > 20
    assert pulled.max() < 12
    assert pulled.std() < 2.5
    # Lockstep stays lockstep: with every step taking its mean time there is no drift to take back.
    assert _slot_drift(0.0, 0.3).max() == 0.0


def test_lockstep_is_the_same_with_any_drift_decay():
    trace = make_trace([read_steps(range(40))] * 8)
    model = tiny_model(16, units=8)
    lockstep = simulate(trace, np.arange(8), model, SimParams(step_cv=0.0))
    for decay in (0.1, 1.0):
        also = simulate(trace, np.arange(8), model, SimParams(step_cv=0.0, drift_decay=decay))
        assert (also.l2_hit_rate, also.dram_read_bytes) == (lockstep.l2_hit_rate, lockstep.dram_read_bytes)


def test_drift_decay_keeps_sharing_programs_together():
    # 8 programs in 8 slots stream the same 40 lines through a 16-line LRU (test_sim's drifting test): the random
    # walk of step_cv 1 loses part of the reuse lockstep keeps; pulled back by half their drift a step, the slots
    # keep all of it.
    trace = make_trace([read_steps(range(40))] * 8)
    model = tiny_model(16, units=8)
    drifting = simulate(trace, np.arange(8), model, SimParams(step_cv=1.0))
    pulled = simulate(trace, np.arange(8), model, SimParams(step_cv=1.0, drift_decay=0.5))
    assert drifting.dram_read_bytes > pulled.dram_read_bytes
    assert drifting.l2_hit_rate < pulled.l2_hit_rate == pytest.approx(7 / 8)  # lockstep's: every line fetched once


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", True])
def test_drift_decay_out_of_range_is_a_user_error(bad):
    trace = make_trace([read_steps(range(4))])
    with pytest.raises(UserError, match="drift_decay"):
        simulate(trace, np.arange(1), tiny_model(16), SimParams(drift_decay=bad))


def test_engines_agree_with_drift_decay():
    # The set-partitioned engine takes its schedule from the cached schedule of launch positions, the linked-list
    # engine runs it inside the cache walk: the same drift decay must give both the same counts.
    trace, perm = _matmul()
    small = replace(get_model("h100"), l2_bytes_per_domain=256 * 1024, l2_effective_bytes_per_domain=256 * 1024)
    runs = [simulate(trace, perm, small, SimParams(step_cv=0.7, drift_decay=0.01), Engine(engine, workers=1),
                     occupancy=2)
            for engine in ("sets", "list")]
    counts = [(sum(d.hit_sectors for d in r.per_domain), sum(d.lookup_sectors for d in r.per_domain),
               r.dram_read_bytes, r.dram_write_bytes) for r in runs]
    assert counts[0] == counts[1]
