"""Calibration of the L2 simulator against ncu measurements already taken: re-predict every measured row.

Reads a sim_vs_ncu_<tag>.json (benchmarks/sim_vs_ncu/run.py on a GPU), rebuilds each case's trace from the task's
analytic access model, simulates every order at the occupancy ncu measured with the current simulator, and
writes old predicted / new predicted / measured side by side, with the mean absolute error on the fit set
(the rows the progress model's one parameter, STEP_TIME_CV, was fitted on) and on the held-out rows, and the
ranking agreement per case. CPU only (~3-5 minutes with the matmul 8192^3 case; ~12 GB peak memory).

    python benchmarks/sim_calibration/run.py                     # -> benchmarks/sim_calibration/sim_calibration_h100.json
    python benchmarks/sim_calibration/run.py --fit-grid 0.3,0.4,0.5   # also sweep STEP_TIME_CV on the fit set
    python benchmarks/sim_calibration/run.py --only transpose --out /tmp/cal.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from swizzlelab.sim.agreement import ranking_agreement  # noqa: E402
from swizzlelab.sim import SimParams  # noqa: E402

HERE = Path(__file__).resolve().parent
# (task, m) of the cases the parameter was fitted on; every other row is held out (--fit-set overrides it).
FIT_SET = (("matmul", 8192),)


def case_key(row: dict[str, Any]) -> str:
    return json.dumps({"task": row["task"], **row["case"]}, sort_keys=True)


def in_fit_set(row: dict[str, Any], fit_set: tuple[tuple[str, int], ...]) -> bool:
    return any(row["task"] == task and row["case"].get("m") == m for task, m in fit_set)


def mean_abs(values: list[float]) -> float | None:
    return sum(abs(v) for v in values) / len(values) if values else None


def predict_case(rows: list[dict[str, Any]], model: Any, step_cvs: dict[str, float]) -> list[dict[str, dict]]:
    """For each row of one case: {label: prediction} for each named step_cv (one trace build per case)."""
    from swizzlelab.scenario import load_scenario
    from swizzlelab.sim import footprint_of, simulate

    scenario = load_scenario(rows[0]["task"], rows[0]["case"], target="h100")
    trace = scenario.trace
    footprint = footprint_of(trace)
    out = []
    for row in rows:
        perm = scenario.permutation(row["order"])
        if perm.id != row["permutation_id"]:
            raise SystemExit(f"{row['task']} {row['order']}: permutation {perm.id} differs from the measured "
                             f"{row['permutation_id']}: the order's formula changed since the measurement")
        preds = {}
        for label, cv in step_cvs.items():
            # This study fits the random walk's step_cv (the default progress model before the saturating one).
            res = simulate(trace, perm, model, SimParams(progress="random_walk", step_cv=cv),
                           occupancy=int(row["occupancy"]), footprint=footprint)
            preds[label] = {
                "step_cv": res.step_cv,
                "l2_hit_pct": 100 * res.l2_hit_rate,
                "dram_read_bytes": res.dram_read_bytes,
                "dram_write_bytes": res.dram_write_bytes,
                "l2_lookup_sectors": res.per_domain[0].lookup_sectors,
                "sim_s": res.elapsed_s,
            }
        out.append(preds)
    del trace
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measured", default=str(HERE.parent / "sim_vs_ncu" / "sim_vs_ncu_h100.json"),
                        help="a sim_vs_ncu_<tag>.json")
    parser.add_argument("--fit-set", default="", help="TASK:M,... cases the parameter is fitted on (default: "
                        + ",".join(f"{t}:{m}" for t, m in FIT_SET) + ")")
    parser.add_argument("--out", default=str(HERE / "sim_calibration_h100.json"))
    parser.add_argument("--fit-grid", default="", help="comma list of STEP_TIME_CV values to sweep on the fit set")
    parser.add_argument("--only", default=None, help="comma list of task names (default: all rows)")
    args = parser.parse_args(argv)
    fit_set = FIT_SET
    if args.fit_set:
        fit_set = tuple((t, int(m)) for t, _, m in (item.partition(":") for item in args.fit_set.split(",")))

    from swizzlelab.hw import get_model
    from swizzlelab.io import atomic_write_text
    from swizzlelab.sim.params import STEP_TIME_CV

    measured_record = json.loads(Path(args.measured).read_text())
    rows = [r for r in measured_record["rows"] if r.get("measured_l2_hit_pct") is not None]
    if args.only:
        keep = set(args.only.split(","))
        rows = [r for r in rows if r["task"] in keep]
    model = get_model(measured_record.get("model", "h100"))
    grid_cvs = [float(v) for v in args.fit_grid.split(",") if v.strip()]
    started = time.time()

    cases: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        cases.setdefault(case_key(row), []).append(row)
    out_rows: list[dict[str, Any]] = []
    sweep: dict[float, list[float]] = {cv: [] for cv in grid_cvs}
    case_summaries = []
    for key, case_rows in cases.items():
        t0 = time.time()
        step_cvs = {"new": STEP_TIME_CV, "lockstep": 0.0}
        fit = in_fit_set(case_rows[0], fit_set)
        if fit:
            step_cvs.update({f"cv={cv:g}": cv for cv in grid_cvs})
        preds = predict_case(case_rows, model, step_cvs)
        for row, pred in zip(case_rows, preds):
            measured_hit = float(row["measured_l2_hit_pct"])
            measured_read = float(row["measured_dram_read_bytes"])
            new = pred["new"]
            out_rows.append({
                "task": row["task"], "case": row["case"], "order": row["order"], "occupancy": row["occupancy"],
                "set": "fit" if fit else "held_out",
                "measured_l2_hit_pct": measured_hit,
                "old_predicted_l2_hit_pct": row["predicted_l2_hit_pct"],
                "new_predicted_l2_hit_pct": new["l2_hit_pct"],
                "lockstep_new_counting_l2_hit_pct": pred["lockstep"]["l2_hit_pct"],
                "measured_dram_read_bytes": measured_read,
                "old_predicted_dram_read_bytes": row["predicted_dram_read_bytes"],
                "new_predicted_dram_read_bytes": new["dram_read_bytes"],
                "lockstep_new_counting_dram_read_bytes": pred["lockstep"]["dram_read_bytes"],
                "measured_l2_sectors": row.get("measured_l2_sectors"),
                "old_predicted_l2_lookup_sectors": row.get("predicted_l2_lookup_sectors"),
                "new_predicted_l2_lookup_sectors": new["l2_lookup_sectors"],
                "new_error_pp": new["l2_hit_pct"] - measured_hit,
                "old_error_pp": row["predicted_l2_hit_pct"] - measured_hit,
                "new_dram_read_ratio": new["dram_read_bytes"] / measured_read if measured_read else None,
                "old_dram_read_ratio": row["predicted_dram_read_bytes"] / measured_read if measured_read else None,
                "sweep_l2_hit_pct": {k: v["l2_hit_pct"] for k, v in pred.items() if k.startswith("cv=")},
                "sweep_dram_read_bytes": {k: v["dram_read_bytes"] for k, v in pred.items() if k.startswith("cv=")},
                "measured_by": row.get("measured_by"),
                "predicted_by": f"predicted (model {model.name}, step_cv {new['step_cv']:g})",
            })
            for cv in grid_cvs if fit else ():
                sweep[cv].append(pred[f"cv={cv:g}"]["l2_hit_pct"] - measured_hit)
        mine = out_rows[-len(case_rows):]
        measured = [r["measured_l2_hit_pct"] for r in mine]
        case_summaries.append({
            "task": case_rows[0]["task"], "case": case_rows[0]["case"], "set": "fit" if fit else "held_out",
            "old_mae_pp": mean_abs([r["old_error_pp"] for r in mine]),
            "new_mae_pp": mean_abs([r["new_error_pp"] for r in mine]),
            "old_ranking": ranking_agreement([r["old_predicted_l2_hit_pct"] for r in mine], measured),
            "new_ranking": ranking_agreement([r["new_predicted_l2_hit_pct"] for r in mine], measured),
            "seconds": time.time() - t0,
        })
        print_case(case_summaries[-1], mine, model.name, measured_record.get("device", "?"))

    def set_mae(name: str | None, field: str) -> float | None:
        return mean_abs([r[field] for r in out_rows if name is None or r["set"] == name])

    summary = {
        "fit_set": [f"{task} m={m}" for task, m in fit_set],
        "step_time_cv": STEP_TIME_CV,
        "old_mae_pp": {"fit": set_mae("fit", "old_error_pp"), "held_out": set_mae("held_out", "old_error_pp"),
                       "all": set_mae(None, "old_error_pp")},
        "new_mae_pp": {"fit": set_mae("fit", "new_error_pp"), "held_out": set_mae("held_out", "new_error_pp"),
                       "all": set_mae(None, "new_error_pp")},
        "new_rankings_match_every_case": all(c["new_ranking"]["ranking_matches"] is not False for c in case_summaries),
        "old_rankings_match_every_case": all(c["old_ranking"]["ranking_matches"] is not False for c in case_summaries),
        "fit_sweep_mae_pp": {f"{cv:g}": mean_abs(errors) for cv, errors in sweep.items()},
    }
    record = {
        "script": "benchmarks/sim_calibration/run.py",
        "command": " ".join([Path(sys.executable).name, "benchmarks/sim_calibration/run.py", *argv]),
        "host": f"{platform.processor() or platform.machine()} (CPU; predictions only)",
        "measured_file": str(Path(args.measured).name),
        "measured_device": measured_record.get("device"),
        "model": model.name,
        "note": ("measured_* are ncu measurements on the device named; old_predicted_* are the simulator's "
                 "predictions stored in the measured file; new_predicted_* are predictions of the current "
                 "simulator (progress model with STEP_TIME_CV, far stores counted near and at home); "
                 "lockstep_new_counting_* isolate the counting fix (step_cv = 0)"),
        "summary": summary,
        "cases": case_summaries,
        "rows": out_rows,
        "elapsed_s": time.time() - started,
    }
    atomic_write_text(args.out, json.dumps(record, indent=2, default=str))
    old, new = summary["old_mae_pp"], summary["new_mae_pp"]
    print(f"\nMAE L2 hit, old -> new (pp): fit {old['fit']} -> {new['fit']}, held-out {old['held_out']} -> "
          f"{new['held_out']}, all {old['all']} -> {new['all']}".replace("None", "-"))
    print(f"rankings match ncu in every case: old {summary['old_rankings_match_every_case']}, "
          f"new {summary['new_rankings_match_every_case']}; STEP_TIME_CV = {STEP_TIME_CV}")
    if grid_cvs:
        print("fit-set MAE by step_cv: " + ", ".join(f"{k}: {v:.2f}" for k, v in summary["fit_sweep_mae_pp"].items()
                                                    if v is not None))
    print(f"wrote {args.out}")
    return 0


def print_case(summary: dict[str, Any], rows: list[dict[str, Any]], model: str, device: str) -> None:
    sizes = " ".join(f"{k}={v}" for k, v in summary["case"].items() if k != "seed")
    print(f"\n{summary['task']} {sizes} [{summary['set']}]   predicted (model {model}) vs measured ({device}, ncu)")
    print(f"{'order':<20}{'occ':>4}{'old hit%':>10}{'new hit%':>10}{'meas hit%':>11}"
          f"{'old rd GB':>11}{'new rd GB':>11}{'meas rd GB':>12}")
    for r in rows:
        print(f"{r['order']:<20}{r['occupancy']:>4}{r['old_predicted_l2_hit_pct']:>10.1f}"
              f"{r['new_predicted_l2_hit_pct']:>10.1f}{r['measured_l2_hit_pct']:>11.1f}"
              f"{r['old_predicted_dram_read_bytes'] / 1e9:>11.3f}{r['new_predicted_dram_read_bytes'] / 1e9:>11.3f}"
              f"{r['measured_dram_read_bytes'] / 1e9:>12.3f}")
    new_rank = summary["new_ranking"]
    print(f"MAE old {summary['old_mae_pp']:.2f} pp -> new {summary['new_mae_pp']:.2f} pp; ranking matches: "
          f"{new_rank['ranking_matches']} ({new_rank['pairs_concordant']} pairs agree, "
          f"{new_rank['pairs_discordant']} disagree)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
