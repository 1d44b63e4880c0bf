"""L2 cache simulation of a kernel's access trace under a launch order on a hardware model.

Programs are dispatched to domains and slots as the hardware does, then drift apart; each domain is an LRU cache.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.fmt import fmt_bytes
from swizzlelab.hw import SET_MAPS, HardwareModel, domain_programs, get_model
from swizzlelab.runtime import available_memory_bytes
from swizzlelab.sim import gpu, kernels, walk

MAX_OCCUPANCY = 64
ENGINES = ("auto", "sets", "list", "gpu")

# Spread of a program step's duration (coefficient of variation; mean step time 1): the one fitted parameter
# of the simulator's progress model. Real programs drift apart (memory latency jitter, SM contention): a wave
# that starts together soon runs at different k-steps, later programs start whenever an earlier one ends,
# and reuse between programs launched far apart needs a longer time window than lockstep gives (lockstep,
# 0, predicted 77% L2 hit for row-major matmul 8192^3 where ncu measured 56%). Fitted by grid search (step
# 0.05) minimising the mean |predicted - measured| L2 hit % over the 5 orders of matmul 8192^3 fp16 measured
# with ncu on an H100 SXM (MAE 16.7 pp at 0 -> 4.2 pp at 0.4; 0.35: 5.1, 0.45: 5.0); checked without refitting
# on matmul 4096^3 and transpose 16384^2: benchmarks/sim_calibration/run.py -> sim_calibration_h100.json.
# Refitted for the 16-way set-associative L2 (issue 15) on the square matmul rows (8192^3 and 4096^3, 11 orders)
# of benchmarks/sim_gpu/sim_vs_ncu_validation_h100.json: fit-set MAE 4.77 pp at 0.3, 3.33 at 0.4, 2.37 at 0.5;
# the held-out rows there are predicted with 0.5. Checked again with 64-byte DRAM fetches on the 20 square-matmul
# rows of benchmarks/sim_validation (H100 and H200): 2.96 pp at 0.4, 2.86 at 0.5, 3.51 at 0.6 (sim_validation_random_walk.json).
# Measured on H100 and H200 only: the AMD models use the same value until measurements say otherwise.
STEP_TIME_CV = 0.5
STEP_TIME_SEED = 0x5EED
# How much shorter a step whose accesses all hit in L2 is than one whose accesses all read from DRAM (0..1): a
# step's duration is its draw x (1 - HIT_SPEEDUP x the share of its accesses that did not read from DRAM). On the
# hardware a program that trails a neighbour over a shared operand hits in L2 and catches up; with independent
# draws alone such programs drift apart. The linked-list engine runs the cache inside the schedule, so each step
# is timed by its own hits. The set-partitioned engines schedule before the cache: they take the hits from the
# previous pass (pass 1 without them, HIT_PASSES in all). Fitted on the square matmul rows of
# benchmarks/sim_validation (0.025: fit MAE 2.86 -> 2.76 pp, held-out 3.80 -> 3.69 pp, sim_validation_hit_speedup.json;
# the passes give the same within 0.11 pp a row, sim_validation_hit_speedup_sets.json) but off by default: the gain
# is small and costs 2.3-3.6x (passes) or about 10x (linked-list engine) the time (hit_speedup_cost.json; README
# there). 0 = the progress model without it.
HIT_SPEEDUP = 0.0
HIT_PASSES = 3
# Share of a slot's drift (its clock minus the clock it would have in lockstep) that each step takes back (0..1;
# kernels._after_step). With step_cv alone the durations accumulate, so slot clocks drift apart as a random walk
# (about step_cv x sqrt(steps)): over the ~4000 steps a slot runs in matmul 16384x16384x4096, programs that share an
# operand panel end up about half a program apart and never share it in L2, where the H100 measured much of that
# sharing kept (55.2% hit; 41.8% predicted at step_cv 0.5, 63.9% in lockstep). On the hardware loads are issued
# stages ahead (cp.async / TMA pipelines) and every SM draws on the same DRAM and L2 bandwidth, so a late step
# costs a program less than its full excess and a program behind gets the bandwidth the others leave: jitter is
# local, drift stays small. Mean reversion bounds the drift near step_cv / sqrt(2 x drift_decay) steps, whatever
# the kernel's length. (A non-accumulating jitter of each step's issue time, the other bounded-drift model, was
# tried first and changed next to nothing: a slot whose step was issued late issues its next steps at once, so
# the slots stay in lockstep order.) Fitted with step_cv on the square matmul rows of benchmarks/sim_validation
# (sim_validation_drift_decay.json; README there); 0 = off: the random walk of step_cv alone.
DRIFT_DECAY = 0.0
# How close in time (mean step times) a second program's read of a line must follow the line's latest L2 lookup for
# NVIDIA's L2 request coalescer (LRC, between the crossbar and the L2 slices) to merge it into that request: the
# merged read makes no L2 lookup, so ncu's lts__t_sectors (hit rate's denominator) never sees it. Measured on an
# H100 (benchmarks/sim_validation/lookup_probe.py): the sectors ncu's L2 did not look up (requested minus lookups
# less fabric lookups) equal lrc__request_sectors_op_read_coalescing_achieved_type_hardware within 0.025 of the
# requested sectors, 1-30% of them in matmul by order. 0 = off (AMD has no such unit in the model).
# Fitted on the H100's measured schedules replayed (simulate(schedule=), sim_replay_h100.json): 0.1, the default
# since the saturating progress model keeps sharing programs together as the hardware does; on the random walk's
# schedules with step_cv 0.3 (sim_validation_lrc.json) it took 0.3, standing in for drift.
LRC_WINDOW = 0.1
COALESCE_TABLE_SLOTS = 1 << 14  # a thread's coalescer table (kernels.coalesce_groups), in a core's cache
# The saturating progress model (kernels.schedule_saturating; with its contention terms, below, the default progress
# model on NVIDIA models whose GPCs are known). Timelines of the matmul on an H100
# (benchmarks/sim_validation/timeline_h100.json) show what the random walk above misses: a program's time is set by its
# SM (the same SMs are fast or slow in every run, correlation ~0.9; the 12 SMs of the smallest GPC 15-18% faster) while
# the kernel is bound by L2 bandwidth, and by nothing of its own once DRAM is the bottleneck; steps of one program are
# not independent draws (first-wave programs end within 0.4-3 steps of each other). So the waves of an order that leaves
# DRAM idle come apart (matmul 8192^3 row-major: start spread 1, 6, 13, 34, ... 153 steps) and those of an order that
# saturates DRAM stay together (16384x16384x4096 row-major: 14-19 steps for 62 waves), whatever their length.
# The share of a step's time an SM's GPC bandwidth sets while DRAM is idle is the model's (HardwareModel.gpc_bound,
# read from measured chips; the SM's speed is 1 - b + b x its GPC's SMs / their mean). DRAM_SATURATION: the share
# of L2 reads that miss at which DRAM saturates, the same on the H100 and the H200: scaling it by DRAM bandwidth per
# SM (x 4.8/3.35 on the H200) fitted the H200's fit rows worse (2.11 against 2.03 pp) and pulled its streaming rows
# apart (16384^2 x 4096 row-major 42.0% predicted, 54.0% measured; 54.4% without). STEP_TIME_CV_SATURATING: a
# step's own spread there (the first wave's end spread). SM pace applies to L2-bound kernels only (trace.l2_bound,
# task.yml): ncu's L2 lookups run at 7.2-10.4 TB/s in every matmul row and 1.9-5.7 TB/s in every other task's, and
# SM pace pulls apart the waves of kernels that do not load L2 that hard (flash attention, histogram), where the
# hardware's stay together. DRAM_SATURATION and STEP_TIME_CV_SATURATING are fitted on the square matmul rows of
# benchmarks/sim_validation with each model's GPC layout and share (sim_validation.json, README there): the issue's
# targets loss (hit MAE / 3 pp + DRAM error / 10%) over cv 0.2-0.5 x saturation 0.25-0.4 picks 0.3 / 0.3.
DRAM_SATURATION = 0.3
STEP_TIME_CV_SATURATING = 0.3
SATURATION_MISS_GAIN = 0.02
# The contention terms of the saturating model (progress "contention"; kernels.schedule_saturating). Stamped launches
# of the matmul on H100s and H200s (benchmarks/sim_validation/launches, wave_pace.json; README there, stop 34) show
# two things the saturating model misses: the fast SMs of an H100 run at the others' pace for the first 2-4 waves
# (0.99-1.00 of their duration) and only then 12-18% faster, while the programs still start together; and on every
# chip the start spread of a wave grows by a few steps a wave, the late starters of a wave taking longer.
# HOT_LOAD: reads of lines read by many programs at once (a decayed count per sampled line, HOT_WINDOW_STEPS) at
# which the L2 slices, not the GPCs' paths, set the pace (the pace fades as (count / HOT_LOAD) ** HOT_POWER nears 1);
# AGE_PRIORITY: while L2-bound a step takes 1 + AGE_PRIORITY x (2 r - 1) of its time, r the share of resident
# programs older than its own; step_cv applies to the DRAM queue part only; START_JITTER: each step's requests
# arrive within +-START_JITTER/2 steps of its slot's clock (a step's loads spread over it; the clocks keep no drift
# from it), which the coalescer sees. Chosen on the launches of the square matmul (8192^3, a fit case) and fitted with
# step_cv and dram_saturation on the table's fit rows (sim_validation_contention*.json).
HOT_LOAD = 8.0
HOT_WINDOW_STEPS = 2.0
HOT_POWER = 8.0
AGE_PRIORITY = 0.02
START_JITTER = 2.0
# Page noise (contention model; each model's HardwareModel.page_noise, 0 = off): a step whose read misses share DRAM
# pages of DRAM_PAGE_BYTES with other reads of its step takes a second draw on its time, of spread page_noise x their
# mean share of a page (1 - 1/lines of the page in the step). DRAM controllers serve requests to an open row first, so streams that read whole pages
# at once are served unevenly and their programs drift apart. Stamped launches of 16384^2x4096 on the H200
# (benchmarks/sim_validation/launches, partner_sync.py): programs streaming B's 256-byte rows start further from the
# program that shares their panel than those streaming A's 128-byte rows (35% against 43% within 12 steps).
DRAM_PAGE_BYTES = 1024
# A program's own pace (contention model; an experiment, 0 = off): one draw per program scales the L2-bound part of
# its steps. On the H100 a matmul's program durations spread 3-10% of their median, the model's 1.6-4.8% (stamped
# launches, benchmarks/sim_validation/program_pace.py): independent step draws average away over a program's 64-128
# steps. 0.01, the fit rows' choice, lowered the error on a fresh set but ranked one more case against ncu, so the
# registered rule kept 0 (benchmarks/sim_validation/README.md, "A program's own pace").
PROGRAM_CV = 0.0
PROGRESS_MODELS = ("saturating", "contention", "random_walk")
# The progress model where one of the first two can run and none is named. Contention since stop 35: on a fresh test
# set measured after the choice rule was committed (benchmarks/sim_validation/fresh, README there), both models at
# step_cv 0.3 / dram_saturation 0.3, it ranked 5 of 7 cases as ncu does against the saturating model's 3 (31 rows:
# hit MAE 1.96 against 3.09 pp, DRAM error 8.7% against 17.2%; the saturating model overpredicts streaming orders'
# reads by 30-50%), and it stays within the targets on the committed table (2.84 pp, 7.7%).
DEFAULT_PROGRESS = "contention"
SATURATION_SAMPLE_EVERY = 16  # the live miss share is estimated on every 16th L2 set
SATURATION_WINDOW_STEPS = 4.0  # over about the last 4 mean step times of all slots
NCU_COUNTER = "ncu lts__t_sector_hit_rate (32-byte sectors; stores that fill sectors hit)"
TCC_COUNTER = "rocprof TCC_HIT/(TCC_HIT+TCC_MISS) (line requests; a store hits only a present line)"


@dataclass(frozen=True)
class Schedule:
    """The steps of a trace in the order one L2 domain ran them, each with its program's near partition and its
    start time (any unit): a measured timeline (benchmarks/sim_validation/timeline_probe.py) replayed through the
    cache model in place of the progress model, which tells the cache model's error from the progress model's."""

    steps: np.ndarray  # int64 trace step ids, each exactly once, in the order they ran
    near: np.ndarray  # int8 near L2 partition of the program that ran each step
    start: np.ndarray  # float64 start time of each step in mean step times (the coalescer's window unit)

    def program_span(self, tile_step_ptr: np.ndarray, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(earliest, latest) step start of the program at each launch position of `perm`: a program's start and
        its last step's (start jitter can put a program's first step after its second)."""
        first = np.full(tile_step_ptr[-1], np.inf)
        last = np.full(tile_step_ptr[-1], -np.inf)
        np.minimum.at(first, self.steps, self.start)
        np.maximum.at(last, self.steps, self.start)
        return first[tile_step_ptr[perm]], last[tile_step_ptr[perm + 1] - 1]


@dataclass(frozen=True)
class DomainStats:
    """Figures of one L2 domain (one XCD on AMD; the whole L2 on NVIDIA)."""

    domain: int
    n_programs: int
    requested_sectors: int
    lookup_sectors: int  # requested + looked up again at a far home partition
    hit_sectors: int
    line_accesses: int
    line_lookups: int
    line_hits: int
    fabric_sectors: int
    dram_read_bytes: int
    dram_write_bytes: int
    evictions: int
    tcc_hits: int = 0  # line requests that hit as AMD's TCC_HIT counts them

    @property
    def l2_hit_rate(self) -> float:
        return self.hit_sectors / self.lookup_sectors if self.lookup_sectors else 0.0

    @property
    def tcc_hit_rate(self) -> float:
        return self.tcc_hits / self.line_accesses if self.line_accesses else 0.0

    @property
    def line_hit_rate(self) -> float:
        return self.line_hits / self.line_lookups if self.line_lookups else 0.0


@dataclass(frozen=True)
class SimResult:
    """Predicted L2 behaviour of one launch order (all figures are predictions of model `model`)."""

    model: str
    occupancy: int
    n_slots_per_domain: int
    n_partitions: int
    capacity_lines_per_partition: int
    assoc: int | None
    step_cv: float  # spread of a step's duration in the progress model (0 = lockstep)
    l2_hit_rate: float  # sector hit rate over all L2 lookups, as ncu's lts__t_sector_hit_rate
    line_hit_rate: float  # share of line lookups that found the line present
    fabric_bytes: int  # bytes looked up again at a far partition (0 with one partition)
    dram_read_bytes: int
    dram_write_bytes: int
    compulsory_bytes: int
    compulsory_read_bytes: int
    requested_bytes: int
    line_accesses: int
    n_programs: int
    per_domain: tuple[DomainStats, ...] = field(default_factory=tuple)
    elapsed_s: float = 0.0
    # How `l2_hit_rate` is counted: the vendor profiler's own definition (docs/hit-rates.md).
    hit_rate_counter: str = NCU_COUNTER
    sector_hit_rate: float = 0.0  # ncu's definition on any vendor (sectors; stores hit)
    tcc_hit_rate: float = 0.0  # AMD's TCC_HIT / (TCC_HIT + TCC_MISS) on any vendor (line requests)
    l2_miss_read_bytes: int = 0  # bytes the L2s read from behind them (memory-side cache or DRAM)
    llc_hit_rate: float | None = None  # memory-side cache (Infinity Cache) hit rate of those reads
    set_fraction: float = 1.0  # share of L2 sets simulated (< 1: counts scaled up from a sample of sets)
    hit_speedup: float = 0.0  # how much L2 hits shorten a step in the progress model (0 = not at all)
    wave_sync: int = 0  # launches per wave of a kernel with a barrier between waves (0 = none)
    drift_decay: float = 0.0  # share of a slot's drift from lockstep taken back each step (0 = a random walk)
    lrc_window: float = 0.0  # mean step times within which the L2 request coalescer merges reads (0 = off)
    coalesced_bytes: int = 0  # requested bytes the coalescer merged into another program's lookup (no L2 lookup)
    replayed: bool = False  # the steps ran in a given (measured) schedule, not the progress model's
    gpc_bound: float = 0.0  # saturating progress model: share of a step's time its GPC's bandwidth sets (0 = off)
    dram_saturation: float = 0.0  # ... the L2 read miss share at which DRAM saturates on this model
    miss_gain: float = 0.0  # ... and how much a step's own misses set its time behind a saturated DRAM
    progress: str = "random_walk"  # the progress model that ordered the steps (PROGRESS_MODELS; "replayed" if given)
    age_priority: float = 0.0  # contention model: how much older programs go first while L2-bound (0 = off)
    hot_load: float = 0.0  # ... recent reads of a line at which the L2 slices set the pace (0 = off)
    start_jitter: float = 0.0  # ... steps over which a step's requests arrive (0 = off)
    page_noise: float = 0.0  # ... spread of the time of steps whose misses read DRAM pages densely (0 = off)
    program_cv: float = 0.0  # ... spread of a program's own pace, one draw for all its steps (0 = off)

    @property
    def best_hit_rate(self) -> float:
        """The hit rate if every sector first touched by a read missed exactly once (stores count as hits,
        so no order can do better)."""
        return 1.0 - self.compulsory_read_bytes / self.requested_bytes if self.requested_bytes else 0.0

    @property
    def dram_avoided_rate(self) -> float:
        """Share of requested read+write bytes that did not cause a DRAM read."""
        return 1.0 - self.dram_read_bytes / self.requested_bytes if self.requested_bytes else 0.0

    def domain_hit_rates(self) -> tuple[float, ...]:
        """Each L2 domain's hit rate, counted as `l2_hit_rate` is (the target profiler's definition)."""
        tcc = self.hit_rate_counter == TCC_COUNTER
        return tuple(d.tcc_hit_rate if tcc else d.l2_hit_rate for d in self.per_domain)

    @property
    def accesses_per_s(self) -> float:
        return self.line_accesses / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["kind"] = f"predicted (model {self.model}" + (", replaying a given schedule)" if self.replayed else ")")
        record["best_hit_rate"] = self.best_hit_rate
        record["dram_avoided_rate"] = self.dram_avoided_rate
        record["per_domain"] = [
            {**asdict(d), "l2_hit_rate": d.l2_hit_rate, "line_hit_rate": d.line_hit_rate} for d in self.per_domain
        ]
        return record

    def text(self) -> str:
        tag = f"predicted (model {self.model})"
        lines = [
            f"L2 hit rate          {100 * self.l2_hit_rate:6.2f} %   {tag}, as {self.hit_rate_counter}",
            f"L2 line hit rate     {100 * self.line_hit_rate:6.2f} %   {tag}",
            f"not read from DRAM   {100 * self.dram_avoided_rate:6.2f} %   {tag} (share of requested bytes)",
            f"DRAM read            {fmt_bytes(self.dram_read_bytes):>10}   {tag}",
            f"DRAM write           {fmt_bytes(self.dram_write_bytes):>10}   {tag}",
            *([f"Infinity Cache hit   {100 * self.llc_hit_rate:6.2f} %   {tag} (of {fmt_bytes(self.l2_miss_read_bytes)} "
               "L2 read misses; no counter reports it)"] if self.llc_hit_rate is not None else []),
            f"compulsory DRAM      {fmt_bytes(self.compulsory_bytes):>10}   from trace",
            f"requested from L2    {fmt_bytes(self.requested_bytes):>10}   from trace",
            f"best possible hit    {100 * self.best_hit_rate:6.2f} %   from trace (1 - compulsory reads/requested)",
            f"occupancy            {self.occupancy} program(s) per unit, {self.n_slots_per_domain} slots per domain",
            f"progress model       {self.progress.replace('_', ' ')}, step time spread (cv) {self.step_cv:g}"
            + ("  (lockstep)" if self.step_cv == 0 else "")
            + (f", hit speedup {self.hit_speedup:g}" if self.hit_speedup else "")
            + (f", drift decay {self.drift_decay:g}" if self.drift_decay else "")
            + (f", DRAM saturates at a {100 * self.dram_saturation:.0f}% miss share"
               if self.progress in ("saturating", "contention") else "")
            + (f", hot-line load {self.hot_load:g}, age priority {self.age_priority:g}, start jitter "
               f"{self.start_jitter:g} steps" if self.progress == "contention" else "")
            + (f", page noise {self.page_noise:g}" if self.page_noise else "")
            + (f", program pace spread {self.program_cv:g}" if self.program_cv else "")
            + (f", GPC-bound share {self.gpc_bound:g} (an L2-bound kernel)" if self.gpc_bound else ""),
        ]
        if len(self.per_domain) > 1:
            rates = ", ".join(f"{100 * rate:.1f}" for rate in self.domain_hit_rates())
            lines.append(f"per-domain hit %     [{rates}]   {tag}")
        return "\n".join(lines)


def _as_perm(perm: Any, n_tiles: int) -> np.ndarray:
    array = np.asarray(getattr(perm, "perm", perm))
    if array.ndim != 1 or array.shape[0] != n_tiles:
        raise UserError(
            f"launch order has {array.size} entries but the trace has {n_tiles} tiles: build the order on the "
            "same grid and sizes as the trace"
        )
    if not np.issubdtype(array.dtype, np.integer):
        raise UserError("launch order must hold integer tile indices")
    array = array.astype(np.int64, copy=False)
    if n_tiles and (array.min() < 0 or array.max() >= n_tiles or np.bincount(array, minlength=n_tiles).max() != 1):
        raise UserError(
            "launch order is not a permutation of the tiles: prove the formula with "
            "`swizzlelab check FORMULA --grid ...`, which names the tiles never run or run twice"
        )
    return np.ascontiguousarray(array)


def _trace_arrays(trace: Any) -> tuple[np.ndarray, ...]:
    try:
        arrays = (
            np.ascontiguousarray(trace.lines, dtype=np.int64),
            np.ascontiguousarray(trace.sector_mask, dtype=np.uint8),
            np.ascontiguousarray(trace.is_write, dtype=np.bool_),
            np.ascontiguousarray(trace.step_ptr, dtype=np.int64),
            np.ascontiguousarray(trace.tile_step_ptr, dtype=np.int64),
        )
    except AttributeError as err:
        raise UserError(f"not an access trace ({err}): pass a swizzlelab.trace.AccessTrace") from None
    lines, masks, writes, step_ptr, tile_step_ptr = arrays
    if not (lines.shape == masks.shape == writes.shape):
        raise UserError("access trace arrays lines/sector_mask/is_write differ in length: rebuild the trace")
    if step_ptr.size == 0 or step_ptr[-1] != lines.size or tile_step_ptr.size == 0 or tile_step_ptr[-1] != step_ptr.size - 1:
        raise UserError("access trace CSR pointers do not match its arrays: rebuild the trace")
    return arrays


def default_workers() -> int:
    """Threads worth running: the CPUs this process may use."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def fetch_pair(model: HardwareModel) -> int:
    """1 when a read miss fetches the aligned pair of 32-byte sectors from DRAM (the model's dram_fetch_bytes)."""
    return int(model.dram_fetch_bytes == 2 * model.sector_bytes)


def domain_seed_of(seed: int, domain: int) -> int:
    """The step-duration seed of one L2 domain (domains draw independent durations)."""
    return (int(seed) * 0x9E3779B1 + int(domain)) % (1 << 64)


def trace_upper_bound_lines(trace: Any, n_access: int) -> int:
    """An upper bound on distinct lines (from the tensors' extents when the trace lists them)."""
    tensors = getattr(trace, "tensors", None) or []
    total = sum(int(getattr(t, "n_lines", 0)) for t in tensors)
    return min(total, n_access) if total > 0 else n_access


def footprint_of(trace: Any) -> tuple[int, int, int, int]:
    """(unique lines, touched sectors, sectors first touched by a read, sectors a read must miss when misses fetch
    64-byte sector pairs) over the whole trace."""
    lines, masks, writes, _, _ = _trace_arrays(trace)
    bound = trace_upper_bound_lines(trace, lines.size)
    out = kernels.footprint(lines, masks, writes, np.int64(bound), kernels.popcount_table())
    return int(out[0]), int(out[1]), int(out[2]), int(out[3])


def compulsory_read_sectors(footprint: tuple[int, ...], model: HardwareModel) -> int:
    """Sectors every order must miss on a read (a lower bound of missed sectors and of DRAM sectors read): with
    sector-pair fetches a read of one sector also brings its partner, so only the first read of a pair must miss."""
    return footprint[3] if fetch_pair(model) and len(footprint) > 3 else footprint[2]


_SET_INDEX_CACHE: dict[tuple[int, int, int, int], tuple[Any, np.ndarray]] = {}
LLC_WAYS = 16


_LINE_RANGE_CACHE: dict[tuple[int, int], tuple[Any, tuple[int, int]]] = {}


def line_range(lines: np.ndarray) -> tuple[int, int]:
    """(lowest, highest) line id of a trace's line array, cached per array (each order of a search checks it)."""
    if lines.size == 0:
        return 0, -1
    key = (id(lines), int(lines.size))
    hit = _LINE_RANGE_CACHE.get(key)
    if hit is not None and hit[0]() is lines:
        return hit[1]
    found = (int(lines.min()), int(lines.max()))
    for stale in [k for k, (ref, _) in _LINE_RANGE_CACHE.items() if ref() is None]:
        del _LINE_RANGE_CACHE[stale]
    _LINE_RANGE_CACHE[key] = (weakref.ref(lines), found)
    return found


def set_map_of(model: HardwareModel) -> int:
    """The set map code the kernels take (kernels._set_and_home): 0 hashed, 1 interleaved, 2 permuted."""
    return SET_MAPS.index(model.l2_set_map)


def partition_bits(n_partitions: int) -> int:
    return max(int(n_partitions) - 1, 0).bit_length()


def set_index_array(lines: np.ndarray, n_sets: int, n_partitions: int, n_workers: int,
                    set_map: int = 0) -> np.ndarray:
    """L2 set index << partition bits | home partition of every access (`set_map`: 0 hashed, 1 interleaved,
    2 permuted; kernels._set_and_home), cached per trace array: a search simulates many orders of one trace, and
    both depend only on the line."""
    key = (id(lines), int(lines.size), int(n_sets), int(n_partitions), int(set_map))
    hit = _SET_INDEX_CACHE.get(key)
    if hit is not None and hit[0]() is lines:
        return hit[1]
    pbits = partition_bits(n_partitions)
    out = np.empty(lines.size, dtype=np.uint16 if (n_sets << pbits) <= 1 << 16 else np.int32)
    chunks = np.linspace(0, lines.size, max(n_workers, 1) + 1).astype(np.int64)

    def fill(i: int) -> None:
        kernels.set_index_of(lines, np.int64(n_sets), np.int64(n_partitions), np.int64(pbits), out,
                             np.int64(chunks[i]), np.int64(chunks[i + 1]), np.int64(set_map))

    if n_workers > 1 and lines.size > 1 << 20:
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            list(pool.map(fill, range(n_workers)))
    else:
        for i in range(max(n_workers, 1)):
            fill(i)
    _cache_put(_SET_INDEX_CACHE, key, (weakref.ref(lines), out), 4)
    return out


_CACHE_LOCK = threading.Lock()


def _cache_put(cache: dict, key: tuple, entry: tuple, limit: int) -> None:
    """Store `entry` (weakref to its trace array, value[, more weakrefs]), dropping entries whose array is gone and
    the oldest beyond `limit`. Under a lock: a search simulates orders on several threads (with --k-dir alternate
    each has a trace array of its own), and unlocked clean-ups raced on the same stale key."""
    with _CACHE_LOCK:
        for stale in [k for k, held in cache.items() if held[0]() is None]:
            cache.pop(stale, None)
        if len(cache) >= limit:
            cache.pop(next(iter(cache)))
        cache[key] = entry


# Sets whose entries fill about this many bytes form one group: they stay in a host core's L2 cache while the
# group runs. At least MIN_GROUPS groups, so threads share the work evenly.
GROUP_BYTES = 256 * 1024
MIN_GROUPS = 16
QUEUE_RECORDS = 16384  # records a set group's queue holds at least (run_groups; run_share's queues too)
_GROUP_CACHE: dict[tuple[int, ...], tuple[Any, "SetGroups", Any]] = {}


@dataclass(frozen=True)
class SetGroups:
    """A trace's accesses split by groups of L2 set indices (kernels.group_counts/group_fill): ptr[s, g] is where
    step s's records of group g start; sets group_sets[g]..group_sets[g+1]-1 belong to group g."""

    ptr: np.ndarray
    rec: np.ndarray
    shw: np.ndarray
    offset: np.ndarray
    group_sets: np.ndarray
    # The spans of the latest schedule asked for: the coalescer and the engine read the same ones.
    _last: list = field(default_factory=list, repr=False, compare=False)

    @property
    def n_groups(self) -> int:
        return int(self.group_sets.size - 1)

    def scheduled(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first, last)[g, k]: group g's records of the k-th scheduled step, laid out group by group."""
        with _CACHE_LOCK:
            if self._last and self._last[0]() is steps:
                return self._last[1]
        dtype = np.int32 if self.rec.size < 1 << 31 else np.int64
        first = np.empty((self.n_groups, steps.size), dtype=dtype)
        last = np.empty((self.n_groups, steps.size), dtype=dtype)
        kernels.gather_spans(self.ptr, steps, first, last)
        with _CACHE_LOCK:
            self._last[:] = [weakref.ref(steps), (first, last)]
        return first, last


def group_bytes_per_access(max_step: int) -> int:
    """Host bytes a cached set-group split takes per access (record, set word, place in its step)."""
    return 8 + 4 + (2 if max_step < 1 << 15 else 4)


def set_groups(lines, masks, writes, set_home, step_ptr, n_sets, n_partitions, ways, n_simulated,
               max_step) -> SetGroups | None:
    """The trace's accesses of sets 0..n_simulated-1 split into set groups, cached per trace (it does not depend
    on the order: a search reuses it for every candidate); None when it would not fit in the memory left."""
    # The split depends on the set map too, which `set_home` (itself cached per trace and map) carries.
    key = (id(lines), int(lines.size), id(set_home), int(n_sets), int(n_partitions), int(ways), int(n_simulated))
    hit = _GROUP_CACHE.get(key)
    if hit is not None and hit[0]() is lines and hit[2]() is set_home:
        return hit[1]
    per_group = max(1, GROUP_BYTES // (n_partitions * walk.set_words(ways) * 8))
    n_groups = max(1, min(n_simulated, max(-(-n_simulated // per_group), MIN_GROUPS)))
    n_steps = step_ptr.size - 1
    need = lines.size * group_bytes_per_access(max_step) * n_simulated // max(n_sets, 1) + n_groups * (n_steps + 1) * 16
    if need > available_memory_bytes() // 2:
        return None
    group_sets = np.linspace(0, n_simulated, n_groups + 1).astype(np.int64)
    group_of = np.full(n_sets, -1, dtype=np.int64)
    for g in range(n_groups):
        group_of[group_sets[g]:group_sets[g + 1]] = g
    pbits = np.int64(partition_bits(n_partitions))
    ptr = kernels.group_counts(set_home, step_ptr, pbits, group_of, np.int64(n_groups))
    n = int(ptr[-1, -1])
    rec = np.empty(n, dtype=np.int64)
    shw = np.empty(n, dtype=np.int32)
    offset = np.empty(n, dtype=np.int16 if max_step < 1 << 15 else np.int32)
    kernels.group_fill(lines, masks, writes, set_home, step_ptr, pbits, group_of, ptr, rec, shw, offset)
    groups = SetGroups(ptr, rec, shw, offset, group_sets)
    _cache_put(_GROUP_CACHE, key, (weakref.ref(lines), groups, weakref.ref(set_home)), 2)  # exact and sampled
    return groups


def hit_passes(hit_speedup: float) -> int:
    """Passes of the simulation: one without hit-dependent step times, HIT_PASSES with."""
    return HIT_PASSES if hit_speedup > 0 else 1


def hit_step_scale(step_miss: np.ndarray, step_accesses: np.ndarray, hit_speedup: float) -> np.ndarray:
    """Each step's duration factor, 1 - hit_speedup x (share of its accesses that did not read from DRAM)."""
    hit_share = 1.0 - step_miss / np.maximum(step_accesses, 1)
    return np.ascontiguousarray(1.0 - hit_speedup * np.clip(hit_share, 0.0, 1.0), dtype=np.float64)


def _run_list_engine(model, work, lines, masks, writes, step_ptr, tile_step_ptr, n_slots, n_partitions, capacity,
                     n_sets, popcount, cv, seed, n_workers, hit_speedup=0.0, drift_decay=0.0) -> list[np.ndarray]:
    """Linked-list LRU engine (any associativity, fully associative included); domains on threads. It runs the
    cache inside the schedule, so with `hit_speedup` > 0 each step's duration follows its own hits (one pass)."""
    key_space = (line_range(lines)[1] + 1) * n_partitions if lines.size else 0
    direct = np.empty(key_space if key_space <= kernels.MAX_DIRECT_KEYS else 0, dtype=np.int32)
    # Per step of the trace: every step belongs to one program of one domain, so threads write disjoint entries.
    live = hit_speedup > 0
    step_scale = np.ones(step_ptr.size - 1 if live else 0, dtype=np.float64)
    step_miss = np.zeros(step_ptr.size - 1 if live else 0, dtype=np.int64)

    def run_one(d: int, programs: np.ndarray, direct: np.ndarray) -> np.ndarray:
        stats = np.zeros(kernels.N_STATS, dtype=np.int64)
        if programs.size:
            kernels.run_domain(
                lines, masks, writes, step_ptr, tile_step_ptr, np.ascontiguousarray(programs),
                np.int64(n_slots), np.int64(model.units_per_domain), np.int64(n_partitions),
                np.int64(capacity), np.int64(n_sets), popcount, stats, direct,
                np.float64(cv), np.uint64(domain_seed_of(seed, d)), step_scale, step_miss, np.float64(hit_speedup),
                np.int64(fetch_pair(model)), np.float64(drift_decay), np.int64(set_map_of(model)),
            )
        return stats

    n_threads = min(n_workers, sum(1 for _, programs in work if programs.size))
    if n_threads > 1:
        # Domains are independent caches: each thread simulates whole domains with its own key map (the
        # numba kernel releases the GIL), so results are those of the serial loop.
        def run_share(share: list[tuple[int, np.ndarray]]) -> list[np.ndarray]:
            own = np.empty_like(direct)
            return [run_one(d, programs, own) for d, programs in share]

        shares = [work[i::n_threads] for i in range(n_threads)]
        with ThreadPoolExecutor(max_workers=n_threads) as pool:
            done = list(pool.map(run_share, shares))
        by_domain = {d: stats for share, results in zip(shares, done) for (d, _), stats in zip(share, results)}
        return [by_domain[d] for d, _ in work]
    return [run_one(d, programs, direct) for d, programs in work]


@dataclass(frozen=True)
class LlcStats:
    """The memory-side cache shared by all L2 domains (AMD Infinity Cache / MALL), fed by the L2s' read misses."""

    read_sectors: int  # sectors the L2s missed and asked the memory side for
    hit_sectors: int

    @property
    def hit_rate(self) -> float:
        return self.hit_sectors / self.read_sectors if self.read_sectors else 0.0


# Sets whose entries fill about this many bytes run together from one queue: with the queue itself they stay in
# a host core's L2 cache while it runs (measured on matmul 8192 with one thread: see benchmarks/sim_speed).
SUB_RANGE_BYTES = 256 * 1024


def _max_step(step_ptr: np.ndarray) -> int:
    return int(np.diff(step_ptr).max()) if step_ptr.size > 1 else 0


def _share_layout(n_partitions: int, ways: int, lo: int, hi: int, max_step: int) -> tuple[int, int]:
    """(sub-ranges, records per queue) for sets lo..hi-1: sub-ranges that fit the host's L2, queues that hold at
    least one step beyond what triggers a run."""
    n_sub = max(1, min(hi - lo, -(-(hi - lo) * n_partitions * ways * 8 // SUB_RANGE_BYTES)))
    return n_sub, max(QUEUE_RECORDS, 2 * max_step)


def _run_share(job, lines, masks, writes, set_home, pbits, step_ptr, n_partitions, ways, max_step, stats, got_stream,
               pair=0):
    d, (steps, near, _), lo, hi, sets, row = job
    n_sub, queue_len = _share_layout(n_partitions, ways, lo, hi, max_step)
    kernels.run_share(lines, masks, writes, set_home, np.int64(pbits), step_ptr, steps, near, np.int64(n_partitions),
                      np.int64(ways), np.int64(lo), np.int64(hi), np.int64(n_sub), np.int64(queue_len),
                      np.int64(max_step), sets, stats, np.int64(row), got_stream, np.int64(pair))


# A domain's schedule depends on its programs only through their step counts in launch order: durations are drawn
# per (launch position, step of the program) and near partitions per launch position, never per tile. Orders of
# one trace whose tiles all have the same steps (every task's) share one schedule of positions, which each order
# maps to its tiles (a search simulates hundreds of orders of one trace; the schedule was a third of a GPU run).
_SCHEDULE_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
SCHEDULE_CACHE_ENTRIES = 32  # MI300X: 8 domains a model, each with its own seed


def _position_schedule(counts: np.ndarray, n_slots: int, n_partitions: int, cv: float, seed: int,
                       drift_decay: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(launch position, step within the program, near partition, start time) of every step a domain runs, in
    the order it runs them, for programs with `counts` steps in launch order (cached). Drift decay keeps this
    true: a slot's lockstep clock counts its steps, which depend on the step counts alone."""
    key = (hashlib.blake2b(counts.tobytes(), digest_size=16).digest(), int(counts.size), int(n_slots),
           int(n_partitions), float(cv), int(seed), float(drift_decay))
    with _CACHE_LOCK:
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
    with _CACHE_LOCK:
        if len(_SCHEDULE_CACHE) >= SCHEDULE_CACHE_ENTRIES:
            _SCHEDULE_CACHE.pop(next(iter(_SCHEDULE_CACHE)))
        _SCHEDULE_CACHE[key] = entry
    return entry


def clear_schedule_cache() -> None:
    """Forget every cached schedule of launch positions (benchmarks time a trace's first order with it)."""
    with _CACHE_LOCK:
        _SCHEDULE_CACHE.clear()


def _synced_schedule(programs, tile_steps, tile_step_ptr, n_slots, n_partitions, cv, seed, chunk, drift_decay=0.0):
    """A domain's schedule when each wave of `chunk` launches starts only once the previous wave has finished (a
    kernel with a barrier between waves; chunk = every launch is a kernel without one): every wave runs as if
    launched alone, all its programs starting at once, and the waves follow one another. Each wave draws its own step durations (seed per wave); its start times
    continue after the previous wave's last step start plus one mean step (they only order the memory-side cache's
    merge of domains)."""
    steps, nears, starts = [], [], []
    offset = 0.0
    for w, lo in enumerate(range(0, programs.size, chunk)):
        wave = programs[lo:lo + chunk]
        # Wave 0 draws what the domain draws without the barrier: a launch of one wave is the same run either way.
        pos, k, near, start = _position_schedule(tile_steps[wave], n_slots, n_partitions, cv,
                                                 seed if w == 0 else domain_seed_of(seed, w), drift_decay)
        steps.append(tile_step_ptr[wave[pos]] + k)
        nears.append(near)
        starts.append(start + offset)
        if start.size:
            offset = float(starts[-1][-1]) + 1.0
    if not steps:
        return np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.float64)
    return np.concatenate(steps), np.concatenate(nears), np.concatenate(starts)


def _domain_schedules(work, step_ptr, tile_step_ptr, n_slots, n_partitions, cv, seed, step_scale=None, n_workers=1,
                      wave_chunk=0, drift_decay=0.0, given=None):
    """{domain: (steps, near partitions, start times)}: the order in which each domain runs its programs' steps
    (`step_scale`: each step's duration factor, or None); domains on up to `n_workers` threads (each domain's
    schedule is its own sequential loop, so a multi-domain GPU's schedules are independent). Without step scales
    the schedule comes from the domain's position schedule (identical: kernels.schedule_domain either way).
    `wave_chunk` > 0: waves of that many of the domain's launches, each starting after the previous one ends
    (simulate never asks for it with step scales, whose passes reschedule without the barrier).
    `drift_decay`: the progress model's mean reversion (kernels._after_step). `given`: a Schedule that replaces
    the progress model (single-domain models only)."""
    if given is not None:
        return {0: (given.steps, given.near, given.start)}
    scale = np.zeros(0, dtype=np.float64) if step_scale is None else step_scale
    jobs = [(d, programs) for d, programs in work if programs.size]
    tile_steps = np.diff(tile_step_ptr)

    def one(job):
        d, programs = job
        programs = np.ascontiguousarray(programs)
        if step_scale is None:
            # Without a barrier the whole launch is one wave.
            return _synced_schedule(programs, tile_steps, tile_step_ptr, n_slots, n_partitions, cv,
                                    domain_seed_of(seed, d), wave_chunk or programs.size, drift_decay)
        return kernels.schedule_domain(step_ptr, tile_step_ptr, programs, np.int64(n_slots),
                                       np.int64(n_partitions), np.float64(cv), np.uint64(domain_seed_of(seed, d)),
                                       scale, np.float64(drift_decay))

    if n_workers > 1 and len(jobs) > 1:
        with ThreadPoolExecutor(max_workers=min(n_workers, len(jobs))) as pool:
            done = list(pool.map(one, jobs))
    else:
        done = [one(job) for job in jobs]
    return {d: sched for (d, _), sched in zip(jobs, done)}


def step_tiles(tile_step_ptr: np.ndarray) -> np.ndarray:
    """The program (tile) each step of a trace belongs to: what the coalescer compares, on the CPU and the GPU."""
    return np.repeat(np.arange(tile_step_ptr.size - 1, dtype=np.int64), np.diff(tile_step_ptr))


def _coalescing(work, lines, masks, writes, step_ptr, tile_step_ptr, n_slots, n_partitions, cv, seed, n_workers,
                wave_chunk, drift_decay, window, n_lines, popcount, full_mask, given=None, sets=None) -> int:
    """Sectors the L2 request coalescer merges (kernels.coalesce_reads, per domain on the schedule without hit
    speedup). The engines run every read as before: a coalesced read finds the line its first reader on that side
    just brought, a near hit, so the result less one lookup and one hit per coalesced sector is what ncu counts,
    and the DRAM traffic is the engines' own. `sets` = (n_sets, ways, n_simulated) of a set-associative one-domain
    model: the lines are counted group by group of the engine's set-group split (cached per trace), on threads,
    each group's table in a core's cache; over a sample of the sets (n_simulated < n_sets) the count is scaled up
    as the engine's are."""
    schedules = _domain_schedules(work, step_ptr, tile_step_ptr, n_slots, n_partitions, cv, seed, None, n_workers,
                                  wave_chunk, drift_decay, given)
    step_tile = step_tiles(tile_step_ptr)
    if sets is not None and len(schedules) == 1:
        n_sets, ways, n_simulated, set_map = sets
        set_home = set_index_array(lines, n_sets, n_partitions, n_workers, set_map)
        groups = set_groups(lines, masks, writes, set_home, step_ptr, n_sets, n_partitions, ways, n_simulated,
                            _max_step(step_ptr))
        if groups is not None:
            steps, near, start = next(iter(schedules.values()))
            first, last = groups.scheduled(steps)
            near = near.astype(np.int64)
            # The kernel keeps only the reads of the current and the previous window; should one window's reads of
            # a group overflow its table (a kernel with very large steps), the serial kernel counts instead.
            bounds = np.linspace(0, groups.n_groups, min(max(n_workers, 1), groups.n_groups) + 1).astype(np.int64)

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


def _stream_length(step_ptr: np.ndarray, steps: np.ndarray) -> int:
    return int((step_ptr[steps + 1] - step_ptr[steps]).sum())


def _run_sets_engine(model, work, lines, masks, writes, step_ptr, tile_step_ptr, n_slots, n_partitions, n_sets,
                     ways, popcount, cv, seed, n_workers, set_fraction=1.0,
                     use_gpu=False, hit_speedup=0.0, wave_chunk=0,
                     drift_decay=0.0, given=None,
                     coalesce: gpu.Coalesce | None = None) -> tuple[list[np.ndarray], LlcStats | None, int]:
    """Set-partitioned engine: per domain one schedule, then ranges of sets on threads (same sums as serial), or
    every set index on its own GPU thread (`use_gpu`; the memory-side cache replay stays on the CPU). With
    `hit_speedup` > 0, HIT_PASSES passes: each reschedules with the step times the previous pass's hits give.
    Returns (statistics per domain, the memory-side cache's, whole-line reads of the simulated sets the GPU counted
    coalesced (`coalesce`, GPU only) or -1)."""
    set_home = set_index_array(lines, n_sets, n_partitions, n_workers, set_map_of(model))
    pbits = partition_bits(n_partitions)
    llc = model.llc_bytes > 0
    n_passes = hit_passes(hit_speedup)
    # The DRAM-bound sectors of every access: the memory-side cache replays them, the next pass counts misses.
    record = llc or n_passes > 1
    n_simulated = n_sets if set_fraction >= 1.0 else max(1, int(round(n_sets * set_fraction)))
    step_scale = None
    for p in range(n_passes):
        schedules = _domain_schedules(work, step_ptr, tile_step_ptr, n_slots, n_partitions, cv, seed, step_scale,
                                      n_workers, wave_chunk, drift_decay, given)
        by_domain, got, coalesced = _sets_pass(model, work, lines, masks, writes, set_home, pbits, step_ptr,
                                               n_partitions, n_sets, ways, n_simulated, n_workers, record, use_gpu,
                                               schedules, coalesce)
        if p + 1 < n_passes:
            step_miss = np.zeros(step_ptr.size - 1, dtype=np.int64)
            for d, sched in schedules.items():
                kernels.step_miss_counts(step_ptr, sched[0], got[d], step_miss)
            accesses = (np.diff(step_ptr) if n_simulated == n_sets else
                        kernels.step_access_counts(step_ptr, set_home, np.int64(pbits), np.int64(n_simulated)))
            step_scale = hit_step_scale(step_miss, accesses, hit_speedup)
            del got
    return (*_scaled(by_domain, work, _run_llc(model, lines, step_ptr, schedules, got, n_workers) if llc else None,
                     n_sets, n_simulated), coalesced)


def _sets_pass(model, work, lines, masks, writes, set_home, pbits, step_ptr, n_partitions, n_sets, ways, n_simulated,
               n_workers, record, use_gpu, schedules, coalesce=None
               ) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray], int]:
    """One run of every domain's schedule through its L2: ({domain: statistics}, {domain: DRAM-bound sectors per
    access of its stream}, empty unless `record`; the GPU's coalesced whole-line reads or -1)."""
    max_step = _max_step(step_ptr)
    if use_gpu:
        gpu_stats, got, coalesced = gpu.run_sets_gpu(lines, masks, writes, set_home, step_ptr, schedules, pbits,
                                                     n_partitions, n_sets, n_simulated, ways, record,
                                                     fetch_pair(model), coalesce)
        return {d: gpu_stats.get(d, np.zeros(kernels.N_STATS, dtype=np.int64)) for d, _ in work}, got, coalesced
    groups = set_groups(lines, masks, writes, set_home, step_ptr, n_sets, n_partitions, ways, n_simulated, max_step)
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
    queue_len = max(QUEUE_RECORDS, max_step)
    kernel = kernels.run_groups_for(ways, n_partitions, pbits, record)

    def run_job(job):
        if groups is None:
            _run_share(job, lines, masks, writes, set_home, pbits, step_ptr, n_partitions, ways, max_step, stats,
                       got[job[0]], fetch_pair(model))
            return
        d, (steps, near, _), lo, hi, sets, row = job
        kernel(*spans[d], groups.rec, groups.shw, groups.offset, groups.group_sets, np.int64(lo),
                           np.int64(hi), steps, near, starts[d], np.int64(pbits), np.int64(n_partitions),
                           np.int64(ways), np.int64(queue_len), sets, stats, np.int64(row), got[d],
                           np.int64(fetch_pair(model)))

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


LLC_STEP = 4096


def _run_llc(model, lines, step_ptr, schedules, got, n_workers=1) -> LlcStats:
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
    step_ptr_1 = np.minimum(np.arange(n_steps + 1, dtype=np.int64) * LLC_STEP, n)
    no_writes = np.zeros(n, dtype=np.bool_)

    def run_job(job):
        _run_share(job, line, mask, no_writes, set_home, 0, step_ptr_1, 1, ways, LLC_STEP, stats,
                   np.zeros(0, np.uint8))

    if n_jobs > 1:
        with ThreadPoolExecutor(max_workers=n_jobs) as pool:
            list(pool.map(run_job, jobs))
    else:
        run_job(jobs[0])
    total = stats.sum(axis=0)
    return LlcStats(read_sectors=int(total[kernels.ST_REQ_SECTORS]), hit_sectors=int(total[kernels.ST_HIT_SECTORS]))


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))


def _option(value: Any, default: Any, name: str, meaning: str, ok: Any, bounds: str) -> Any:
    """`value`, or `default` where it is None, if it is a number `ok` accepts; else one line saying what it must be."""
    chosen = default if value is None else value
    if not _is_number(chosen) or not ok(float(chosen)):
        raise UserError(f"{name} ({meaning}) must be {bounds}, got {value!r}")
    return chosen


def slot_speeds(model: HardwareModel, n_slots: int, gpc_bound: float, seed: int) -> np.ndarray:
    """Each slot's pace while the kernel is L2-bound: 1 - gpc_bound + gpc_bound x its SM's GPC size / the mean an
    SM sees (slot s runs on unit s mod units; units go to GPCs in a seeded shuffle, as chips differ)."""
    sizes = np.asarray(model.gpc_sms, dtype=np.float64)
    labels = np.repeat(np.arange(sizes.size), model.gpc_sms)
    np.random.default_rng(seed).shuffle(labels)
    per_unit = 1.0 - gpc_bound + gpc_bound * sizes[labels] / ((sizes * sizes).sum() / sizes.sum())
    return np.ascontiguousarray(per_unit[np.arange(n_slots) % model.units_per_domain])


_SAMPLE_CACHE: dict[tuple[int, ...], tuple[Any, tuple[np.ndarray, ...]]] = {}


def sampled_accesses(lines, writes, step_ptr, n_sets, n_partitions, ways, n_workers,
                     set_map: int = 0) -> tuple[np.ndarray, ...]:
    """kernels.sample_accesses of a trace (the accesses of the sets the saturating model watches), cached per trace
    array: they do not depend on the order, so each order of a search pays only for its own schedule."""
    key = (id(lines), int(lines.size), int(n_sets), int(n_partitions), int(ways), SATURATION_SAMPLE_EVERY,
           int(set_map))
    hit = _SAMPLE_CACHE.get(key)
    if hit is not None and hit[0]() is lines:
        return hit[1]
    set_home = set_index_array(lines, n_sets, n_partitions, n_workers, set_map)
    found = kernels.sample_accesses(step_ptr, lines, writes, set_home, np.int64(partition_bits(n_partitions)),
                                    np.int64(SATURATION_SAMPLE_EVERY), np.int64(n_partitions), np.int64(ways))
    _cache_put(_SAMPLE_CACHE, key, (weakref.ref(lines), found), 2)
    return found


_PAGE_CACHE: dict[tuple[Any, ...], tuple[Any, np.ndarray]] = {}


def sampled_page_share(lines, step_ptr, sample_ptr, n_sets, n_partitions, n_workers, line_bytes: int,
                       set_map: int = 0) -> np.ndarray:
    """kernels.sample_page_share of a trace (how densely each sampled access's step reads its DRAM page; `sample_ptr`
    from sampled_accesses), cached per trace array as sampled_accesses is."""
    page_lines = max(DRAM_PAGE_BYTES // line_bytes, 1)
    key = (id(lines), int(lines.size), int(n_sets), int(n_partitions), SATURATION_SAMPLE_EVERY, int(set_map),
           page_lines)
    hit = _PAGE_CACHE.get(key)
    if hit is not None and hit[0]() is lines:
        return hit[1]
    set_home = set_index_array(lines, n_sets, n_partitions, n_workers, set_map)
    found = kernels.sample_page_share(step_ptr, lines, set_home, np.int64(partition_bits(n_partitions)),
                                      np.int64(SATURATION_SAMPLE_EVERY), np.int64(page_lines), sample_ptr)
    _cache_put(_PAGE_CACHE, key, (weakref.ref(lines), found), 2)
    return found


def saturating_schedule(model, programs, lines, writes, step_ptr, tile_step_ptr, n_slots, n_partitions, n_sets,
                         ways, cv, seed, gpc_bound, dram_saturation, miss_gain, n_workers, contention=None) -> Schedule:
    """The saturating progress model's schedule of a one-domain model (kernels.schedule_saturating); with
    `contention` = (age_priority, hot_load, start_jitter, page_noise, program_cv) its contention terms too."""
    ptr, base, line, read = sampled_accesses(lines, writes, step_ptr, n_sets, n_partitions, ways, n_workers,
                                             set_map_of(model))
    n_sample = (n_sets + SATURATION_SAMPLE_EVERY - 1) // SATURATION_SAMPLE_EVERY
    age, hot, jitter, paging, own_pace = contention if contention is not None else (0.0, 0.0, 0.0, 0.0, 0.0)
    page = np.zeros(0, dtype=np.float64)
    if paging > 0:
        page = sampled_page_share(lines, step_ptr, ptr, n_sets, n_partitions, n_workers, model.line_bytes,
                                  set_map_of(model))
    steps, near, start = kernels.schedule_saturating(
        tile_step_ptr, np.ascontiguousarray(programs), np.int64(n_slots), np.int64(n_partitions),
        np.float64(cv), np.uint64(seed), slot_speeds(model, n_slots, gpc_bound, seed), ptr, base, line, read,
        np.int64(n_sample * n_partitions * ways), np.int64(ways),
        np.float64(dram_saturation), np.float64(SATURATION_WINDOW_STEPS * n_slots),
        np.float64(miss_gain), np.float64(age), np.float64(hot), np.float64(HOT_WINDOW_STEPS), np.float64(HOT_POWER),
        contention is not None, page, np.float64(paging), np.float64(own_pace))
    if jitter > 0:
        # The requests of a step spread over it: each arrives within +-jitter/2 steps of its slot's clock, and the
        # steps run in that order (the clocks themselves keep no drift from it).
        start = start + jitter * (np.random.default_rng(seed).random(start.size) - 0.5)
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
    lines, _, writes, step_ptr, tile_step_ptr = _trace_arrays(trace)
    contention = ((result.age_priority, result.hot_load, result.start_jitter, result.page_noise, result.program_cv)
                  if result.progress == "contention" else None)
    n_sets = result.capacity_lines_per_partition // result.assoc
    return saturating_schedule(model, _as_perm(perm, tile_step_ptr.size - 1), lines, writes, step_ptr,
                                tile_step_ptr, result.n_slots_per_domain, result.n_partitions, n_sets, result.assoc,
                                result.step_cv, seed, result.gpc_bound, result.dram_saturation, result.miss_gain,
                                workers, contention)


def _check_schedule(schedule, model, n_steps, n_partitions, hit_speedup, drift_decay, wave_sync, engine, assoc) -> None:
    """Refuses a given schedule the engines cannot replay as the trace's (one line each)."""
    if not isinstance(schedule, Schedule):
        raise UserError(f"schedule must be a Schedule (steps, near, start), got {type(schedule).__name__}")
    if model.n_domains != 1:
        raise UserError(f"a given schedule replays one L2 domain; {model.name} has {model.n_domains}")
    if hit_speedup or drift_decay or wave_sync:
        raise UserError("a given schedule replaces the progress model: leave hit_speedup, drift_decay and wave_sync off")
    if engine in ("list", "gpu") or assoc is None:
        raise UserError("a given schedule runs on the set-partitioned CPU engine (engine 'auto' or 'sets', a "
                        "set-associative L2)")
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


def simulate(
    trace: Any,
    perm: Any,
    hw: HardwareModel | str,
    occupancy: int = 1,
    assoc: int | None | str = "model",
    capacity_bytes: int | None = None,
    footprint: tuple[int, int, int] | None = None,
    step_cv: float | None = None,
    seed: int = STEP_TIME_SEED,
    workers: int | None = None,
    engine: str = "auto",
    set_fraction: float = 1.0,
    hit_speedup: float | None = None,
    wave_sync: int = 0,
    drift_decay: float | None = None,
    lrc_window: float | None = None,
    schedule: Schedule | None = None,
    gpc_bound: float | None = None,
    dram_saturation: float | None = None,
    miss_gain: float | None = None,
    progress: str | None = None,
    age_priority: float | None = None,
    hot_load: float | None = None,
    start_jitter: float | None = None,
    page_noise: float | None = None,
    program_cv: float | None = None,
) -> SimResult:
    """Predict L2 hit rates and DRAM traffic of running `trace`'s tiles in the order `perm` on `hw`.

    `assoc="model"` (default) is the model's `l2_ways`-way set-associative LRU with a hashed set index;
    an integer gives another number of ways; `None` is a fully associative LRU per domain (the slower
    linked-list engine: its sets cannot be split). `capacity_bytes` overrides the model's capacity per domain (split over its partitions). `footprint` may pass a
    precomputed `footprint_of(trace)` when simulating many orders of one trace. `step_cv` is the spread of a
    step's duration (default STEP_TIME_CV, the value fitted on an H100; 0 = every resident program advances
    in lockstep) and `seed` picks the durations (a step's duration depends only on seed, program and step).
    `workers` threads simulate the L2 domains of multi-domain GPUs (default: the CPUs this process may use);
    the result does not depend on it. `engine` "auto" runs set-associative caches on the set-partitioned
    engine (sets split over threads) and a fully associative one on the linked-list engine; "list" forces the
    linked-list engine (identical results, slower: kept to check the fast one); "gpu" runs the set-partitioned
    model on a CUDA GPU (numba.cuda + CuPy, one thread per set index; identical results). `set_fraction` < 1 simulates
    only that share of the L2 sets (the first ones; the set index is a hash, so they are a uniform sample of the
    lines) and scales the counts up: an estimate for screening many orders quickly (1.0 = exact). `hit_speedup`
    (default HIT_SPEEDUP; 0 = off) shortens each step by that share times the share of its accesses that did not
    read from DRAM, as the cache state at the step gives it (engine "auto" then runs the linked-list engine, which
    keeps the cache inside the schedule, unless the model has a memory-side cache); the set-partitioned engines
    ("sets", "gpu", set_fraction < 1) schedule before the cache and approximate it by HIT_PASSES fixed-point
    passes, each timed by the previous pass's hits. `wave_sync` W > 0 models a kernel whose launches come in waves
    of W (launch index // W) and whose programs of a wave start only once the previous wave has finished (a barrier
    between waves, as tasks/matmul's sync_wave): each wave starts all its programs at once, so its programs walk
    their steps nearly in step instead of drifting apart over the run (set-associative engines only).
    `drift_decay` (default DRIFT_DECAY; 0 = off) is the share of a
    slot's drift from its lockstep clock that each step takes back: the drift then stays near
    step_cv / sqrt(2 drift_decay) steps instead of growing with the kernel's length. `lrc_window` (default
    LRC_WINDOW; 0 = off; NVIDIA models only) models the L2 request coalescer: a whole-line read that another
    program on the same side read whole no more than that many mean step times before joins that lookup, so ncu
    counts neither; the hit rate is taken over the lookups left (`coalesced_bytes` says how much was merged;
    DRAM traffic is unchanged). `schedule` (single-domain models, set-associative engines) replays a given
    order of steps, such as a measured timeline, in place of the progress model (step_cv, hit_speedup, drift_decay
    and wave_sync then have no effect and must be left at their defaults); `perm` still names the launch order.
    `progress` picks the progress model that orders the steps: "saturating" (where it can run: NVIDIA models whose
    GPCs are known (`gpc_sms`), one L2 domain, a set-associative L2, no hit_speedup, drift_decay, wave_sync or given
    schedule; its contention form, below, is the default there) or "random_walk" (the default elsewhere; its step_cv
    default is STEP_TIME_CV). In the saturating model each slot keeps its SM's pace while DRAM is idle, if the
    kernel is L2-bound (`trace.l2_bound`, from task.yml; `gpc_bound`, default the model's (HardwareModel.gpc_bound)
    for such a trace and 0 for any other, is the share of a step's time its GPC's bandwidth sets), and loses it as
    DRAM saturates (live miss share on a sample of sets against `dram_saturation`, default DRAM_SATURATION); behind a
    saturated DRAM a step's time follows its own misses by `miss_gain` (default SATURATION_MISS_GAIN); step_cv defaults to
    STEP_TIME_CV_SATURATING. Asked for by name, or by passing one of its parameters, where it cannot run, it is
    refused in one line. "contention" is the saturating model with its contention terms (kernels.schedule_saturating;
    HOT_LOAD above): the SM pace fades while reads crowd onto the same lines (`hot_load`, default HOT_LOAD), older
    programs are served first while L2-bound (`age_priority`, default AGE_PRIORITY), step_cv spreads the DRAM queue
    part only, and each step's requests arrive within +-`start_jitter`/2 steps of its slot's clock (default
    START_JITTER); it runs where "saturating" can. Its `page_noise` (default the model's; 0 = off) spreads the time
    of steps whose misses read DRAM pages densely; its `program_cv` (default PROGRAM_CV, 0 = off; an experiment) gives
    each program one draw of its own pace on the L2-bound part of its steps. Left out, the progress model is
    DEFAULT_PROGRESS where it can run.
    """
    model = get_model(hw) if isinstance(hw, str) else hw
    if not isinstance(wave_sync, (int, np.integer)) or isinstance(wave_sync, bool) or wave_sync < 0:
        raise UserError(f"wave_sync must be a whole number of launches per wave (0 = off), got {wave_sync!r}")
    if wave_sync and wave_sync % model.n_domains:
        raise UserError(f"wave_sync must split evenly over the {model.n_domains} L2 domains of {model.name}, "
                        f"got {wave_sync}")
    speedup = HIT_SPEEDUP if hit_speedup is None else hit_speedup
    if not isinstance(speedup, (int, float, np.integer, np.floating)) or not 0.0 <= float(speedup) < 1.0:
        raise UserError(f"hit_speedup (share of a step's time L2 hits save) must be a number in 0..1 (1 excluded), "
                        f"got {hit_speedup!r}")
    decay = _option(drift_decay, DRIFT_DECAY, "drift_decay", "share of a slot's drift from lockstep taken back "
                    "each step", lambda v: 0.0 <= v <= 1.0, "a number in 0..1")
    window = _option(lrc_window, LRC_WINDOW, "lrc_window", "mean step times within which the L2 request coalescer "
                     "merges reads", lambda v: 0.0 <= v <= 1e6, "a number >= 0")
    # SM pace only where the kernel loads its SMs' paths to L2 hard (trace.l2_bound, from task.yml).
    gpc = _option(gpc_bound, model.gpc_bound if getattr(trace, "l2_bound", False) else 0.0, "gpc_bound",
                  "share of a step's time its GPC's bandwidth sets", lambda v: 0.0 <= v < 1.0,
                  "a number in 0..1 (1 excluded)")
    saturation = _option(dram_saturation, DRAM_SATURATION, "dram_saturation", "L2 read miss share at which DRAM "
                         "saturates", lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")
    gain = _option(miss_gain, SATURATION_MISS_GAIN, "miss_gain", "how much a step's own misses set its time behind a "
                   "saturated DRAM", lambda v: 0.0 <= v <= 1.0, "a number in 0..1")
    if progress is not None and progress not in PROGRESS_MODELS:
        raise UserError(f"progress must be one of {', '.join(PROGRESS_MODELS)} (or left out for the model's default), "
                        f"got {progress!r}")
    tuned = [name for name, value in (("gpc_bound", gpc_bound), ("dram_saturation", dram_saturation),
                                      ("miss_gain", miss_gain)) if value is not None]
    if progress == "random_walk" and tuned:
        raise UserError(f"{tuned[0]} belongs to the saturating progress model, not the random walk")
    terms = [name for name, value in (("age_priority", age_priority), ("hot_load", hot_load),
                                      ("start_jitter", start_jitter), ("page_noise", page_noise),
                                      ("program_cv", program_cv))
             if value is not None]
    if terms and progress not in ("contention", None):
        raise UserError(f"{terms[0]} belongs to the contention progress model, not the {progress.replace('_', ' ')}")
    age = _option(age_priority, AGE_PRIORITY, "age_priority", "how much older programs go first while L2-bound",
                  lambda v: 0.0 <= v < 1.0, "a number in 0..1 (1 excluded)")
    hot = _option(hot_load, HOT_LOAD, "hot_load", "recent reads of a line at which the L2 slices set the pace",
                  lambda v: 0.0 < v <= 1e6, "a number > 0")
    jitter = _option(start_jitter, START_JITTER, "start_jitter", "steps over which a step's requests arrive",
                     lambda v: 0.0 <= v <= 1e3, "a number >= 0")
    paging = _option(page_noise, model.page_noise, "page_noise",
                     "spread of the time of steps that read DRAM pages densely", lambda v: 0.0 <= v <= 1.0,
                     "a number in 0..1")
    own_pace = _option(program_cv, PROGRAM_CV, "program_cv", "spread of a program's own pace",
                       lambda v: 0.0 <= v <= 1.0, "a number in 0..1")
    blockers = [why for why, present in (
        (f"{model.name} has no known GPCs", not model.gpc_sms),
        (f"{model.name} has several L2 domains", model.n_domains != 1),
        (f"engine {engine!r}", engine not in ("auto", "sets", "gpu")), ("a fully associative L2", assoc is None),
        ("hit_speedup", bool(speedup)), ("drift_decay", bool(decay)),
        ("wave_sync", bool(wave_sync)), ("a given schedule", schedule is not None)) if present]
    asked = progress in ("saturating", "contention") or (progress is None and bool(tuned or terms))
    if asked and blockers:
        raise UserError(f"the {progress or 'saturating'} progress model cannot run with {blockers[0]}")
    saturating = progress != "random_walk" and not blockers
    # Named, or picked by passing one of its terms, or the default where none is named.
    contention = saturating and (progress == "contention"
                                 or (progress is None and (bool(terms) or DEFAULT_PROGRESS == "contention")))
    if not saturating:
        gpc = 0.0
    cv = (STEP_TIME_CV_SATURATING if saturating else STEP_TIME_CV) if step_cv is None else step_cv
    if not isinstance(cv, (int, float, np.integer, np.floating)) or not 0.0 <= float(cv) <= 1.0:
        raise UserError(f"step_cv (spread of a step's duration) must be a number in 0..1, got {step_cv!r}")
    if not isinstance(occupancy, (int, np.integer)) or not 1 <= int(occupancy) <= MAX_OCCUPANCY:
        raise UserError(f"occupancy must be an integer 1..{MAX_OCCUPANCY} programs per unit, got {occupancy!r}")
    lines, masks, writes, step_ptr, tile_step_ptr = _trace_arrays(trace)
    n_tiles = tile_step_ptr.size - 1
    order = _as_perm(perm, n_tiles)
    cap_bytes = model.l2_effective_bytes_per_domain if capacity_bytes is None else int(capacity_bytes)
    n_partitions = model.l2_partitions
    capacity = cap_bytes // n_partitions // model.line_bytes
    if capacity < 1:
        raise UserError(f"L2 capacity {cap_bytes} bytes holds no {model.line_bytes}-byte line per partition: give a larger one")
    if isinstance(assoc, str):
        if assoc != "model":
            raise UserError(f"associativity must be 'model', an integer number of ways or None, got {assoc!r}")
        assoc = min(model.l2_ways, capacity)
    if not isinstance(set_fraction, (int, float)) or not 0.0 < float(set_fraction) <= 1.0:
        raise UserError(f"set_fraction must be a number in (0, 1], got {set_fraction!r}")
    if engine not in ENGINES:
        raise UserError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if assoc is None:
        n_sets = 1
    else:
        if not isinstance(assoc, (int, np.integer)) or assoc < 1 or assoc > capacity:
            raise UserError(f"associativity must be an integer 1..{capacity} ways, got {assoc!r}")
        n_sets = capacity // int(assoc)
        capacity = n_sets * int(assoc)
    if capacity * n_partitions > kernels.MAX_NODES:
        raise UserError(
            f"L2 of {capacity * n_partitions} lines per domain is above the simulator's {kernels.MAX_NODES}: "
            "give a smaller capacity"
        )
    low, high = line_range(lines)
    if lines.size and (low < 0 or (high + 1) * n_partitions >= kernels.MAX_KEY):
        raise UserError("trace line ids must lie in 0 .. 2**38: rebuild the trace with line-aligned tensor bases")
    n_slots = model.units_per_domain * int(occupancy)
    popcount = kernels.popcount_table()
    if schedule is not None:
        _check_schedule(schedule, model, step_ptr.size - 1, n_partitions, hit_speedup, drift_decay, wave_sync,
                        engine, assoc)
        speedup, decay = 0.0, 0.0  # the given order of steps is the progress

    started = time.perf_counter()
    work = [(d, programs) for d, programs in enumerate(domain_programs(order, model))]
    n_workers = default_workers() if workers is None else max(int(workers), 1)
    # Hit-dependent step times need the cache inside the schedule: "auto" runs them on the linked-list engine,
    # except behind a memory-side cache, which only the set-partitioned engine models (it then takes passes).
    live = speedup > 0 and model.llc_bytes == 0
    use_sets = engine in ("sets", "gpu") or (engine == "auto" and assoc is not None and not live) or set_fraction < 1.0
    if wave_sync and (not use_sets or assoc is None or speedup > 0):
        raise UserError("wave_sync needs the set-partitioned engine: a set-associative L2, engine 'auto', 'sets' or "
                        "'gpu', and no hit_speedup")
    if engine == "gpu" and assoc is None:
        raise UserError("engine 'gpu' needs a set-associative L2 (give assoc)")
    if n_partitions > walk.MAX_PARTITIONS:
        raise UserError(f"the simulator handles at most {walk.MAX_PARTITIONS} L2 partitions, got {n_partitions}")
    given = schedule
    if saturating:
        given = saturating_schedule(model, work[0][1], lines, writes, step_ptr, tile_step_ptr, n_slots, n_partitions,
                                     n_sets, capacity // n_sets, float(cv), seed, float(gpc), float(saturation),
                                     float(gain), n_workers,
                                     (float(age), float(hot), float(jitter), float(paging), float(own_pace))
                                     if contention else None)
    coalesced = 0
    coalescing = window > 0 and model.vendor == "nvidia"
    n_simulated = n_sets if set_fraction >= 1.0 else max(1, int(round(n_sets * set_fraction)))
    sectors_per_line = model.line_bytes // model.sector_bytes
    full_mask = (1 << sectors_per_line) - 1
    # The GPU counts the coalescer on the walk's own stream where the walk runs the coalescer's schedule (one
    # domain, one pass); should it not count (a table ran out), the CPU does below.
    on_device = None
    if coalescing and engine == "gpu" and model.n_domains == 1 and hit_passes(float(speedup)) == 1:
        on_device = gpu.Coalesce(step_tile=step_tiles(tile_step_ptr), window=float(window), full_mask=full_mask)
    llc = None
    device_coalesced = -1
    if use_sets:
        if assoc is None and set_fraction < 1.0:
            raise UserError("set_fraction < 1 needs a set-associative L2 (give assoc)")
        all_stats, llc, device_coalesced = _run_sets_engine(
            model, work, lines, masks, writes, step_ptr, tile_step_ptr, n_slots, n_partitions, n_sets,
            capacity // n_sets, popcount, float(cv), seed, n_workers, float(set_fraction), use_gpu=engine == "gpu",
            hit_speedup=float(speedup), wave_chunk=int(wave_sync) // model.n_domains,
            drift_decay=float(decay), given=given, coalesce=on_device)
    else:
        all_stats = _run_list_engine(
            model, work, lines, masks, writes, step_ptr, tile_step_ptr, n_slots, n_partitions, capacity, n_sets,
            popcount, float(cv), seed, n_workers, float(speedup), float(decay))
    if device_coalesced >= 0:
        coalesced = int(round(device_coalesced * sectors_per_line * n_sets / n_simulated))
    elif coalescing:
        if footprint is None:
            footprint = footprint_of(trace)
        coalesced = _coalescing(work, lines, masks, writes, step_ptr, tile_step_ptr, n_slots, n_partitions, float(cv),
                                seed, n_workers, int(wave_sync) // model.n_domains, float(decay), float(window),
                                footprint[0], popcount, full_mask, given,
                                (n_sets, capacity // n_sets, n_simulated, set_map_of(model))
                                if use_sets and assoc is not None else None)
    per_domain = [
        DomainStats(
            domain=d,
            n_programs=int(programs.size),
            requested_sectors=int(stats[kernels.ST_REQ_SECTORS]),
            lookup_sectors=int(stats[kernels.ST_LOOKUP_SECTORS]),
            hit_sectors=int(stats[kernels.ST_HIT_SECTORS]),
            line_accesses=int(stats[kernels.ST_LINE_ACCESSES]),
            line_lookups=int(stats[kernels.ST_LINE_LOOKUPS]),
            line_hits=int(stats[kernels.ST_LINE_HITS]),
            fabric_sectors=int(stats[kernels.ST_FABRIC_SECTORS]),
            dram_read_bytes=int(stats[kernels.ST_DRAM_READ_SECTORS]) * model.sector_bytes,
            dram_write_bytes=int(stats[kernels.ST_DRAM_WRITE_SECTORS]) * model.sector_bytes,
            evictions=int(stats[kernels.ST_EVICTIONS]),
            tcc_hits=int(stats[kernels.ST_TCC_HITS]),
        )
        for (d, programs), stats in zip(work, all_stats)
    ]
    elapsed_s = time.perf_counter() - started
    if footprint is None:
        footprint = footprint_of(trace)
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
    dram_read = l2_read
    if llc is not None:
        # L2 misses the Infinity Cache serves never reach HBM.
        dram_read = l2_read - llc.hit_sectors * model.sector_bytes
    return SimResult(
        model=model.name,
        occupancy=int(occupancy),
        n_slots_per_domain=n_slots,
        n_partitions=n_partitions,
        capacity_lines_per_partition=int(capacity),
        assoc=None if assoc is None else int(assoc),
        step_cv=float(cv),
        l2_hit_rate=tcc_rate if amd else sector_rate,
        line_hit_rate=line_hits / line_lookups if line_lookups else 0.0,
        fabric_bytes=sum(d.fabric_sectors for d in per_domain) * model.sector_bytes,
        dram_read_bytes=dram_read,
        dram_write_bytes=sum(d.dram_write_bytes for d in per_domain),
        compulsory_bytes=touched_sectors * model.sector_bytes,
        compulsory_read_bytes=first_read_sectors * model.sector_bytes,
        requested_bytes=requested_sectors * model.sector_bytes,
        line_accesses=line_accesses,
        n_programs=int(order.size),
        per_domain=tuple(per_domain),
        elapsed_s=elapsed_s,
        hit_rate_counter=TCC_COUNTER if amd else NCU_COUNTER,
        sector_hit_rate=sector_rate,
        tcc_hit_rate=tcc_rate,
        l2_miss_read_bytes=l2_read,
        llc_hit_rate=None if llc is None else llc.hit_rate,
        set_fraction=float(set_fraction),
        hit_speedup=float(speedup),
        wave_sync=int(wave_sync),
        drift_decay=float(decay),
        lrc_window=float(window) if model.vendor == "nvidia" else 0.0,
        coalesced_bytes=coalesced * model.sector_bytes,
        replayed=schedule is not None,
        gpc_bound=float(gpc),
        dram_saturation=float(saturation) if saturating else 0.0,
        miss_gain=float(gain) if saturating else 0.0,
        progress="replayed" if schedule is not None else "contention" if contention else "saturating" if saturating
        else "random_walk",
        age_priority=float(age) if contention else 0.0,
        hot_load=float(hot) if contention else 0.0,
        start_jitter=float(jitter) if contention else 0.0,
        page_noise=float(paging) if contention else 0.0,
        program_cv=float(own_pace) if contention else 0.0,
    )


def _trace_known(trace: Any) -> bool:
    """Whether the simulator's per-trace caches already hold this trace (its set indices were computed)."""
    lines = getattr(trace, "lines", None)
    with _CACHE_LOCK:
        return any(ref() is lines for ref, _ in _SET_INDEX_CACHE.values())


def simulate_many(jobs: list[tuple[Any, Any]], hw: HardwareModel | str, *, concurrency: int | None = None,
                  on_done: Any = None, **options: Any) -> list[SimResult]:
    """`simulate(trace, perm, hw, **options)` of every (trace, perm) in `jobs`, each result what simulate alone
    gives. The first runs alone when its trace is new to the simulator (it builds what later orders of the trace
    share: set indices, sampled accesses, set groups, device copies); the rest run `concurrency` at a time
    (default: one per CPU) with the CPUs split between them. Each order's own CPU work (the saturating model's
    schedule is serial) then overlaps the others' and, with engine "gpu", the device's walks (one order on the
    device at a time): on the H100 host a batch of 24 orders of matmul 8192 ran at 0.61, 1.13, 1.28 and 1.23 G
    accesses/s with 2, 4, 8 and 16 at once (benchmarks/sim_speed/sim_speed_gpuhost_h100.json, gpu_batch).
    `on_done(i, result)` is called as each finishes (from the thread that ran it)."""
    if "workers" in options:
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
        results[i] = simulate(trace, perm, model, workers=workers, **options)
        if on_done is not None:
            on_done(i, results[i])

    side_by_side(len(jobs), one, first_alone=bool(jobs) and not _trace_known(jobs[0][0]), concurrency=concurrency,
                 cpus=cpus)
    return [r for r in results if r is not None]


def side_by_side(count: int, one: Any, *, first_alone: bool, concurrency: int, cpus: int) -> None:
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
