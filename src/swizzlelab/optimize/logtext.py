"""The per-iteration text log in the shape engineers know (shared/formats/iteration-log-example.txt), with the
prediction and its model, the proof of bijection, the confidence interval and the device name added.
"""

from __future__ import annotations

import json
from typing import Any

from swizzlelab.optimize.reasons import UNCHANGED_PP, ci_text, pct, verdict
from swizzlelab.optimize.records import EVALUATED, Attempt
from swizzlelab.fmt import fmt_bytes


def _ms(value: float) -> str:
    return f"{value:.3f}ms" if value < 10 else f"{value:.2f}ms"


def locality_line(attempt: Attempt, baseline: Attempt) -> str:
    """'L2 Cache Locality Improvement: ...' from ncu when measured, else from the prediction."""
    ncu = (attempt.measurement or {}).get("ncu") or {}
    base_ncu = (baseline.measurement or {}).get("ncu") or {}
    pred, base_pred = attempt.prediction or {}, baseline.prediction or {}
    predicted = ""
    if pred and base_pred:
        predicted = (
            f"predicted {pct(base_pred['l2_hit_rate'])} -> {pct(pred['l2_hit_rate'])}, DRAM read "
            f"{fmt_bytes(base_pred['dram_read_bytes'])} -> {fmt_bytes(pred['dram_read_bytes'])} ({pred['kind']})"
        )
    if ncu.get("l2_hit_rate_pct") is not None and base_ncu.get("l2_hit_rate_pct") is not None:
        old, new = base_ncu["l2_hit_rate_pct"], ncu["l2_hit_rate_pct"]
        device = attempt.measurement["device"]
        if abs(new - old) < UNCHANGED_PP:
            head, word = f"L2 cache hit rate unchanged ({new - old:+.2f} percentage points)", "went"
        elif new > old:
            head, word = f"Successfully improved L2 cache hit rate by {new - old:.2f} percentage points", "increased"
        else:
            head, word = f"L2 cache hit rate did not improve ({new - old:+.2f} percentage points)", "decreased"
        return (
            f"L2 Cache Locality Improvement: {head}. Hit rate {word} from "
            f"{old:.1f}% to {new:.1f}% (higher percentages indicate better cache locality through improved block "
            f"swizzling), DRAM read {fmt_bytes(base_ncu.get('dram_read_bytes') or 0)} -> "
            f"{fmt_bytes(ncu.get('dram_read_bytes') or 0)}, measured ({device}, ncu); {predicted}."
        )
    if not pred or not base_pred:
        return "L2 Cache Locality Improvement: not evaluated (the order was rejected before simulation)."
    diff = 100 * (pred["l2_hit_rate"] - base_pred["l2_hit_rate"])
    word = "increased" if diff > 0 else "decreased" if diff < 0 else "unchanged"
    return (
        f"L2 Cache Locality Improvement: {'Predicted improvement' if diff > 0 else 'No predicted improvement'} of "
        f"{diff:+.2f} percentage points. Hit rate {word} from {pct(base_pred['l2_hit_rate'])} to "
        f"{pct(pred['l2_hit_rate'])} ({pred['kind']}; not measured), DRAM read "
        f"{fmt_bytes(base_pred['dram_read_bytes'])} -> {fmt_bytes(pred['dram_read_bytes'])}."
    )


def performance_line(attempt: Attempt, measured_note: str) -> str:
    """'Performance Gain: Achieved 1.12x speedup with execution time reduced from ...' with the CI and device."""
    measurement = attempt.measurement or {}
    comparison = measurement.get("comparison")
    correctness = measurement.get("correctness") or {}
    if correctness and not correctness.get("passed", True):
        return f"Performance Gain: none: the output was wrong on {measurement['device']} ({correctness['message']})."
    if not comparison:
        pred = attempt.prediction or {}
        extra = ""
        if pred.get("predicted_dram_ms") is not None:
            extra = f"; predicted DRAM time {pred['predicted_dram_ms']:.3f} ms at peak bandwidth ({pred['kind']})"
        return f"Performance Gain: not measured: {measured_note}{extra}."
    a_ms, b_ms = comparison["baseline_ms"], comparison["candidate_ms"]
    speedup = comparison["speedup"]
    change = (1 - b_ms / a_ms) * 100
    direction = "reduced" if b_ms < a_ms else "increased"
    cached = ", from the measurement cache" if measurement.get("cached") else ""
    return (
        f"Performance Gain: Achieved {speedup:.2f}x speedup with execution time {direction} from {_ms(a_ms)} to "
        f"{_ms(b_ms)} ({abs(change):.1f}% {'faster' if change > 0 else 'slower'}; 95% CI {ci_text(comparison)}, "
        f"{verdict(comparison)}; interleaved A B A B, {comparison['n_pairs']} pairs, measured "
        f"({measurement['device']}){cached})."
    )


def render_iteration(attempt: Attempt, baseline: Attempt, measured_note: str) -> str:
    """One iteration block of log.txt."""
    proof = attempt.proof or {}
    out = [
        f"Iteration {attempt.iteration}:",
        f"Proposer: {attempt.proposer} ({attempt.label})",
        "Code optimization reasoning:",
        attempt.reasoning.strip() or "(none given)",
        "",
        "Reason why old was slow:",
        json.dumps(attempt.reasons_old, indent=4, ensure_ascii=False),
        "",
        "Summary of optimization:",
        attempt.summary.strip() or "(none given)",
        "",
        "Reason why new should be better:",
        attempt.why_better.strip() or attempt.hypothesis.strip() or "(none given)",
        "",
        "Swizzling formula:",
        attempt.formula.strip() or "(no formula)",
        "",
    ]
    if proof:
        out.append(
            f"Proof of bijection: {proof.get('message', '')} (tiles {proof.get('n_tiles')}, missing "
            f"{proof.get('n_missing')}, duplicated {proof.get('n_duplicated')}, out of range "
            f"{proof.get('n_out_of_range')}; permutation id {attempt.permutation_id})"
        )
    out.append(f"Outcome: {attempt.status}: {attempt.message}")
    pred = attempt.prediction
    if pred:
        out.append(
            f"Prediction ({pred['kind']}, occupancy {pred['occupancy']}): L2 hit rate {pct(pred['l2_hit_rate'])}, "
            f"DRAM read {fmt_bytes(pred['dram_read_bytes'])}, DRAM write {fmt_bytes(pred['dram_write_bytes'])}"
        )
    out += ["", f"--- PROFILING ITERATION {attempt.iteration} ---"]
    if attempt.status == EVALUATED:
        out.append(locality_line(attempt, baseline) + " " + performance_line(attempt, measured_note))
    else:
        out.append(f"Not profiled: {attempt.status} ({attempt.message}).")
    return "\n".join(out) + "\n\n"


def render_header(scenario: Any, baseline: Attempt, notes: list[str]) -> str:
    pred = baseline.prediction or {}
    lines = [
        (
            f"swizzlelab optimize: task {scenario.task.name} ({scenario.sizes_label()}), grid "
            f"{'x'.join(map(str, scenario.grid))}, kernel {scenario.kernel.path} ({scenario.kernel.name})"
        ),
        (
            f"Baseline (the kernel's own order, permutation id {baseline.permutation_id}): predicted hit rate "
            f"{pct(pred.get('l2_hit_rate'))}, DRAM read {fmt_bytes(pred.get('dram_read_bytes', 0))} "
            f"({pred.get('kind', '')})"
        ),
    ]
    timing = (baseline.measurement or {}).get("timing")
    if timing:
        lines.append(
            f"Baseline time {timing['mean_ms']:.4f} ms +- {1.96 * timing['sem_ms']:.4f} (95%), measured "
            f"({baseline.measurement['device']})"
        )
    lines += notes
    return "\n".join(lines) + "\n\n"
