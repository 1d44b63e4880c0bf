"""The set-partitioned simulator engine gives the linked-list engine's results exactly (same model, same sets).

Traces of several tasks and random ones, one or two L2 partitions, one or many domains, 1 or 3 threads.
"""

from __future__ import annotations

import importlib
from dataclasses import replace

import numpy as np
import pytest

from swizzlelab.hw import get_model
from swizzlelab.sim import CacheGeometry, Engine, SimParams, clear_schedule_cache, domain_programs, kernels, simulate
from swizzlelab.sim.params import L2Geometry, Progress
from swizzlelab.sim.schedule import domain_schedules, domain_seed_of, schedule_cache_size
from swizzlelab.sim.setup import Run, TraceArrays
from swizzlelab.swizzle import family, to_permutation
from swizzlelab.tasks import load_task
from tests.test_sim import make_trace, tiny_model

KB = 1024
engines_module = importlib.import_module("swizzlelab.sim.engines")


def schedule_run(step_ptr, tile_step_ptr, model, progress, n_slots=4, n_partitions=2, wave_chunk=0) -> Run:
    """A run over a trace of one line per step (schedules read only its pointers)."""
    n = int(step_ptr[-1])
    trace = TraceArrays(np.arange(n, dtype=np.int64), np.ones(n, np.uint8), np.zeros(n, np.bool_), step_ptr,
                        tile_step_ptr)
    geometry = L2Geometry(n_partitions=n_partitions, capacity=1, n_sets=1, assoc=None, set_map=0, pair=0)
    return Run(model=model, trace=trace, geometry=geometry, progress=progress, n_slots=n_slots, n_workers=1,
               n_simulated=1, wave_chunk=wave_chunk)


def _comparable(result):
    # The list engine has no memory-side cache behind the L2s: compare everything that comes from the L2s.
    return replace(result, elapsed_s=0.0, dram_read_bytes=0, llc_hit_rate=None)


def _task_trace(name: str, case: dict):
    task = load_task(name)
    config = task.kernel.GPU_CONFIG
    trace = task.access_model(case, config=config)
    grid = task.tile_grid(case, config)
    args, consts = task.swizzle_args(case, config)
    return trace, grid, args, consts


CASES = [
    ("matmul", {"m": 1024, "n": 768, "k": 512}, family("grouped", GROUP_M=4)),
    ("matmul", {"m": 512, "n": 512, "k": 1024}, family("column_major")),
    ("transpose", {"m": 512, "n": 768, "dtype": "float16"}, family("diagonal")),
]


@pytest.mark.parametrize("name,case,order", CASES)
# 16 ways with 2 partitions (NVIDIA) and 1 (AMD) run the kernels compiled for those geometries; 4 and 8 ways the
# generic ones.
@pytest.mark.parametrize("target,l2_kb,assoc", [("h100", 256, 16), ("h100", 96, 4), ("mi300x", 32, 8),
                                                ("mi300x", 64, 16)])
def test_sets_engine_equals_list_engine_on_task_traces(name, case, order, target, l2_kb, assoc):
    trace, grid, args, consts = _task_trace(name, case)
    perm = to_permutation(order, grid, args, consts).perm
    model = get_model(target)
    small = replace(model, l2_bytes_per_domain=l2_kb * KB, l2_effective_bytes_per_domain=l2_kb * KB)
    # The linked-list engine runs the random walk only (the saturating model needs sets), so both engines run it.
    want = simulate(trace, perm, small, SimParams(progress="random_walk"), Engine("list", workers=1),
                    geometry=CacheGeometry(assoc), occupancy=2)
    assert want.per_domain[0].evictions > 0  # the caches are under pressure
    results, saturating = [], []
    for workers in (1, 3):
        got = simulate(trace, perm, small, SimParams(progress="random_walk"), Engine("sets", workers=workers),
                       geometry=CacheGeometry(assoc), occupancy=2)
        assert _comparable(got) == _comparable(want)
        results.append(replace(got, elapsed_s=0.0))
        saturating.append(replace(simulate(trace, perm, small, engine=Engine(workers=workers),
                                           geometry=CacheGeometry(assoc), occupancy=2),
                                  elapsed_s=0.0))
    # The memory-side cache (AMD) replays on threads too: the whole result does not depend on them, nor does the
    # default progress model's.
    assert results[0] == results[1] and saturating[0] == saturating[1]


@pytest.mark.parametrize("seed", range(6))
def test_sets_engine_equals_list_engine_on_random_traces(seed):
    rng = np.random.default_rng(100 + seed)
    tiles = [
        [[(int(rng.integers(0, 200)), int(rng.integers(1, 16)), bool(rng.random() < 0.25))
          for _ in range(int(rng.integers(1, 8)))] for _ in range(int(rng.integers(1, 7)))]
        for _ in range(int(rng.integers(10, 60)))
    ]
    trace = make_trace(tiles)
    perm = rng.permutation(len(tiles))
    partitions = int(rng.choice([1, 2]))
    model = tiny_model(48, units=2 * partitions, domains=int(rng.choice([1, 3])), partitions=partitions)
    for assoc in (1, 4, 48):
        want = simulate(trace, perm, model, engine=Engine("list", workers=1), geometry=CacheGeometry(assoc),
                        occupancy=2)
        got = simulate(trace, perm, model, engine=Engine("sets", workers=3), geometry=CacheGeometry(assoc), occupancy=2)
        assert _comparable(got) == _comparable(want)


@pytest.mark.parametrize("seed", range(3))
def test_streaming_shares_equal_the_set_group_split(seed, monkeypatch):
    # Traces too large to split by set groups run on streaming shares: same results.
    rng = np.random.default_rng(300 + seed)
    tiles = [
        [[(int(rng.integers(0, 300)), int(rng.integers(1, 16)), bool(rng.random() < 0.25))
          for _ in range(int(rng.integers(1, 9)))] for _ in range(int(rng.integers(1, 7)))]
        for _ in range(int(rng.integers(20, 60)))
    ]
    trace = make_trace(tiles)
    perm = rng.permutation(len(tiles))
    model = tiny_model(64, units=4, domains=1 + 2 * (seed % 2), partitions=2)
    want = simulate(trace, perm, model, engine=Engine("list", workers=1), geometry=CacheGeometry(4), occupancy=2)
    grouped = simulate(trace, perm, model, engine=Engine("sets", workers=3), geometry=CacheGeometry(4), occupancy=2)
    monkeypatch.setattr(engines_module, "set_groups", lambda *args, **kwargs: None)
    for workers in (1, 3):
        streamed = simulate(trace, perm, model, engine=Engine("sets", workers=workers), geometry=CacheGeometry(4),
                            occupancy=2)
        assert _comparable(streamed) == _comparable(want) == _comparable(grouped)


def test_default_model_is_set_associative_and_fully_associative_stays_available():
    trace, grid, args, consts = _task_trace("matmul", {"m": 512, "n": 512, "k": 256})
    perm = np.arange(int(np.prod(grid)))
    model = get_model("h100")
    default = simulate(trace, perm, model)
    assert default.assoc == model.l2_ways
    full = simulate(trace, perm, replace(model, l2_bytes_per_domain=512 * KB, l2_effective_bytes_per_domain=512 * KB),
                    geometry=CacheGeometry(None))
    assert full.assoc is None


def test_a_sample_of_sets_estimates_the_whole_cache():
    trace, grid, args, consts = _task_trace("matmul", {"m": 2048, "n": 2048, "k": 1024})
    model = replace(get_model("h100"), l2_bytes_per_domain=2 * 1024 * KB, l2_effective_bytes_per_domain=2 * 1024 * KB)
    results = {}
    for progress in ("random_walk", "saturating"):  # the saturating model samples under the exact schedule
        for spec in ("identity", "grouped"):
            perm = to_permutation(family(spec), grid, args, consts).perm
            exact = simulate(trace, perm, model, SimParams(progress=progress), occupancy=2)
            sampled = simulate(trace, perm, model, SimParams(progress=progress), Engine(set_fraction=0.25), occupancy=2)
            assert sampled.set_fraction == 0.25 and exact.set_fraction == 1.0
            assert abs(sampled.l2_hit_rate - exact.l2_hit_rate) < 0.01
            assert abs(sampled.dram_read_bytes - exact.dram_read_bytes) < 0.05 * exact.dram_read_bytes
            results[progress, spec] = (exact.dram_read_bytes, sampled.dram_read_bytes)
    # The saturating model keeps these orders' programs together (a 2 MB L2 here), so it predicts far fewer reads
    # (0.75x at its step_cv 0.3, 0.54x at 0.2).
    assert all(results["saturating", spec][0] < 0.8 * results["random_walk", spec][0] for spec in ("identity",
                                                                                                   "grouped"))
    with pytest.raises(Exception, match="set_fraction"):
        simulate(trace, np.arange(int(np.prod(grid))), model, engine=Engine(set_fraction=0.0))


def test_schedules_of_launch_positions_equal_the_direct_schedule_for_every_order():
    # Tiles of 0-5 steps (a tile without steps is skipped at launch) over 3 domains: each order's schedule, mapped
    # from the cached schedule of launch positions, is the one kernels.schedule_domain computes for that order.
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 6, size=90)
    counts[:3] = 4  # equal counts in front: ties between slots decided by index, as in the direct schedule
    tile_step_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    step_ptr = np.arange(tile_step_ptr[-1] + 1, dtype=np.int64)
    model = tiny_model(64, units=4, domains=3, partitions=2)
    clear_schedule_cache()
    orders = [rng.permutation(counts.size) for _ in range(3)]
    # Two orders that launch tiles of the same step counts in the same places share one cached schedule.
    same_counts = orders[0].copy()
    equal = np.flatnonzero(counts[same_counts] == counts[same_counts][0])
    same_counts[equal] = same_counts[equal[::-1]]
    for order in [*orders, same_counts]:
        work = list(enumerate(domain_programs(order, model)))
        for cv in (0.0, 0.5):
            got = domain_schedules(schedule_run(step_ptr, tile_step_ptr, model, Progress("random_walk", cv, 11)),
                                   work)
            for d, programs in work:
                want = kernels.schedule_domain(step_ptr, tile_step_ptr, np.ascontiguousarray(programs), np.int64(4),
                                               np.int64(2), np.float64(cv),
                                               np.uint64(domain_seed_of(11, d)), np.zeros(0))
                assert all(np.array_equal(a, b) for a, b in zip(got[d], want)), (d, cv)
    # 3 random orders x 2 cv x 3 domains; the fourth order found its schedules in the cache.
    assert schedule_cache_size() == 18


def test_memory_side_cache_replay_does_not_depend_on_its_step_length(monkeypatch):
    # The merged miss stream is cut into steps of LLC_STEP accesses; one access per step (the first form) and steps
    # that end mid-stream at odd places must give the same Infinity Cache counts.
    trace, grid, args, consts = _task_trace("matmul", {"m": 1024, "n": 768, "k": 512})
    perm = to_permutation(family("grouped", GROUP_M=4), grid, args, consts).perm
    model = get_model("mi300x")
    small = replace(model, l2_bytes_per_domain=16 * KB, l2_effective_bytes_per_domain=16 * KB, llc_bytes=256 * KB)
    results = []
    for step in (1, 7, engines_module.LLC_STEP):
        monkeypatch.setattr(engines_module, "LLC_STEP", step)
        results.append(replace(simulate(trace, perm, small, engine=Engine("sets", workers=2), occupancy=2),
                               elapsed_s=0.0))
    assert 0.0 < results[0].llc_hit_rate < 1.0  # the replay saw both hits and misses
    assert results[0] == results[1] == results[2]


def test_interleaved_set_map_fills_sets_evenly_and_both_engines_run_it():
    from swizzlelab.errors import UserError
    from swizzlelab.sim import kernels

    n_sets, parts = 40, 2
    block = n_sets * parts
    out = np.empty(7 * block, dtype=np.int32)

    def counts(first: int, set_map: int) -> np.ndarray:
        lines = np.arange(first, first + 7 * block, dtype=np.int64)
        kernels.set_index_of(lines, np.int64(n_sets), np.int64(parts), np.int64(1), out, np.int64(0),
                             np.int64(lines.size), np.int64(set_map))
        return np.bincount(out, minlength=block)

    # Interleaved and permuted: 7 whole blocks fill every set of every partition alike; a range that starts inside a
    # block spans two partial blocks, one line more or less per set at each.
    for set_map in (1, 2):
        assert counts(3 * block, set_map).min() == counts(3 * block, set_map).max() == 7
        assert counts(3 * block + 17, set_map).max() - counts(3 * block + 17, set_map).min() <= 2
    hashed_counts = counts(3 * block, 0)
    assert hashed_counts.max() - hashed_counts.min() > 4  # hashed: some sets fill first
    # Every second line: interleaved puts a block's in one partition (a residue class of its slots), permuted
    # spreads them over both.
    strided = np.arange(0, 7 * block, 2, dtype=np.int64)
    for set_map, one_sided in ((1, True), (2, False)):
        kernels.set_index_of(strided, np.int64(n_sets), np.int64(parts), np.int64(1), out[:strided.size],
                             np.int64(0), np.int64(strided.size), np.int64(set_map))
        share = (out[:strided.size] & 1).reshape(7, block // 2).mean(axis=1)  # each block's share in partition 1
        assert np.all((share == 0) | (share == 1)) == one_sided
        if not one_sided:
            assert np.abs(share - 0.5).max() < 0.25

    trace, grid, args, consts = _task_trace(*CASES[0][:2])
    perm = to_permutation(CASES[0][2], grid, args, consts).perm
    hashed = replace(get_model("h100"), l2_bytes_per_domain=96 * KB, l2_effective_bytes_per_domain=96 * KB)
    other = simulate(trace, perm, hashed, SimParams(progress="random_walk"), Engine("sets", workers=3),
                     geometry=CacheGeometry(4), occupancy=2)
    for set_map in ("interleave", "permute"):
        mapped = replace(hashed, l2_set_map=set_map)
        want = simulate(trace, perm, mapped, SimParams(progress="random_walk"), Engine("list", workers=1),
                        geometry=CacheGeometry(4), occupancy=2)
        got = simulate(trace, perm, mapped, SimParams(progress="random_walk"), Engine("sets", workers=3),
                       geometry=CacheGeometry(4), occupancy=2)
        assert _comparable(got) == _comparable(want)
        assert other.per_domain[0].evictions != got.per_domain[0].evictions  # the map reaches the kernels
    with pytest.raises(UserError, match="l2_set_map"):
        replace(hashed, l2_set_map="xor")


def test_threads_asking_for_a_traces_caches_at_once_share_one_build():
    """A search's threads start screening together: each per-trace structure is built once, not once per thread
    (at 545M accesses one copy per thread of the set-group split passed a 63 GiB limit)."""
    import threading

    from swizzlelab.sim import setup

    rng = np.random.default_rng(7)
    n, n_steps = 1 << 21, 1 << 12
    lines = rng.integers(0, 1 << 18, n, dtype=np.int64)
    step_ptr = np.linspace(0, n, n_steps + 1).astype(np.int64)
    trace = TraceArrays(lines, rng.integers(1, 16, n, dtype=np.uint8), rng.random(n) < 0.1, step_ptr,
                        np.arange(0, n_steps + 1, 8, dtype=np.int64))
    geometry = L2Geometry(n_partitions=2, capacity=8192, n_sets=512, assoc=16, set_map=0, pair=0)
    width = 4
    start = threading.Barrier(width)
    got: list = [None] * width

    def ask(i: int) -> None:
        start.wait()
        home = setup.set_index_array(lines, geometry.n_sets, geometry.n_partitions, 1)
        got[i] = (home, setup.set_groups(trace, home, geometry, geometry.n_sets // 4),
                  setup.sampled_accesses(trace, geometry, 1))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(width)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got[0][1] is not None
    for i in range(1, width):
        assert got[i][0] is got[0][0] and got[i][1] is got[0][1] and got[i][2] is got[0][2]
