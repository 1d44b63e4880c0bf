"""Replays the H100's measured matmul timelines (timeline_probe.py) through the simulator's cache model in place of
its progress model, and sets both against ncu: which part of the simulator's error is the cache, which the schedule.

    python -m benchmarks.sim_validation.replay OUT_JSON TIMELINES ROWS_JSON VALIDATION_JSON [--near hash,sm_half,...]

TIMELINES: timeline_h100_raw.npz (or the probe's folder); ROWS_JSON: the ncu rows of the same GPU; VALIDATION_JSON:
sim_validation.json, whose default-model predictions of the same rows are copied beside the replays. CPU only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.lab.timelines import NEAR_MAPS, load_timelines, near_of, order_key, order_table, stamped_schedule
from benchmarks.lab.validation import lookup_deficit, model_name, tau_untied
from swizzlelab.hw import get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import Engine, Schedule, SimParams, footprint_of, kernels, simulate
from swizzlelab.tasks import load_task

# The L2 request coalescer's window (median step lengths of the measured schedule) is fitted here on the square
# case (8192^3, the validation's fit part) against ncu's lookup deficit, and the other cases are held out.
LRC_WINDOWS = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
FIT_CASES = ("8192x8192x8192",)


def measured_schedule(data: dict[str, np.ndarray], order: str, tile_step_ptr: np.ndarray, perm: np.ndarray,
                      near: np.ndarray) -> tuple[Schedule, float]:
    """The steps as the H100 started them (k-step stamps of every program), times in median step lengths."""
    key = order_key(order)
    return stamped_schedule(data[f"{key}_r0_start"], data[f"{key}_r0_step"], order, tile_step_ptr, perm, near)


def coalesced_sectors(trace, schedule: Schedule, model, window: float, step_tile: np.ndarray, n_lines: int) -> int:
    """Sectors the L2 request coalescer merges on a given schedule (kernels.coalesce_reads, as simulate runs it);
    `step_tile` (each step's tile) and `n_lines` (the trace's distinct lines) are the case's, made once for all its
    schedules and windows."""
    return int(kernels.coalesce_reads(
        np.asarray(trace.lines), np.asarray(trace.sector_mask), np.asarray(trace.is_write), np.asarray(trace.step_ptr),
        schedule.steps, schedule.near.astype(np.int64), schedule.start, step_tile, np.int64(model.l2_partitions),
        np.float64(window), np.int64(n_lines), kernels.popcount_table(),
        np.int64((1 << (model.line_bytes // model.sector_bytes)) - 1)))


def summarize(out_rows: list[dict], first: str) -> dict:
    """Errors of every replay (near map, coalescer window) and of the default model against ncu, fit / held-out /
    all rows; the window fitted on the fit rows; Kendall tau of the orders per case (pairs measured < 1 pp apart are
    ties and count in no tau)."""
    summary: dict = {}
    for part in ("fit", "held_out", "all"):
        rows = [r for r in out_rows if part in ("all", r["set"])]
        for label in rows[0]["replayed"] if rows else ():
            runs = [r for r in rows if label in r["replayed"]]
            dram = [abs(r["replayed"][label]["dram_read_bytes"] / r["measured_dram_read_bytes"] - 1) for r in runs]
            hit = [abs(r["replayed"][label]["l2_hit_pct"] - r["measured_l2_hit_pct"]) for r in runs]
            fabric = [abs(r["replayed"][label]["fabric_per_requested"] - r["measured_fabric_per_requested"])
                      for r in runs if r["measured_fabric_per_requested"] is not None]
            deficit = [abs(r["replayed"][label]["coalesced_share"] - r["measured_lookup_deficit"]) for r in runs]
            summary.setdefault(part, {})[label] = {
                "rows": len(runs), "l2_hit_mae_pp": round(float(np.mean(hit)), 2),
                "dram_read_mean_rel_error": round(float(np.mean(dram)), 4),
                "fabric_per_requested_mae": round(float(np.mean(fabric)), 4) if fabric else None,
                "lookup_deficit_mae": round(float(np.mean(deficit)), 4)}
        with_default = [r for r in rows if r["default_model_l2_hit_pct"] is not None]
        if with_default:
            summary[part]["default_model"] = {
                "rows": len(with_default),
                "l2_hit_mae_pp": round(float(np.mean([abs(r["default_model_l2_hit_pct"] - r["measured_l2_hit_pct"])
                                                      for r in with_default])), 2),
                "dram_read_mean_rel_error": round(float(np.mean([
                    abs(r["default_model_dram_read_bytes"] / r["measured_dram_read_bytes"] - 1)
                    for r in with_default])), 4)}
    fit = summary.get("fit", {})
    best = min((w for w in LRC_WINDOWS if f"{first},lrc{w:g}" in fit),
               key=lambda w: fit[f"{first},lrc{w:g}"]["l2_hit_mae_pp"], default=None)
    summary["fitted_lrc_window"] = best
    taus = {}
    for case in sorted({json.dumps(r["case"], sort_keys=True) for r in out_rows}):
        rows = [r for r in out_rows if json.dumps(r["case"], sort_keys=True) == case]
        measured = [r["measured_l2_hit_pct"] for r in rows]

        def tied(i, j, measured=measured):
            return abs(measured[i] - measured[j]) < 1.0

        name = "x".join(str(json.loads(case)[d]) for d in ("m", "n", "k"))
        taus[name] = {
            "replay_fitted_window": tau_untied([r["replayed"][f"{first},lrc{best:g}"]["l2_hit_pct"] for r in rows],
                                               measured, tied)["tau"] if best is not None else None,
            "default_model": tau_untied([r["default_model_l2_hit_pct"] for r in rows], measured, tied)["tau"]
            if all(r["default_model_l2_hit_pct"] is not None for r in rows) else None}
    summary["kendall_tau_hit_per_case"] = taus
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("timelines")
    parser.add_argument("rows")
    parser.add_argument("validation")
    parser.add_argument("--near", default=",".join(NEAR_MAPS))
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--resummarize", action="store_true",
                        help="recompute the summary of OUT_JSON's stored rows (no simulation)")
    args = parser.parse_args(argv)
    if args.resummarize:
        record = json.loads(Path(args.out).read_text())
        record["summary"] = summarize(record["rows"], record["near_maps"][0])
        atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
        print(json.dumps(record["summary"]["kendall_tau_hit_per_case"], indent=1))
        return 0
    started = time.time()
    timelines = load_timelines(Path(args.timelines))
    ncu = json.loads(Path(args.rows).read_text())
    device = ncu["device"]
    model = get_model(model_name(device))
    validation = json.loads(Path(args.validation).read_text())
    default = {(json.dumps(r["case"], sort_keys=True), r["order"]): r for r in validation["rows"]
               if r["device"] == device}
    task = load_task("matmul")
    out_rows = []
    for case_name, data in timelines.items():
        m, n, k = (int(v) for v in case_name.split("x"))
        rows = [r for r in ncu["rows"] if r["task"] == "matmul"
                and (r["case"]["m"], r["case"]["n"], r["case"]["k"]) == (m, n, k)]
        if not rows:
            continue
        case = rows[0]["case"]  # the seed only picks input values: the trace is the same for any
        trace = task.access_model(case, config=task.kernel.GPU_CONFIG)
        tile_step_ptr = np.asarray(trace.tile_step_ptr, dtype=np.int64)
        step_tile = np.repeat(np.arange(tile_step_ptr.size - 1, dtype=np.int64), np.diff(tile_step_ptr))
        footprint = footprint_of(trace)
        for row in rows:
            order = row["order"]
            if f"{order_key(order)}_r0_start" not in data:
                continue
            perm = order_table(order, m, n, k)
            sm = data[f"{order_key(order)}_r0_sm"]
            requested = None
            replays = {}
            for i, mode in enumerate(args.near.split(",")):
                schedule, step_ns = measured_schedule(data, order, tile_step_ptr, perm, near_of(mode, sm,
                                                                                                 model.l2_partitions))
                res = simulate(trace, perm, model, SimParams(lrc_window=0.0), Engine(workers=args.workers),
                               occupancy=int(row["occupancy"]), schedule=schedule, footprint=footprint)
                requested = res.requested_bytes // model.sector_bytes
                lookups = sum(d.lookup_sectors for d in res.per_domain)
                hits = sum(d.hit_sectors for d in res.per_domain)
                # The coalescer leaves the engine's DRAM traffic alone and removes one lookup and one hit per
                # merged sector (simulate does the same), so one engine run serves every window; the windows are
                # taken for the first near map only (the maps agree within 0.4 pp, below).
                for window in LRC_WINDOWS if i == 0 else (0.0,):
                    merged = (coalesced_sectors(trace, schedule, model, window, step_tile, footprint[0])
                              if window else 0)
                    replays[f"{mode},lrc{window:g}"] = {
                        "l2_hit_pct": round(100 * (hits - merged) / (lookups - merged), 2),
                        "dram_read_bytes": res.dram_read_bytes,
                        "fabric_per_requested": round(res.fabric_bytes / res.requested_bytes, 4),
                        "coalesced_share": round(merged / requested, 4),
                    }
                print(f"{case_name} {order} near {mode}: replayed (measured H100 schedule, model {model.name}) "
                      f"{replays[f'{mode},lrc0'] } | measured (ncu, {device}) {row['measured_l2_hit_pct']}% "
                      f"{row['measured_dram_read_bytes'] / 1e9:.2f} GB", flush=True)
            counters = row["counters"]
            fab = counters.get("lts__t_sectors_srcunit_ltcfabric.sum")
            pred = default.get((json.dumps(case, sort_keys=True), order), {})
            out_rows.append({
                "task": "matmul", "case": case, "order": order, "device": device, "occupancy": row["occupancy"],
                "median_step_ns": step_ns,
                "measured_l2_hit_pct": row["measured_l2_hit_pct"],
                "measured_dram_read_bytes": row["measured_dram_read_bytes"],
                "measured_fabric_per_requested": round(fab / requested, 4) if fab is not None else None,
                "measured_lookup_deficit": lookup_deficit(counters, requested),
                "default_model_l2_hit_pct": pred.get("predicted_l2_hit_pct"),
                "default_model_dram_read_bytes": pred.get("predicted_dram_read_bytes"),
                "replayed": replays,
            })
    for r in out_rows:
        r["set"] = "fit" if f"{r['case']['m']}x{r['case']['n']}x{r['case']['k']}" in FIT_CASES else "held_out"
    summary = summarize(out_rows, args.near.split(",")[0])
    record = {
        "script": "benchmarks/sim_validation/replay.py",
        "command": "python -m " + " ".join(["benchmarks.sim_validation.replay", *argv]),
        "kind": f"predicted (model {model.name}) from schedules measured on {device} (%globaltimer per k-step), "
                f"against ncu measurements on {device}",
        "device": device,
        "near_maps": args.near.split(","),
        "lrc_windows_mean_steps": list(LRC_WINDOWS),
        "summary": summary,
        "rows": out_rows,
        "elapsed_s": round(time.time() - started, 1),
    }
    atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
