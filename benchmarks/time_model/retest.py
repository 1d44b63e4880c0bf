"""How far the study's measured speedups move when the same order is timed again in another session: the orders that
benchmarks/task_orders_h100 and benchmarks/attention_orders_h100 also timed on an H100, set against the study's rows.

    python benchmarks/time_model/retest.py benchmarks/time_model/time_model_h100.json benchmarks/time_model/retest_h100.json

Both earlier studies timed each order on its own (its mean over repeated runs, L2 flushed before each run), at an
earlier commit of the kernels; the study times each order interleaved A/B against the kernel's own order. The log
difference of the two speedups is an upper bound of one session's reproducibility (it includes kernel changes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from swizzlelab.io import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
EARLIER = (ROOT / "benchmarks/task_orders_h100/task_orders_h100.json",
           ROOT / "benchmarks/attention_orders_h100/attention_orders_h100.json")
# The kernel's own order of each task, as the earlier studies named it.
OWN_ORDER = {"matmul": "grouped:GROUP_M=8"}


def _case_text(task: str, case: dict[str, Any]) -> str:
    return task + json.dumps(case, sort_keys=True)


def earlier_times(paths: tuple[Path, ...] = EARLIER) -> dict[str, dict[str, float]]:
    """case -> order -> mean ms, from both earlier studies' files (measured, NVIDIA H100 80GB HBM3)."""
    out: dict[str, dict[str, float]] = {}
    for path in paths:
        data = json.loads(path.read_text())
        for result in data["results"]:
            if "cases" in result:  # attention_orders: task -> cases -> orders
                for case in result["cases"]:
                    times = out.setdefault(_case_text(result["task"], case["case"]), {})
                    times.update({o["order"]: o["timing"]["mean_ms"] for o in case["orders"] if o.get("timing")})
            elif result.get("timing"):
                times = out.setdefault(_case_text(result["task"], result["case"]), {})
                times[result["order"]] = result["timing"]["mean_ms"]
    return out


def pairs(study: dict[str, Any], plan_cases: dict[str, dict[str, Any]],
          earlier: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """The study's rows whose order (and the kernel's own) an earlier study also timed."""
    out = []
    for row in study["rows"]:
        case = plan_cases.get(row["case"])
        if case is None:
            continue
        times = earlier.get(_case_text(row["task"], case))
        if not times:
            continue
        own = OWN_ORDER.get(row["task"], "identity")
        order = row["order"].replace("identity1d", "identity")
        if own not in times or order not in times or order == own:
            continue
        before = times[own] / times[order]
        out.append({"task": row["task"], "case": row["case"], "order": row["order"],
                    "study_speedup": row["measured_speedup"], "earlier_speedup": before,
                    "log_difference": math.log(row["measured_speedup"]) - math.log(before)})
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the study's summary (fit.py's output)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--plan", type=Path, default=ROOT / "benchmarks/time_model/plan_h100.json")
    args = parser.parse_args(argv)
    study = json.loads(args.study.read_text())
    plan = json.loads(args.plan.read_text())
    plan_cases = {f"{c['task']} bench:{c['bench']} {' '.join(c['sizes'])}".strip(): c["case"] for c in plan["cases"]}
    found = pairs(study, plan_cases, earlier_times())
    diffs = np.array([p["log_difference"] for p in found])
    summary = {"pairs": len(found),
               "median_abs_log_difference": float(np.median(np.abs(diffs))) if found else None,
               "rms_log_difference": float(np.sqrt(np.mean(diffs ** 2))) if found else None,
               "per_session_sd_if_independent": float(np.sqrt(np.mean(diffs ** 2) / 2)) if found else None}
    result = {"script": "benchmarks/time_model/retest.py", "command": "python benchmarks/time_model/retest.py "
              + " ".join(argv), "device": study.get("device", []), "measured": "measured (NVIDIA H100 80GB HBM3): both sides; the earlier side at an "
              "earlier commit, each order timed alone", "sources": [str(p.relative_to(ROOT)) for p in EARLIER],
              "summary": summary, "pairs": found}
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print("speedups measured (NVIDIA H100 80GB HBM3) by this study and by an earlier one:")
    for p in found:
        print(f"{p['case']:42s} {p['order']:22s} study {p['study_speedup']:.3f} earlier {p['earlier_speedup']:.3f} "
              f"log diff {p['log_difference']:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
