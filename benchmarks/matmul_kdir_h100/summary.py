"""The K-direction study's summary.json, built from its raw files (raw.manifest.json): every ncu row and timing of the
measured runs (no per-sample times), the simulator's rows against them, the search's best and the optimize summaries.

    python benchmarks/archive.py summarize matmul_kdir_h100     (stdlib only; the raw files restored first)
"""

from __future__ import annotations

import json
from pathlib import Path

MEASURED = ("matmul_kdir_h100.json", "matmul_kdir_sweep_h100.json", "matmul_kdir_sync_h100.json",
            "matmul_kdir_nosync_h100.json", "matmul_kalt_opt_h100.json", "matmul_sync_opt_h100.json",
            "matmul_sync_opt_base_h100.json")
TIMED = ("probe_vs_task_h100.json", "sync_variants_h100.json", "sync_variants_helper_h100.json",
         "sync_variants_moved_h100.json", "sync_variants_repeat_h100.json")
OPTIMIZED = ("optimize_matmul_kalt_h100.json", "optimize_matmul_sync_h100.json")
TIMING_KEYS = ("round", "label", "kernel", "order", "k_alternate", "wave_sync", "base", "variant", "speedup", "ci95",
               "base_ms", "variant_ms", "base_mean_ms", "variant_mean_ms", "n")


def measured_run(doc: dict) -> dict:
    """A run.py file: its ncu rows (order, reverse, wave, barrier, DRAM reads, hit rate, output) and timings."""
    rows = [{"order": r["order"], "reverse": r.get("reverse"), "wave": r.get("wave"), "sync": r.get("sync"),
             "dram_read_bytes": r["metrics"].get("dram__bytes_read.sum"),
             "l2_hit_pct": r["metrics"].get("lts__t_sector_hit_rate.pct"), "output_ok": r["output_ok"]}
            for r in doc["rows"]]
    timings = [{k: t[k] for k in ("base", "variant", "speedup", "ci95") if k in t} for t in doc.get("timings", [])]
    return {"command": doc["command"], "device": doc["device"], "rows": rows, "timings": timings}


def summarize(folder: Path) -> dict:
    def load(name: str) -> dict:
        return json.loads((folder / name).read_text())

    sim = load("matmul_kdir_sim.json")
    search = load("matmul_kdir_search.json")
    return {
        "summary_of": "benchmarks/matmul_kdir_h100's raw files (raw.manifest.json), by summary.py",
        "device": "measured (NVIDIA H100 80GB HBM3, ncu and CUDA events); predicted (model H100-SXM)",
        "measured": {name: measured_run(load(name)) for name in MEASURED},
        "timed": {name: {"command": load(name)["command"], "device": load(name)["device"],
                         "rows": [{k: r[k] for k in TIMING_KEYS if k in r} for r in load(name)["rows"]]}
                  for name in TIMED},
        "prediction": {k: sim[k] for k in ("command", "predicted_by", "measured_by", "summary")}
        | {"rows": [{k: r[k] for k in ("file", "order", "wave", "measured_dram_read_bytes", "predicted_dram_read_bytes",
                                       "measured_l2_hit_pct", "predicted_l2_hit_pct")} for r in sim["rows"]]},
        "search": {k: search[k] for k in ("command", "predicted_by", "waves", "candidates", "best_by_wave", "best",
                                          "target_dram_read_bytes", "best_predicted_below_target")},
        "optimized": {name: {k: v for k, v in load(name).items() if k != "rows"} for name in OPTIMIZED},
    }
