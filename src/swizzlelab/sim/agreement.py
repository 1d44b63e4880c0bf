"""How well predictions agree with measurements: mean absolute error and ranking agreement of orders.

One rule for every comparison of the simulator with ncu (benchmarks/sim_vs_ncu, benchmarks/sim_calibration).
"""

from __future__ import annotations

from typing import Any

RANK_TOL_PP = 1.0  # orders closer than this (L2 hit %) count as tied when comparing rankings


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
