"""How well predictions agree with measurements: mean absolute error and ranking agreement of orders.

One rule for every comparison of the simulator with ncu (benchmarks/sim_validation's table).
"""

from __future__ import annotations

from typing import Any

RANK_TOL_PP = 1.0  # orders closer than this (L2 hit %) count as tied when comparing rankings
# The model's ranking resolution: on the validation table (benchmarks/sim_validation), pairs of orders predicted
# closer than this were ranked as ncu ranks them about as often as not, and pairs predicted further apart almost
# always (docs/hit-rates.md has the counts, `rank_agreement_by_predicted_gap` in sim_validation.json).
RESOLUTION_DRAM_REL = 0.02
RESOLUTION_HIT_PP = 0.5
DRAM_GAP_BINS = (0.0, RESOLUTION_DRAM_REL, 0.05, 0.10)  # relative to the pair's mean
HIT_GAP_BINS = (0.0, RESOLUTION_HIT_PP, 1.0, 2.0)  # percentage points


def relative_gap(a: float, b: float) -> float:
    """(a - b) over the pair's mean: the gap of two byte counts that compares across sizes."""
    mean = (a + b) / 2
    return (a - b) / mean if mean else 0.0


def agreement_by_predicted_gap(cases: list[list[dict[str, Any]]], *, dram_tie: float = 0.02,
                               hit_tie_pp: float = RANK_TOL_PP) -> dict[str, list[dict[str, Any]]]:
    """Pairs of orders within each case, binned by how far apart the model predicts them (DRAM reads: relative gap,
    DRAM_GAP_BINS; hit rate: pp, HIT_GAP_BINS): per bin, pairs ranked as measured, reversed, and measured as a tie
    (closer than `dram_tie` / `hit_tie_pp`)."""
    def binned(edges: tuple[float, ...], pairs: list[tuple[float, float]], tie: float) -> list[dict[str, Any]]:
        out = [{"predicted_gap_from": lo, "predicted_gap_to": hi, "concordant": 0, "discordant": 0, "measured_tie": 0}
               for lo, hi in zip(edges, (*edges[1:], None))]
        for predicted, measured in pairs:
            row = next(b for b in reversed(out) if abs(predicted) >= b["predicted_gap_from"])
            key = "measured_tie" if abs(measured) < tie else (
                "concordant" if predicted * measured > 0 else "discordant")
            row[key] += 1
        return out

    dram, hit = [], []
    for rows in cases:
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                dram.append((relative_gap(a["predicted_dram_read_bytes"], b["predicted_dram_read_bytes"]),
                             relative_gap(a["measured_dram_read_bytes"], b["measured_dram_read_bytes"])))
                hit.append((a["predicted_l2_hit_pct"] - b["predicted_l2_hit_pct"],
                            a["measured_l2_hit_pct"] - b["measured_l2_hit_pct"]))
    return {"dram_read": binned(DRAM_GAP_BINS, dram, dram_tie), "l2_hit": binned(HIT_GAP_BINS, hit, hit_tie_pp)}


RESOLUTION_TEXT = f"within {100 * RESOLUTION_DRAM_REL:.0f}% of DRAM reads and {RESOLUTION_HIT_PP} pp of hit rate"


def within_resolution(dram_a: float, dram_b: float, hit_a_pct: float, hit_b_pct: float) -> bool:
    """Whether the model predicts two orders closer than its ranking resolution in both DRAM reads and hit rate: its
    ranking of them is then no better than a coin's, so only a measurement can order them."""
    return abs(relative_gap(dram_a, dram_b)) < RESOLUTION_DRAM_REL and abs(hit_a_pct - hit_b_pct) < RESOLUTION_HIT_PP


def below_resolution(labels: list[str], dram_read: list[float], hit_pct: list[float]) -> list[tuple[str, str]]:
    """The pairs of orders (by label) within the model's ranking resolution of each other (within_resolution)."""
    return [(labels[i], labels[j]) for i in range(len(labels)) for j in range(i + 1, len(labels))
            if within_resolution(dram_read[i], dram_read[j], hit_pct[i], hit_pct[j])]


def ranks(values: list[float]) -> list[int]:
    """Rank of each value, 0 = largest (ties share order of appearance)."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    out = [0] * len(values)
    for rank, i in enumerate(order):
        out[i] = rank
    return out


def pair_agreement(predicted: list[float], measured: list[float], tol: float) -> tuple[int, int]:
    """(concordant, discordant) order pairs among those that differ by more than `tol` in both lists."""
    concordant = discordant = 0
    for i in range(len(predicted)):
        for j in range(i + 1, len(predicted)):
            dp, dm = predicted[i] - predicted[j], measured[i] - measured[j]
            if abs(dp) > tol and abs(dm) > tol:
                if (dp > 0) == (dm > 0):
                    concordant += 1
                else:
                    discordant += 1
    return concordant, discordant


def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-a between two score lists (1 = same ranking, -1 = reversed)."""
    n = len(a)
    pairs = 0
    score = 0
    for i in range(n):
        for j in range(i + 1, n):
            pairs += 1
            product = (a[i] - a[j]) * (b[i] - b[j])
            score += (product > 0) - (product < 0)
    return score / pairs if pairs else 1.0


def summarize(case_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Error and ranking agreement of one case's orders."""
    measured = [r["measured_l2_hit_pct"] for r in case_rows]
    if any(v is None for v in measured):
        return {"mae_pp": None, "ranking_matches": None, "ranks_identical": None, "kendall_tau_hit": None,
                "kendall_tau_dram": None}
    predicted = [r["predicted_l2_hit_pct"] for r in case_rows]
    pred_read = [-float(r["predicted_dram_read_bytes"]) for r in case_rows]
    meas_read = [-float(r["measured_dram_read_bytes"] or 0) for r in case_rows]
    concordant, discordant = pair_agreement(predicted, measured, RANK_TOL_PP)
    return {
        "mae_pp": sum(abs(p - m) for p, m in zip(predicted, measured)) / len(case_rows),
        # Exact ranks are meaningless among near-ties (e.g. transpose, where no order reuses a line), so the
        # ranking "matches" when every pair of orders that differs by > RANK_TOL_PP in both is ordered alike.
        "ranking_matches": (discordant == 0) if concordant + discordant else None,
        "ranks_identical": ranks(predicted) == ranks(measured),
        "pairs_concordant": concordant,
        "pairs_discordant": discordant,
        "kendall_tau_hit": kendall_tau(predicted, measured),
        "kendall_tau_dram": kendall_tau(pred_read, meas_read),
        "dram_read_ratio_mean": sum(p / m for p, m in zip(pred_read, meas_read) if m) / len(case_rows),
    }


def ranking_agreement(predicted: list[float], measured: list[float]) -> dict[str, Any]:
    """Pairs of orders ranked alike / reversed (beyond RANK_TOL_PP) and Kendall's tau of the hit rates."""
    concordant, discordant = pair_agreement(predicted, measured, RANK_TOL_PP)
    return {
        "ranking_matches": (discordant == 0) if concordant + discordant else None,
        "pairs_concordant": concordant,
        "pairs_discordant": discordant,
        "kendall_tau_hit": kendall_tau(predicted, measured),
    }
