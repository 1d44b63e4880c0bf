"""The order in which each L2 domain runs its programs' steps: the progress models (random walk, saturating,
contention), waves behind a barrier, and a given schedule checked for replay.
"""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.sim import kernels
from swizzlelab.sim.params import (HIT_PASSES, HOT_POWER, HOT_WINDOW_STEPS, SATURATION_SAMPLE_EVERY,
                                   SATURATION_WINDOW_STEPS, STEP_TIME_SEED, L2Geometry, Progress, SimParams,
                                   fetch_pair, set_map_of)
from swizzlelab.sim.result import Schedule, SimResult
from swizzlelab.sim.setup import Run, as_perm, sampled_accesses, sampled_page_share, trace_arrays

Work = list[tuple[int, np.ndarray]]  # (domain, its programs in launch order)
DomainSchedule = tuple[np.ndarray, np.ndarray, np.ndarray]  # (steps, near partitions, start times)


def domain_seed_of(seed: int, domain: int) -> int:
    """The step-duration seed of one L2 domain (domains draw independent durations)."""
    return (int(seed) * 0x9E3779B1 + int(domain)) % (1 << 64)


def hit_passes(hit_speedup: float) -> int:
    """Passes of the simulation: one without hit-dependent step times, HIT_PASSES with."""
    return HIT_PASSES if hit_speedup > 0 else 1


def hit_step_scale(step_miss: np.ndarray, step_accesses: np.ndarray, hit_speedup: float) -> np.ndarray:
    """Each step's duration factor, 1 - hit_speedup x (share of its accesses that did not read from DRAM)."""
    hit_share = 1.0 - step_miss / np.maximum(step_accesses, 1)
    return np.ascontiguousarray(1.0 - hit_speedup * np.clip(hit_share, 0.0, 1.0), dtype=np.float64)


# A domain's schedule depends on its programs only through their step counts in launch order: durations are drawn
# per (launch position, step of the program) and near partitions per launch position, never per tile. Orders of
# one trace whose tiles all have the same steps (every task's) share one schedule of positions, which each order
# maps to its tiles (a search simulates hundreds of orders of one trace; the schedule was a third of a GPU run).
_SCHEDULE_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
_SCHEDULE_LOCK = threading.Lock()
SCHEDULE_CACHE_ENTRIES = 32  # MI300X: 8 domains a model, each with its own seed


def position_schedule(counts: np.ndarray, n_slots: int, n_partitions: int, cv: float, seed: int,
                      drift_decay: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(launch position, step within the program, near partition, start time) of every step a domain runs, in
    the order it runs them, for programs with `counts` steps in launch order (cached). Drift decay keeps this
    true: a slot's lockstep clock counts its steps, which depend on the step counts alone."""
    key = (hashlib.blake2b(counts.tobytes(), digest_size=16).digest(), int(counts.size), int(n_slots),
           int(n_partitions), float(cv), int(seed), float(drift_decay))
    with _SCHEDULE_LOCK:
        hit = _SCHEDULE_CACHE.get(key)
    if hit is not None:
        return hit
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    steps, near, start = kernels.schedule_domain(ptr, ptr, np.arange(counts.size, dtype=np.int64), np.int64(n_slots),
                                                 np.int64(n_partitions), np.float64(cv), np.uint64(seed),
                                                 np.zeros(0, dtype=np.float64), np.float64(drift_decay))
    pos = np.searchsorted(ptr, steps, side="right") - 1
    entry = (pos, steps - ptr[pos], near, start)
    with _SCHEDULE_LOCK:
        if len(_SCHEDULE_CACHE) >= SCHEDULE_CACHE_ENTRIES:
            _SCHEDULE_CACHE.pop(next(iter(_SCHEDULE_CACHE)))
        _SCHEDULE_CACHE[key] = entry
    return entry


def schedule_cache_size() -> int:
    """Schedules of launch positions held (tests check that orders share them)."""
    with _SCHEDULE_LOCK:
        return len(_SCHEDULE_CACHE)


def clear_schedule_cache() -> None:
    """Forget every cached schedule of launch positions (benchmarks time a trace's first order with it)."""
    with _SCHEDULE_LOCK:
        _SCHEDULE_CACHE.clear()


def _synced_schedule(run: Run, programs: np.ndarray, tile_steps: np.ndarray, seed: int) -> DomainSchedule:
    """A domain's schedule when each wave of `run.wave_chunk` launches starts only once the previous wave has
    finished (a kernel with a barrier between waves; 0 = every launch is one wave, a kernel without one): every wave
    runs as if launched alone, all its programs starting at once, and the waves follow one another. Each wave draws
    its own step durations (seed per wave); its start times continue after the previous wave's last step start plus
    one mean step (they only order the memory-side cache's merge of domains)."""
    chunk = run.wave_chunk or programs.size
    progress = run.progress
    steps, nears, starts = [], [], []
    offset = 0.0
    for w, lo in enumerate(range(0, programs.size, chunk)):
        wave = programs[lo:lo + chunk]
        # Wave 0 draws what the domain draws without the barrier: a launch of one wave is the same run either way.
        pos, k, near, start = position_schedule(tile_steps[wave], run.n_slots, run.geometry.n_partitions,
                                                progress.step_cv, seed if w == 0 else domain_seed_of(seed, w),
                                                progress.drift_decay)
        steps.append(run.trace.tile_step_ptr[wave[pos]] + k)
        nears.append(near)
        starts.append(start + offset)
        if start.size:
            offset = float(starts[-1][-1]) + 1.0
    if not steps:
        return np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.float64)
    return np.concatenate(steps), np.concatenate(nears), np.concatenate(starts)


def domain_schedules(run: Run, work: Work, step_scale: np.ndarray | None = None) -> dict[int, DomainSchedule]:
    """{domain: (steps, near partitions, start times)}: the order in which each domain runs its programs' steps
    (`step_scale`: each step's duration factor, or None); domains on up to `run.n_workers` threads (each domain's
    schedule is its own sequential loop, so a multi-domain GPU's schedules are independent). Without step scales
    the schedule comes from the domain's position schedule (identical: kernels.schedule_domain either way).
    `run.wave_chunk` > 0: waves of that many of the domain's launches, each starting after the previous one ends
    (simulate never asks for it with step scales, whose passes reschedule without the barrier). `run.given`: a
    Schedule that replaces the progress model (single-domain models only)."""
    if run.given is not None:
        return {0: (run.given.steps, run.given.near, run.given.start)}
    scale = np.zeros(0, dtype=np.float64) if step_scale is None else step_scale
    jobs = [(d, programs) for d, programs in work if programs.size]
    step_ptr, tile_step_ptr = run.trace.step_ptr, run.trace.tile_step_ptr
    tile_steps = np.diff(tile_step_ptr)
    progress = run.progress

    def one(job):
        d, programs = job
        programs = np.ascontiguousarray(programs)
        if step_scale is None:
            return _synced_schedule(run, programs, tile_steps, domain_seed_of(progress.seed, d))
        return kernels.schedule_domain(step_ptr, tile_step_ptr, programs, np.int64(run.n_slots),
                                       np.int64(run.geometry.n_partitions), np.float64(progress.step_cv),
                                       np.uint64(domain_seed_of(progress.seed, d)), scale,
                                       np.float64(progress.drift_decay))

    if run.n_workers > 1 and len(jobs) > 1:
        with ThreadPoolExecutor(max_workers=min(run.n_workers, len(jobs))) as pool:
            done = list(pool.map(one, jobs))
    else:
        done = [one(job) for job in jobs]
    return {d: sched for (d, _), sched in zip(jobs, done)}


def slot_speeds(model: HardwareModel, n_slots: int, gpc_bound: float, seed: int) -> np.ndarray:
    """Each slot's pace while the kernel is L2-bound: 1 - gpc_bound + gpc_bound x its SM's GPC size / the mean an
    SM sees (slot s runs on unit s mod units; units go to GPCs in a seeded shuffle, as chips differ)."""
    sizes = np.asarray(model.gpc_sms, dtype=np.float64)
    labels = np.repeat(np.arange(sizes.size), model.gpc_sms)
    np.random.default_rng(seed).shuffle(labels)
    per_unit = 1.0 - gpc_bound + gpc_bound * sizes[labels] / ((sizes * sizes).sum() / sizes.sum())
    return np.ascontiguousarray(per_unit[np.arange(n_slots) % model.units_per_domain])


def saturating_schedule(run: Run, programs: np.ndarray) -> Schedule:
    """The saturating progress model's schedule of a one-domain model (kernels.schedule_saturating), with its
    contention terms when `run.progress` is the contention model."""
    model, geometry, progress, seed = run.model, run.geometry, run.progress, run.progress.seed
    ways = geometry.ways
    samples = sampled_accesses(run.trace, geometry, run.n_workers)
    n_sample = (geometry.n_sets + SATURATION_SAMPLE_EVERY - 1) // SATURATION_SAMPLE_EVERY
    page = np.zeros(0, dtype=np.float64)
    if progress.page_noise > 0:
        page = sampled_page_share(run.trace, geometry, samples[0], run.n_workers, model.line_bytes)
    steps, near, start = kernels.schedule_saturating(
        run.trace.tile_step_ptr, np.ascontiguousarray(programs), np.int64(run.n_slots),
        np.int64(geometry.n_partitions), np.float64(progress.step_cv), np.uint64(seed),
        slot_speeds(model, run.n_slots, progress.gpc_bound, seed), *samples,
        np.int64(n_sample * geometry.n_partitions * ways), np.int64(ways),
        np.float64(progress.dram_saturation), np.float64(SATURATION_WINDOW_STEPS * run.n_slots),
        np.float64(progress.miss_gain), np.float64(progress.age_priority), np.float64(progress.hot_load),
        np.float64(HOT_WINDOW_STEPS), np.float64(HOT_POWER), progress.contention, page,
        np.float64(progress.page_noise), np.float64(progress.program_cv))
    if progress.start_jitter > 0:
        # The requests of a step spread over it: each arrives within +-jitter/2 steps of its slot's clock, and the
        # steps run in that order (the clocks themselves keep no drift from it).
        start = start + progress.start_jitter * (np.random.default_rng(seed).random(start.size) - 0.5)
        order = np.argsort(start, kind="stable")
        steps, near, start = steps[order], near[order], start[order]
    return Schedule(steps=steps, near=near, start=start)


def own_schedule(trace: Any, perm: Any, model: HardwareModel, result: SimResult, seed: int = STEP_TIME_SEED,
                 workers: int = 1) -> Schedule:
    """The schedule the saturating or contention progress model ran for `result` (simulate's run of `trace` in the
    order `perm` on the one-domain `model`, at `seed`), rebuilt from the parameters the result records: where the
    model's programs ran, to set beside a measured timeline."""
    if result.progress not in ("saturating", "contention") or model.n_domains != 1:
        raise UserError(f"own_schedule needs a saturating or contention result of a one-domain model, got "
                        f"{result.progress} on {model.name}")
    arrays = trace_arrays(trace)
    fields = ("step_cv", "gpc_bound", "dram_saturation", "miss_gain", "age_priority", "hot_load", "start_jitter",
              "page_noise", "program_cv")
    progress = Progress(name=result.progress, seed=seed, **{name: getattr(result, name) for name in fields})
    capacity = result.capacity_lines_per_partition
    geometry = L2Geometry(n_partitions=result.n_partitions, capacity=capacity, n_sets=capacity // result.assoc,
                          assoc=result.assoc, set_map=set_map_of(model), pair=fetch_pair(model))
    run = Run(model=model, trace=arrays, geometry=geometry, progress=progress, n_slots=result.n_slots_per_domain,
              n_workers=workers, n_simulated=geometry.n_sets)
    return saturating_schedule(run, as_perm(perm, arrays.n_tiles))


def check_schedule(schedule: Any, model: HardwareModel, run: Run, params: SimParams, wave_sync: int,
                   engine: str) -> None:
    """Refuses a given schedule the engines cannot replay as the trace's (one line each)."""
    if not isinstance(schedule, Schedule):
        raise UserError(f"schedule must be a Schedule (steps, near, start), got {type(schedule).__name__}")
    if model.n_domains != 1:
        raise UserError(f"a given schedule replays one L2 domain; {model.name} has {model.n_domains}")
    if params.hit_speedup or params.drift_decay or wave_sync:
        raise UserError("a given schedule replaces the progress model: leave hit_speedup, drift_decay and wave_sync off")
    if engine in ("list", "gpu") or run.geometry.assoc is None:
        raise UserError("a given schedule runs on the set-partitioned CPU engine (engine 'auto' or 'sets', a "
                        "set-associative L2)")
    n_steps, n_partitions = run.trace.n_steps, run.geometry.n_partitions
    steps, near, start = schedule.steps, schedule.near, schedule.start
    if not (steps.dtype == np.int64 and near.dtype == np.int8 and start.dtype == np.float64):
        raise UserError("schedule arrays must be int64 steps, int8 near partitions and float64 start times")
    if not steps.shape == near.shape == start.shape or steps.ndim != 1:
        raise UserError("schedule steps, near partitions and start times must be 1-D arrays of one length")
    if steps.size != n_steps or not np.array_equal(np.sort(steps), np.arange(n_steps)):
        raise UserError(f"a schedule must run each of the trace's {n_steps} steps exactly once")
    if near.size and (near.min() < 0 or near.max() >= n_partitions):
        raise UserError(f"schedule near partitions must lie in 0..{n_partitions - 1}")
    if start.size and (not np.isfinite(start).all() or (np.diff(start) < 0).any()):
        raise UserError("schedule start times must be finite and non-decreasing")
