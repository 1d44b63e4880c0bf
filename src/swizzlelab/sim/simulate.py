"""L2 cache simulation of a kernel's access trace under a launch order on a hardware model.

Programs are dispatched to domains and slots as the hardware does, then drift apart; each domain is an LRU cache.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel, domain_programs, get_model
from swizzlelab.sim import engines, gpu, kernels, walk
from swizzlelab.sim.params import MAX_OCCUPANCY, CacheGeometry, Engine, SimParams
from swizzlelab.sim.result import NCU_COUNTER, TCC_COUNTER, DomainStats, LlcStats, Schedule, SimResult
from swizzlelab.sim.schedule import Work, check_schedule, hit_passes, saturating_schedule
from swizzlelab.sim.setup import (Run, as_perm, compulsory_read_sectors, default_workers, footprint_of, line_range,
                                  step_tiles, trace_arrays, trace_known)


def simulate(
    trace: Any,
    perm: Any,
    hw: HardwareModel | str,
    params: SimParams | None = None,
    engine: Engine | str = "auto",
    *,
    occupancy: int = 1,
    geometry: CacheGeometry | None = None,
    footprint: tuple[int, ...] | None = None,
    wave_sync: int = 0,
    schedule: Schedule | None = None,
) -> SimResult:
    """Predict L2 hit rates and DRAM traffic of running `trace`'s tiles in the order `perm` on `hw`.

    `params` (SimParams; default: every value the model's) chooses the progress model that orders the programs'
    steps and its calibration; `engine` (Engine or its name) how the simulation runs (threads, CPU or GPU, a sample
    of the sets); `geometry` (CacheGeometry) another associativity or capacity than the model's. `occupancy`:
    programs resident per SM/CU. `footprint` may pass a precomputed `footprint_of(trace)` when simulating many
    orders of one trace. `wave_sync` W > 0 models a kernel whose launches come in waves of W (launch index // W)
    and whose programs of a wave start only once the previous wave has finished (a barrier between waves, as
    tasks/matmul's sync_wave): each wave starts all its programs at once, so its programs walk their steps nearly
    in step instead of drifting apart over the run (set-associative engines only). `schedule` (single-domain
    models, set-associative engines) replays a given order of steps, such as a measured timeline, in place of the
    progress model (hit_speedup, drift_decay and wave_sync must then be left off); `perm` still names the launch
    order.

    The progress models (SimParams, params.py beside each default): "random_walk", each step's duration a draw of
    spread step_cv (0 = lockstep), optionally pulled back to lockstep by drift_decay and shortened by its L2 hits
    (hit_speedup: engine "auto" then runs the linked-list engine, which keeps the cache inside the schedule, unless
    the model has a memory-side cache; the set-partitioned engines schedule before the cache and approximate it by
    HIT_PASSES fixed-point passes, each timed by the previous pass's hits); "saturating", each slot keeping its
    SM's pace while DRAM is idle, if the kernel is L2-bound (`trace.l2_bound`), and losing it as DRAM saturates;
    "contention", the saturating model with its contention terms (the default where it can run: NVIDIA models
    whose GPCs are known, one L2 domain, a set-associative L2, no hit_speedup, drift_decay, wave_sync or given
    schedule). On NVIDIA models `lrc_window` models the L2 request coalescer: a whole-line read that another
    program on the same side read whole no more than that many mean step times before joins that lookup, so ncu
    counts neither; the hit rate is taken over the lookups left (`coalesced_bytes` says how much was merged; DRAM
    traffic is unchanged).
    """
    model = get_model(hw) if isinstance(hw, str) else hw
    engine = Engine.of(engine)
    run, work, order = _prepare(trace, perm, model, params or SimParams(), engine, geometry or CacheGeometry(),
                                occupancy, wave_sync, schedule)
    started = time.perf_counter()
    if run.progress.saturating:
        run = replace(run, given=saturating_schedule(run, work[0][1]))
    all_stats, llc, coalesced, footprint = _run_engines(run, work, engine, trace, footprint)
    elapsed_s = time.perf_counter() - started
    if footprint is None:
        footprint = footprint_of(trace)
    return _result(run, work, all_stats, llc, coalesced, footprint, elapsed_s=elapsed_s, n_programs=int(order.size),
                   occupancy=int(occupancy), set_fraction=float(engine.set_fraction), wave_sync=int(wave_sync),
                   replayed=schedule is not None)


def _prepare(trace: Any, perm: Any, model: HardwareModel, params: SimParams, engine: Engine,
             geometry: CacheGeometry, occupancy: int, wave_sync: int,
             schedule: Schedule | None) -> tuple[Run, Work, np.ndarray]:
    """Every input of a simulation checked (one line naming what is wrong) and resolved: (the run, each domain's
    programs in launch order, the launch order)."""
    if not isinstance(wave_sync, (int, np.integer)) or isinstance(wave_sync, bool) or wave_sync < 0:
        raise UserError(f"wave_sync must be a whole number of launches per wave (0 = off), got {wave_sync!r}")
    if wave_sync and wave_sync % model.n_domains:
        raise UserError(f"wave_sync must split evenly over the {model.n_domains} L2 domains of {model.name}, "
                        f"got {wave_sync}")
    progress = params.resolve(model, l2_bound=bool(getattr(trace, "l2_bound", False)), engine=engine.name,
                              fully_associative=geometry.assoc is None, wave_sync=int(wave_sync),
                              replay=schedule is not None)
    if not isinstance(occupancy, (int, np.integer)) or not 1 <= int(occupancy) <= MAX_OCCUPANCY:
        raise UserError(f"occupancy must be an integer 1..{MAX_OCCUPANCY} programs per unit, got {occupancy!r}")
    arrays = trace_arrays(trace)
    order = as_perm(perm, arrays.n_tiles)
    l2 = geometry.resolve(model)
    engine.check()
    low, high = line_range(arrays.lines)
    if arrays.lines.size and (low < 0 or (high + 1) * l2.n_partitions >= kernels.MAX_KEY):
        raise UserError("trace line ids must lie in 0 .. 2**38: rebuild the trace with line-aligned tensor bases")
    n_simulated = l2.n_sets if engine.set_fraction >= 1.0 else max(1, int(round(l2.n_sets * engine.set_fraction)))
    run = Run(model=model, trace=arrays, geometry=l2, progress=progress,
              n_slots=model.units_per_domain * int(occupancy),
              n_workers=default_workers() if engine.workers is None else max(int(engine.workers), 1),
              n_simulated=n_simulated, wave_chunk=int(wave_sync) // model.n_domains, given=schedule)
    if schedule is not None:
        check_schedule(schedule, model, run, params, wave_sync, engine.name)
    if wave_sync and (not _uses_sets(run, engine) or l2.assoc is None or progress.hit_speedup > 0):
        raise UserError("wave_sync needs the set-partitioned engine: a set-associative L2, engine 'auto', 'sets' or "
                        "'gpu', and no hit_speedup")
    if engine.name == "gpu" and l2.assoc is None:
        raise UserError("engine 'gpu' needs a set-associative L2 (give assoc)")
    if l2.n_partitions > walk.MAX_PARTITIONS:
        raise UserError(f"the simulator handles at most {walk.MAX_PARTITIONS} L2 partitions, got {l2.n_partitions}")
    if _uses_sets(run, engine) and l2.assoc is None and engine.set_fraction < 1.0:
        raise UserError("set_fraction < 1 needs a set-associative L2 (give assoc)")
    return run, [(d, programs) for d, programs in enumerate(domain_programs(order, model))], order


def _uses_sets(run: Run, engine: Engine) -> bool:
    """Whether the set-partitioned engine runs. Hit-dependent step times need the cache inside the schedule: "auto"
    runs them on the linked-list engine, except behind a memory-side cache, which only the set-partitioned engine
    models (it then takes passes)."""
    live = run.progress.hit_speedup > 0 and run.model.llc_bytes == 0
    return (engine.name in ("sets", "gpu") or (engine.name == "auto" and run.geometry.assoc is not None and not live)
            or engine.set_fraction < 1.0)


def _run_engines(run: Run, work: Work, engine: Engine, trace: Any,
                 footprint: tuple[int, ...] | None) -> tuple[list[np.ndarray], LlcStats | None, int, Any]:
    """(statistics per domain, the memory-side cache's, sectors the coalescer merged, the footprint if computed)."""
    model, geometry = run.model, run.geometry
    coalescing = run.progress.lrc_window > 0
    sectors_per_line = model.line_bytes // model.sector_bytes
    full_mask = (1 << sectors_per_line) - 1
    use_sets = _uses_sets(run, engine)
    # The GPU counts the coalescer on the walk's own stream where the walk runs the coalescer's schedule (one
    # domain, one pass); should it not count (a table ran out), the CPU does below.
    on_device = None
    if coalescing and engine.name == "gpu" and model.n_domains == 1 and hit_passes(run.progress.hit_speedup) == 1:
        on_device = gpu.Coalesce(step_tile=step_tiles(run.trace.tile_step_ptr), window=run.progress.lrc_window,
                                 full_mask=full_mask)
    llc = None
    device_coalesced = -1
    if use_sets:
        all_stats, llc, device_coalesced = engines.run_sets(run, work, use_gpu=engine.name == "gpu",
                                                            coalesce=on_device)
    else:
        all_stats = engines.run_list(run, work)
    coalesced = 0
    if device_coalesced >= 0:
        coalesced = int(round(device_coalesced * sectors_per_line * geometry.n_sets / run.n_simulated))
    elif coalescing:
        if footprint is None:
            footprint = footprint_of(trace)
        coalesced = engines.coalesced_sectors(run, work, footprint[0], full_mask,
                                              grouped=use_sets and geometry.assoc is not None)
    return all_stats, llc, coalesced, footprint


def _domain_stats(d: int, programs: np.ndarray, stats: np.ndarray, sector_bytes: int) -> DomainStats:
    return DomainStats(
        domain=d,
        n_programs=int(programs.size),
        requested_sectors=int(stats[kernels.ST_REQ_SECTORS]),
        lookup_sectors=int(stats[kernels.ST_LOOKUP_SECTORS]),
        hit_sectors=int(stats[kernels.ST_HIT_SECTORS]),
        line_accesses=int(stats[kernels.ST_LINE_ACCESSES]),
        line_lookups=int(stats[kernels.ST_LINE_LOOKUPS]),
        line_hits=int(stats[kernels.ST_LINE_HITS]),
        fabric_sectors=int(stats[kernels.ST_FABRIC_SECTORS]),
        dram_read_bytes=int(stats[kernels.ST_DRAM_READ_SECTORS]) * sector_bytes,
        dram_write_bytes=int(stats[kernels.ST_DRAM_WRITE_SECTORS]) * sector_bytes,
        evictions=int(stats[kernels.ST_EVICTIONS]),
        tcc_hits=int(stats[kernels.ST_TCC_HITS]),
        dram_write_lines=int(stats[kernels.ST_WRITEBACK_LINES]),
    )


def _result(run: Run, work: Work, all_stats: list[np.ndarray], llc: LlcStats | None, coalesced: int,
            footprint: tuple[int, ...], **fields: Any) -> SimResult:
    """The SimResult of a run from its domains' statistics (`fields`: what the result records of the call itself)."""
    model, geometry, progress = run.model, run.geometry, run.progress
    per_domain = [_domain_stats(d, programs, stats, model.sector_bytes)
                  for (d, programs), stats in zip(work, all_stats)]
    touched_sectors, first_read_sectors = footprint[1], compulsory_read_sectors(footprint, model)
    requested_sectors = sum(d.requested_sectors for d in per_domain)
    # Reads the coalescer merged make no lookup (NVIDIA has one L2 domain, so the totals carry the correction).
    lookup_sectors = sum(d.lookup_sectors for d in per_domain) - coalesced
    hit_sectors = sum(d.hit_sectors for d in per_domain) - coalesced
    line_accesses = sum(d.line_accesses for d in per_domain)
    line_lookups = sum(d.line_lookups for d in per_domain)
    line_hits = sum(d.line_hits for d in per_domain)
    tcc_hits = sum(d.tcc_hits for d in per_domain)
    sector_rate = hit_sectors / lookup_sectors if lookup_sectors else 0.0
    tcc_rate = tcc_hits / line_accesses if line_accesses else 0.0
    amd = model.vendor == "amd"
    l2_read = sum(d.dram_read_bytes for d in per_domain)
    # L2 misses the Infinity Cache serves never reach HBM.
    dram_read = l2_read if llc is None else l2_read - llc.hit_sectors * model.sector_bytes
    replayed = fields["replayed"]
    return SimResult(
        model=model.name,
        n_slots_per_domain=run.n_slots,
        n_partitions=geometry.n_partitions,
        capacity_lines_per_partition=int(geometry.capacity),
        assoc=geometry.assoc,
        step_cv=progress.step_cv,
        l2_hit_rate=tcc_rate if amd else sector_rate,
        line_hit_rate=line_hits / line_lookups if line_lookups else 0.0,
        fabric_bytes=sum(d.fabric_sectors for d in per_domain) * model.sector_bytes,
        dram_read_bytes=dram_read,
        dram_write_bytes=sum(d.dram_write_bytes for d in per_domain),
        compulsory_bytes=touched_sectors * model.sector_bytes,
        compulsory_read_bytes=first_read_sectors * model.sector_bytes,
        requested_bytes=requested_sectors * model.sector_bytes,
        line_accesses=line_accesses,
        per_domain=tuple(per_domain),
        hit_rate_counter=TCC_COUNTER if amd else NCU_COUNTER,
        sector_hit_rate=sector_rate,
        tcc_hit_rate=tcc_rate,
        l2_miss_read_bytes=l2_read,
        llc_hit_rate=None if llc is None else llc.hit_rate,
        hit_speedup=progress.hit_speedup,
        drift_decay=progress.drift_decay,
        lrc_window=progress.lrc_window,
        coalesced_bytes=coalesced * model.sector_bytes,
        gpc_bound=progress.gpc_bound,
        dram_saturation=progress.dram_saturation,
        miss_gain=progress.miss_gain,
        progress="replayed" if replayed else progress.name,
        age_priority=progress.age_priority,
        hot_load=progress.hot_load,
        start_jitter=progress.start_jitter,
        page_noise=progress.page_noise,
        program_cv=progress.program_cv,
        dram_write_lines=sum(d.dram_write_lines for d in per_domain),
        line_bytes=model.line_bytes,
        **fields,
    )


def simulate_many(jobs: list[tuple[Any, Any]], hw: HardwareModel | str, params: SimParams | None = None,
                  engine: Engine | str = "auto", *, concurrency: int | None = None,
                  on_done: Callable[[int, SimResult], Any] | None = None, **options: Any) -> list[SimResult]:
    """`simulate(trace, perm, hw, params, engine, **options)` of every (trace, perm) in `jobs`, each result what
    simulate alone gives. The first runs alone when its trace is new to the simulator (it builds what later orders
    of the trace share: set indices, sampled accesses, set groups, device copies); the rest run `concurrency` at a
    time (default: one per CPU) with the CPUs split between them. Each order's own CPU work (the saturating model's
    schedule is serial) then overlaps the others' and, with engine "gpu", the device's walks (one order on the
    device at a time): on the H100 host a batch of 24 orders of matmul 8192 ran at 0.61, 1.13, 1.28 and 1.23 G
    accesses/s with 2, 4, 8 and 16 at once (benchmarks/sim_speed/sim_speed_gpuhost_h100.json, gpu_batch).
    `on_done(i, result)` is called as each finishes (from the thread that ran it)."""
    engine = Engine.of(engine)
    if engine.workers is not None:
        raise UserError("simulate_many splits the CPUs itself: give concurrency, not workers")
    model = get_model(hw) if isinstance(hw, str) else hw
    cpus = default_workers()
    if concurrency is None:
        concurrency = cpus
    if not isinstance(concurrency, (int, np.integer)) or isinstance(concurrency, bool) or concurrency < 1:
        raise UserError(f"concurrency must be a whole number of orders at once (1 or more), got {concurrency!r}")
    results: list[SimResult | None] = [None] * len(jobs)

    def one(i: int, workers: int) -> None:
        trace, perm = jobs[i]
        results[i] = simulate(trace, perm, model, params, replace(engine, workers=workers), **options)
        if on_done is not None:
            on_done(i, results[i])

    side_by_side(len(jobs), one, first_alone=bool(jobs) and not trace_known(jobs[0][0]), concurrency=concurrency,
                 cpus=cpus)
    return [r for r in results if r is not None]


def side_by_side(count: int, one: Callable[[int, int], Any], *, first_alone: bool, concurrency: int,
                 cpus: int) -> None:
    """one(i, workers) for i in 0..count-1, as simulate_many runs its orders: the first alone on all `cpus` when
    `first_alone` (it builds what later orders of its trace share), the rest `concurrency` at a time with the CPUs
    split between them (one at a time: each on all of them)."""
    first = 1 if first_alone and count else 0
    if first:
        one(0, cpus)
    rest = range(first, count)
    width = min(int(concurrency), len(rest))
    if width > 1:
        with ThreadPoolExecutor(max_workers=width) as pool:
            list(pool.map(lambda i: one(i, max(1, cpus // width)), rest))
    else:
        for i in rest:
            one(i, cpus)
