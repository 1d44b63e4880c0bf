"""How much one order's ncu figures move between runs of the same kernel on the same GPU, against the simulator's
prediction of it and the single run the validation table holds (CPU only; reads committed JSON).

    python benchmarks/sim_validation/repeat_spread.py OUT_JSON REPEAT_ROWS_JSON VALIDATION_JSON
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from swizzlelab.io import atomic_write_text

TIE_PP = 1.0  # validate.py's fixed tie threshold


def kendall(predicted: list[float], measured: list[float], tie_pp: float) -> float | None:
    """Kendall's tau over the pairs whose measured values differ by at least `tie_pp` (a predicted tie of a measured
    difference counts against the model), as validate.py's `kendall_tau_hit_1pp`."""
    good = bad = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            if abs(measured[i] - measured[j]) < tie_pp:
                continue
            if (predicted[i] - predicted[j]) * (measured[i] - measured[j]) > 0:
                good += 1
            else:
                bad += 1
    return (good - bad) / (good + bad) if good + bad else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("repeats")
    parser.add_argument("validation")
    args = parser.parse_args(argv)
    repeats = json.loads(Path(args.repeats).read_text())
    validation = json.loads(Path(args.validation).read_text())
    device = repeats["device"]

    def key(row: dict[str, Any]) -> tuple[str, str, str]:
        return row["task"], json.dumps({k: v for k, v in row["case"].items() if k != "seed"}, sort_keys=True), row["order"]

    table = {key(r): r for r in validation["rows"] if r["device"] == device}
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in repeats["rows"]:
        runs[key(row)].append(row)
    cases: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for k, rows in runs.items():
        hits = [r["measured_l2_hit_pct"] for r in rows]
        reads = [r["measured_dram_read_bytes"] for r in rows]
        ref = table[k]
        cases[f"{k[0]} {k[1]}"].append({
            "order": k[2], "runs": len(rows), "measured_l2_hit_pct": hits, "measured_dram_read_bytes": reads,
            "hit_mean": sum(hits) / len(hits), "hit_range_pp": max(hits) - min(hits),
            "dram_mean": sum(reads) / len(reads), "dram_range_rel": (max(reads) - min(reads)) / min(reads),
            "table_measured_l2_hit_pct": ref["measured_l2_hit_pct"],
            "table_measured_dram_read_bytes": ref["measured_dram_read_bytes"],
            "predicted_l2_hit_pct": ref["predicted_l2_hit_pct"],
            "predicted_dram_read_bytes": ref["predicted_dram_read_bytes"],
        })
    summary = {}
    for name, orders in cases.items():
        pred = [o["predicted_l2_hit_pct"] for o in orders]
        n_runs = min(o["runs"] for o in orders)
        per_run = [kendall(pred, [o["measured_l2_hit_pct"][i] for o in orders], TIE_PP) for i in range(n_runs)]
        summary[name] = {
            "tau_hit_vs_each_run": per_run,
            "tau_hit_vs_table_run": kendall(pred, [o["table_measured_l2_hit_pct"] for o in orders], TIE_PP),
            "tau_hit_vs_run_mean": kendall(pred, [o["hit_mean"] for o in orders], TIE_PP),
            "mae_hit_vs_run_mean_pp": sum(abs(o["predicted_l2_hit_pct"] - o["hit_mean"]) for o in orders) / len(orders),
            "mae_hit_vs_table_run_pp": sum(abs(o["predicted_l2_hit_pct"] - o["table_measured_l2_hit_pct"])
                                           for o in orders) / len(orders),
            "largest_hit_range_pp": max(o["hit_range_pp"] for o in orders),
            "largest_dram_range_rel": max(o["dram_range_rel"] for o in orders),
            "orders": orders,
        }
    record = {"script": "benchmarks/sim_validation/repeat_spread.py",
              "command": " ".join(["python", "benchmarks/sim_validation/repeat_spread.py", *argv]),
              "device": device, "measured_by": f"measured ({device}, ncu; {repeats['command']})",
              "predicted_by": "predicted (validation JSON's rows: " + validation["command"] + ")",
              "tie_pp": TIE_PP, "cases": summary}
    atomic_write_text(args.out, json.dumps(record, indent=1))
    for name, s in summary.items():
        print(f"{name}: tau vs each run {s['tau_hit_vs_each_run']}, vs the table's run {s['tau_hit_vs_table_run']}, "
              f"vs the runs' mean {s['tau_hit_vs_run_mean']}; hit range up to {s['largest_hit_range_pp']:.1f} pp, "
              f"DRAM up to {100 * s['largest_dram_range_rel']:.0f}%; MAE vs mean {s['mae_hit_vs_run_mean_pp']:.2f} pp")
        for o in s["orders"]:
            print(f"   {o['order']:<20} runs {['%.1f' % h for h in o['measured_l2_hit_pct']]} table "
                  f"{o['table_measured_l2_hit_pct']:.1f} predicted {o['predicted_l2_hit_pct']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
