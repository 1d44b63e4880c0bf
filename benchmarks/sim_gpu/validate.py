"""Simulator vs ncu validation table: predictions of the current model for every measured row, a parameter fit
on one part (matmul 8192 and 4096) and the held-out part reported separately.

    python benchmarks/sim_gpu/validate.py MEASURED_JSON OUT_JSON [--cv-grid 0.3,0.4,0.5]
MEASURED_JSON comes from benchmarks/sim_gpu/run.py (committed rows: run_h100.py, its earlier name) on the GPU host (ncu rows, measured). The fitted
parameter is the progress model's step-time spread (cv); it is chosen by the fit rows' mean |error| of L2 hit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from scipy.stats import kendalltau

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from swizzlelab.hw import get_model  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.sim import footprint_of, simulate  # noqa: E402
from swizzlelab.sim.simulate import STEP_TIME_CV  # noqa: E402
from swizzlelab.swizzle import to_permutation  # noqa: E402
from swizzlelab.tasks import load_task  # noqa: E402


def fit_set(row: dict[str, Any]) -> str:
    case = row["case"]
    is_fit = row["task"] == "matmul" and case.get("m") == case.get("n") == case.get("k")
    return "fit" if is_fit else "held_out"


def case_key(row: dict[str, Any]) -> str:
    return row["task"] + " " + " ".join(f"{k}={v}" for k, v in row["case"].items() if k != "seed")


def _cache_key(row: dict[str, Any], cv: float) -> str:
    return json.dumps([row["task"], row["case"], row["order"], int(row["occupancy"]), cv], sort_keys=True)


def predict_rows(rows: list[dict[str, Any]], model_name: str, cvs: list[float], cache_path: str | None = None,
                 workers: int | None = None) -> None:
    """Adds predictions at every cv in `cvs` to each row (one trace per case); `cache_path` keeps them between
    runs (written after each prediction), so a long validation can be resumed or split over processes."""
    cache: dict[str, Any] = {}
    if cache_path and Path(cache_path).exists():
        cache = json.loads(Path(cache_path).read_text())
    by_case: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_case[case_key(row)].append(row)
    model = get_model(model_name)
    for key, case_rows in by_case.items():
        t0 = time.time()
        for row in case_rows:
            row.setdefault("predictions", {})
        todo = [(row, cv) for row in case_rows for cv in cvs if _cache_key(row, cv) not in cache]
        if todo:
            task = load_task(case_rows[0]["task"])
            case = case_rows[0]["case"]
            config = task.kernel.GPU_CONFIG
            trace = task.access_model(case, config=config)
            footprint = footprint_of(trace)
            grid = task.tile_grid(case, config)
            args, consts = task.swizzle_args(case, config)
            for row, cv in todo:
                perm = to_permutation(task.parse_order(row["order"]), grid, args, consts)
                res = simulate(trace, perm, model, occupancy=int(row["occupancy"]), footprint=footprint, step_cv=cv,
                               workers=workers)
                if cache_path and Path(cache_path).exists():  # another process may have added entries
                    cache.update(json.loads(Path(cache_path).read_text()))
                cache[_cache_key(row, cv)] = {"l2_hit_pct": 100 * res.l2_hit_rate,
                                              "dram_read_bytes": int(res.dram_read_bytes)}
                if cache_path:
                    atomic_write_text(cache_path, json.dumps(cache))
            del trace
        for row in case_rows:
            for cv in cvs:
                row["predictions"][str(cv)] = cache[_cache_key(row, cv)]
        print(f"{key}: {len(case_rows)} orders predicted in {time.time() - t0:.0f} s", flush=True)


def mae(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(rows: list[dict[str, Any]], part: str) -> dict[str, Any]:
    chosen = [r for r in rows if r["set"] == part]
    hit = [abs(r["predicted_l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in chosen]
    dram = [abs(r["predicted_dram_read_bytes"] - r["measured_dram_read_bytes"]) / r["measured_dram_read_bytes"]
            for r in chosen if r["measured_dram_read_bytes"]]
    taus = {}
    by_case: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in chosen:
        by_case[case_key(r)].append(r)
    for key, case_rows in by_case.items():
        tau_hit = kendalltau([r["predicted_l2_hit_pct"] for r in case_rows],
                             [r["measured_l2_hit_pct"] for r in case_rows]).statistic
        tau_dram = kendalltau([r["predicted_dram_read_bytes"] for r in case_rows],
                              [r["measured_dram_read_bytes"] for r in case_rows]).statistic
        taus[key] = {"kendall_tau_hit": tau_hit, "kendall_tau_dram_read": tau_dram, "n_orders": len(case_rows),
                     "mae_hit_pp": mae([abs(r["predicted_l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in case_rows]),
                     "measured_hit_spread_pp": max(r["measured_l2_hit_pct"] for r in case_rows)
                     - min(r["measured_l2_hit_pct"] for r in case_rows)}
    return {"rows": len(chosen), "mae_l2_hit_pp": mae(hit), "mean_rel_error_dram_read": mae(dram), "cases": taus}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("measured")
    parser.add_argument("out")
    parser.add_argument("--cv-grid", default=f"{STEP_TIME_CV}")
    parser.add_argument("--model", default="h100")
    parser.add_argument("--cache", default=None, help="JSON file of predictions kept between runs")
    parser.add_argument("--only", choices=("fit", "held_out"), default=None,
                        help="predict only this part at --cv-grid and stop (to fill the cache in parallel)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    measured = json.loads(Path(args.measured).read_text())
    rows = [r for r in measured["rows"] if r.get("measured_l2_hit_pct") is not None]
    cvs = [float(v) for v in args.cv_grid.split(",")]
    started = time.time()
    for r in rows:
        r["set"] = fit_set(r)
    fit_rows = [r for r in rows if r["set"] == "fit"]
    if args.only:
        part = [r for r in rows if r["set"] == args.only]
        part.sort(key=lambda r: r["task"] == "matmul")  # cheap cases first
        predict_rows(part, args.model, cvs, args.cache, args.workers)
        return 0
    # The fit part is predicted at every cv of the grid; the held-out part only at the fitted one.
    predict_rows(fit_rows, args.model, cvs, args.cache, args.workers)
    sweep = {str(cv): mae([abs(r["predictions"][str(cv)]["l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in fit_rows])
             for cv in cvs}
    best_cv = min(cvs, key=lambda cv: sweep[str(cv)])
    print(f"fit sweep (MAE L2 hit pp by step_cv): {sweep}; fitted step_cv {best_cv}", flush=True)
    predict_rows([r for r in rows if r["set"] == "held_out"], args.model, [best_cv], args.cache, args.workers)
    model = get_model(args.model)
    out_rows = []
    for r in rows:
        p = r["predictions"][str(best_cv)]
        out_rows.append({
            "task": r["task"], "case": r["case"], "order": r["order"], "device": r["device"], "set": r["set"],
            "occupancy": r["occupancy"],
            "predicted_l2_hit_pct": p["l2_hit_pct"], "measured_l2_hit_pct": r["measured_l2_hit_pct"],
            "predicted_dram_read_bytes": p["dram_read_bytes"], "measured_dram_read_bytes": r["measured_dram_read_bytes"],
            "output_correct": r["output_correct"],
            "predicted_by": f"predicted (model {model.name}, {model.l2_ways}-way, step_cv {best_cv})",
            "measured_by": f"measured ({r['device']}, ncu)",
            "sweep": r["predictions"],
        })
    record = {
        "script": "benchmarks/sim_gpu/validate.py",
        "command": " ".join(["python", "benchmarks/sim_gpu/validate.py", *argv]),
        "measured_file": args.measured, "measured_script": measured.get("script"),
        "measured_command": measured.get("command"), "device": measured.get("device"),
        "model": model.name, "l2_ways": model.l2_ways, "fit_parameter": "step_cv", "fit_grid": cvs,
        "fit_sweep_mae_pp": sweep, "fitted_step_cv": best_cv,
        "fit_rule": "set 'fit' = square matmul cases; the cv with the lowest fit-set MAE (L2 hit) is used for all rows",
        "fit": summarize(out_rows, "fit"), "held_out": summarize(out_rows, "held_out"),
        "targets": {"held_out_mae_l2_hit_pp": 3.0, "held_out_mean_rel_error_dram_read": 0.10,
                    "kendall_tau_per_case": 0.8},
        "failures": measured.get("failures"), "rows": out_rows, "elapsed_s": time.time() - started,
    }
    atomic_write_text(args.out, json.dumps(record, indent=1, default=str))
    for part in ("fit", "held_out"):
        s = record[part]
        print(f"{part}: {s['rows']} rows, MAE hit {s['mae_l2_hit_pp']} pp, DRAM read rel err {s['mean_rel_error_dram_read']}")
        for key, c in s["cases"].items():
            print(f"   {key}: tau hit {c['kendall_tau_hit']}, tau dram {c['kendall_tau_dram_read']}, MAE {c['mae_hit_pp']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
