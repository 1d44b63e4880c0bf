"""The per-iteration text log in the shape engineers know (docs/formats/iteration-log-example.txt), with the
prediction and its model, the proof of bijection, the confidence interval and the device name added.
"""

from __future__ import annotations

from typing import Any

from swizzlelab.fmt import fmt_bytes, grid_text, pct
from swizzlelab.optimize.reasons import UNCHANGED_PP, hit_change
from swizzlelab.optimize.records import EVALUATED, NO_FORMULA, UNPARSABLE, Attempt


def _ms(value: float) -> str:
    return f"{value:.3f}ms" if value < 10 else f"{value:.2f}ms"


def locality_line(attempt: Attempt, baseline: Attempt) -> str:
    """'L2 Cache Locality Improvement: ...' from ncu when measured, else from the prediction."""
    ncu, base_ncu = attempt.ncu, baseline.ncu
    pred, base_pred = attempt.prediction, baseline.prediction
    predicted = ""
    if pred is not None and base_pred is not None:
        predicted = (
            f"predicted hit rate {hit_change(base_pred.l2_hit_rate, pred.l2_hit_rate)}, DRAM read "
            f"{fmt_bytes(base_pred.dram_read_bytes)} -> {fmt_bytes(pred.dram_read_bytes)} (model {pred.model})"
        )
    if (ncu is not None and base_ncu is not None and ncu.l2_hit_rate_pct is not None
            and base_ncu.l2_hit_rate_pct is not None and attempt.measurement is not None):
        old, new = base_ncu.l2_hit_rate_pct, ncu.l2_hit_rate_pct
        if abs(new - old) < UNCHANGED_PP:
            head = f"L2 cache hit rate unchanged at {new:.1f}% ({new - old:+.2f} percentage points)"
        elif new > old:
            head = f"Successfully improved L2 cache hit rate by {new - old:.2f} percentage points, from {old:.1f}% to {new:.1f}%"
        else:
            head = f"L2 cache hit rate fell by {old - new:.2f} percentage points, from {old:.1f}% to {new:.1f}%"
        return (
            f"L2 Cache Locality Improvement: {head} (higher percentages indicate better cache locality through "
            f"improved block swizzling); DRAM read {fmt_bytes(base_ncu.dram_read_bytes or 0)} -> "
            f"{fmt_bytes(ncu.dram_read_bytes or 0)}, measured ({attempt.measurement.device}, ncu); {predicted}."
        )
    if pred is None or base_pred is None:
        return "L2 Cache Locality Improvement: not evaluated (the order was rejected before simulation)."
    diff = 100 * (pred.l2_hit_rate - base_pred.l2_hit_rate)
    if abs(diff) < UNCHANGED_PP:
        head = f"no predicted change: the hit rate {hit_change(base_pred.l2_hit_rate, pred.l2_hit_rate)}"
    elif diff > 0:
        head = f"predicted improvement of {diff:.2f} percentage points: the hit rate {hit_change(base_pred.l2_hit_rate, pred.l2_hit_rate)}"
    else:
        head = f"predicted loss of {-diff:.2f} percentage points: the hit rate {hit_change(base_pred.l2_hit_rate, pred.l2_hit_rate)}"
    return (
        f"L2 Cache Locality Improvement: {head[0].upper() + head[1:]} (model {pred.model}; not measured), DRAM read "
        f"{fmt_bytes(base_pred.dram_read_bytes)} -> {fmt_bytes(pred.dram_read_bytes)}."
    )


def performance_line(attempt: Attempt, measured_note: str) -> str:
    """'Performance Gain: Achieved 1.12x speedup with execution time reduced from ...' with the CI and device."""
    measurement = attempt.measurement
    if measurement is not None and measurement.passed is False:
        return f"Performance Gain: none: the output was wrong on {measurement.device} ({measurement.check_message})."
    comparison = attempt.timed
    if comparison is None:
        pred = attempt.prediction
        extra = ""
        if pred is not None and pred.predicted_dram_ms is not None:
            extra = f"; predicted DRAM time {pred.predicted_dram_ms:.3f} ms at peak bandwidth (model {pred.model})"
        return f"Performance Gain: not measured: {measured_note}{extra}."
    a_ms, b_ms = comparison.baseline_ms, comparison.candidate_ms
    change = (1 - b_ms / a_ms) * 100
    direction = "reduced" if b_ms < a_ms else "increased"
    cached = ", from the measurement cache" if measurement.cached else ""
    how = (f"interleaved A B A B, {comparison.n_pairs} pairs" if comparison.stage == "pair" else
           f"raced against the kernel's order with other orders, {comparison.n_pairs} rounds; not re-measured alone, "
           "so not reported as a gain")
    left = f"; {comparison.note}" if comparison.note else ""
    return (
        f"Performance Gain: Achieved {comparison.speedup:.2f}x speedup with execution time {direction} from "
        f"{_ms(a_ms)} to {_ms(b_ms)} ({abs(change):.1f}% {'faster' if change > 0 else 'slower'}; 95% CI "
        f"{comparison.ci_text()}, {comparison.verdict()}; {how}{left}, measured ({measurement.device}){cached})."
    )


def reasons_prose(reasons: dict[str, str]) -> str:
    """'Reason why old was slow' as sentences, one per earlier attempt (the JSONL keeps the mapping)."""
    if not reasons:
        return "(nothing tried before)"
    return "\n".join(f"- {name[0].upper() + name[1:]}: {text}" for name, text in reasons.items())


def render_iteration(attempt: Attempt, baseline: Attempt, measured_note: str) -> str:
    """One iteration block of log.txt."""
    proof = attempt.proof
    out = [
        f"Iteration {attempt.iteration}: {attempt.label}",
        f"Proposer: {attempt.proposer} ({attempt.label})" + _reply_figures(attempt),
        *_exchange(attempt),
        "Code optimization reasoning:",
        attempt.reasoning.strip() or "(none given)",
        "",
        "Reason why old was slow:",
        reasons_prose(attempt.reasons_old),
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
    if proof is not None:
        out.append(
            f"Proof of bijection: {proof.message} (tiles {proof.n_tiles}, missing {proof.n_missing}, duplicated "
            f"{proof.n_duplicated}, out of range {proof.n_out_of_range}; permutation id {attempt.permutation_id})"
        )
    out.append(f"Outcome: {attempt.status}: {attempt.message}")
    pred = attempt.prediction
    if pred is not None:
        out.append(
            f"Prediction (model {pred.model}, occupancy {pred.occupancy}): L2 hit rate {pct(pred.l2_hit_rate)}, "
            f"DRAM read {fmt_bytes(pred.dram_read_bytes)}, DRAM write {fmt_bytes(pred.dram_write_bytes)}"
        )
    out += ["", f"--- PROFILING ITERATION {attempt.iteration} ---"]
    if attempt.status == EVALUATED:
        out.append(locality_line(attempt, baseline) + " " + performance_line(attempt, measured_note))
    else:
        out.append(f"Not profiled: {attempt.status} ({attempt.message}).")
    return "\n".join(out) + "\n\n"


# Without --log-prompts a reply that gave no formula is shown up to this many characters (the JSONL keeps it whole).
REPLY_SHOWN_CHARS = 1500


def _reply_figures(attempt: Attempt) -> str:
    if attempt.proposer != "llm" or not (attempt.reply_s or attempt.tokens):
        return ""
    return f"; reply in {attempt.reply_s:.1f} s, {attempt.tokens} tokens (prompt and reply)"


def _exchange(attempt: Attempt) -> list[str]:
    """The prompt (--log-prompts) and the reply as received: whole with --log-prompts, else only when no
    formula could be used from it, shortened."""
    out = []
    if attempt.prompt:
        out += ["Prompt sent:", attempt.prompt.rstrip(), ""]
    if attempt.reply and (attempt.prompt or attempt.status in (NO_FORMULA, UNPARSABLE)):
        text = attempt.reply.rstrip()
        if not attempt.prompt and len(text) > REPLY_SHOWN_CHARS:
            text = text[:REPLY_SHOWN_CHARS] + f" ... ({len(attempt.reply)} characters; iterations.jsonl has all)"
        out += ["Reply as received:", text or "(empty)", ""]
    return out


def render_header(scenario: Any, baseline: Attempt, notes: list[str]) -> str:
    pred = baseline.prediction
    lines = [
        (
            f"swizzlelab optimize: task {scenario.task.name} ({scenario.sizes_label()}), grid "
            f"{grid_text(scenario.grid)}, kernel {scenario.kernel.path} ({scenario.kernel.name}), target "
            f"{scenario.model.name}, {scenario.occupancy.text()}"
        ),
        (
            f"Baseline (the kernel's own order, permutation id {baseline.permutation_id}): predicted hit rate "
            f"{pct(pred.l2_hit_rate) if pred else 'n/a'}, DRAM read {fmt_bytes(pred.dram_read_bytes if pred else 0)}"
            f" (model {pred.model if pred else scenario.model.name})"
        ),
    ]
    timing = baseline.measurement.timing if baseline.measurement is not None else None
    if timing is not None:
        lines.append(
            f"Baseline time {timing.mean_ms:.4f} ms +- {1.96 * timing.sem_ms:.4f} (95%), measured "
            f"({baseline.measurement.device})"
        )
    lines += notes
    return "\n".join(lines) + "\n\n"
