"""The optimizer with K alternation on matmul 8192^3 (issue 15): its predicted ranking, next to ncu and timings of
the task kernel itself (tasks/matmul/kernel.py, config k_wave and sync_wave) on the H100, in one JSON.

    python benchmarks/matmul_kdir_h100/summarize_kalt.py   (writes optimize_matmul_kalt_h100.json here)
    python benchmarks/matmul_kdir_h100/summarize_kalt.py --opt-dir optimize_sync --measured matmul_sync_opt_h100.json
        --base matmul_sync_opt_base_h100.json --out optimize_matmul_sync_h100.json
Inputs: an optimize folder (`swizzlelab optimize ... --k-dir alternate [--wave-sync]` on a CPU: predictions only) and
a `run.py --task-kernel [--sync]` JSON from the H100 with the optimizer's top orders and grouped-8; `--base`: a
run.py JSON whose forward grouped-8 row (no barrier) is Triton's order as shipped, when the measured JSON's forward
rows carry the barrier. The speedup reported first is the optimizer's own choice's (every timing is listed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from swizzlelab.io import atomic_write_text

HERE = Path(__file__).resolve().parent
TARGET_BYTES = 1.1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--opt-dir", default="optimize_kalt")
    parser.add_argument("--measured", default="matmul_kalt_opt_h100.json")
    parser.add_argument("--base", default=None)
    parser.add_argument("--out", default="optimize_matmul_kalt_h100.json")
    args = parser.parse_args(argv)
    lines = (HERE / args.opt_dir / "iterations.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    predicted = {}
    for line in lines[1:]:
        it = json.loads(line)
        if it.get("prediction"):
            predicted.setdefault(it["label"], {"iteration": it["iteration"],
                                               "predicted_dram_read_bytes": it["prediction"]["dram_read_bytes"],
                                               "predicted_l2_hit_pct": 100 * it["prediction"]["l2_hit_rate"]})
    measured = json.loads((HERE / args.measured).read_text())
    base_run = json.loads((HERE / args.base).read_text()) if args.base else None
    rows = []
    for r in measured["rows"] + (base_run["rows"] if base_run else []):
        if not r["output_ok"]:
            continue
        label = r["order"] if r["order"] != "grouped:GROUP_M=8" or not r["wave"] else "kernel default site"
        row = {"order": r["order"], "k_wave": r["wave"], "wave_sync": bool(r.get("sync")),
               "measured_dram_read_bytes": r["metrics"]["dram__bytes_read.sum"],
               "measured_l2_hit_pct": r["metrics"]["lts__t_sector_hit_rate.pct"]}
        if r["wave"] and label in predicted:  # the optimizer predicted orders with K alternating (and its barrier)
            row.update(predicted[label])
            row["dram_rel_error"] = row["predicted_dram_read_bytes"] / row["measured_dram_read_bytes"] - 1
        rows.append(row)
    alternating = [r for r in rows if r["k_wave"]]
    best = min(alternating, key=lambda r: r["measured_dram_read_bytes"])
    top = min((r for r in alternating if "iteration" in r and r["iteration"] > 0), key=lambda r: r["iteration"])
    base = next(r for r in rows if r["order"] == "grouped:GROUP_M=8" and not r["k_wave"] and not r["wave_sync"])
    timings = [{"variant": t["variant"], "base": t["base"], "speedup": t["speedup"], "ci95": t["ci95"],
                "base_mean_ms": t["a"]["mean_ms"], "variant_mean_ms": t["b"]["mean_ms"], "n": t["a"]["n"]}
               for t in measured["timings"]]
    chosen = [t for t in timings if t["variant"].startswith(top["order"] + " ")]
    fastest = chosen[0] if chosen else max(timings, key=lambda t: t["speedup"])
    errors = [abs(r["dram_rel_error"]) for r in rows if "dram_rel_error" in r]
    doc = {
        "task": "matmul", "case": measured["case"], "device": measured["device"],
        "kernel": measured["kernel"], "k_wave": 264, "wave_sync": 264 if measured.get("sync") else 0,
        "optimize_command": header["command"], "measure_command": measured["command"],
        **({"base_command": base_run["command"]} if base_run else {}),
        "script": "benchmarks/matmul_kdir_h100/summarize_kalt.py",
        "predicted_by": "predicted (model H100-SXM, occupancy 2; optimize on a CPU, no GPU)",
        "measured_by": f"measured ({measured['device']}, ncu dram__bytes_read.sum / lts__t_sector_hit_rate.pct; "
                       "CUDA events, interleaved with L2 flushes, for the speedups)",
        "rows": rows,
        "optimizer_best_order": top["order"], "optimizer_best_measured_dram_read_bytes": top["measured_dram_read_bytes"],
        "best_order": best["order"], "best_dram_read_bytes": best["measured_dram_read_bytes"],
        "grouped8_forward_dram_read_bytes": base["measured_dram_read_bytes"],
        "dram_read_reduction_vs_grouped8": 1 - best["measured_dram_read_bytes"] / base["measured_dram_read_bytes"],
        "target_dram_read_bytes": TARGET_BYTES, "target_met": best["measured_dram_read_bytes"] <= TARGET_BYTES,
        "timings_vs_grouped8_forward": timings,
        "speedup_vs_grouped8": fastest["speedup"], "speedup_vs_grouped8_ci95": fastest["ci95"],
        "speedup_order": fastest["variant"],
        "prediction_dram_mean_abs_rel_error": sum(errors) / len(errors) if errors else None,
        "prediction_rows": len(errors),
    }
    atomic_write_text(HERE / args.out, json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k not in ("rows", "timings_vs_grouped8_forward")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
