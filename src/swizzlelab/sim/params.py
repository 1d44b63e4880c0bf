"""The simulator's parameters: the progress model's calibration (SimParams, resolved per hardware model into Progress),
how a simulation runs (Engine) and the L2 geometry it simulates (CacheGeometry, resolved into L2Geometry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.hw import SET_MAPS, HardwareModel
from swizzlelab.sim import kernels

MAX_OCCUPANCY = 64
ENGINES = ("auto", "sets", "list", "gpu")

# Spread of a program step's duration (coefficient of variation; mean step time 1): the one fitted parameter
# of the simulator's progress model. Real programs drift apart (memory latency jitter, SM contention): a wave
# that starts together soon runs at different k-steps, later programs start whenever an earlier one ends,
# and reuse between programs launched far apart needs a longer time window than lockstep gives (lockstep,
# 0, predicted 77% L2 hit for row-major matmul 8192^3 where ncu measured 56%). Fitted by grid search (step
# 0.05) minimising the mean |predicted - measured| L2 hit % over the 5 orders of matmul 8192^3 fp16 measured
# with ncu on an H100 SXM (MAE 16.7 pp at 0 -> 4.2 pp at 0.4; 0.35: 5.1, 0.45: 5.0); checked without refitting
# on matmul 4096^3 and transpose 16384^2: git 305b79c:benchmarks/sim_calibration/run.py.
# Refitted for the 16-way set-associative L2 (issue 15) on the square matmul rows (8192^3 and 4096^3, 11 orders) of git
# 43bd3ac:benchmarks/sim_gpu/sim_vs_ncu_validation_h100.json: fit-set MAE 4.77 pp at 0.3, 3.33 at 0.4, 2.37 at 0.5; the
# held-out rows there are predicted with 0.5. Checked again with 64-byte DRAM fetches on the 20 square-matmul rows of
# benchmarks/sim_validation (H100 and H200): 2.96 pp at 0.4, 2.86 at 0.5, 3.51 at 0.6 (sim_validation_random_walk.json).
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
# kernels.progress._after_step). With step_cv alone the durations accumulate, so slot clocks drift apart as a random walk
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
# H100 (git 305b79c:benchmarks/sim_validation/lookup_probe.py): the sectors ncu's L2 did not look up (requested
# minus lookups less fabric lookups) equal lrc__request_sectors_op_read_coalescing_achieved_type_hardware within
# 0.025 of the requested sectors, 1-30% of them in matmul by order. 0 = off (AMD has no such unit in the model).
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
# A program's own pace (contention model; an experiment, 0 = off): one draw per program scales the L2-bound part of its
# steps. On the H100 a matmul's program durations spread 3-10% of their median, the model's 1.6-4.8% (stamped launches,
# git 305b79c:benchmarks/sim_validation/program_pace.py): independent step draws average away over a program's 64-128
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


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))


def _option(value: Any, default: Any, name: str, meaning: str, ok: Callable[[float], bool], bounds: str) -> Any:
    """`value`, or `default` where it is None, if it is a number `ok` accepts; else one line saying what it must be."""
    chosen = default if value is None else value
    if not _is_number(chosen) or not ok(float(chosen)):
        raise UserError(f"{name} ({meaning}) must be {bounds}, got {value!r}")
    return chosen


@dataclass(frozen=True)
class Progress:
    """The progress model a simulation runs and its calibration, every value resolved for one hardware model and
    trace (SimParams.resolve). Terms of a model that does not run are 0; `lrc_window` is 0 where the model has no
    request coalescer (AMD)."""

    name: str  # PROGRESS_MODELS
    step_cv: float
    seed: int = STEP_TIME_SEED
    hit_speedup: float = 0.0
    drift_decay: float = 0.0
    lrc_window: float = 0.0
    gpc_bound: float = 0.0
    dram_saturation: float = 0.0
    miss_gain: float = 0.0
    age_priority: float = 0.0
    hot_load: float = 0.0
    start_jitter: float = 0.0
    page_noise: float = 0.0
    program_cv: float = 0.0

    @property
    def saturating(self) -> bool:
        """The saturating model runs (alone or with its contention terms)."""
        return self.name in ("saturating", "contention")

    @property
    def contention(self) -> bool:
        return self.name == "contention"


@dataclass(frozen=True)
class SimParams:
    """How the simulator's progress model orders the programs' steps, and its calibration: None = the default for
    the hardware model and trace (`resolve`; `defaults_for` shows them). Calibration sweeps construct these; the
    meaning and fit of each value is written beside its default constant in this module.

    `progress`: PROGRESS_MODELS ("saturating" and "contention" run on NVIDIA models whose GPCs are known, one L2
    domain, a set-associative L2, no hit_speedup, drift_decay, wave_sync or given schedule; "contention", the
    default there, adds the contention terms; "random_walk" elsewhere). Passing a term of a model names it: a
    saturating term (gpc_bound, dram_saturation, miss_gain) or a contention term (age_priority, hot_load,
    start_jitter, page_noise, program_cv) picks that model where progress is left out, and is refused in one line
    where that model cannot run or another is named. `seed` picks the step durations (a step's duration depends
    only on seed, program and step)."""

    progress: str | None = None
    step_cv: float | None = None
    seed: int = STEP_TIME_SEED
    hit_speedup: float | None = None
    drift_decay: float | None = None
    lrc_window: float | None = None
    gpc_bound: float | None = None
    dram_saturation: float | None = None
    miss_gain: float | None = None
    age_priority: float | None = None
    hot_load: float | None = None
    start_jitter: float | None = None
    page_noise: float | None = None
    program_cv: float | None = None

    def _tuned(self) -> list[str]:
        return [name for name in ("gpc_bound", "dram_saturation", "miss_gain") if getattr(self, name) is not None]

    def _terms(self) -> list[str]:
        return [name for name in ("age_priority", "hot_load", "start_jitter", "page_noise", "program_cv")
                if getattr(self, name) is not None]

    def resolve(self, model: HardwareModel, *, l2_bound: bool, engine: str = "auto", fully_associative: bool = False,
                wave_sync: int = 0, replay: bool = False) -> Progress:
        """Every value for a run on `model` of a trace that is (`l2_bound`) or is not L2-bound, on `engine`, with a
        fully associative L2 or not, a barrier between waves or not, a given schedule (`replay`) or not: the
        defaults filled in, each value checked (one line naming what it must be), the progress model chosen."""
        speedup = self.hit_speedup if self.hit_speedup is not None else HIT_SPEEDUP
        if not _is_number(speedup) or not 0.0 <= float(speedup) < 1.0:
            raise UserError(f"hit_speedup (share of a step's time L2 hits save) must be a number in 0..1 (1 excluded), "
                            f"got {self.hit_speedup!r}")
        decay = _option(self.drift_decay, DRIFT_DECAY, "drift_decay", "share of a slot's drift from lockstep taken "
                        "back each step", lambda v: 0.0 <= v <= 1.0, "a number in 0..1")
        window = _option(self.lrc_window, LRC_WINDOW, "lrc_window", "mean step times within which the L2 request "
                         "coalescer merges reads", lambda v: 0.0 <= v <= 1e6, "a number >= 0")
        # SM pace only where the kernel loads its SMs' paths to L2 hard (trace.l2_bound, from task.yml).
        gpc = _option(self.gpc_bound, model.gpc_bound if l2_bound else 0.0, "gpc_bound",
                      "share of a step's time its GPC's bandwidth sets", lambda v: 0.0 <= v < 1.0,
                      "a number in 0..1 (1 excluded)")
        saturation = _option(self.dram_saturation, DRAM_SATURATION, "dram_saturation", "L2 read miss share at "
                             "which DRAM saturates", lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")
        gain = _option(self.miss_gain, SATURATION_MISS_GAIN, "miss_gain", "how much a step's own misses set its time "
                       "behind a saturated DRAM", lambda v: 0.0 <= v <= 1.0, "a number in 0..1")
        progress = self.progress
        if progress is not None and progress not in PROGRESS_MODELS:
            raise UserError(f"progress must be one of {', '.join(PROGRESS_MODELS)} (or left out for the model's "
                            f"default), got {progress!r}")
        tuned, terms = self._tuned(), self._terms()
        if progress == "random_walk" and tuned:
            raise UserError(f"{tuned[0]} belongs to the saturating progress model, not the random walk")
        if terms and progress not in ("contention", None):
            raise UserError(f"{terms[0]} belongs to the contention progress model, not the "
                            f"{progress.replace('_', ' ')}")
        age = _option(self.age_priority, AGE_PRIORITY, "age_priority", "how much older programs go first while "
                      "L2-bound", lambda v: 0.0 <= v < 1.0, "a number in 0..1 (1 excluded)")
        hot = _option(self.hot_load, HOT_LOAD, "hot_load", "recent reads of a line at which the L2 slices set the "
                      "pace", lambda v: 0.0 < v <= 1e6, "a number > 0")
        jitter = _option(self.start_jitter, START_JITTER, "start_jitter", "steps over which a step's requests arrive",
                         lambda v: 0.0 <= v <= 1e3, "a number >= 0")
        paging = _option(self.page_noise, model.page_noise, "page_noise", "spread of the time of steps that read "
                         "DRAM pages densely", lambda v: 0.0 <= v <= 1.0, "a number in 0..1")
        own_pace = _option(self.program_cv, PROGRAM_CV, "program_cv", "spread of a program's own pace",
                           lambda v: 0.0 <= v <= 1.0, "a number in 0..1")
        blockers = [why for why, present in (
            (f"{model.name} has no known GPCs", not model.gpc_sms),
            (f"{model.name} has several L2 domains", model.n_domains != 1),
            (f"engine {engine!r}", engine not in ("auto", "sets", "gpu")),
            ("a fully associative L2", fully_associative),
            ("hit_speedup", bool(speedup)), ("drift_decay", bool(decay)),
            ("wave_sync", bool(wave_sync)), ("a given schedule", replay)) if present]
        asked = progress in ("saturating", "contention") or (progress is None and bool(tuned or terms))
        if asked and blockers:
            raise UserError(f"the {progress or 'saturating'} progress model cannot run with {blockers[0]}")
        saturating = progress != "random_walk" and not blockers
        # Named, or picked by passing one of its terms, or the default where none is named.
        contention = saturating and (progress == "contention"
                                     or (progress is None and (bool(terms) or DEFAULT_PROGRESS == "contention")))
        cv = (STEP_TIME_CV_SATURATING if saturating else STEP_TIME_CV) if self.step_cv is None else self.step_cv
        if not _is_number(cv) or not 0.0 <= float(cv) <= 1.0:
            raise UserError(f"step_cv (spread of a step's duration) must be a number in 0..1, got {self.step_cv!r}")
        return Progress(
            name="contention" if contention else "saturating" if saturating else "random_walk",
            step_cv=float(cv), seed=self.seed,
            # A given order of steps is the progress: nothing of the progress model's runs.
            hit_speedup=0.0 if replay else float(speedup), drift_decay=0.0 if replay else float(decay),
            lrc_window=float(window) if model.vendor == "nvidia" else 0.0,
            gpc_bound=float(gpc) if saturating else 0.0,
            dram_saturation=float(saturation) if saturating else 0.0,
            miss_gain=float(gain) if saturating else 0.0,
            **({"age_priority": float(age), "hot_load": float(hot), "start_jitter": float(jitter),
                "page_noise": float(paging), "program_cv": float(own_pace)} if contention else {}))

    @classmethod
    def defaults_for(cls, model: HardwareModel, *, l2_bound: bool = True) -> SimParams:
        """Every value the simulator takes for `model` (a trace that is or is not L2-bound) when none is given and
        nothing keeps its default progress model from running: the defaults per hardware model, written out."""
        got = cls().resolve(model, l2_bound=l2_bound)
        return cls(progress=got.name, step_cv=got.step_cv, seed=got.seed, hit_speedup=got.hit_speedup,
                   drift_decay=got.drift_decay, lrc_window=got.lrc_window,
                   **{name: getattr(got, name) for name in ("gpc_bound", "dram_saturation", "miss_gain")
                      if got.saturating},
                   **{name: getattr(got, name) for name in ("age_priority", "hot_load", "start_jitter", "page_noise",
                                                            "program_cv") if got.contention})


@dataclass(frozen=True)
class Engine:
    """How a simulation runs; every engine gives the same figures, `set_fraction` < 1 an estimate.

    `name`: "auto" runs set-associative caches on the set-partitioned engine (sets split over threads) and a fully
    associative one on the linked-list engine; "sets" the set-partitioned engine; "list" the linked-list engine
    (identical results, slower: kept to check the fast one); "gpu" the set-partitioned model on a CUDA GPU
    (numba.cuda + CuPy, one thread per set index). `workers`: host threads (default: the CPUs this process may use);
    the result does not depend on it. `set_fraction` < 1 simulates only that share of the L2 sets (the first ones;
    the set index is a hash, so they are a uniform sample of the lines) and scales the counts up: an estimate for
    screening many orders quickly (1.0 = exact)."""

    name: str = "auto"
    workers: int | None = None
    set_fraction: float = 1.0

    @classmethod
    def of(cls, engine: Engine | str) -> Engine:
        return engine if isinstance(engine, Engine) else cls(engine)

    def check(self) -> None:
        if not isinstance(self.set_fraction, (int, float)) or not 0.0 < float(self.set_fraction) <= 1.0:
            raise UserError(f"set_fraction must be a number in (0, 1], got {self.set_fraction!r}")
        if self.name not in ENGINES:
            raise UserError(f"engine must be one of {', '.join(ENGINES)}, got {self.name!r}")


@dataclass(frozen=True)
class L2Geometry:
    """One L2 domain as the engines simulate it: `n_partitions` partitions of `capacity` lines, each in `n_sets`
    sets of `ways` lines (`assoc` None: one fully associative set), the set map (kernels.setmap._set_and_home) and
    whether a read miss fetches the aligned pair of 32-byte sectors (`pair`)."""

    n_partitions: int
    capacity: int
    n_sets: int
    assoc: int | None
    set_map: int
    pair: int

    @property
    def ways(self) -> int:
        return self.capacity // self.n_sets

    @property
    def pbits(self) -> int:
        return partition_bits(self.n_partitions)


@dataclass(frozen=True)
class CacheGeometry:
    """The L2 a simulation assumes: `assoc` "model" (the model's `l2_ways`-way set-associative LRU with a hashed set
    index), another number of ways, or None (a fully associative LRU per domain: the slower linked-list engine, whose
    sets cannot be split); `capacity_bytes` overrides the model's capacity per domain (split over its partitions)."""

    assoc: int | None | str = "model"
    capacity_bytes: int | None = None

    def resolve(self, model: HardwareModel) -> L2Geometry:
        cap_bytes = model.l2_effective_bytes_per_domain if self.capacity_bytes is None else int(self.capacity_bytes)
        n_partitions = model.l2_partitions
        capacity = cap_bytes // n_partitions // model.line_bytes
        if capacity < 1:
            raise UserError(f"L2 capacity {cap_bytes} bytes holds no {model.line_bytes}-byte line per partition: "
                            "give a larger one")
        assoc = self.assoc
        if isinstance(assoc, str):
            if assoc != "model":
                raise UserError(f"associativity must be 'model', an integer number of ways or None, got {assoc!r}")
            assoc = min(model.l2_ways, capacity)
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
        return L2Geometry(n_partitions=n_partitions, capacity=int(capacity), n_sets=int(n_sets),
                          assoc=None if assoc is None else int(assoc), set_map=set_map_of(model),
                          pair=fetch_pair(model))


def fetch_pair(model: HardwareModel) -> int:
    """1 when a read miss fetches the aligned pair of 32-byte sectors from DRAM (the model's dram_fetch_bytes)."""
    return int(model.dram_fetch_bytes == 2 * model.sector_bytes)


def set_map_of(model: HardwareModel) -> int:
    """The set map code the kernels take (kernels.setmap._set_and_home): 0 hashed, 1 interleaved, 2 permuted."""
    return SET_MAPS.index(model.l2_set_map)


def partition_bits(n_partitions: int) -> int:
    return max(int(n_partitions) - 1, 0).bit_length()
