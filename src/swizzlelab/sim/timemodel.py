"""Predicted time of a kernel under a block order, from the simulator's traffic: the order's DRAM and far-L2 time
against the rest of the kernel's time, combined with a calibrated overlap and anchored on the kernel's own order.

Calibrated on measured rows of every task (benchmarks/time_model); docs/time-model.md says how well it predicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from swizzlelab.hw import HardwareModel


@dataclass(frozen=True)
class Calibration:
    """The time model's constants for one hardware model, fitted on measured rows.

    dram_efficiency: share of the model's peak DRAM bandwidth that kernels' misses are served at;
    fabric_s_per_gb: seconds one GB of far-partition L2 traffic adds to the memory time (0 with one partition);
    llc_s_per_gb: seconds one GB of L2 misses served by a memory-side cache (AMD's Infinity Cache) adds;
    overlap: p of the p-norm that joins memory time and the rest (1: they add up; large: the larger hides the
    other); occupancy_power: how the rest of the time grows when an order's kernel fits fewer programs per SM
    (time x (base programs / order's programs) ** power); sigma: spread of log(measured / predicted speedup) on
    the rows fitted, for intervals; noise: the relative change below which measured speedups are not explained by
    traffic (the spread of measured orders whose predicted traffic barely changes: index arithmetic, DRAM page
    and L2 slice effects the simulator does not model); splice_bias: the speedup of an order whose traffic is
    the kernel's own (1.0 unless fitted with FitOptions.splice); partial_write_cost: the time of one byte a
    written-back line did not hold dirty (a partial-line DRAM write: `SimResult.partial_write_bytes`), as a share of
    the time of one byte moved (0: DRAM bytes alone count)."""

    model: str
    dram_efficiency: float
    fabric_s_per_gb: float
    overlap: float
    occupancy_power: float
    sigma: float
    noise: float
    rows: int
    source: str
    llc_s_per_gb: float = 0.0
    splice_bias: float = 1.0
    partial_write_cost: float = 0.0


# Fitted by benchmarks/time_model/fit.py (its summary JSON holds the rows, the fit and the held-out figures).
CALIBRATIONS: dict[str, Calibration] = {
    # 48 fit rows of 12 cases, 6 tasks, NVIDIA H100 80GB HBM3 (held out: 39 rows; docs/time-model.md). The DRAM
    # efficiency sits at its bound (the datasheet's peak); far-L2 traffic fitted to no cost (on these rows it moves
    # with the DRAM traffic and adds nothing); no splice bias (FitOptions says why).
    "H100-SXM": Calibration("H100-SXM", dram_efficiency=1.0, fabric_s_per_gb=0.0, overlap=1.859, occupancy_power=1.0,
                            sigma=0.090, noise=0.039, rows=48, splice_bias=1.0,
                            source="fitted on H100 rows, benchmarks/time_model/time_model_h100.json"),
}
# Models without their own calibration use the nearest one's shape: efficiency, overlap and spread carry over.
FALLBACK = "H100-SXM"


# AMD's CDNA 3 white paper: the Infinity Cache (MALL) peaks at 17.2 TB/s; used for every model that has one until a
# measured calibration exists (none here: no AMD GPU is lent to this project).
LLC_S_PER_GB = 1e9 / 17.2e12
# The original MI300X swizzle work (../shared/seed_formulas/transpose, its iteration 1) measured a 32768^2 fp16
# transpose with 32 x 32 tiles 12.4% faster under an order that the simulator gives the same DRAM bytes but whose
# output lines each XCD writes back whole, where the kernel's own order has two XCDs write back half a line each
# (benchmarks/seed_orders). Memory-bound, (R + W + c W) / (R + W) = 1.124 with R = W: c = 0.248. One published row,
# no AMD GPU here to measure more: a prior for AMD models, 0 elsewhere (no NVIDIA row has shown it).
PARTIAL_WRITE_COST_AMD = 0.248


def calibration_for(hw: HardwareModel) -> Calibration:
    cal = CALIBRATIONS.get(hw.name)
    if cal is not None:
        return cal
    base = CALIBRATIONS[FALLBACK]
    amd = hw.vendor == "amd"
    return replace(base, model=hw.name, fabric_s_per_gb=0.0 if hw.l2_partitions <= 1 else base.fabric_s_per_gb,
                   llc_s_per_gb=LLC_S_PER_GB if hw.llc_bytes else 0.0,
                   partial_write_cost=PARTIAL_WRITE_COST_AMD if amd else base.partial_write_cost,
                   source=f"{base.source} ({FALLBACK}'s constants" + (", Infinity Cache at AMD's 17.2 TB/s peak"
                                                                      if hw.llc_bytes else "")
                   + (", partial-line writes at the original MI300X transpose's cost" if amd else "") + ")")


@dataclass(frozen=True)
class Traffic:
    """What an order makes the kernel move, as the simulator predicts it (bytes), and the programs per SM its
    compiled kernel allows (None: as many as the kernel's own order's)."""

    dram_bytes: float
    fabric_bytes: float = 0.0
    occupancy: int | None = None
    llc_bytes: float = 0.0  # L2 misses a memory-side cache served (AMD), not DRAM
    partial_write_bytes: float = 0.0  # bytes of written-back lines they did not hold dirty (partial-line writes)

    @classmethod
    def of(cls, figures: Any) -> Traffic:
        """The traffic of a simulated order: a SimResult, or a record with its byte fields (optimize's Prediction)."""
        llc = max(figures.l2_miss_read_bytes - figures.dram_read_bytes, 0)  # served by AMD's Infinity Cache
        return cls(dram_bytes=float(figures.dram_read_bytes + figures.dram_write_bytes),
                   fabric_bytes=float(figures.fabric_bytes), llc_bytes=float(llc),
                   partial_write_bytes=float(figures.partial_write_bytes))


@dataclass(frozen=True)
class TimePrediction:
    """A predicted speedup over the kernel's own order (> 1: faster) with its interval."""

    speedup: float
    low: float
    high: float
    time_ms: float | None  # with a measured anchor
    memory_share: float  # share of the kernel's own time that is memory time (0..1); -1 when unknown
    model: str
    anchor: str

    def changes(self, noise: float) -> bool:
        """Whether the predicted change is larger than the measurement resolves."""
        return abs(self.speedup - 1.0) > noise

    def text(self) -> str:
        return (f"predicted {self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}] (time model {self.model}; "
                f"{self.anchor})")


@dataclass(frozen=True)
class TimeModel:
    """The time model of one kernel and case: its own order's traffic and, where a GPU measured it, its time."""

    hw: HardwareModel
    cal: Calibration
    base: Traffic
    base_ms: float | None = None
    anchor: str = ""

    def memory_s(self, traffic: Traffic) -> float:
        bandwidth = self.hw.dram_bw_bytes_per_s * self.cal.dram_efficiency
        moved = traffic.dram_bytes + traffic.partial_write_bytes * self.cal.partial_write_cost
        return (moved / bandwidth + traffic.fabric_bytes / 1e9 * self.cal.fabric_s_per_gb
                + traffic.llc_bytes / 1e9 * self.cal.llc_s_per_gb)

    def _rest_s(self) -> float | None:
        """The part of the kernel's own time that is not memory time (from the anchor), or None without one."""
        if self.base_ms is None:
            return None
        total, memory, p = self.base_ms / 1e3, self.memory_s(self.base), self.cal.overlap
        return (max(total ** p - memory ** p, 0.0)) ** (1.0 / p)

    def _time_s(self, traffic: Traffic, rest: float, scale: float) -> float:
        p = self.cal.overlap
        if traffic.occupancy and self.base.occupancy and traffic.occupancy < self.base.occupancy:
            rest *= (self.base.occupancy / traffic.occupancy) ** self.cal.occupancy_power
        return ((scale * self.memory_s(traffic)) ** p + rest ** p) ** (1.0 / p)

    def predict(self, traffic: Traffic) -> TimePrediction:
        rest = self._rest_s()
        base_memory = self.memory_s(self.base)
        widen = math.exp(1.96 * self.cal.sigma)
        if rest is None:
            # No measurement of the kernel's own order: its compute share is unknown, so the change lies between
            # the compute-bound (1.0) and the memory-bound (the memory times' ratio) extremes.
            ratio = base_memory / max(self.memory_s(traffic), 1e-30)
            low, high = sorted((1.0, ratio))
            return TimePrediction(speedup=ratio, low=low / widen, high=high * widen, time_ms=None, memory_share=-1.0,
                                  model=self.hw.name, anchor="no measurement of the kernel's own order: compute "
                                  "share unknown, memory-bound figure shown")
        total = self.base_ms / 1e3
        # A base faster than its predicted memory time means the bandwidth is higher than calibrated here: scale
        # the memory times so the anchor holds.
        scale = min(1.0, total / base_memory) if base_memory > 0 else 1.0
        base_time = self._time_s(self.base, rest, scale)
        order_time = self._time_s(traffic, rest, scale)
        speedup = base_time / order_time * self.cal.splice_bias
        return TimePrediction(speedup=speedup, low=speedup / widen, high=speedup * widen, time_ms=order_time * 1e3,
                              memory_share=min(1.0, scale * base_memory / total), model=self.hw.name,
                              anchor=self.anchor or "anchored on the kernel's own order")

    def bound(self) -> str:
        """'compute-bound', 'memory-bound' or 'mixed' (from the anchor), or 'unknown'."""
        rest = self._rest_s()
        if rest is None:
            return "unknown"
        share = self.memory_s(self.base) / (self.base_ms / 1e3)
        return "memory-bound" if share > 0.8 else "compute-bound" if share < 0.35 else "mixed"


def stop_reason(model: TimeModel, speedups: Sequence[float]) -> str | None:
    """One line when no order is predicted to gain more than the measurement resolves (anchored models only:
    without a measured kernel time the compute share, and so any verdict, is unknown)."""
    if not speedups or model.base_ms is None:
        return None
    best = max(speedups)
    noise = model.cal.noise
    if best > 1.0 + noise:
        return None
    return (f"{model.bound()}: predicted gain < {noise:.0%} for every untried order (best {best:.3f}x of "
            f"{len(speedups)}; time model {model.hw.name}, {model.anchor}): nothing measurable to gain, stopping")


@dataclass(frozen=True)
class Row:
    """One measured row for calibration: the kernel's own traffic and time, an order's traffic, and the speedup
    measured for it (weight: 1 / its variance, from the measurement's interval)."""

    base: Traffic
    order: Traffic
    base_ms: float
    measured: float
    weight: float = 1.0


def _log_errors(params: np.ndarray, hw: HardwareModel, template: Calibration, rows: Sequence[Row],
                weights: np.ndarray) -> np.ndarray:
    efficiency, fabric, overlap, power = params
    cal = replace(template, dram_efficiency=float(efficiency), fabric_s_per_gb=float(fabric), overlap=float(overlap),
                  occupancy_power=float(power))
    out = np.empty(len(rows))
    for i, row in enumerate(rows):
        model = TimeModel(hw, cal, row.base, row.base_ms)
        out[i] = math.sqrt(weights[i]) * (math.log(model.predict(row.order).speedup) - math.log(row.measured))
    return out


# Rows whose predicted change (before any splice bias) is smaller than this show what traffic cannot explain.
QUIET_CHANGE = 0.02
NOISE_QUANTILE = 0.75
# The spread (log) of measured speedups around the model that is not measurement noise: the first fit's held-out
# spread (benchmarks/time_model, issue 43). A row's weight is 1 / (its measurement variance + this squared): with
# CIs of 0.1-1% and a model off by ~9%, weighting by the CI alone let the tightest rows (SpMV) set every constant.
MODEL_SPREAD = 0.09
# The noise band is never narrower than this: interleaved A/B timing resolves about 1% (CIs of 0.1-1%).
NOISE_FLOOR = 0.01


@dataclass(frozen=True)
class FitOptions:
    """How fit() weighs rows and which constants it frees.

    model_spread: added (squared) to each row's measurement variance (0: weights from the CI alone);
    splice: also fit a splice bias (the median residual of orders with the kernel's own traffic);
    max_efficiency: upper bound of the DRAM efficiency (1.0: the datasheet's peak is a ceiling)."""

    model_spread: float = MODEL_SPREAD
    splice: bool = False
    max_efficiency: float = 1.0


def fit(hw: HardwareModel, rows: Sequence[Row], template: Calibration | None = None,
        source: str = "", options: FitOptions = FitOptions()) -> Calibration:
    """Least squares on log speedups (weighted) over efficiency, far-L2 cost, overlap and the occupancy power;
    then (options.splice) the splice bias, the spread (sigma) and the noise band.

    No splice bias by default: on the study's fit rows an order with the kernel's own traffic measured anything from
    4% slower (transposes) to 20% faster (matmul 16384^2x64), so one constant factor predicted held-out cases worse
    than none (benchmarks/time_model/README.md)."""
    start = replace(template or calibration_for(hw), splice_bias=1.0)
    x0 = np.array([min(start.dram_efficiency, options.max_efficiency), start.fabric_s_per_gb, start.overlap,
                   start.occupancy_power])
    lower = np.array([0.2, 0.0, 1.0, 0.0])
    upper = np.array([options.max_efficiency, 5.0, 32.0, 2.0])
    if hw.l2_partitions <= 1:  # nothing to fit: no far partition
        upper[1] = lower[1] + 1e-12
        x0[1] = 0.0
    weights = np.array([1.0 / (1.0 / r.weight + options.model_spread ** 2) for r in rows])
    solution = least_squares(_log_errors, np.clip(x0, lower, upper), bounds=(lower, upper),
                             args=(hw, start, rows, weights))
    efficiency, fabric, overlap, power = (float(v) for v in solution.x)
    fitted = replace(start, model=hw.name, dram_efficiency=efficiency, fabric_s_per_gb=fabric, overlap=overlap,
                     occupancy_power=power, rows=len(rows), source=source or start.source)
    if not rows:
        return fitted
    residual = _log_errors(solution.x, hw, fitted, rows, np.ones(len(rows)))
    predicted = np.array([TimeModel(hw, fitted, r.base, r.base_ms).predict(r.order).speedup for r in rows])
    quiet = np.abs(np.log(predicted)) < QUIET_CHANGE
    # The orders whose traffic barely changes tell how far measured speedups stray from what traffic predicts (a
    # quantile of them) and, where asked, what replacing the index code costs (their median): medians, so that one
    # case with a large effect the simulator does not model moves neither.
    bias = float(np.median(residual[quiet])) if options.splice and quiet.sum() >= 5 else 0.0
    left = residual - bias
    noise = float(np.quantile(np.abs(left[quiet]), NOISE_QUANTILE)) if quiet.sum() >= 5 else start.noise
    return replace(fitted, splice_bias=math.exp(-bias), sigma=float(np.sqrt(np.mean(left ** 2))),
                   noise=max(noise, NOISE_FLOOR))
