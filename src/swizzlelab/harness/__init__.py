"""The evaluation harness: correctness with poisoned outputs, CUDA-event timing with L2 flushes and a sem stop
rule, interleaved A/B comparison, Nsight Compute profiling, system info and leaderboard-shaped reports.
"""

from swizzlelab.harness.correctness import (
    CaseResult,
    RunCheck,
    check_correctness,
    count_poisoned,
    derive_seed,
    poison_,
    poison_value,
)
from swizzlelab.harness.evaluate import EvalReport, make_candidate, profile, run_mode
from swizzlelab.harness.ncu import KernelMetrics, NAMED_METRICS, parse_ncu_csv, run_ncu
from swizzlelab.harness.sysinfo import SystemInfo, system_info
from swizzlelab.harness.timing import (
    Comparison,
    Timing,
    TimingOptions,
    compare_interleaved,
    geometric_mean,
    ratio_ci,
    summarize,
    time_fn,
)

__all__ = [
    "CaseResult",
    "Comparison",
    "EvalReport",
    "KernelMetrics",
    "NAMED_METRICS",
    "RunCheck",
    "SystemInfo",
    "Timing",
    "TimingOptions",
    "check_correctness",
    "compare_interleaved",
    "count_poisoned",
    "derive_seed",
    "geometric_mean",
    "make_candidate",
    "parse_ncu_csv",
    "poison_",
    "poison_value",
    "profile",
    "ratio_ci",
    "run_mode",
    "run_ncu",
    "summarize",
    "system_info",
    "time_fn",
]
