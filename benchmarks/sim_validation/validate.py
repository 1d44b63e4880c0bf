"""The simulator's validation table (issue 15, part 2): the current model's predictions for every ncu row measured
by benchmarks/sim_validation/run.py on the H100 and the H200, a parameter fit on one part, the rest held out.

    python -m benchmarks.sim_validation.validate OUT_JSON MEASURED_JSON... [--cv-grid 0.4,0.5,0.6]
        [--hit-grid 0,0.05] [--decay-grid 0,0.01] [--engine sets] [--cache FILE]
Each row is predicted with the model of its GPU (h100 / h200). The fitted parameters are the progress model's
step-time spread (step_cv), hit speedup (hit_speedup), drift decay (drift_decay), the coalescer's window
(lrc_window) and the saturating progress model's gpc_bound (SM pace, for tasks whose task.yml says l2_bound; "model":
each GPU model's own), dram_saturation and miss_gain (--saturation-grid 0: the random walk instead), chosen on a grid
by the fit rows' mean |error| of L2 hit (--fit-loss targets: with the DRAM error beside it); the held-out rows use
them unchanged. The defaults are the simulator's; the rules
themselves are in benchmarks/lab/validation.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.lab.validation import (
    MODEL_GPC, MODEL_PAGE, POINT_NAMES, TARGETS, TIE_DRAM_REL, TIE_PP, contention_of, effective, fit_loss, fit_set,
    gpc_text, l2_bound_evidence, lookup_deficit, merge_runs, noise_pp, page_text, point_label,
    predict_rows, program_cv_of, row_gpc_bound, row_model, row_page_noise, summarize)
from swizzlelab.hw import SET_MAPS
from swizzlelab.io import atomic_write_text
from swizzlelab.sim.params import (
    AGE_PRIORITY, DRAM_SATURATION, DRIFT_DECAY, HIT_SPEEDUP, LRC_WINDOW, SATURATION_MISS_GAIN, START_JITTER,
    STEP_TIME_CV, STEP_TIME_CV_SATURATING)
from swizzlelab.tasks import load_task


def _grid(text: str, option: str = "", model: float | None = None) -> list[float]:
    """A comma-separated grid of numbers ('model' standing for `model` where given); one line on a bad one."""
    try:
        return [model if model is not None and v.strip() == "model" else float(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"{option or 'a grid'} {text}: give numbers in 0..1"
                         + (" or 'model'" if model is not None else "")) from None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("measured", nargs="+")
    parser.add_argument("--cv-grid", default=f"{STEP_TIME_CV_SATURATING}",
                        help=f"step_cv values (the random walk's default is {STEP_TIME_CV})")
    parser.add_argument("--hit-grid", default=f"{HIT_SPEEDUP}", help="hit_speedup values (fitted with step_cv)")
    parser.add_argument("--decay-grid", default=f"{DRIFT_DECAY}",
                        help="drift_decay values (fitted with step_cv and hit_speedup)")
    parser.add_argument("--lrc-grid", default=f"{LRC_WINDOW}",
                        help="lrc_window values: the L2 request coalescer's window (fitted with the others)")
    parser.add_argument("--gpc-grid", default="model",
                        help="gpc_bound values (saturating progress model: SM pace of L2-bound tasks); 'model' = each "
                             "GPU model's own (HardwareModel.gpc_bound)")
    parser.add_argument("--saturation-grid", default=f"{DRAM_SATURATION}",
                        help="dram_saturation values (0 = the random-walk progress model)")
    parser.add_argument("--gain-grid", default=f"{SATURATION_MISS_GAIN}", help="miss_gain values")
    parser.add_argument("--set-map", choices=SET_MAPS, default=None,
                        help="predict every row with this L2 set map instead of its model's (HardwareModel.l2_set_map)")
    parser.add_argument("--capacity-grid", default="1.0",
                        help="capacity scales: the modelled L2 bytes over the model's (fitted with the others)")
    parser.add_argument("--engine", default="auto", choices=["auto", "sets", "gpu"],
                        help="simulator engine (sets: hit speedup by fixed-point passes; gpu: the sets engine on "
                             "the GPU, same results)")
    parser.add_argument("--hot-grid", default="0",
                        help="hot_load values of the contention progress model (0: the saturating model without its "
                             "contention terms; simulate's HOT_LOAD)")
    parser.add_argument("--age-grid", default=f"{AGE_PRIORITY}", help="age_priority values (contention model)")
    parser.add_argument("--jitter-grid", default=f"{START_JITTER}", help="start_jitter values (contention model)")
    parser.add_argument("--program-grid", default="0",
                        help="program_cv values of the contention model (a program's own pace; 0 = off)")
    parser.add_argument("--page-grid", default="model",
                        help="page_noise values of the contention model, or 'model' (each model's own, the default)")
    parser.add_argument("--fit-by", choices=["all", "device"], default="all",
                        help="all: one parameter point for every GPU; device: each GPU's own point, fitted on its own "
                             "fit rows (the H100's and the H200's DRAM differ in bandwidth, so where DRAM saturates "
                             "may too)")
    parser.add_argument("--fit-loss", choices=["hit", "targets"], default="hit",
                        help="hit: the fit rows' MAE of L2 hit; targets: that MAE over its target (3 pp) plus the "
                             "DRAM reads' mean relative error over its target (10%%), so both figures the issue "
                             "sets count on their own scale")
    parser.add_argument("--cache", default=None, help="JSON file of predictions kept between runs")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=1,
                        help="orders simulated at once (the CPUs split between them), as sim.simulate_many")
    args = parser.parse_args(argv)
    started = time.time()
    rows, sources = [], []
    for path in args.measured:
        measured = json.loads(Path(path).read_text())
        sources.append({k: measured.get(k) for k in ("device", "script", "command", "l2_cache_bytes", "sm_count",
                                                       "nvidia_smi", "ncu_version", "failures")} | {"file": path})
        rows += [r for r in measured["rows"] if r.get("measured_l2_hit_pct") is not None]
    cvs, hits, decays, lrcs = (_grid(g) for g in (args.cv_grid, args.hit_grid, args.decay_grid, args.lrc_grid))
    gpcs = _grid(args.gpc_grid, "--gpc-grid", MODEL_GPC)
    if any(not (0.0 <= v < 1.0 or v == MODEL_GPC) for v in gpcs):
        raise SystemExit(f"--gpc-grid {args.gpc_grid}: give numbers in 0..1 (1 excluded) or 'model'")
    sats, gains, scales, ages, hots, jitters = (_grid(g) for g in (
        args.saturation_grid, args.gain_grid, args.capacity_grid, args.age_grid, args.hot_grid, args.jitter_grid))
    pages = _grid(args.page_grid, "--page-grid", MODEL_PAGE)
    owns = _grid(args.program_grid, "--program-grid")
    points = sorted({(cv, hit, decay, lrc, gpc if sat else 0.0, sat, gain if sat else 0.0, scale,
                      *((age, hot, jitter, page, own) if sat and hot else (0.0, 0.0, 0.0, 0.0, 0.0)))
                     for cv in cvs for hit in hits for decay in decays for lrc in lrcs for gpc in gpcs for sat in sats
                     for gain in gains for scale in scales for age in ages for hot in hots for jitter in jitters
                     for page in pages for own in owns})
    cache: dict[str, Any] = {}
    if args.cache and Path(args.cache).exists():
        cache = json.loads(Path(args.cache).read_text())
    rows = merge_runs(rows)
    for r in rows:
        r["set"] = fit_set(r)
        if args.set_map:
            r["set_map"] = args.set_map
    fit_rows = [r for r in rows if r["set"] == "fit"]
    declared = {name: load_task(name).spec.l2_bound for name in sorted({r["task"] for r in rows})}
    predict_rows(fit_rows, points, cache, args.cache, args.workers, args.engine, args.concurrency)
    def group_of(row: dict[str, Any]) -> str:
        return "all" if args.fit_by == "all" else row["device"]

    groups = {group: [r for r in fit_rows if group_of(r) == group] for group in sorted({group_of(r) for r in rows})}
    if any(not members for members in groups.values()):
        raise SystemExit("--fit-by device: a GPU without fit rows (" + ", ".join(g for g, m in groups.items() if not m)
                         + ") cannot be fitted")
    sweeps = {group: {point_label(pt): fit_loss(members, pt, args.fit_loss) for pt in points}
              for group, members in groups.items()}
    bests = {group: min(points, key=lambda pt: sweeps[group][point_label(pt)]) for group in groups}
    for group, best in bests.items():
        print(f"fit sweep of {group} ({args.fit_loss} loss by step_cv[,h hit_speedup][,d drift_decay][,l lrc_window]"
              f"[,g gpc_bound,s dram_saturation,m miss_gain][,c capacity scale]): {sweeps[group]}; fitted "
              + ", ".join(f"{name} {value}" for name, value in zip(POINT_NAMES, best)), flush=True)

    held_out = [r for r in rows if r["set"] == "held_out"]
    for group, best in bests.items():
        predict_rows([r for r in held_out if group_of(r) == group], [best], cache, args.cache, args.workers,
                     args.engine, args.concurrency)
    out_rows = []
    for r in rows:
        best = bests[group_of(r)]
        best_cv, best_hit, best_decay, best_lrc, best_gpc, best_sat, best_gain, best_scale = best[:8]
        terms = contention_of(best)
        p = r["predictions"][point_label(best)]
        model = row_model(r)
        counters = r.get("counters") or {}
        out_rows.append({
            "task": r["task"], "case": r["case"], "order": r["order"], "device": r["device"], "set": r["set"],
            "occupancy": r["occupancy"],
            "predicted_l2_hit_pct": p["l2_hit_pct"], "measured_l2_hit_pct": r["measured_l2_hit_pct"],
            "predicted_dram_read_bytes": p["dram_read_bytes"], "measured_dram_read_bytes": r["measured_dram_read_bytes"],
            "measured_runs": r["measured_runs"], "measured_l2_hit_pct_runs": r["measured_l2_hit_pct_runs"],
            "measured_dram_read_bytes_runs": r["measured_dram_read_bytes_runs"],
            "predicted_dram_write_bytes": p["dram_write_bytes"],
            "measured_dram_write_bytes": r.get("measured_dram_write_bytes"),
            # ncu's hit rate is lookup_hit / lts__t_sectors; (hit + miss) / sectors far from 1 means the counters
            # came from replay passes that saw different traffic (docs/hit-rates.md).
            "measured_lookup_over_sectors": ((counters["lts__t_sectors_lookup_hit.sum"]
                                              + counters["lts__t_sectors_lookup_miss.sum"])
                                             / counters["lts__t_sectors.sum"])
            if counters.get("lts__t_sectors.sum") and "lts__t_sectors_lookup_miss.sum" in counters else None,
            "measured_noise_pp": noise_pp(r),
            # Requested sectors ncu's L2 did not look up (the coalescer's), measured and predicted (share of requests).
            "measured_lookup_deficit": lookup_deficit(counters, p.get("requested_bytes", 0) // model.sector_bytes),
            "predicted_coalesced_share": (p["coalesced_bytes"] / p["requested_bytes"]
                                          if p.get("requested_bytes") else None),
            "output_correct": r["output_correct"],
            "predicted_by": f"predicted (model {model.name}, {model.l2_ways}-way, "
                            + ("" if model.l2_set_map == "hash" else f"{model.l2_set_map} set map, ")
                            + f"step_cv {best_cv}, "
                            f"hit_speedup {best_hit}, drift_decay {best_decay}, lrc_window {best_lrc}, "
                            + (f"{'contention' if terms else 'saturating'} progress: gpc_bound "
                               f"{row_gpc_bound(r, effective(best, declared[r['task']])[4]):g}, "
                               f"dram_saturation {best_sat}, miss_gain {best_gain}, " if best_sat else
                               "random-walk progress, ")
                            + ("age_priority {}, hot_load {}, start_jitter {}, ".format(*terms) if terms else "")
                            + (f"page_noise {row_page_noise(r, best)}, " if row_page_noise(r, best) else "")
                            + (f"program_cv {program_cv_of(best)}, " if program_cv_of(best) else "")
                            + (f"L2 capacity x{best_scale}, " if best_scale != 1.0 else "") + f"engine {args.engine})",
            "predict_s": p.get("elapsed_s"),
            "measured_by": f"measured ({r['device']}, ncu lts__t_sector_hit_rate.pct, dram__bytes_read.sum; mean of "
                           f"{r['measured_runs']} runs)",
            "sweep": r["predictions"],
        })
    parts = {}
    for part in ("fit", "held_out"):
        chosen = [r for r in out_rows if r["set"] == part]
        parts[part] = {"all": summarize(chosen),
                       **{dev: summarize([r for r in chosen if r["device"] == dev])
                          for dev in sorted({r["device"] for r in chosen})}}
    record = {
        "script": "benchmarks/sim_validation/validate.py",
        "command": " ".join(["python", "-m", "benchmarks.sim_validation.validate", *argv]),
        "device": " + ".join(src["device"] for src in sources), "measured": sources,
        "fit_parameter": "step_cv, hit_speedup, drift_decay, lrc_window, gpc_bound, dram_saturation, miss_gain, "
                         "capacity scale",
        "fit_grid": cvs,
        "fit_grid_hit_speedup": hits, "fit_grid_drift_decay": decays, "fit_grid_lrc_window": lrcs,
        "fit_grid_gpc_bound": [gpc_text(v) for v in gpcs], "fit_grid_dram_saturation": sats,
        "fit_grid_miss_gain": gains,
        "progress_model": ("contention" if all(contention_of(b) for b in bests.values()) else
                           "saturating" if all(b[5] for b in bests.values()) else "random_walk"),
        "l2_bound_evidence": l2_bound_evidence(rows, declared),
        # Rows run at their model's GPC layout; per-chip layouts (--chip, --layout) were a probe (git 305b79c).
        "chips": {},
        "fit_grid_capacity_scale": scales,
        "fit_grid_age_priority": ages, "fit_grid_hot_load": hots, "fit_grid_start_jitter": jitters,
        "fit_grid_page_noise": [page_text(v) for v in pages], "fit_grid_program_cv": owns,
        "fit_by": args.fit_by, "fit_loss": args.fit_loss, "assumed_layouts": {},
        # One point: each fitted_* is its value; --fit-by device: {device: value}.
        **{f"fitted_{name}": (shown(bests["all"][i]) if args.fit_by == "all" else
                              {g: shown(b[i]) for g, b in bests.items()})
           for i, name in enumerate(POINT_NAMES)
           for shown in [gpc_text if name == "gpc_bound" else page_text if name == "page_noise" else float]},
        "fit_sweep_mae_pp" if args.fit_loss == "hit" else "fit_sweep_loss":
            sweeps["all"] if args.fit_by == "all" else sweeps,
        "fit_rule": ("set 'fit' = the square matmul cases (4096^3, 8192^3) on both GPUs; the (step_cv, hit_speedup, "
                     "drift_decay, lrc_window, gpc_bound, dram_saturation, miss_gain, capacity scale) "
                     + ("with the lowest fit-set MAE (L2 hit)" if args.fit_loss == "hit" else
                        "with the lowest fit-set MAE (L2 hit) / 3 pp + mean relative DRAM read error / 10%")
                     + (" predicts every row" if args.fit_by == "all" else
                        ", chosen per GPU on that GPU's fit rows, predicts that GPU's rows")),
        "tie_rule": "per case, a pair of orders whose measured L2 hit differs by less than the larger of the two "
                    f"rows' measured_noise_pp and {TIE_PP} pp (DRAM read: < {100 * TIE_DRAM_REL:.0f}%) is a tie and "
                    "left out of tau; measured_noise_pp = |ncu % - lookup_hit/(lookup_hit+lookup_miss)| of the row "
                    "(ncu's passes disagreeing); a measured difference the model predicts as equal counts as "
                    f"discordant; kendall_tau_hit_1pp uses {TIE_PP} pp alone; tau_all_pairs is tau-a over every pair",
        "fit": parts["fit"], "held_out": parts["held_out"], "targets": TARGETS,
        "rows": out_rows, "elapsed_s": time.time() - started,
    }
    atomic_write_text(args.out, json.dumps(record, indent=1, default=str))
    for part in ("fit", "held_out"):
        for dev, s in parts[part].items():
            print(f"{part} {dev}: {s['rows']} rows, MAE hit {s['mae_l2_hit_pp']:.2f} pp, DRAM read rel err "
                  f"{s['mean_rel_error_dram_read']:.3f} (median {s['median_rel_error_dram_read']:.3f}); cases with tau "
                  f"< {TARGETS['kendall_tau_per_case']}: hit {s['cases_with_tau_hit_below_target']}, DRAM read "
                  f"{s['cases_with_tau_dram_read_below_target']} of {s['n_cases']} ({len(s['cases_below_tau_target'])} "
                  f"cases in all, {len(s['cases_below_tau_target_misranked_beyond_resolution'])} with a pair misranked "
                  f"beyond the model's resolution)")
        for metric, bins in parts[part]["all"]["rank_agreement_by_predicted_gap"].items():
            print(f"   {metric} pairs by predicted gap (ranked as measured / reversed / measured tie): " + "; ".join(
                f"{b['predicted_gap_from']}-{b['predicted_gap_to'] or ''}: {b['concordant']}/{b['discordant']}/"
                f"{b['measured_tie']}" for b in bins))
        for key, c in parts[part]["all"]["cases"].items():
            t = c["kendall_tau_hit"]
            print(f"   {key}: tau hit {t['tau']} ({t['pairs']} pairs, {t['measured_ties']} ties; 1 pp rule "
                  f"{c['kendall_tau_hit_1pp']['tau']}), tau dram "
                  f"{c['kendall_tau_dram_read']['tau']}, MAE {c['mae_hit_pp']:.2f} pp, dram err "
                  f"{c['mean_rel_error_dram_read']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
