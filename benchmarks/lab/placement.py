"""The placement probe's launch pairs, shared by benchmarks/sim_validation's placement_probe.py and chip_study.py: a
case's key and the difference of two orders' figures in every launch pair.
"""

from __future__ import annotations

import itertools
from typing import Any


def case_key(case: dict[str, int], layout: str = "default") -> str:
    """'MxNxK', and the operand layout when it is not the task's own."""
    return f"{case['m']}x{case['n']}x{case['k']}" + ("" if layout == "default" else f" {layout}")


METRIC_FIELDS = {"dram": "measured_dram_read_bytes", "hit": "measured_l2_hit_pct"}


def launch_differences(rows: list[dict[str, Any]], o1: str, o2: str, metric: str) -> dict[int, list[float]]:
    """o1's figure minus o2's for every launch pair (same process, same launch index), by placement; DRAM reads as a
    difference relative to the pair's mean, so cases of any size compare; hit rates in pp."""
    field = METRIC_FIELDS[metric]
    by_placement: dict[int, list[float]] = {}
    for (p, _, _), group in itertools.groupby(sorted(rows, key=lambda r: (r["placement"], r["process"], r["launch"])),
                                              key=lambda r: (r["placement"], r["process"], r["launch"])):
        vals = {r["order"]: r[field] for r in group}
        if o1 in vals and o2 in vals:
            diff = vals[o1] - vals[o2]
            by_placement.setdefault(p, []).append(2 * diff / (vals[o1] + vals[o2]) if metric == "dram" else diff)
    return by_placement
