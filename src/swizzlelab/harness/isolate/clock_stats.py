"""Clock statistics of an isolated run: the residual of the parent's wall clock over the child's figures, fitted
over the request size against trusted calibration requests, and the verdict on whether the figures can stand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import theilslopes

from swizzlelab.harness.timers import GATE_NS_PER_CALL

# A timed request runs k calls back to back on k slot sets of fresh inputs, k drawn by the parent from 1..pool
# size (shuffled rounds). The parent's wall clock over a request, minus the child's figures (the residual), grows
# per call only by what happens between calls (the seal); whatever the child skips or forges once per request
# cannot change that growth. Both the residual's growth per call and its fixed part are compared with those of
# trusted requests of busy stand-in calls made before the submission is imported.

# When the budget is spent but the residual's interval is still too wide to judge, timing goes on up to
# EXTEND_FACTOR x the budget + EXTEND_S: more requests narrow it; a child cannot gain from the extra requests.
# (Measured on an H100, 2026-11-25: the 0.23 ms histogram, whose 512 MiB fresh inputs make requests slow, still had
# a +-0.047 ms interval after 3 x 1 s + 2 s, against 0.036 allowed, and an honest kernel was refused.)
EXTEND_FACTOR, EXTEND_S = 5.0, 10.0
# The residual's growth per call (between calls: the seal copy, event gaps, per-call host work after the
# synchronize; measured 0.009..0.043 ms on an H100) may be at most this much + a share of the figure (GPU clock
# drift over long kernels) + its 99% interval, and that interval at most RESIDUAL_CI_MS + a share of the
# figure: a wall clock noisier than that cannot vouch for the figures. On the CPU (tests only) interpreter
# noise is milliseconds.
RESIDUAL_SLOPE_MS, RESIDUAL_SLOPE_REL = 0.05, 0.01
RESIDUAL_CI_MS, RESIDUAL_CI_REL = 0.03, 0.03
RESIDUAL_SLOPE_MS_CPU, RESIDUAL_SLOPE_REL_CPU = 3.0, 0.2
RESIDUAL_CI_MS_CPU, RESIDUAL_CI_REL_CPU = 10.0, 0.5
# ... and its fixed part per request by this much: work hidden outside the marks once per request is bounded
# by it, spread over up to MAX_POOL calls.
INTERCEPT_MS = 0.6
INTERCEPT_MS_CPU = 40.0
# Work left on another stream after the last end mark: counted when the device-wide synchronize after it takes
# longer than this beyond the empty requests'.
TAIL_SLACK_MS = 0.02
CALIBRATION_REQUESTS = 24
CALIBRATION_POOL = 4


@dataclass
class Calibration:
    """The residual (parent's wall clock minus the child's figures) over trusted requests of busy stand-in
    calls, made before the submission is imported: its growth per call and its fixed part per request."""

    slope_ms: float
    intercept_ms: float
    tail_ms: float
    n: int



def _residual_fit(ks: list[int], walls_ms: list[float], sums_ms: list[float]) -> tuple[float, float, float, float]:
    """Theil-Sen fit (99% interval) of the residual, wall time - the request's figures, over k: slope,
    intercept, and the interval's low and high slope."""
    residual = [w - f for w, f in zip(walls_ms, sums_ms)]
    fit = theilslopes(residual, ks, alpha=0.99)
    return float(fit[0]), float(fit[1]), float(fit[2]), float(fit[3])


def _ci_allowed(per_call: float, on_gpu: bool) -> float:
    return (RESIDUAL_CI_MS + RESIDUAL_CI_REL * per_call) if on_gpu else (RESIDUAL_CI_MS_CPU
                                                                         + RESIDUAL_CI_REL_CPU * per_call)


def residual_ci_ok(ks: list[int], walls_ms: list[float], sums_ms: list[float], on_gpu: bool) -> bool:
    """Whether the requests so far pin the residual's growth per call down well enough to judge the figures;
    when not, the loop keeps timing (up to its extension) instead of refusing an honest kernel for want of
    samples (measured on an H100: a 0.21 ms histogram, whose 512 MiB fresh inputs make requests slow, reached
    a 0.040 ms interval in a 1 s budget against 0.037 allowed)."""
    if len(set(ks)) < 2:
        return False
    _, _, low, high = _residual_fit(ks, walls_ms, sums_ms)
    return (high - low) / 2 <= _ci_allowed(float(sum(sums_ms) / sum(ks)), on_gpu)


def clock_verdict(ks: list[int], walls_ms: list[float], sums_ms: list[float], cal: Calibration,
                  on_gpu: bool) -> tuple[dict[str, float], str | None]:
    """The parent's wall clock against the child's figures over timed requests of k calls each.

    The residual (wall - the request's figures) is fitted over k (Theil-Sen, 99% interval). Its growth per call,
    less the trusted gate's, may be at most RESIDUAL_SLOPE_MS + RESIDUAL_SLOPE_REL of the figure + its interval: more means work each
    call did outside its marks, or a forged figure; the interval itself may be at most RESIDUAL_CI_MS +
    RESIDUAL_CI_REL of the figure. Its fixed part may exceed the trusted calibration's by INTERCEPT_MS + the
    interval over the mean k: more means work done once per request outside the marks, e.g. a child that pads
    short requests to flatten the growth. Returns the figures and None, or the figures and a one-line reason."""
    if len(set(ks)) < 2:
        return {}, "the timed requests all had the same size, so the wall clock cannot be checked"
    slope, intercept, low, high = _residual_fit(ks, walls_ms, sums_ms)
    # The trusted gate before a request grows by GATE_NS_PER_CALL per call (timers.py): not the child's doing.
    gate_ms = GATE_NS_PER_CALL / 1e6 if on_gpu else 0.0
    slope -= gate_ms
    per_call = float(sum(sums_ms) / sum(ks))
    half = (high - low) / 2
    if on_gpu:
        abs_ms, rel, fixed = RESIDUAL_SLOPE_MS, RESIDUAL_SLOPE_REL, INTERCEPT_MS
    else:
        abs_ms, rel, fixed = RESIDUAL_SLOPE_MS_CPU, RESIDUAL_SLOPE_REL_CPU, INTERCEPT_MS_CPU
    ci_allowed = _ci_allowed(per_call, on_gpu)
    slope_allowed = abs_ms + rel * per_call + half
    intercept_allowed = fixed + half * float(np.mean(ks))
    clocks = {"figure_per_call_ms": per_call, "residual_slope_ms": slope, "gate_slope_ms": gate_ms,
              "residual_slope_ci99_ms": half,
              "residual_slope_ci99_allowed_ms": ci_allowed, "slope_allowed_ms": slope_allowed,
              "calibration_slope_ms": cal.slope_ms, "residual_intercept_ms": intercept,
              "calibration_intercept_ms": cal.intercept_ms, "intercept_excess_ms": intercept - cal.intercept_ms,
              "intercept_allowed_ms": intercept_allowed, "calibration_requests": cal.n}
    head = "the child's clock and the parent's wall clock disagree:"
    if slope > slope_allowed:
        return clocks, (f"{head} each call adds {slope + per_call:.4g} ms of wall time but its figure says "
                        f"{per_call:.4g} ms (at most {slope_allowed:.3f} ms more allowed): work outside the measured "
                        f"interval")
    if half > ci_allowed:
        return clocks, (f"the parent's wall clock varies too much between requests (99% interval of the time "
                        f"between calls +-{half:.3f} ms, at most {ci_allowed:.3f} ms) to vouch for the child's figures")
    if intercept - cal.intercept_ms > intercept_allowed:
        return clocks, (f"{head} each request costs {intercept - cal.intercept_ms:.3f} ms more wall time than a "
                        f"trusted one beyond its calls' figures (allowed {intercept_allowed:.3f} ms): work outside "
                        f"the measured interval")
    return clocks, None
