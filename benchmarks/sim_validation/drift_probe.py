"""How much drift each streaming row wants: the rows of matmul / flash attention in row-major, column-major or diagonal
order (fit and held out) predicted at a grid of step_cv, each row's measured DRAM reads and L2 hit set against them.

    python -m benchmarks.sim_validation.drift_probe OUT_JSON MEASURED_JSON... [--cv-grid 0,0.1,0.2,0.3,0.5] [--cache FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.lab.validation import fit_set, point_label, predict_rows, random_walk_point
from swizzlelab.io import atomic_write_text


def streaming(row: dict) -> bool:
    """The README's rule: an order that walks a whole operand per row or column of programs, of a matmul or flash
    attention (fit or held out)."""
    return row["task"] in ("matmul", "flash_attention") and row["order"] in ("row_major", "column_major", "diagonal")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("measured", nargs="+")
    parser.add_argument("--cv-grid", default="0,0.1,0.2,0.3,0.5")
    parser.add_argument("--cache", default=None, help="JSON file of predictions kept between runs (validate.py's)")
    args = parser.parse_args(argv)
    started = time.time()
    rows, devices = [], []
    for path in args.measured:
        measured = json.loads(Path(path).read_text())
        devices.append(measured.get("device"))
        rows += [r for r in measured["rows"] if r.get("measured_l2_hit_pct") is not None and streaming(r)]
    cvs = [float(v) for v in args.cv_grid.split(",")]
    points = [random_walk_point(cv) for cv in cvs]
    cache = json.loads(Path(args.cache).read_text()) if args.cache and Path(args.cache).exists() else {}
    predict_rows(rows, points, cache, args.cache, None)
    out = []
    for r in rows:
        by_cv = {cv: r["predictions"][point_label(random_walk_point(cv))] for cv in cvs}
        dram = {cv: p["dram_read_bytes"] for cv, p in by_cv.items()}
        out.append({
            "task": r["task"], "case": r["case"], "order": r["order"], "device": r["device"], "set": fit_set(r),
            "measured_l2_hit_pct": r["measured_l2_hit_pct"], "measured_dram_read_bytes": r["measured_dram_read_bytes"],
            "predicted_l2_hit_pct": {str(cv): p["l2_hit_pct"] for cv, p in by_cv.items()},
            "predicted_dram_read_bytes": {str(cv): d for cv, d in dram.items()},
            # The grid's step_cv whose DRAM reads come nearest the measured ones, and the same for the L2 hit rate.
            "nearest_cv_dram": min(cvs, key=lambda cv: abs(dram[cv] - r["measured_dram_read_bytes"])),
            "nearest_cv_hit": min(cvs, key=lambda cv: abs(by_cv[cv]["l2_hit_pct"] - r["measured_l2_hit_pct"])),
        })
    record = {
        "script": "benchmarks/sim_validation/drift_probe.py",
        "command": " ".join(["python", "-m", "benchmarks.sim_validation.drift_probe", *argv]),
        "device": " + ".join(str(d) for d in devices), "measured": list(args.measured),
        "kind": "predicted (models h100 / h200 of each row's GPU, 16-way, drift_decay 0) vs measured (ncu rows)",
        "cv_grid": cvs, "rows": out, "elapsed_s": time.time() - started,
    }
    atomic_write_text(args.out, json.dumps(record, indent=1))
    for r in out:
        print(f"{r['set']:8} {r['device'][7:11]} {r['task']} {r['case']} {r['order']}: nearest cv by DRAM "
              f"{r['nearest_cv_dram']}, by hit {r['nearest_cv_hit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
