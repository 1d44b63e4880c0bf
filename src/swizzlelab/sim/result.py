"""What a simulation predicts (SimResult, per domain DomainStats, the memory-side cache's LlcStats) and a schedule of
steps (Schedule: a measured timeline to replay, or the one a progress model ran).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from swizzlelab.fmt import fmt_bytes

NCU_COUNTER = "ncu lts__t_sector_hit_rate (32-byte sectors; stores that fill sectors hit)"
TCC_COUNTER = "rocprof TCC_HIT/(TCC_HIT+TCC_MISS) (line requests; a store hits only a present line)"


@dataclass(frozen=True)
class Schedule:
    """The steps of a trace in the order one L2 domain ran them, each with its program's near partition and its
    start time (any unit): a measured timeline (git 305b79c:benchmarks/sim_validation/timeline_probe.py) replayed
    through the cache model in place of the progress model, which tells the cache model's error from the progress
    model's."""

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
    dram_write_lines: int = 0  # dirty lines written back: DRAM write requests, each of a whole or part of a line

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
    dram_write_lines: int = 0  # dirty lines the L2s wrote back (DRAM write requests)
    line_bytes: int = 128

    @property
    def partial_write_bytes(self) -> int:
        """Bytes of the lines written back that they did not hold dirty: a line whose halves two L2s (or one L2
        at two times) wrote back is two partial-line DRAM writes where one would do (AMD's XCDs; sim/timemodel)."""
        return max(self.dram_write_lines * self.line_bytes - self.dram_write_bytes, 0)

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
        record["partial_write_bytes"] = self.partial_write_bytes
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


@dataclass(frozen=True)
class LlcStats:
    """The memory-side cache shared by all L2 domains (AMD Infinity Cache / MALL), fed by the L2s' read misses."""

    read_sectors: int  # sectors the L2s missed and asked the memory side for
    hit_sectors: int

    @property
    def hit_rate(self) -> float:
        return self.hit_sectors / self.read_sectors if self.read_sectors else 0.0
