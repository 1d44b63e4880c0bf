"""Reasons computed from data: why an earlier attempt was slow, why a new order should be better.

Every sentence is built from predicted figures (with the model named), measured figures (with the device named),
proofs and first-wave sharing statistics; nothing here is free prose.
"""

from __future__ import annotations

from typing import Any

from swizzlelab.optimize.records import (
    DUPLICATE,
    EVALUATED,
    NO_FORMULA,
    NOT_BIJECTIVE,
    UNPARSABLE,
    Attempt,
)
from swizzlelab.fmt import fmt_bytes

UNCHANGED_PP = 0.5  # predicted hit-rate changes below this many percentage points read as "unchanged"


def pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def domain_word(n_domains: int, vendor: str) -> str:
    return "XCDs" if vendor == "amd" else "L2 domains"


def ci_text(comparison: dict[str, Any]) -> str:
    low, high = comparison["ci95"]
    return f"{comparison['speedup']:.3f}x [{low:.3f}, {high:.3f}]"


def verdict(comparison: dict[str, Any]) -> str:
    """'improvement', 'regression' or 'within noise': only a CI that excludes 1.0 counts."""
    low, high = comparison["ci95"]
    if low > 1.0:
        return "improvement"
    if high < 1.0:
        return "regression"
    return "within noise"


def wave_clause(wave: dict[str, Any] | None, base_wave: dict[str, Any] | None, vendor: str) -> str:
    """First-wave sharing (and cross-domain duplication, and capacity) in one clause, vs the baseline."""
    if not wave:
        return ""
    parts = []
    base_sharing = f" (baseline {base_wave['sharing']:.2f}x)" if base_wave else ""
    parts.append(
        f"the first {wave['wave_programs']} programs of each domain share {wave['sharing']:.2f}x of their lines"
        + base_sharing
    )
    if wave.get("rows"):
        base_rc = f", baseline {base_wave['rows']:.0f} x {base_wave['cols']:.0f}" if base_wave else ""
        parts.append(f"they cover {wave['rows']:.0f} tile rows x {wave['cols']:.0f} tile columns{base_rc}")
    if wave["n_domains"] > 1:
        base_cross = f" (baseline {100 * base_wave['cross_domain_fraction']:.0f}%)" if base_wave else ""
        parts.append(
            f"{100 * wave['cross_domain_fraction']:.0f}% of their lines are read by more than one of "
            f"{wave['n_domains']} {domain_word(wave['n_domains'], vendor)}{base_cross}"
        )
    if wave["distinct_bytes"] > wave["l2_bytes_per_domain"]:
        parts.append(
            f"one domain's first wave reads {fmt_bytes(wave['distinct_bytes'])} distinct, more than its "
            f"{fmt_bytes(wave['l2_bytes_per_domain'])} of L2"
        )
    return "; ".join(parts)


def prediction_change(pred: dict[str, Any], ref: dict[str, Any], ref_name: str) -> str:
    """'predicted hit rate unchanged 41.2% -> 41.5%' style, with DRAM read bytes, naming the model."""
    diff_pp = 100 * (pred["l2_hit_rate"] - ref["l2_hit_rate"])
    if abs(diff_pp) < UNCHANGED_PP:
        word = "unchanged"
    elif diff_pp > 0:
        word = "rose"
    else:
        word = "fell"
    return (
        f"predicted hit rate {word} {pct(ref['l2_hit_rate'])} -> {pct(pred['l2_hit_rate'])} vs {ref_name}, "
        f"DRAM read {fmt_bytes(ref['dram_read_bytes'])} -> {fmt_bytes(pred['dram_read_bytes'])} "
        f"({pred['kind']})"
    )


DRAM_UNCHANGED = 0.01  # measured DRAM reads within this fraction of the baseline's read as "unchanged"


def locality_unchanged(ncu: dict[str, Any], base_ncu: dict[str, Any]) -> bool:
    """True when ncu's L2 hit rate and DRAM reads of an order match the baseline's (so a time change is not
    explained by L2 locality)."""
    hit, base_hit = ncu.get("l2_hit_rate_pct"), base_ncu.get("l2_hit_rate_pct")
    dram, base_dram = ncu.get("dram_read_bytes"), base_ncu.get("dram_read_bytes")
    if None in (hit, base_hit, dram, base_dram) or not base_dram:
        return False
    return abs(hit - base_hit) < UNCHANGED_PP and abs(dram - base_dram) <= DRAM_UNCHANGED * base_dram


def measured_clause(
    measurement: dict[str, Any] | None, best: Attempt | None, this: Attempt, base_ncu: dict[str, Any] | None = None
) -> str:
    if not measurement:
        return ""
    correctness = measurement.get("correctness") or {}
    if correctness and not correctness.get("passed", False):
        return f"wrong output on {measurement.get('device', 'the GPU')}: {correctness.get('message', '')}"
    comparison = measurement.get("comparison")
    if not comparison:
        return measurement.get("error", "")
    text = f"{ci_text(comparison)} vs the kernel's default order, measured ({measurement['device']}): {verdict(comparison)}"
    if verdict(comparison) == "improvement" and best is not None and best.iteration != this.iteration:
        best_cmp = best.measurement["comparison"]
        text += f", below the best so far ({best.name()}: {ci_text(best_cmp)})"
    ncu = measurement.get("ncu") or {}
    if ncu.get("l2_hit_rate_pct") is not None:
        text += f"; ncu L2 hit {ncu['l2_hit_rate_pct']:.1f}%, DRAM read {fmt_bytes(ncu.get('dram_read_bytes') or 0)}"
        if verdict(comparison) != "within noise" and locality_unchanged(ncu, base_ncu or {}):
            text += " (both as the baseline's: the time change does not come from L2 locality)"
    return text


def why_old_was_slow(
    attempt: Attempt, baseline: Attempt | None, best: Attempt | None, vendor: str
) -> str:
    """One data-derived sentence on why `attempt` did not make the kernel (more) fast."""
    if attempt.status == NOT_BIJECTIVE:
        proof = attempt.proof or {}
        return (
            f"not a bijection on the {'x'.join(str(g) for g in proof.get('grid', []))} grid: "
            f"{proof.get('n_missing', 0)} tiles never run, {proof.get('n_duplicated', 0)} run more than once, "
            f"{proof.get('n_out_of_range', 0)} programs outside the grid; never simulated or run"
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
    if attempt.status != EVALUATED or not attempt.prediction:
        return attempt.message or attempt.status
    pred = attempt.prediction
    if attempt.iteration == 0:
        head = (
            f"the kernel's own order: predicted hit rate {pct(pred['l2_hit_rate'])}, DRAM read "
            f"{fmt_bytes(pred['dram_read_bytes'])} ({pred['kind']}); no order can beat "
            f"{pct(pred['best_hit_rate'])} (every touched sector missing once)"
        )
        wave = wave_clause(attempt.wave, None, vendor)
    else:
        head = prediction_change(pred, baseline.prediction, "the baseline") if baseline and baseline.prediction else ""
        wave = wave_clause(attempt.wave, baseline.wave if baseline else None, vendor)
    base_ncu = ((baseline.measurement if baseline else None) or {}).get("ncu")
    measured = measured_clause(attempt.measurement, best, attempt, base_ncu)
    return ": ".join(p for p in (head, wave) if p) + (f"; {measured}" if measured else "")


def reasons_dict(
    history: list[Attempt], baseline: Attempt | None, best: Attempt | None, vendor: str
) -> dict[str, str]:
    """'Reason why old was slow': one entry per earlier attempt, baseline first."""
    out: dict[str, str] = {}
    for attempt in history:
        out[attempt.name()] = why_old_was_slow(attempt, baseline, best, vendor)
    return out


def why_new_is_better(
    pred: dict[str, Any],
    wave: dict[str, Any] | None,
    ref: Attempt,
    vendor: str,
) -> str:
    """Predicted figures and first-wave sharing of a candidate against a reference attempt (best so far)."""
    head = prediction_change(pred, ref.prediction, ref.name()) if ref.prediction else ""
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
