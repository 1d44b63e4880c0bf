"""L2 simulator: hand-computable cases, a pure-Python reference model, and one-line errors."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import replace

import numpy as np
import pytest

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel, get_model
from swizzlelab.sim import CacheGeometry, Engine, SimParams, simulate
from swizzlelab.sim.schedule import domain_seed_of
from swizzlelab.sim import kernels
from swizzlelab.sim.kernels import home_partition, near_partition
from swizzlelab.trace import AccessTrace, TensorInfo

LINE = 128
SECTOR = 32


def make_trace(tiles: list[list[list[tuple[int, int, bool]]]]) -> AccessTrace:
    """tiles[t][s] = list of (line, sector_mask, is_write) of step s of tile t."""
    lines, masks, writes, step_ptr, tile_step_ptr = [], [], [], [0], [0]
    for steps in tiles:
        for step in steps:
            for line, mask, write in step:
                lines.append(line)
                masks.append(mask)
                writes.append(write)
            step_ptr.append(len(lines))
        tile_step_ptr.append(len(step_ptr) - 1)
    n_lines = max(lines) + 1 if lines else 1
    return AccessTrace(
        np.array(lines, dtype=np.int64), np.array(masks, dtype=np.uint8), np.array(writes, dtype=bool),
        np.array(step_ptr, dtype=np.int64), np.array(tile_step_ptr, dtype=np.int64),
        [TensorInfo("x", 0, n_lines, 4)], (len(tiles),),
    )


def tiny_model(capacity_lines: int, units: int = 1, domains: int = 1, partitions: int = 1,
               fetch_bytes: int = SECTOR) -> HardwareModel:
    return HardwareModel(
        name="tiny", vendor="test", n_units=units * domains, n_domains=domains, units_per_domain=units,
        l2_bytes_per_domain=capacity_lines * LINE * partitions, line_bytes=LINE, sector_bytes=SECTOR,
        dispatch="in_order" if domains == 1 else "round_robin_domains", dram_bw_bytes_per_s=1.0,
        source="test model", l2_partitions=partitions,
        l2_ways=capacity_lines,  # one set: the fully associative LRU the hand-worked expectations assume
        dram_fetch_bytes=fetch_bytes,
    )


def read_steps(lines, mask=0xF):
    return [[(line, mask, False)] for line in lines]


def test_lru_cyclic_stream_one_longer_than_capacity_never_hits():
    capacity = 16
    trace = make_trace([read_steps(list(range(capacity + 1)) * 5)])
    result = simulate(trace, np.array([0]), tiny_model(capacity))
    assert result.l2_hit_rate == 0.0
    assert result.dram_read_bytes == 5 * (capacity + 1) * LINE


def test_lru_cyclic_stream_that_fits_hits_after_the_first_pass():
    capacity = 16
    trace = make_trace([read_steps(list(range(capacity)) * 5)])
    result = simulate(trace, np.array([0]), tiny_model(capacity))
    assert result.l2_hit_rate == pytest.approx(4 / 5)
    assert result.dram_read_bytes == capacity * LINE == result.compulsory_bytes


def test_two_programs_reading_one_tile_back_to_back_hit_half():
    tile = read_steps(range(10))
    trace = make_trace([tile, tile])
    result = simulate(trace, np.array([0, 1]), tiny_model(64))
    assert result.l2_hit_rate == pytest.approx(0.5)
    assert result.line_hit_rate == pytest.approx(0.5)
    assert result.dram_read_bytes == 10 * LINE
    assert result.best_hit_rate == pytest.approx(0.5)


def test_mi300x_programs_one_apart_land_on_different_xcds_and_miss():
    mi300x = get_model("mi300x")
    shared = read_steps(range(100, 110))
    tiles = [read_steps(range(1000 + 20 * t, 1000 + 20 * t + 10)) for t in range(16)]
    tiles[0] = shared
    tiles[1] = shared  # launch index 1 -> XCD 1
    result = simulate(make_trace(tiles), np.arange(16), mi300x)
    assert result.l2_hit_rate == 0.0
    assert result.per_domain[0].n_programs == 2 and result.per_domain[1].n_programs == 2
    # eight apart: both on XCD 0, running side by side -> the second reads hit
    tiles[1] = tiles[2]
    tiles[8] = shared
    result = simulate(make_trace(tiles), np.arange(16), mi300x)
    assert result.per_domain[0].l2_hit_rate == pytest.approx(0.5)
    assert result.l2_hit_rate == pytest.approx(10 / 160)


def test_sector_and_line_hit_rates_differ_for_disjoint_sectors():
    first = read_steps(range(10), mask=0b0001)
    second = read_steps(range(10), mask=0b0010)
    result = simulate(make_trace([first, second]), np.array([0, 1]), tiny_model(64))
    assert result.line_hit_rate == pytest.approx(0.5)
    assert result.l2_hit_rate == 0.0
    assert result.dram_read_bytes == 20 * SECTOR
    assert result.compulsory_bytes == 20 * SECTOR and result.requested_bytes == 20 * SECTOR


def test_write_back_counts_evicted_and_flushed_dirty_sectors():
    writes = [[(line, 0xF, True)] for line in range(10)]
    result = simulate(make_trace([writes]), np.array([0]), tiny_model(4))
    assert result.dram_read_bytes == 0  # write-allocate without a read
    assert result.l2_hit_rate == 1.0 and result.line_hit_rate == 0.0  # stores never wait for DRAM
    assert result.dram_write_bytes == 10 * LINE  # 6 evicted dirty + 4 flushed at the end
    assert result.per_domain[0].evictions == 6


def test_partial_write_then_full_read_reads_only_missing_sectors():
    steps = [[(7, 0b0001, True)], [(7, 0xF, False)]]
    result = simulate(make_trace([steps]), np.array([0]), tiny_model(8))
    assert result.dram_read_bytes == 3 * SECTOR
    assert result.dram_write_bytes == 1 * SECTOR
    # the written sector counts as a hit (a store needs no fetch), then 1 of the 4 read sectors is valid
    assert result.l2_hit_rate == pytest.approx(2 / 5)
    assert result.line_hit_rate == pytest.approx(1 / 2)


@pytest.mark.parametrize("engine", ["sets", "list"])
def test_a_read_miss_fetches_the_sector_pair_when_dram_fetch_is_64_bytes(engine):
    # Sector 0 then sector 1 of each line, then sector 2 alone: with 64-byte fetches the first read brings its
    # pair (sectors 0+1), so the second read hits; sector 2's miss brings sector 3 along (read, never used).
    steps = [[(line, 0b0001, False)] for line in range(6)] + [[(line, 0b0010, False)] for line in range(6)]
    steps += [[(line, 0b0100, False)] for line in range(6)]
    trace = make_trace([steps])
    pair = simulate(trace, np.array([0]), tiny_model(64, fetch_bytes=64), engine=engine)
    single = simulate(trace, np.array([0]), tiny_model(64), engine=engine)
    assert pair.l2_hit_rate == pytest.approx(1 / 3) and single.l2_hit_rate == 0.0
    assert pair.dram_read_bytes == 6 * 4 * SECTOR and single.dram_read_bytes == 6 * 3 * SECTOR
    # The bound any order must respect follows the fetch: only the first read of each pair must miss.
    assert pair.best_hit_rate == pytest.approx(1 / 3) and single.best_hit_rate == 0.0
    assert get_model("h100").dram_fetch_bytes == 64 and get_model("mi300x").dram_fetch_bytes == 32
    with pytest.raises(UserError, match="dram_fetch_bytes"):
        tiny_model(8, fetch_bytes=128)


@pytest.mark.parametrize("lookup", ["direct", "hashed"])
def test_two_partitions_count_the_far_lookup_as_ncu_does(lookup, monkeypatch):
    if lookup == "hashed":
        monkeypatch.setattr(kernels, "MAX_DIRECT_KEYS", 0)
    model = tiny_model(64, units=2, partitions=2)
    tile = read_steps(range(10))
    result = simulate(make_trace([tile, tile]), np.array([0, 1]), model)
    near = [near_partition(i, 2) for i in (0, 1)]
    assert result.dram_read_bytes == 10 * LINE  # each line read from DRAM once either way
    if near[0] == near[1]:
        assert result.l2_hit_rate == pytest.approx(0.5)
    else:
        # each line: a near miss in both partitions and one far lookup that hits -> 1 hit in 3 lookups
        assert result.l2_hit_rate == pytest.approx(1 / 3)
        assert result.fabric_bytes == 10 * LINE


# ---- a slow, obvious reference: the same scheduling and LRU in plain Python (one partition) ----------------
def reference(trace: AccessTrace, perm: np.ndarray, model: HardwareModel, occupancy: int,
              step_cv: float = 0.0, seed: int = 0, drift_decay: float = 0.0) -> dict[str, int]:
    """Slots run in simulated time: the earliest slot (ties: lowest index) runs one step of its program, which
    takes kernels.step_duration(...) (1 when step_cv = 0: round-robin lockstep) less drift_decay x the slot's lead
    on its lockstep clock (never below 0); a finished slot takes the next program in launch order at its finishing
    time."""
    pop = [bin(v).count("1") for v in range(256)]
    capacity = model.l2_lines_per_partition
    totals = dict(req=0, hit=0, lines=0, line_hits=0, read=0, write=0)
    for d in range(model.n_domains):
        programs = list(perm[d :: model.n_domains]) if model.dispatch == "round_robin_domains" else list(perm)
        domain_seed = np.uint64(domain_seed_of(seed, d))
        cache: OrderedDict[int, list[int]] = OrderedDict()
        queue = iter(enumerate(programs))

        def load(queue=queue):
            for k, t in queue:
                if trace.tile_step_ptr[t + 1] > trace.tile_step_ptr[t]:
                    return [int(trace.tile_step_ptr[t]), int(trace.tile_step_ptr[t + 1]), k, int(trace.tile_step_ptr[t])]
            return None

        slots = [load() for _ in range(model.units_per_domain * occupancy)]
        lockstep = [0.0] * len(slots)  # each slot's clock had every step taken exactly the mean step time
        ready = [(0.0, s) for s, slot in enumerate(slots) if slot is not None]
        heapq.heapify(ready)
        while ready:
            now, s = heapq.heappop(ready)
            slot = slots[s]
            for a in range(trace.step_ptr[slot[0]], trace.step_ptr[slot[0] + 1]):
                line, m, w = int(trace.lines[a]), int(trace.sector_mask[a]), bool(trace.is_write[a])
                totals["req"] += pop[m]
                totals["lines"] += 1
                if line in cache:
                    totals["line_hits"] += 1
                    cache.move_to_end(line)
                    valid, dirty = cache[line]
                else:
                    if len(cache) == capacity:
                        _, (_, old_dirty) = cache.popitem(last=False)
                        totals["write"] += pop[old_dirty]
                    valid, dirty = 0, 0
                totals["hit"] += pop[m] if w else pop[m & valid]
                fetched = 0
                if not w:
                    fetched = m & ~valid & 0xFF
                    if model.dram_fetch_bytes == 2 * model.sector_bytes:  # the aligned sector pair comes along
                        fetched = (fetched | ((fetched & 5) << 1) | ((fetched >> 1) & 5)) & ~valid & 0xFF
                    totals["read"] += pop[fetched]
                cache[line] = [valid | m | fetched, dirty | (m if w else 0)]
            duration = kernels.step_duration(step_cv, domain_seed, slot[2], slot[0] - slot[3])
            if drift_decay > 0:
                now = max(now + duration - drift_decay * (now - lockstep[s]), now)
                lockstep[s] += 1.0
            else:
                now += duration
            slot[0] += 1
            if slot[0] == slot[1]:
                slots[s] = slot = load()
            if slot is not None:
                heapq.heappush(ready, (now, s))
        totals["write"] += sum(pop[dirty] for _, dirty in cache.values())
    return totals


@pytest.mark.parametrize("step_cv", [0.0, 0.5])
@pytest.mark.parametrize("lookup", ["direct", "hashed"])
@pytest.mark.parametrize("seed", range(6))
def test_matches_python_reference_on_random_traces(seed, lookup, step_cv, monkeypatch):
    if lookup == "hashed":
        monkeypatch.setattr(kernels, "MAX_DIRECT_KEYS", 0)
    rng = np.random.default_rng(seed)
    n_tiles = int(rng.integers(5, 40))
    tiles = []
    for _ in range(n_tiles):
        n_steps = int(rng.integers(0, 6))
        tiles.append([
            [(int(rng.integers(0, 60)), int(rng.integers(1, 16)), bool(rng.random() < 0.2))
             for _ in range(int(rng.integers(0, 5)))]
            for _ in range(n_steps)
        ])
    trace = make_trace(tiles)
    perm = rng.permutation(n_tiles)
    domains = int(rng.choice([1, 3]))
    model = tiny_model(int(rng.integers(2, 30)), units=int(rng.integers(1, 4)), domains=domains,
                       fetch_bytes=SECTOR * int(rng.choice([1, 2])))
    occupancy = int(rng.integers(1, 3))
    got = simulate(trace, perm, model, SimParams(step_cv=step_cv, seed=seed + 7), occupancy=occupancy)
    want = reference(trace, perm, model, occupancy, step_cv=step_cv, seed=seed + 7)
    assert got.requested_bytes == want["req"] * SECTOR
    assert got.l2_hit_rate == pytest.approx(want["hit"] / want["req"] if want["req"] else 0.0)
    assert got.line_accesses == want["lines"]
    assert sum(d.line_hits for d in got.per_domain) == want["line_hits"]
    assert got.dram_read_bytes == want["read"] * SECTOR
    assert got.dram_write_bytes == want["write"] * SECTOR


def test_step_durations_have_mean_one_spread_cv_and_depend_only_on_seed_program_step():
    draws = np.array([kernels.step_duration(0.3, np.uint64(5), p, s) for p in range(200) for s in range(50)])
    assert draws.mean() == pytest.approx(1.0, abs=0.02)
    assert draws.std() == pytest.approx(0.3, abs=0.02)
    assert draws.min() >= 1.0 - 0.3
    assert kernels.step_duration(0.3, np.uint64(5), 17, 3) == kernels.step_duration(0.3, np.uint64(5), 17, 3)
    assert kernels.step_duration(0.3, np.uint64(5), 17, 3) != kernels.step_duration(0.3, np.uint64(6), 17, 3)
    assert kernels.step_duration(0.0, np.uint64(5), 17, 3) == 1.0


def test_drifting_programs_lose_reuse_that_lockstep_keeps():
    # 8 programs in 8 slots stream the same 40 lines, one per step, through a 16-line LRU: in lockstep every
    # line is fetched once and hit by the other 7; once the programs drift apart by more than the cache
    # holds, a program re-fetches what the leaders pushed out.
    tile = read_steps(range(40))
    trace = make_trace([tile] * 8)
    model = tiny_model(16, units=8)
    lockstep = simulate(trace, np.arange(8), model, SimParams(step_cv=0.0))
    drifting = simulate(trace, np.arange(8), model, SimParams(step_cv=1.0))
    assert lockstep.l2_hit_rate == pytest.approx(7 / 8)
    assert lockstep.dram_read_bytes == 40 * LINE
    assert drifting.dram_read_bytes > lockstep.dram_read_bytes
    assert drifting.l2_hit_rate < lockstep.l2_hit_rate
    assert drifting.step_cv == 1.0 and lockstep.step_cv == 0.0
    again = simulate(trace, np.arange(8), model, SimParams(step_cv=1.0))
    assert again.dram_read_bytes == drifting.dram_read_bytes  # same seed, same durations
    with pytest.raises(UserError):
        simulate(trace, np.arange(8), model, SimParams(step_cv=1.5))


def test_far_store_is_looked_up_near_and_at_home_both_hits():
    model = tiny_model(64, units=2, partitions=2)
    lines = list(range(40))
    result = simulate(make_trace([[[(line, 0xF, True)] for line in lines]]), np.array([0]), model)
    near = near_partition(0, 2)
    far = sum(1 for line in lines if home_partition(line, 2) != near)
    assert 0 < far < len(lines)
    assert result.l2_hit_rate == 1.0
    assert result.per_domain[0].lookup_sectors == 4 * (len(lines) + far)
    assert result.fabric_bytes == far * LINE
    assert result.dram_write_bytes == len(lines) * LINE and result.dram_read_bytes == 0


def test_full_associativity_equals_one_set_and_direct_mapped_is_no_better_when_it_fits():
    trace = make_trace([read_steps(list(range(0, 64, 3)) * 4)])
    model = tiny_model(64)
    full = simulate(trace, np.array([0]), model)
    one_set = simulate(trace, np.array([0]), model, geometry=CacheGeometry(64))
    direct = simulate(trace, np.array([0]), model, geometry=CacheGeometry(1))
    assert full.l2_hit_rate == one_set.l2_hit_rate == pytest.approx(3 / 4)
    assert direct.l2_hit_rate <= full.l2_hit_rate


def test_matmul_orders_on_h100_bounds_and_ordering():
    from swizzlelab.tasks import load_task
    from swizzlelab.swizzle import family, to_permutation

    task = load_task("matmul")
    config = task.kernel.GPU_CONFIG
    case = {"m": 1024, "n": 1024, "k": 512}
    trace = task.access_model(case, config=config)
    grid = task.tile_grid(case, config)
    args, consts = task.swizzle_args(case, config)
    small = replace(get_model("h100"), units_per_domain=8, n_units=8, l2_bytes_per_domain=256 * 1024,
                    l2_effective_bytes_per_domain=256 * 1024)
    results = {}
    for name, params in (("identity", {}), ("column_major", {}), ("grouped", {"GROUP_M": 2})):
        perm = to_permutation(family(name, **params), grid, args, consts)
        results[name] = simulate(trace, perm, small)
    for res in results.values():
        assert res.dram_read_bytes >= res.compulsory_read_bytes
        assert 0.0 <= res.l2_hit_rate <= res.best_hit_rate + 1e-12
        assert res.dram_write_bytes == 1024 * 1024 * 2  # C written back once, in fp16
    assert results["identity"].compulsory_bytes == (1024 * 512 * 2) * 2 + 1024 * 1024 * 2


def test_bad_inputs_are_one_line_user_errors():
    trace = make_trace([read_steps(range(4)), read_steps(range(4))])
    model = tiny_model(8)
    for perm in (np.array([0, 0]), np.array([0]), np.array([0, 2]), np.array([0.0, 1.0])):
        with pytest.raises(UserError):
            simulate(trace, perm, model)
    with pytest.raises(UserError):
        simulate(trace, np.array([0, 1]), model, occupancy=0)
    with pytest.raises(UserError):
        simulate(trace, np.array([0, 1]), model, geometry=CacheGeometry(0))
    with pytest.raises(UserError):
        simulate(object(), np.array([0, 1]), model)
    with pytest.raises(UserError) as err:
        simulate(trace, np.array([0, 1]), "z80")
    assert "h100" in str(err.value)


def test_domains_on_threads_give_the_serial_result():
    from swizzlelab.tasks import load_task
    from swizzlelab.swizzle import family, to_permutation

    task = load_task("matmul")
    config = task.kernel.GPU_CONFIG
    case = {"m": 2048, "n": 1536, "k": 256}
    trace = task.access_model(case, config=config)
    perm = to_permutation(family("grouped", GROUP_M=4), task.tile_grid(case, config),
                          *task.swizzle_args(case, config)).perm
    small = replace(get_model("mi300x"), l2_bytes_per_domain=64 * 1024, l2_effective_bytes_per_domain=64 * 1024)
    serial = simulate(trace, perm, small, engine=Engine(workers=1))
    threaded = simulate(trace, perm, small, engine=Engine(workers=3))
    assert 0 < serial.l2_hit_rate < 1 and serial.l2_miss_read_bytes > serial.compulsory_read_bytes
    assert replace(threaded, elapsed_s=0.0) == replace(serial, elapsed_s=0.0)
