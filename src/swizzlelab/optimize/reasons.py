"""Reasons computed from data: why an earlier attempt was slow, why a new order should be better.

Every sentence is built from predicted figures (with the model named), measured figures (with the device named),
proofs and first-wave sharing statistics; nothing here is free prose.
"""

from __future__ import annotations

from typing import Any

from swizzlelab.fmt import fmt_bytes, grid_text, pct
from swizzlelab.optimize.records import (
    DUPLICATE,
    EVALUATED,
    NO_FORMULA,
    NOT_BIJECTIVE,
    UNPARSABLE,
    Attempt,
    Measurement,
    NcuFigures,
    Prediction,
    Wave,
)

UNCHANGED_PP = 0.5  # predicted hit-rate changes below this many percentage points read as "unchanged"
DRAM_UNCHANGED = 0.01  # measured DRAM reads within this fraction of the baseline's read as "unchanged"


def domain_word(vendor: str) -> str:
    return "XCDs" if vendor == "amd" else "L2 domains"


def hit_change(old: float, new: float) -> str:
    """'rose from 41.2% to 48.0%' / 'stayed at 80.5%' / 'fell from ...' for two rates in 0..1."""
    diff_pp = 100 * (new - old)
    if abs(diff_pp) < UNCHANGED_PP:
        return f"stayed at {pct(new)}" if abs(diff_pp) < 0.05 else f"was about the same ({pct(old)} -> {pct(new)})"
    return f"{'rose' if diff_pp > 0 else 'fell'} from {pct(old)} to {pct(new)} ({diff_pp:+.1f} points)"


def wave_clause(wave: Wave | None, base_wave: Wave | None, vendor: str) -> str:
    """First-wave sharing (and cross-domain duplication, and capacity) in one clause, vs the baseline."""
    if wave is None:
        return ""
    parts = []
    base_sharing = f" (baseline {base_wave.sharing:.2f}x)" if base_wave else ""
    parts.append(
        f"the first {wave.wave_programs} programs of each domain share {wave.sharing:.2f}x of their lines"
        + base_sharing
    )
    if wave.rows:
        base_rc = f", baseline {base_wave.rows:.0f} x {base_wave.cols:.0f}" if base_wave else ""
        parts.append(f"they cover {wave.rows:.0f} tile rows x {wave.cols:.0f} tile columns{base_rc}")
    if wave.n_domains > 1:
        base_cross = f" (baseline {100 * base_wave.cross_domain_fraction:.0f}%)" if base_wave else ""
        parts.append(
            f"{100 * wave.cross_domain_fraction:.0f}% of their lines are read by more than one of "
            f"{wave.n_domains} {domain_word(vendor)}{base_cross}"
        )
    if wave.distinct_bytes > wave.l2_bytes_per_domain:
        parts.append(
            f"one domain's first wave reads {fmt_bytes(wave.distinct_bytes)} distinct, more than its "
            f"{fmt_bytes(wave.l2_bytes_per_domain)} of L2"
        )
    return "; ".join(parts)


def prediction_change(pred: Prediction, ref: Prediction, ref_name: str) -> str:
    """'predicted hit rate rose from 41.2% to 48.0% vs the baseline, DRAM read ... (model H100-SXM)'."""
    return (
        f"predicted hit rate {hit_change(ref.l2_hit_rate, pred.l2_hit_rate)} vs {ref_name}, DRAM read "
        f"{fmt_bytes(ref.dram_read_bytes)} -> {fmt_bytes(pred.dram_read_bytes)} (model {pred.model})"
    )


def locality_unchanged(ncu: NcuFigures, base_ncu: NcuFigures) -> bool:
    """True when ncu's L2 hit rate and DRAM reads of an order match the baseline's (so a time change is not
    explained by L2 locality)."""
    hit, base_hit = ncu.l2_hit_rate_pct, base_ncu.l2_hit_rate_pct
    dram, base_dram = ncu.dram_read_bytes, base_ncu.dram_read_bytes
    if None in (hit, base_hit, dram, base_dram) or not base_dram:
        return False
    return abs(hit - base_hit) < UNCHANGED_PP and abs(dram - base_dram) <= DRAM_UNCHANGED * base_dram


def measured_clause(
    measurement: Measurement | None, best: Attempt | None, this: Attempt, base_ncu: NcuFigures | None = None
) -> str:
    if measurement is None:
        return ""
    if measurement.passed is False:
        return f"wrong output on {measurement.device}: {measurement.check_message}"
    comparison = measurement.comparison or measurement.raced
    if comparison is None:
        return measurement.error
    verdict = comparison.verdict()
    raced = " in a race of orders" if comparison.stage == "race" else ""
    text = f"{comparison.ci_text()} vs the kernel's default order{raced}, measured ({measurement.device}): {verdict}"
    if verdict == "improvement" and best is not None and best.iteration != this.iteration and best.comparison:
        text += f", below the best so far ({best.name()}: {best.comparison.ci_text()})"
    ncu = measurement.ncu
    if ncu is not None and ncu.l2_hit_rate_pct is not None:
        text += f"; ncu L2 hit {ncu.l2_hit_rate_pct:.1f}%, DRAM read {fmt_bytes(ncu.dram_read_bytes or 0)}"
        if verdict != "within noise" and locality_unchanged(ncu, base_ncu or NcuFigures()):
            text += " (both as the baseline's: the time change does not come from L2 locality)"
    return text


def why_old_was_slow(attempt: Attempt, baseline: Attempt | None, best: Attempt | None, vendor: str) -> str:
    """One data-derived sentence on why `attempt` did not make the kernel (more) fast."""
    if attempt.status == NOT_BIJECTIVE:
        proof = attempt.proof
        if proof is None:
            return f"not a bijection: {attempt.message}"
        return (
            f"not a bijection on the {grid_text(proof.grid)} grid: {proof.n_missing} tiles never run, "
            f"{proof.n_duplicated} run more than once, {proof.n_out_of_range} programs outside the grid; never "
            "simulated or run"
        )
    if attempt.status == UNPARSABLE:
        return f"rejected before evaluation: {attempt.message}"
    if attempt.status == NO_FORMULA:
        return f"no formula could be taken from the reply: {attempt.message}"
    if attempt.status == DUPLICATE:
        return (
            f"same permutation as iteration {attempt.duplicate_of} (id {attempt.permutation_id}): "
            "a different text for an order already evaluated; nothing new learned"
        )
    pred = attempt.prediction
    if attempt.status != EVALUATED or pred is None:
        return attempt.message or attempt.status
    if attempt.iteration == 0:
        head = (
            f"the kernel's own order: predicted hit rate {pct(pred.l2_hit_rate)}, DRAM read "
            f"{fmt_bytes(pred.dram_read_bytes)} (model {pred.model}); no order can beat "
            f"{pct(pred.best_hit_rate)} (every touched sector missing once)"
        )
        wave = wave_clause(attempt.wave, None, vendor)
    else:
        head = (prediction_change(pred, baseline.prediction, "the baseline")
                if baseline is not None and baseline.prediction is not None else "")
        wave = wave_clause(attempt.wave, baseline.wave if baseline else None, vendor)
    base_ncu = baseline.ncu if baseline is not None else None
    measured = measured_clause(attempt.measurement, best, attempt, base_ncu)
    return ": ".join(p for p in (head, wave) if p) + (f"; {measured}" if measured else "")


def reasons_dict(
    history: list[Attempt], baseline: Attempt | None, best: Attempt | None, vendor: str
) -> dict[str, str]:
    """'Reason why old was slow': one entry per earlier attempt, baseline first."""
    return {attempt.name(): why_old_was_slow(attempt, baseline, best, vendor) for attempt in history}


def why_new_is_better(pred: Prediction, wave: Wave | None, ref: Attempt, vendor: str) -> str:
    """Predicted figures and first-wave sharing of a candidate against a reference attempt (best so far)."""
    head = prediction_change(pred, ref.prediction, ref.name()) if ref.prediction is not None else ""
    clause = wave_clause(wave, ref.wave, vendor)
    parts = [p[0].upper() + p[1:] for p in (head, clause) if p]
    return ". ".join(parts) + "."


def memory_summary(scenario: Any, analysis: Any) -> str:
    """The task's memory facts from its trace (footprint, reuse, sharing statements), for reasoning sections."""
    tensors = ", ".join(
        f"{t.name} {fmt_bytes(t.touched_bytes)} touched / {fmt_bytes(t.requested_bytes)} requested "
        f"({t.requested_bytes / t.touched_bytes if t.touched_bytes else 0:.1f}x reuse)"
        for t in analysis.tensors
    )
    model = scenario.target.model
    lines = [
        (
            f"Task {scenario.task.name} ({scenario.sizes_label()}), tile grid {'x'.join(map(str, scenario.grid))} "
            f"({scenario.n_tiles} programs); tensors (from trace): {tensors}."
        ),
        (
            f"Target {model.name}: {model.n_domains} L2 domain(s) of "
            f"{fmt_bytes(model.l2_effective_bytes_per_domain)}, {model.units_per_domain} units each, dispatch "
            f"{model.dispatch}; {scenario.occupancy.programs} resident program(s) per unit ({scenario.occupancy.source})."
        ),
        f"Best hit rate any order could reach: {pct(analysis.best_hit_rate)} (from trace: 1 - compulsory/requested).",
    ]
    shared = [s.statement() for s in analysis.sharing if s.fraction >= 0.05]
    lines += [f"Sharing (from trace): {text}" for text in shared[:6]]
    lines += [f"Sharing (from trace): {p.statement()}" for p in analysis.periods]
    return "\n".join(lines)
