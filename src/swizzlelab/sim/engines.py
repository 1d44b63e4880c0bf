"""The simulator's engines: the linked-list LRU (any associativity), the set-partitioned engine (set groups on host
threads, or the GPU backend), the memory-side cache replay, and the L2 request coalescer's count.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from swizzlelab.hw import HardwareModel
from swizzlelab.sim import gpu, kernels, walk
from swizzlelab.sim.result import LlcStats
from swizzlelab.sim.schedule import DomainSchedule, Work, domain_schedules, domain_seed_of, hit_passes, hit_step_scale
from swizzlelab.sim.setup import Run, line_range, max_step, set_groups, step_tiles

COALESCE_TABLE_SLOTS = 1 << 14  # a thread's coalescer table (kernels.coalesce_groups), in a core's cache
QUEUE_RECORDS = 16384  # records a set group's queue holds at least (run_groups; run_share's queues too)
# Sets whose entries fill about this many bytes run together from one queue: with the queue itself they stay in
# a host core's L2 cache while it runs (measured on matmul 8192 with one thread: see benchmarks/sim_speed).
SUB_RANGE_BYTES = 256 * 1024
LLC_WAYS = 16
LLC_STEP = 4096


class Stream(NamedTuple):
    """Accesses as run_share walks them: a trace's (or the merged miss stream's) arrays with each access's set word."""

    lines: np.ndarray
    masks: np.ndarray
    writes: np.ndarray
    set_home: np.ndarray
    step_ptr: np.ndarray


class SetShape(NamedTuple):
    """The shape of the sets a share walks: partition bits of a set word, partitions, ways per set."""

    pbits: int
    n_partitions: int
    ways: int


def run_list(run: Run, work: Work) -> list[np.ndarray]:
    """Linked-list LRU engine (any associativity, fully associative included); domains on threads. It runs the
    cache inside the schedule, so with `hit_speedup` > 0 each step's duration follows its own hits (one pass)."""
    lines, masks, writes, step_ptr, tile_step_ptr = run.trace
    geometry, progress = run.geometry, run.progress
    n_partitions = geometry.n_partitions
    popcount = kernels.popcount_table()
    key_space = (line_range(lines)[1] + 1) * n_partitions if lines.size else 0
    direct = np.empty(key_space if key_space <= kernels.MAX_DIRECT_KEYS else 0, dtype=np.int32)
    # Per step of the trace: every step belongs to one program of one domain, so threads write disjoint entries.
    live = progress.hit_speedup > 0
    step_scale = np.ones(step_ptr.size - 1 if live else 0, dtype=np.float64)
    step_miss = np.zeros(step_ptr.size - 1 if live else 0, dtype=np.int64)

    def run_one(d: int, programs: np.ndarray, direct: np.ndarray) -> np.ndarray:
        stats = np.zeros(kernels.N_STATS, dtype=np.int64)
        if programs.size:
            kernels.run_domain(
                lines, masks, writes, step_ptr, tile_step_ptr, np.ascontiguousarray(programs),
                np.int64(run.n_slots), np.int64(run.model.units_per_domain), np.int64(n_partitions),
                np.int64(geometry.capacity), np.int64(geometry.n_sets), popcount, stats, direct,
                np.float64(progress.step_cv), np.uint64(domain_seed_of(progress.seed, d)), step_scale, step_miss,
                np.float64(progress.hit_speedup), np.int64(geometry.pair), np.float64(progress.drift_decay),
                np.int64(geometry.set_map),
            )
        return stats

    n_threads = min(run.n_workers, sum(1 for _, programs in work if programs.size))
    if n_threads > 1:
        # Domains are independent caches: each thread simulates whole domains with its own key map (the
        # numba kernel releases the GIL), so results are those of the serial loop.
        def run_share(share: Work) -> list[np.ndarray]:
            own = np.empty_like(direct)
            return [run_one(d, programs, own) for d, programs in share]

        shares = [work[i::n_threads] for i in range(n_threads)]
        with ThreadPoolExecutor(max_workers=n_threads) as pool:
            done = list(pool.map(run_share, shares))
        by_domain = {d: stats for share, results in zip(shares, done) for (d, _), stats in zip(share, results)}
        return [by_domain[d] for d, _ in work]
    return [run_one(d, programs, direct) for d, programs in work]


def _share_layout(n_partitions: int, ways: int, lo: int, hi: int, max_step: int) -> tuple[int, int]:
    """(sub-ranges, records per queue) for sets lo..hi-1: sub-ranges that fit the host's L2, queues that hold at
    least one step beyond what triggers a run."""
    n_sub = max(1, min(hi - lo, -(-(hi - lo) * n_partitions * ways * 8 // SUB_RANGE_BYTES)))
    return n_sub, max(QUEUE_RECORDS, 2 * max_step)


def _run_share(job, stream: Stream, shape: SetShape, longest: int, stats: np.ndarray, got_stream: np.ndarray,
               pair: int = 0) -> None:
    """One share of a domain's sets walks the domain's whole stream once (kernels.run_share)."""
    d, (steps, near, _), lo, hi, sets, row = job
    n_sub, queue_len = _share_layout(shape.n_partitions, shape.ways, lo, hi, longest)
    kernels.run_share(stream.lines, stream.masks, stream.writes, stream.set_home, np.int64(shape.pbits),
                      stream.step_ptr, steps, near, np.int64(shape.n_partitions), np.int64(shape.ways), np.int64(lo),
                      np.int64(hi), np.int64(n_sub), np.int64(queue_len), np.int64(longest), sets, stats,
                      np.int64(row), got_stream, np.int64(pair))


def run_sets(run: Run, work: Work, use_gpu: bool = False,
             coalesce: gpu.Coalesce | None = None) -> tuple[list[np.ndarray], LlcStats | None, int]:
    """Set-partitioned engine: per domain one schedule, then ranges of sets on threads (same sums as serial), or
    every set index on its own GPU thread (`use_gpu`; the memory-side cache replay stays on the CPU). With
    `hit_speedup` > 0, HIT_PASSES passes: each reschedules with the step times the previous pass's hits give.
    Returns (statistics per domain, the memory-side cache's, whole-line reads of the simulated sets the GPU counted
    coalesced (`coalesce`, GPU only) or -1)."""
    set_home = run.set_home()
    step_ptr = run.trace.step_ptr
    hit_speedup = run.progress.hit_speedup
    llc = run.model.llc_bytes > 0
    n_passes = hit_passes(hit_speedup)
    # The DRAM-bound sectors of every access: the memory-side cache replays them, the next pass counts misses.
    record = llc or n_passes > 1
    step_scale = None
    for p in range(n_passes):
        schedules = domain_schedules(run, work, step_scale)
        by_domain, got, coalesced = _sets_pass(run, work, set_home, record, use_gpu, schedules, coalesce)
        if p + 1 < n_passes:
            step_miss = np.zeros(step_ptr.size - 1, dtype=np.int64)
            for d, sched in schedules.items():
                kernels.step_miss_counts(step_ptr, sched[0], got[d], step_miss)
            accesses = (np.diff(step_ptr) if run.n_simulated == run.geometry.n_sets else
                        kernels.step_access_counts(step_ptr, set_home, np.int64(run.geometry.pbits),
                                                   np.int64(run.n_simulated)))
            step_scale = hit_step_scale(step_miss, accesses, hit_speedup)
            del got
    memory_side = _run_llc(run.model, run.trace.lines, step_ptr, schedules, got, run.n_workers) if llc else None
    return (*_scaled(by_domain, work, memory_side, run.geometry.n_sets, run.n_simulated), coalesced)


def _sets_pass(run: Run, work: Work, set_home: np.ndarray, record: bool, use_gpu: bool,
               schedules: dict[int, DomainSchedule], coalesce: gpu.Coalesce | None = None
               ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray], int]:
    """One run of every domain's schedule through its L2: ({domain: statistics}, {domain: DRAM-bound sectors per
    access of its stream}, empty unless `record`; the GPU's coalesced whole-line reads or -1)."""
    lines, masks, writes, step_ptr, _ = run.trace
    geometry, n_simulated, n_workers = run.geometry, run.n_simulated, run.n_workers
    n_sets, n_partitions, ways, pbits, pair = (geometry.n_sets, geometry.n_partitions, geometry.ways, geometry.pbits,
                                               geometry.pair)
    longest = max_step(step_ptr)
    if use_gpu:
        gpu_stats, got, coalesced = gpu.run_sets_gpu(run, set_home, schedules, record, coalesce)
        return {d: gpu_stats.get(d, np.zeros(kernels.N_STATS, dtype=np.int64)) for d, _ in work}, got, coalesced
    groups = set_groups(run.trace, set_home, geometry, n_simulated)
    # With the set-group split, a share runs a range of groups over the domain's schedule; without it (too
    # little memory) a share walks the domain's whole stream once, keeping its own range of sets' accesses.
    # As many shares as threads over all domains, not more.
    n_units = groups.n_groups if groups is not None else n_simulated
    per_domain = max(1, min(n_units, -(-n_workers // max(len(schedules), 1))))
    jobs = []
    got = {}
    starts = {}
    spans = {}
    for d, sched in schedules.items():
        if groups is not None:
            spans[d] = groups.scheduled(sched[0])
        # Shares of one domain use one set array and one miss stream (each writes only its own sets' entries).
        arrays = walk.new_sets(n_sets * n_partitions, ways, np)
        lens = step_ptr[sched[0] + 1] - step_ptr[sched[0]]
        starts[d] = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64) if record else np.zeros(0, np.int64)
        got[d] = np.zeros(int(lens.sum()) if record else 0, dtype=np.uint8)
        bounds = np.linspace(0, n_units, per_domain + 1).astype(np.int64)
        jobs += [(d, sched, int(bounds[g]), int(bounds[g + 1]), arrays, len(jobs) + g) for g in range(per_domain)]
    stats = np.zeros((len(jobs), kernels.N_STATS), dtype=np.int64)
    queue_len = max(QUEUE_RECORDS, longest)
    kernel = kernels.run_groups_for(ways, n_partitions, pbits, record)
    stream = Stream(lines, masks, writes, set_home, step_ptr)
    shape = SetShape(pbits, n_partitions, ways)

    def run_job(job):
        if groups is None:
            _run_share(job, stream, shape, longest, stats, got[job[0]], pair)
            return
        d, (steps, near, _), lo, hi, sets, row = job
        kernel(*spans[d], groups.rec, groups.shw, groups.offset, groups.group_sets, np.int64(lo),
               np.int64(hi), steps, near, starts[d], np.int64(pbits), np.int64(n_partitions),
               np.int64(ways), np.int64(queue_len), sets, stats, np.int64(row), got[d],
               np.int64(pair))

    if n_workers > 1 and len(jobs) > 1:
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            list(pool.map(run_job, jobs))
    else:
        for job in jobs:
            run_job(job)
    by_domain = {d: np.zeros(kernels.N_STATS, dtype=np.int64) for d, _ in work}
    for job in jobs:
        by_domain[job[0]] += stats[job[5]]
    return by_domain, got, -1


def _scaled(by_domain, work, llc, n_sets, n_simulated) -> tuple[list[np.ndarray], LlcStats | None]:
    if n_simulated < n_sets:
        # A sample of the sets: scale every count to the whole cache.
        scale = n_sets / n_simulated
        for d in by_domain:
            by_domain[d] = np.rint(by_domain[d] * scale).astype(np.int64)
        if llc is not None:
            llc = LlcStats(int(round(llc.read_sectors * scale)), int(round(llc.hit_sectors * scale)))
    return [by_domain[d] for d, _ in work], llc


def _run_llc(model: HardwareModel, lines: np.ndarray, step_ptr: np.ndarray, schedules: dict[int, DomainSchedule],
             got: dict[int, np.ndarray], n_workers: int = 1) -> LlcStats:
    """Replay the L2s' read misses, merged in simulated time (ties: domain order, then stream order), through
    one shared set-associative LRU (ranges of its sets on `n_workers` threads: sets are independent)."""
    misses = [kernels.stream_misses(lines, step_ptr, sched[0], sched[2], got[d], np.int64(np.count_nonzero(got[d])))
              for d, sched in schedules.items()]
    if not misses:
        return LlcStats(0, 0)
    starts = np.zeros(len(misses) + 1, dtype=np.int64)
    np.cumsum([m[0].size for m in misses], out=starts[1:])
    order = kernels.merge_by_time(np.concatenate([m[2] for m in misses]), starts)
    line = np.concatenate([m[0] for m in misses])[order]
    mask = np.concatenate([m[1] for m in misses])[order]
    n = line.size
    capacity = max(model.llc_bytes // model.line_bytes, 1)
    ways = min(LLC_WAYS, capacity)
    n_sets = capacity // ways
    set_home = np.empty(n, dtype=np.int32)
    kernels.set_index_of(line, np.int64(n_sets), np.int64(1), np.int64(0), set_home, np.int64(0), np.int64(n))
    n_jobs = max(1, min(n_workers, n_sets))
    stats = np.zeros((n_jobs, kernels.N_STATS), dtype=np.int64)
    # The merged stream runs as consecutive steps of LLC_STEP accesses: the set walk queues by step, and one step per
    # access made the replay of matmul 8192 on MI300X cost 3 of every 4 seconds of a simulation.
    n_steps = -(-n // LLC_STEP)
    sched = (np.arange(n_steps, dtype=np.int64), np.zeros(n_steps, np.int8), None)
    sets = walk.new_sets(n_sets, ways, np)
    bounds = np.linspace(0, n_sets, n_jobs + 1).astype(np.int64)
    jobs = [(0, sched, int(bounds[j]), int(bounds[j + 1]), sets, j) for j in range(n_jobs)]
    stream = Stream(line, mask, np.zeros(n, dtype=np.bool_), set_home,
                    np.minimum(np.arange(n_steps + 1, dtype=np.int64) * LLC_STEP, n))
    shape = SetShape(0, 1, ways)

    def run_job(job):
        _run_share(job, stream, shape, LLC_STEP, stats, np.zeros(0, np.uint8))

    if n_jobs > 1:
        with ThreadPoolExecutor(max_workers=n_jobs) as pool:
            list(pool.map(run_job, jobs))
    else:
        run_job(jobs[0])
    total = stats.sum(axis=0)
    return LlcStats(read_sectors=int(total[kernels.ST_REQ_SECTORS]), hit_sectors=int(total[kernels.ST_HIT_SECTORS]))


def coalesced_sectors(run: Run, work: Work, n_lines: int, full_mask: int, grouped: bool) -> int:
    """Sectors the L2 request coalescer merges (kernels.coalesce_reads, per domain on the schedule without hit
    speedup). The engines run every read as before: a coalesced read finds the line its first reader on that side
    just brought, a near hit, so the result less one lookup and one hit per coalesced sector is what ncu counts,
    and the DRAM traffic is the engines' own. `grouped` (a set-associative one-domain model on a set-partitioned
    engine): the lines are counted group by group of the engine's set-group split (cached per trace), on threads,
    each group's table in a core's cache; over a sample of the sets (n_simulated < n_sets) the count is scaled up
    as the engine's are. `n_lines` bounds the trace's distinct lines (its footprint)."""
    lines, masks, writes, step_ptr, tile_step_ptr = run.trace
    n_partitions, window = run.geometry.n_partitions, run.progress.lrc_window
    popcount = kernels.popcount_table()
    schedules = domain_schedules(run, work)
    step_tile = step_tiles(tile_step_ptr)
    if grouped and len(schedules) == 1:
        n_sets, n_simulated = run.geometry.n_sets, run.n_simulated
        groups = set_groups(run.trace, run.set_home(), run.geometry, n_simulated)
        if groups is not None:
            steps, near, start = next(iter(schedules.values()))
            first, last = groups.scheduled(steps)
            near = near.astype(np.int64)
            # The kernel keeps only the reads of the current and the previous window; should one window's reads of
            # a group overflow its table (a kernel with very large steps), the serial kernel counts instead.
            bounds = np.linspace(0, groups.n_groups, min(max(run.n_workers, 1), groups.n_groups) + 1).astype(np.int64)

            def part(i: int) -> int:
                return int(kernels.coalesce_groups(first, last, groups.rec, np.int64(bounds[i]), np.int64(bounds[i + 1]),
                                                   steps, near, start, step_tile,
                                                   np.int64(n_partitions), np.float64(window), popcount,
                                                   np.int64(full_mask), np.int64(COALESCE_TABLE_SLOTS)))

            if bounds.size > 2:
                with ThreadPoolExecutor(max_workers=bounds.size - 1) as pool:
                    counts = list(pool.map(part, range(bounds.size - 1)))
            else:
                counts = [part(0)]
            if min(counts) >= 0:
                return int(round(sum(counts) * n_sets / n_simulated))
    return sum(int(kernels.coalesce_reads(lines, masks, writes, step_ptr, sched[0], sched[1].astype(np.int64),
                                          sched[2], step_tile, np.int64(n_partitions), np.float64(window),
                                          np.int64(n_lines), popcount,
                                          np.int64(full_mask)))
               for sched in schedules.values())
