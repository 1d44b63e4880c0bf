"""Evaluation reports in the shape of the public leaderboard's (text) and the same content as JSON, plus what
the leaderboard lacks: task, mode, order and permutation id, device labels, repetitions, sem, baseline rows.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from swizzlelab.fmt import fmt_bytes
from swizzlelab.harness.evaluate import BenchRow, EvalReport, ProfileRow
from swizzlelab.harness.ncu import NAMED_METRICS
from swizzlelab.harness.timing import Timing
from swizzlelab.io import atomic_write_text

HEADLINES = {
    "test": ("Testing successful", "Testing failed"),
    "benchmark": ("Benchmarking successful", "Benchmarking failed"),
    "ranked": ("Leaderboard run successful", "Leaderboard run failed"),
    "profile": ("Profiling successful", "Profiling failed"),
}


def case_line(case: dict[str, Any], seed: int | None = None) -> str:
    """'seed: 1118; seq_len: 8192; head_dim: 128' (the seed first, as the leaderboard prints it)."""
    items = [("seed", case.get("seed") if seed is None else seed)]
    items += [(k, v) for k, v in case.items() if k != "seed"]
    return "; ".join(f"{k}: {v}" for k, v in items)


def fmt_ms(value: float) -> str:
    """A time in ms with four significant digits (enough to see a 0.1% difference on most kernels)."""
    if not math.isfinite(value):
        return "inf"
    return f"{value:.4g}" if value >= 1e-3 else f"{value:.3e}"


def fmt_std(value: float) -> str:
    return f"{value:.2g}" if math.isfinite(value) else "inf"


def fmt_duration_ns(value: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.2f} ns"


def fmt_metric(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ns":
        return fmt_duration_ns(value)
    if unit == "bytes":
        return fmt_bytes(value)
    if unit == "%":
        return f"{value:.2f}%"
    return f"{value:.4g} {unit}"


def timing_lines(timing: Timing, indent: str = "  ") -> list[str]:
    """The leaderboard's two lines (⌚ mean ± std, ⚡ best 🐌 worst) and one line of swizzlelab additions."""
    return [
        f"{indent}⌚ {fmt_ms(timing.mean_ms)} ± {fmt_std(timing.std_ms)} ms",
        f"{indent}⚡ {fmt_ms(timing.best_ms)} ms 🐌 {fmt_ms(timing.worst_ms)} ms",
        f"{indent}{timing.label}: n={timing.n}, sem {fmt_std(timing.sem_ms)} ms "
        f"({100 * timing.rel_sem:.3f}%), stopped by {timing.stopped_by}{_clock_note(timing.gpu_clock)}",
    ]


def _clock_note(clock: dict[str, Any] | None) -> str:
    """The SM clock while timed: a power-bound kernel's time follows it."""
    if not clock:
        return ""
    return (f", SM clock {clock['sm_mhz_mean']:.0f} MHz mean (min {clock['sm_mhz_min']:.0f}), "
            f"{clock['power_w_mean']:.0f} W")


def _order_line(order: dict[str, Any]) -> str:
    parts = [f"order: {order.get('spec', '?')}"]
    if "grid" in order:
        parts.append("grid " + "x".join(str(g) for g in order["grid"]))
    if "permutation_id" in order:
        parts.append(f"permutation {order['permutation_id']}")
    return "  " + ", ".join(parts)


def _bench_section(title: str, rows: list[BenchRow], report: EvalReport) -> list[str]:
    lines = [f"## {title}:"]
    for row in rows:
        lines.append(case_line(row.case, row.seed))
        if row.seed != row.case.get("seed"):
            lines.append(f"  inputs from seed {row.seed} (benchmark seed {row.case.get('seed')} re-derived)")
        if not row.check.passed:
            lines.append(f"  ❌ {row.check.message}")
        if row.error:
            lines.append(f"  ❌ {row.error}")
        if row.candidate is not None:
            lines += timing_lines(row.candidate)
        lines.append(_order_line(row.order))
        if row.baseline_error:
            lines.append(f"  {row.baseline_error}")
        if row.baseline is not None:
            lines.append("  baseline (the task's library implementation):")
            lines += timing_lines(row.baseline, "    ")
        if row.comparison is not None:
            lines.append(_speedup_line("speedup vs baseline", row.comparison))
        for extra in row.extra_baselines:
            if extra.error:
                lines.append(f"  {extra.error}")
                continue
            lines.append(f"  baseline {extra.name} ({extra.description}):")
            if extra.timing is not None:
                lines += timing_lines(extra.timing, "    ")
            if extra.comparison is not None:
                lines.append(_speedup_line(f"speedup vs {extra.name}", extra.comparison))
    return lines


def _speedup_line(title: str, c: Any) -> str:
    verdict = "faster" if c.is_improvement else ("slower" if c.is_regression else "no significant difference")
    return f"  {title}: {c.speedup:.3f}x, 95% CI [{c.ci_low:.3f}, {c.ci_high:.3f}] ({verdict}; {c.method})"


def _profile_section(rows: list[ProfileRow], report: EvalReport) -> list[str]:
    lines = ["## Profiling:"]
    width = max(len(name) for name, _, _, _ in NAMED_METRICS)
    for row in rows:
        lines += ["```", case_line(row.case), "```", ""]
        lines.append(_order_line(row.order))
        lines.append(f"  output check: {'passed' if row.check_passed else 'FAILED'} ({row.check_message})")
        lines.append(f"  {report.system.measured_label()} by Nsight Compute; report file {row.report_path}")
        lines += ["", "NCU Report:"]
        if not row.kernels:
            lines.append("(no kernel was profiled)")
        for kernel in row.kernels:
            lines += [f"Kernel {kernel.launch_index}: {kernel.kernel_name}", "", "```"]
            named = kernel.named()
            for name, _, _, unit in NAMED_METRICS:
                lines.append(f"{name.ljust(width)} : {fmt_metric(named[name], unit)}")
            lines += ["```", ""]
    return lines


def render_text(report: EvalReport) -> str:
    """The leaderboard-shaped text report."""
    good, bad = HEADLINES[report.mode]
    system = report.system
    lines = [f"> {good if report.success else bad}", ""]
    lines += [
        "Running on:",
        f"* GPU: '{system.gpu}'",
        f"* CPU: '{system.cpu}'",
        f"* Runtime: '{system.runtime}'",
        f"* Platform: '{system.platform}'",
        f"* Torch: '{system.torch}'",
        f"* Triton: '{system.triton}'",
        "",
        f"Task: {report.task}",
        f"Mode: {report.mode}",
        f"Kernel: {report.candidate.source}",
        f"Order: {report.candidate.describe_order()}",
    ]
    if report.candidate.formula is not None:
        lines.append("Formula:")
        lines += ["  " + line for line in report.candidate.formula.normalized_source().strip().splitlines()]
    if report.command:
        lines.append(f"Command: {report.command}")
    lines.append("")
    if report.tests:
        n_pass = sum(result.passed for result in report.tests)
        lines.append(f"## Passed {n_pass}/{len(report.tests)} tests:")
        for result in report.tests:
            lines.append(case_line(result.case))
            if not result.passed:
                lines.append(f"  ❌ {result.message}")
        if report.tests and report.tests[0].order:
            lines.append(_order_line(report.tests[0].order) + " (first test case)")
        if system.runtime != "CUDA":
            lines.append("  (run on the CPU under the Triton interpreter: correctness only, no timing)")
        lines.append("")
    if report.benchmarks:
        lines += _bench_section("Benchmarks", report.benchmarks, report) + [""]
    if report.ranked:
        lines += _bench_section("Ranked Benchmark", report.ranked, report)
        if report.score_ms is not None:
            lines.append(
                f"Ranking score (geometric mean of the benchmark means): {fmt_ms(report.score_ms)} ms, "
                f"{system.measured_label()}"
            )
        lines.append("")
    if report.profiles:
        lines += _profile_section(report.profiles, report)
    return "\n".join(lines).rstrip() + "\n"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def report_dict(report: EvalReport) -> dict[str, Any]:
    """The same content as the text report, as a JSON-ready dict."""
    candidate = report.candidate
    return _json_safe({
        "format": "swizzlelab.eval/1",
        "success": report.success,
        "task": report.task,
        "mode": report.mode,
        "command": report.command,
        "label": report.system.measured_label(),
        "system": report.system.to_dict(),
        "kernel": candidate.source,
        "order": {
            "spec": candidate.describe_order(),
            "formula": candidate.formula.normalized_source() if candidate.formula is not None else None,
        },
        "budget_s_per_case": report.budget_s,
        "tests": {
            "passed": sum(r.passed for r in report.tests),
            "total": len(report.tests),
            "cases": [r.to_dict() for r in report.tests],
        },
        "benchmarks": [row.to_dict() for row in report.benchmarks],
        "ranked": {
            "cases": [row.to_dict() for row in report.ranked],
            "score_ms": report.score_ms,
            "score": "geometric mean of the candidate's mean times over the benchmark cases",
        },
        "profiles": [row.to_dict() for row in report.profiles],
    })


def write_reports(report: EvalReport, out_dir: str | Path) -> tuple[Path, Path]:
    """Write `<task>-<mode>.txt` and `<task>-<mode>.json` atomically into `out_dir`; returns both paths."""
    folder = Path(out_dir)
    stem = f"{report.task}-{report.mode}"
    text_path = atomic_write_text(folder / f"{stem}.txt", render_text(report))
    json_path = atomic_write_text(folder / f"{stem}.json", json.dumps(report_dict(report), indent=2) + "\n")
    return text_path, json_path
