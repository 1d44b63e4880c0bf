"""Row- against column-major on the H100's stamped launches: how long their programs take and how much they read,
the asymmetry the model, whose two orders are mirror images on a square matmul, has none of (stop 40).

    python -m benchmarks.sim_validation.order_pace OUT_JSON LAUNCHES_JSON [LAUNCHES_JSON ...] [--table sim_validation.json]
Per square case (m = n) with both orders stamped: each order's median program duration and launch span (mean over its stamped
launches), ncu's DRAM reads of those same launches, and the table's mean DRAM reads of the case (the unstamped task
kernel, every run); then how the duration ratio and the DRAM ratios rank alike over the cases (Spearman).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from benchmarks.lab.timelines import stamped_counters, stamped_stems
from benchmarks.lab.validation import case_key
from swizzlelab.io import atomic_write_text

ORDERS = ("row_major", "column_major")


def launch_figures(npz: Any, case: str, order: str) -> list[dict[str, float]]:
    """Median program duration and span (first start to last end, ns) of each stamped run of (case, order)."""
    out = []
    for run in stamped_stems(npz.files, case, order):
        start = npz[f"{run}_start"].astype(np.int64)
        duration = npz[f"{run}_duration"].astype(np.int64)
        out.append({"run": run.rsplit("_", 1)[1], "median_program_ns": float(np.median(duration)),
                    "span_ns": float((start + duration).max() - start.min())})
    return out


def table_reads(table: list[dict[str, Any]], device: str, case: str) -> dict[str, float]:
    """The table's mean DRAM reads of each order of a case given as MxNxK, on GPUs whose name starts with device."""
    m, n, k = (int(v) for v in case.split("x"))
    key = case_key({"task": "matmul", "case": {"m": m, "n": n, "k": k}})
    return {r["order"]: r["measured_dram_read_bytes"] for r in table
            if r["device"].startswith(device) and case_key(r) == key and r["order"] in ORDERS}


def cases_of(path: Path, record: dict[str, Any], table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The square cases of one launches file (`record`, read from `path`; its stamps in the .npz beside it)."""
    npz = np.load(path.with_suffix(".npz"))
    counters = stamped_counters(record["probe"], record["launches"])
    rows = []
    for case in sorted({row["case"] for row in record["probe"]["rows"]}):
        m, n, _ = case.split("x")
        if m != n:  # only a square matmul makes the two orders mirror images
            continue
        figures = {order: launch_figures(npz, case, order) for order in ORDERS}
        if not all(figures.values()):
            continue
        per_order = {}
        for order in ORDERS:
            reads = [counters[(case, order, f["run"])]["dram__bytes_read.sum"] for f in figures[order]]
            per_order[order] = {"launches": len(figures[order]),
                                "median_program_ns": float(np.mean([f["median_program_ns"] for f in figures[order]])),
                                "span_ns": float(np.mean([f["span_ns"] for f in figures[order]])),
                                "stamped_dram_read_bytes": float(np.mean(reads))}
        table_mean = table_reads(table, record["device"], case)
        col, row = per_order["column_major"], per_order["row_major"]
        rows.append({"file": path.name, "case": case, "orders": per_order,
                     "column_over_row": {
                         "median_program": col["median_program_ns"] / row["median_program_ns"],
                         "span": col["span_ns"] / row["span_ns"],
                         "stamped_dram_reads": col["stamped_dram_read_bytes"] / row["stamped_dram_read_bytes"],
                         "table_dram_reads": (table_mean["column_major"] / table_mean["row_major"]
                                              if len(table_mean) == 2 else None)}})
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("launches", nargs="+", help="replay_launch.py measure's launches_*.json (the .npz beside it)")
    parser.add_argument("--table", default=str(Path(__file__).resolve().parent / "sim_validation.json"))
    args = parser.parse_args(argv)
    try:
        table = json.loads(Path(args.table).read_text())["rows"]
        records = {Path(path): json.loads(Path(path).read_text()) for path in args.launches}
        rows = [row for path, record in records.items() for row in cases_of(path, record, table)]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"cannot read the inputs: {exc}") from exc
    devices = sorted({record["device"] for record in records.values()})
    pace = [r["column_over_row"]["median_program"] for r in rows]
    result: dict[str, Any] = {
        "script": "benchmarks/sim_validation/order_pace.py",
        "command": " ".join(["python", "-m", "benchmarks.sim_validation.order_pace", *argv]),
        "device": "measured launches of " + ", ".join(devices) + " (ncu DRAM reads, %globaltimer stamps); analysis",
        "cases": rows}
    for name in ("stamped_dram_reads", "table_dram_reads"):
        pairs = [(p, r["column_over_row"][name]) for p, r in zip(pace, rows) if r["column_over_row"][name]]
        rho = spearmanr([a for a, _ in pairs], [b for _, b in pairs])
        result[f"spearman_program_pace_vs_{name}"] = {"cases": len(pairs), "rho": float(rho.statistic),
                                                      "p": float(rho.pvalue)}
    for r in rows:
        c = r["column_over_row"]
        table = f"{c['table_dram_reads']:.3f}" if c["table_dram_reads"] else "-"
        print(f"{r['case']}: column / row-major: median program {c['median_program']:.3f}, span {c['span']:.3f}, "
              f"DRAM reads stamped {c['stamped_dram_reads']:.3f}, table {table}")
    for name in ("stamped_dram_reads", "table_dram_reads"):
        s = result[f"spearman_program_pace_vs_{name}"]
        print(f"program pace against {name}: Spearman {s['rho']:.2f} (p {s['p']:.2f}, {s['cases']} cases)")
    atomic_write_text(args.out, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
