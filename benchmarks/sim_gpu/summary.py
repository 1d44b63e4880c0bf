"""The first GPU-host validation's summary.json, built from its raw files (raw.manifest.json): the fit and held-out
figures of sim_vs_ncu_validation_h100.json (superseded by sim_validation) and the measured orders' rows.

    python benchmarks/archive.py summarize sim_gpu     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
from pathlib import Path


def summarize(folder: Path) -> dict:
    validation = json.loads((folder / "sim_vs_ncu_validation_h100.json").read_text())
    measured = json.loads((folder / "sim_ncu_rows_h100.json").read_text())
    speed = json.loads((folder / "sim_speed_gpuhost_h100.json").read_text())
    return {"summary_of": "benchmarks/sim_gpu's raw files (raw.manifest.json), by summary.py",
            "device": validation["device"],
            "validation": {k: v for k, v in validation.items() if k not in ("rows", "failures")},
            "measured_rows": [{k: r.get(k) for k in ("task", "case", "order", "measured_l2_hit_pct",
                                                      "measured_dram_read_bytes", "output_correct")}
                              for r in measured["rows"]],
            "host_speed": {"device": speed["device"], "note": speed["note"], "screening": speed["screening"],
                           "runs": [{k: r[k] for k in ("target", "workers", "order", "accesses_per_s")}
                                    for r in speed["runs"]]}}
