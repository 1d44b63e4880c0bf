"""GPU timing: CUDA events around each repetition, L2 flushed between repetitions, a standard-error stop rule,
and interleaved A/B comparison with a 95% confidence interval on the speedup.

The statistics are pure numpy functions on lists of samples (tested on the CPU); only the runners need CUDA.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

import numpy as np
from scipy.stats import t as student_t

from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.harness.correctness import poison_
from swizzlelab.harness.clock_sampler import ClockSampler, sampler_for, wait_for_first_sample
from swizzlelab.harness.loop import LoopState, run_loop, warm_up
from swizzlelab.runtime import device

NO_GPU_MESSAGE = "benchmark needs a CUDA GPU; run --mode test on the CPU"
# Two-sided 95% normal quantile; the sample counts the stop rule reaches make t and normal agree to <1%.
Z_95 = 1.959963984540054
DEFAULT_REL_SEM = 1e-3
CI_METHOD = "delta method on the ratio of means of paired (interleaved) samples, 95% Student-t interval (n-1 df)"


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (the half-width factor of a 95% CI)."""
    if df < 1:
        raise UserError("a t interval needs at least two samples")
    return float(student_t.ppf(0.975, df))


@dataclass
class Timing:
    """Summary of repeated timed runs of one function; all times in milliseconds, measured with CUDA events."""

    mean_ms: float
    std_ms: float
    best_ms: float
    worst_ms: float
    n: int
    sem_ms: float
    stopped_by: str  # "sem" (target reached), "budget" (time ran out) or "max_reps"
    rel_sem_target: float = DEFAULT_REL_SEM
    device: str = ""
    check_after: str = ""  # verdict of the output check after timing ("" when none was asked for)
    samples_ms: list[float] = field(default_factory=list)
    gpu_clock: dict[str, Any] | None = None  # SM clock / power while timed (harness.clock_sampler), when sampled

    @property
    def rel_sem(self) -> float:
        return self.sem_ms / self.mean_ms if self.mean_ms > 0 else math.inf

    @property
    def label(self) -> str:
        return f"measured ({self.device})" if self.device else "measured"

    def to_dict(self, with_samples: bool = True) -> dict[str, Any]:
        out = asdict(self)
        out["rel_sem"] = self.rel_sem
        out["label"] = self.label
        if not with_samples:
            out.pop("samples_ms")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Timing":
        """The inverse of `to_dict` (derived keys such as rel_sem and label are recomputed, not read)."""
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})


@dataclass
class Comparison:
    """Interleaved A/B timing: speedup = mean_a / mean_b (>1 means B is faster) with its 95% CI."""

    a: Timing
    b: Timing
    speedup: float
    ci_low: float
    ci_high: float
    method: str = CI_METHOD

    @property
    def is_improvement(self) -> bool:
        """B is faster than A with 95% confidence: the whole interval lies above 1.0."""
        return self.ci_low > 1.0

    @property
    def is_regression(self) -> bool:
        return self.ci_high < 1.0

    def to_dict(self, with_samples: bool = True) -> dict[str, Any]:
        return {
            "a": self.a.to_dict(with_samples),
            "b": self.b.to_dict(with_samples),
            "speedup": self.speedup,
            "ci95": [self.ci_low, self.ci_high],
            "method": self.method,
            "is_improvement": self.is_improvement,
            "is_regression": self.is_regression,
        }


# ---------------------------------------------------------------- statistics (pure, CPU-testable)


def sem_of(samples: np.ndarray) -> float:
    """Standard error of the mean (sample std with ddof=1); inf below two samples."""
    n = len(samples)
    return float(np.std(samples, ddof=1) / math.sqrt(n)) if n >= 2 else math.inf


def sem_target_reached(samples: np.ndarray, rel_sem_target: float, min_reps: int) -> bool:
    """The stop rule: at least `min_reps` samples and sem/mean below `rel_sem_target`."""
    if len(samples) < max(min_reps, 2):
        return False
    mean = float(np.mean(samples))
    return mean > 0 and sem_of(samples) / mean < rel_sem_target


def summarize(
    samples_ms: np.ndarray | list[float],
    stopped_by: str,
    rel_sem_target: float = DEFAULT_REL_SEM,
    device: str = "",
) -> Timing:
    """A Timing from raw per-repetition samples."""
    samples = np.asarray(samples_ms, dtype=np.float64)
    if samples.size == 0:
        raise UserError("no timing samples were collected; raise the time budget")
    return Timing(
        mean_ms=float(samples.mean()),
        std_ms=float(samples.std(ddof=1)) if samples.size > 1 else 0.0,
        best_ms=float(samples.min()),
        worst_ms=float(samples.max()),
        n=int(samples.size),
        sem_ms=sem_of(samples) if samples.size > 1 else math.inf,
        stopped_by=stopped_by,
        rel_sem_target=rel_sem_target,
        device=device,
        samples_ms=[float(x) for x in samples],
    )


def ratio_ci(a_ms: np.ndarray, b_ms: np.ndarray, confidence_z: float | None = None) -> tuple[float, float, float]:
    """Speedup mean(a)/mean(b) and its CI by the delta method on paired samples (a_i, b_i timed back to back).

    Var(R) ~= R^2 * (s_a^2/(n m_a^2) + s_b^2/(n m_b^2) - 2 s_ab/(n m_a m_b)); the covariance term credits the
    pairing, which cancels drifts (clocks, temperature) that hit A and B alike. The half-width uses Student's
    t with n-1 degrees of freedom (the stop rule may end at 10 pairs, where 1.96 would be 13% too narrow)
    unless `confidence_z` is given.
    """
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    n = min(a.size, b.size)
    if n < 2:
        raise UserError("a comparison needs at least two paired samples; raise the time budget")
    a, b = a[:n], b[:n]
    mean_a, mean_b = float(a.mean()), float(b.mean())
    ratio = mean_a / mean_b
    cov = np.cov(a, b, ddof=1)
    rel_var = (cov[0, 0] / mean_a**2 + cov[1, 1] / mean_b**2 - 2 * cov[0, 1] / (mean_a * mean_b)) / n
    scale = t_quantile_975(n - 1) if confidence_z is None else confidence_z
    half = scale * ratio * math.sqrt(max(rel_var, 0.0))
    return ratio, ratio - half, ratio + half


def ratio_ci_unpaired(a_ms: np.ndarray, b_ms: np.ndarray) -> tuple[float, float, float]:
    """Speedup mean(a)/mean(b) and its 95% CI by the delta method for independent samples (A and B timed in
    different processes, e.g. a library in the trusted parent and a submission in the isolated child):
    Var(R) ~= R^2 * (s_a^2/(n_a m_a^2) + s_b^2/(n_b m_b^2)); Student's t with the smaller n - 1 degrees of freedom.
    Drifts between the two runs are not cancelled as pairing cancels them."""
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    if a.size < 2 or b.size < 2:
        raise UserError("a comparison needs at least two samples on each side; raise the time budget")
    mean_a, mean_b = float(a.mean()), float(b.mean())
    ratio = mean_a / mean_b
    rel_var = a.var(ddof=1) / (a.size * mean_a**2) + b.var(ddof=1) / (b.size * mean_b**2)
    half = t_quantile_975(min(a.size, b.size) - 1) * ratio * math.sqrt(max(rel_var, 0.0))
    return ratio, ratio - half, ratio + half


def compare_unpaired(a: Timing, b: Timing, method: str) -> Comparison | None:
    """A vs B timed apart (different loops or processes): speedup mean_a/mean_b with the unpaired 95% CI; None
    when either side has fewer than two samples."""
    if a.n < 2 or b.n < 2 or len(a.samples_ms) < 2 or len(b.samples_ms) < 2:
        return None
    speedup, low, high = ratio_ci_unpaired(np.asarray(a.samples_ms), np.asarray(b.samples_ms))
    return Comparison(a=a, b=b, speedup=speedup, ci_low=low, ci_high=high, method=method)


def bootstrap_ratio_ci(
    a_ms: np.ndarray, b_ms: np.ndarray, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Paired percentile-bootstrap CI of mean(a)/mean(b): a cross-check of `ratio_ci` without normality."""
    a = np.asarray(a_ms, dtype=np.float64)
    b = np.asarray(b_ms, dtype=np.float64)
    n = min(a.size, b.size)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(n_boot, n))
    ratios = a[:n][picks].mean(axis=1) / b[:n][picks].mean(axis=1)
    low, high = np.quantile(ratios, [0.025, 0.975])
    return float(a[:n].mean() / b[:n].mean()), float(low), float(high)


def next_batch_size(n_done: int, elapsed_s: float, budget_s: float, min_reps: int, max_reps: int) -> int:
    """How many repetitions to run before the next stop-rule check: about half of what is done so far, never
    more than the remaining budget allows at the observed wall time per repetition."""
    remaining_reps = max_reps - n_done
    if remaining_reps <= 0:
        return 0
    if n_done == 0:
        return min(max(min_reps, 1), remaining_reps)
    per_rep_s = max(elapsed_s / n_done, 1e-9)
    fitting = int(max(budget_s - elapsed_s, 0.0) / per_rep_s)
    return max(1, min(max(n_done // 2, 1), remaining_reps, max(fitting, 1)))


@dataclass
class RepetitionPlan:
    """time_fn's and compare_interleaved's rule for the one loop (harness.loop): batches of about half the
    repetitions so far, within the budget; stop once every stream's sem/mean is below `rel_sem_target`
    ("sem"), at `max_reps`, or once the budget is spent after `min_reps` ("budget")."""

    budget_s: float
    min_reps: int = 10
    max_reps: int = 100_000
    rel_sem_target: float = DEFAULT_REL_SEM

    def stop(self, state: LoopState) -> str | None:
        n = len(state.samples)
        if all(sem_target_reached(np.asarray(s), self.rel_sem_target, self.min_reps) for s in state.streams):
            return "sem"
        if n >= self.max_reps:
            return "max_reps"
        if n >= self.min_reps and state.elapsed_s >= self.budget_s:
            return "budget"
        return None

    def next_size(self, state: LoopState) -> int:
        n = len(state.samples)
        batch = next_batch_size(n, state.elapsed_s, self.budget_s, self.min_reps, self.max_reps)
        return max(batch, self.min_reps - n) if n < self.min_reps else batch


def collect_samples(
    run_batch: Callable[[int], list[float]],
    budget_s: float,
    min_reps: int = 10,
    max_reps: int = 100_000,
    rel_sem_target: float = DEFAULT_REL_SEM,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[np.ndarray, str]:
    """Run batches until the sem stop rule holds, the budget is spent or max_reps is reached.

    `run_batch(k)` runs k repetitions and returns their times in ms. At least `min_reps` are always collected.
    """
    plan = RepetitionPlan(budget_s, min_reps, max_reps, rel_sem_target)
    state = run_loop(lambda k: (run_batch(k),), plan, 1, clock)
    return np.asarray(state.samples), state.stopped_by


def collect_pairs(
    run_pairs: Callable[[int], tuple[list[float], list[float]]],
    budget_s: float,
    min_reps: int = 10,
    max_reps: int = 100_000,
    rel_sem_target: float = DEFAULT_REL_SEM,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Like `collect_samples` for interleaved pairs: stops when both A and B reach the sem target."""
    state = run_loop(run_pairs, RepetitionPlan(budget_s, min_reps, max_reps, rel_sem_target), 2, clock)
    return np.asarray(state.streams[0]), np.asarray(state.streams[1]), state.stopped_by


def compare_samples(
    a_ms: np.ndarray, b_ms: np.ndarray, stopped_by: str, rel_sem_target: float = DEFAULT_REL_SEM, device: str = ""
) -> Comparison:
    """A Comparison from paired samples."""
    ratio, low, high = ratio_ci(a_ms, b_ms)
    return Comparison(
        a=summarize(a_ms, stopped_by, rel_sem_target, device),
        b=summarize(b_ms, stopped_by, rel_sem_target, device),
        speedup=ratio,
        ci_low=low,
        ci_high=high,
    )


def geometric_mean(values: list[float]) -> float:
    """Geometric mean of positive values (the ranking score over benchmark means)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0 or np.any(arr <= 0):
        raise UserError("the ranking score needs positive timings for every benchmark case")
    return float(np.exp(np.log(arr).mean()))


# ---------------------------------------------------------------- CUDA runners


def require_cuda() -> Any:
    """torch, after checking that kernels run on a CUDA GPU (not the interpreter); NoGpuError otherwise."""
    if device() != "cuda":
        raise NoGpuError(NO_GPU_MESSAGE)
    import torch

    return torch


class L2Flusher:
    """Writes a buffer of twice the L2 size so no line of the previous repetition is left in L2."""

    def __init__(self, torch: Any) -> None:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0) or (128 << 20)
        self.n_bytes = 2 * l2_bytes
        self.buffer = torch.empty(self.n_bytes // 4, dtype=torch.int32, device="cuda")
        self.counter = 0

    def flush(self) -> None:
        # A changing value keeps the writes from being elided and makes every line dirty in L2.
        self.counter = (self.counter + 1) & 0x7FFFFFFF
        self.buffer.fill_(self.counter)


def _poison_out(data: Any) -> None:
    if isinstance(data, dict) and "out" in data:
        poison_(data["out"])


# GPU cycles to spin after the flush (~50-100 us at H100 clocks): the GPU is still busy when the start event
# is recorded, so the host has enqueued the kernel by then and Python launch overhead stays out of the timing.
LAUNCH_HIDING_CYCLES = 150_000
MAX_WARMUP_CALLS = 1000


class _Runner:
    """Times `fn(data)` with CUDA events, one event pair per repetition, flush + poison before each."""

    def __init__(
        self, torch: Any, fn: Callable[[Any], Any], data: Any, flusher: L2Flusher, poison: bool,
        hide_launch_overhead: bool = True,
    ):
        self.torch, self.fn, self.data, self.flusher, self.poison = torch, fn, data, flusher, poison
        self.spin = hide_launch_overhead and hasattr(torch.cuda, "_sleep")
        self.last_output: Any = None

    def prepare(self) -> None:
        if self.poison:
            _poison_out(self.data)
        self.flusher.flush()
        if self.spin:
            self.torch.cuda._sleep(LAUNCH_HIDING_CYCLES)

    def timed_call(self) -> tuple[Any, Any]:
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        start.record()
        self.last_output = self.fn(self.data)
        end.record()
        return start, end

    def run_batch(self, k: int) -> list[float]:
        events = []
        for _ in range(k):
            self.prepare()
            events.append(self.timed_call())
        self.torch.cuda.synchronize()
        return [float(s.elapsed_time(e)) for s, e in events]


def _warm_up(runner: _Runner, warmup_s: float, min_calls: int = 3) -> None:
    """First call compiles / autotunes; then more calls until `warmup_s` of wall time or `min_calls`."""
    runner.prepare()
    runner.fn(runner.data)
    runner.torch.cuda.synchronize()
    warm_up(lambda: runner.run_batch(1), warmup_s, min_calls, MAX_WARMUP_CALLS)


def _device_name(torch: Any) -> str:
    return str(torch.cuda.get_device_name(torch.cuda.current_device()))


@dataclass(frozen=True)
class TimingOptions:
    """How time_fn and compare_interleaved repeat a call: the stop rule (`min_reps`, `max_reps`,
    `rel_sem_target`), the warm-up's wall time, poisoning data["out"] before each repetition, hiding the host's
    launch cost behind a GPU spin, and sampling the SM clock and power while timed (`Timing.gpu_clock`)."""

    min_reps: int = 10
    max_reps: int = 100_000
    rel_sem_target: float = DEFAULT_REL_SEM
    warmup_s: float = 0.2
    poison: bool = True
    hide_launch_overhead: bool = True
    sample_clock: bool = False

    def plan(self, budget_s: float) -> RepetitionPlan:
        return RepetitionPlan(budget_s, self.min_reps, self.max_reps, self.rel_sem_target)


DEFAULT_OPTIONS = TimingOptions()


def time_fn(
    fn: Callable[[Any], Any],
    data: Any,
    budget_s: float = 3.0,
    *,
    check: Callable[[Any], Any] | None = None,
    options: TimingOptions = DEFAULT_OPTIONS,
) -> Timing:
    """Time `fn(data)`: warm-up, then repetitions (each after an L2 flush and, when `options.poison`, poisoning
    data["out"]) until sem/mean < `options.rel_sem_target` or `budget_s` is spent.

    `check(output)` (e.g. the task's check) runs on the last timed output; its verdict is kept in
    `Timing.check_after` and a failure raises UserError, so a kernel that breaks under repetition is caught.
    With `options.hide_launch_overhead`, a short GPU spin before each start event keeps host-side launch cost
    (Python, Triton's launcher) out of the measured interval: the times are GPU execution times.
    """
    torch = require_cuda()
    runner = _Runner(torch, fn, data, L2Flusher(torch), options.poison, options.hide_launch_overhead)
    _warm_up(runner, options.warmup_s)
    with (sampler_for(torch) if options.sample_clock else ClockSampler(None)) as clock:
        wait_for_first_sample(clock)
        state = run_loop(lambda k: (runner.run_batch(k),), options.plan(budget_s))
    timing = summarize(np.asarray(state.samples), state.stopped_by, options.rel_sem_target, _device_name(torch))
    timing.gpu_clock = clock.summary()
    if check is not None:
        timing.check_after = _check_verdict(check, runner.last_output)
    return timing


def compare_interleaved(
    fn_a: Callable[[Any], Any],
    fn_b: Callable[[Any], Any],
    data_a: Any,
    data_b: Any | None = None,
    budget_s: float = 6.0,
    *,
    check_a: Callable[[Any], Any] | None = None,
    check_b: Callable[[Any], Any] | None = None,
    options: TimingOptions = DEFAULT_OPTIONS,
) -> Comparison:
    """Time A and B interleaved (A B A B ..., L2 flushed before each) and return speedup mean_a/mean_b with a
    95% CI (delta method on the paired samples); `is_improvement` only when the CI lies above 1.0. The warm-up's
    `options.warmup_s` is split between A and B."""
    torch = require_cuda()
    flusher = L2Flusher(torch)
    runner_a = _Runner(torch, fn_a, data_a, flusher, options.poison, options.hide_launch_overhead)
    runner_b = _Runner(torch, fn_b, data_b if data_b is not None else data_a, flusher, options.poison,
                       options.hide_launch_overhead)
    _warm_up(runner_a, options.warmup_s / 2)
    _warm_up(runner_b, options.warmup_s / 2)

    def run_pairs(k: int) -> tuple[list[float], list[float]]:
        events_a, events_b = [], []
        for _ in range(k):
            runner_a.prepare()
            events_a.append(runner_a.timed_call())
            runner_b.prepare()
            events_b.append(runner_b.timed_call())
        torch.cuda.synchronize()
        return ([float(s.elapsed_time(e)) for s, e in events_a], [float(s.elapsed_time(e)) for s, e in events_b])

    with (sampler_for(torch) if options.sample_clock else ClockSampler(None)) as clock:
        wait_for_first_sample(clock)
        state = run_loop(run_pairs, options.plan(budget_s), 2)
    a, b = np.asarray(state.streams[0]), np.asarray(state.streams[1])
    comparison = compare_samples(a, b, state.stopped_by, options.rel_sem_target, _device_name(torch))
    comparison.a.gpu_clock = comparison.b.gpu_clock = clock.summary()
    if check_a is not None:
        comparison.a.check_after = _check_verdict(check_a, runner_a.last_output)
    if check_b is not None:
        comparison.b.check_after = _check_verdict(check_b, runner_b.last_output)
    return comparison


def _check_verdict(check: Callable[[Any], Any], output: Any) -> str:
    result = check(output)
    ok = bool(getattr(result, "ok", result))
    message = str(getattr(result, "message", "passed" if ok else "failed"))
    if not ok:
        raise UserError(f"output wrong after timing (the kernel breaks when repeated): {message}")
    return message
