"""Hit-dependent step times in the progress model: off (0) gives the simulator's earlier results exactly; on, a
program that trails its neighbour over shared lines hits in L2, runs faster and keeps the reuse drift loses."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import get_model
from swizzlelab.sim import Engine, SimParams, simulate
from swizzlelab.swizzle import family, to_permutation
from swizzlelab.tasks import load_task
from tests.test_sim import make_trace, read_steps, tiny_model


def _matmul():
    task = load_task("matmul")
    case = {"m": 1024, "n": 768, "k": 512}
    config = task.kernel.GPU_CONFIG
    trace = task.access_model(case, config=config)
    args, consts = task.swizzle_args(case, config)
    return trace, to_permutation(family("column_major"), task.tile_grid(case, config), args, consts).perm


# (hit sectors, lookup sectors, L2 DRAM read bytes, DRAM write bytes) of matmul 1024x768x512 column-major,
# occupancy 2, step_cv 0.5, with the L2 cut to 256 KB (H100) / 64 KB (MI300X), from the simulator before
# hit_speedup existed (commit 0897e05), both engines.
BEFORE = {"h100": (196840, 625664, 8640768, 1572864), "mi300x": (142624, 442368, 9591808, 1572864)}


@pytest.mark.parametrize("target,kb", [("h100", 256), ("mi300x", 64)])
@pytest.mark.parametrize("engine", ["sets", "list"])
def test_hit_speedup_zero_gives_the_earlier_results(target, kb, engine):
    trace, perm = _matmul()
    small = replace(get_model(target), l2_bytes_per_domain=kb * 1024, l2_effective_bytes_per_domain=kb * 1024)
    result = simulate(trace, perm, small, SimParams(progress="random_walk", step_cv=0.5, hit_speedup=0.0),
                      Engine(engine, workers=1), occupancy=2)
    got = (sum(d.hit_sectors for d in result.per_domain), sum(d.lookup_sectors for d in result.per_domain),
           sum(d.dram_read_bytes for d in result.per_domain), result.dram_write_bytes)
    assert got == BEFORE[target]
    assert result.hit_speedup == 0.0


def _shared_stream():
    # 8 programs in 8 slots stream the same 40 lines, one per step, through a 16-line LRU (as
    # test_drifting_programs_lose_reuse_that_lockstep_keeps): drift past 16 steps loses the reuse.
    return make_trace([read_steps(range(40))] * 8), tiny_model(16, units=8)


def test_hits_that_shorten_steps_keep_sharing_programs_together():
    trace, model = _shared_stream()
    lockstep = simulate(trace, np.arange(8), model, SimParams(step_cv=0.0))
    drifting = simulate(trace, np.arange(8), model, SimParams(step_cv=1.0, hit_speedup=0.0))
    caught_up = simulate(trace, np.arange(8), model, SimParams(step_cv=1.0, hit_speedup=0.9))
    assert caught_up.hit_speedup == 0.9
    assert drifting.l2_hit_rate < caught_up.l2_hit_rate <= lockstep.l2_hit_rate
    assert caught_up.dram_read_bytes < drifting.dram_read_bytes
    again = simulate(trace, np.arange(8), model, SimParams(step_cv=1.0, hit_speedup=0.9))
    assert again.dram_read_bytes == caught_up.dram_read_bytes


def test_set_partitioned_engine_approximates_it_by_passes_the_same_on_any_thread_count():
    trace, perm = _matmul()
    small = replace(get_model("h100"), l2_bytes_per_domain=256 * 1024, l2_effective_bytes_per_domain=256 * 1024)
    off = simulate(trace, perm, small, SimParams(hit_speedup=0.0), Engine("sets", workers=1), occupancy=2)
    one = simulate(trace, perm, small, SimParams(hit_speedup=0.6), Engine("sets", workers=1), occupancy=2)
    three = simulate(trace, perm, small, SimParams(hit_speedup=0.6), Engine("sets", workers=3), occupancy=2)
    assert one.dram_read_bytes != off.dram_read_bytes  # the later passes run another schedule
    assert replace(one, elapsed_s=0.0) == replace(three, elapsed_s=0.0)


def test_bad_hit_speedup_is_a_user_error():
    trace, model = _shared_stream()
    for bad in (-0.1, 1.0, "fast"):
        with pytest.raises(UserError):
            simulate(trace, np.arange(8), model, SimParams(hit_speedup=bad))


def test_behind_a_memory_side_cache_auto_keeps_the_set_engine_and_its_infinity_cache():
    trace, perm = _matmul()
    small = replace(get_model("mi300x"), l2_bytes_per_domain=64 * 1024, l2_effective_bytes_per_domain=64 * 1024)
    auto = simulate(trace, perm, small, SimParams(hit_speedup=0.6), Engine(workers=1), occupancy=2)
    sets = simulate(trace, perm, small, SimParams(hit_speedup=0.6), Engine("sets", workers=1), occupancy=2)
    assert auto.llc_hit_rate is not None
    assert replace(auto, elapsed_s=0.0) == replace(sets, elapsed_s=0.0)
