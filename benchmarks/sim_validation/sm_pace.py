"""What sets a program's pace on the H100, from the measured matmul timelines: each SM's own pace (the same SMs fast in
every run), how much of it shows by case, and the saturating progress model's waves set beside the measured ones.

    python -m benchmarks.sim_validation.sm_pace OUT_JSON TIMELINES [--gpc-bound B --dram-saturation S --miss-gain G]

TIMELINES: timeline_h100_raw.npz. CPU only. The model's schedules are the simulator's own (simulate's saturating
progress model on model H100-SXM); measured figures come from %globaltimer / %smid stamps of every program.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.lab.timelines import STEADY_FROM, WAVE, load_timelines, order_key, order_table, start_slope
from swizzlelab.hw import get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import SimParams, own_schedule, simulate
from swizzlelab.sim.params import DRAM_SATURATION, SATURATION_MISS_GAIN
from swizzlelab.tasks import load_task

TIME_BIN_STEPS = 4  # a step's common pace: the mean step time of every program running in the same 4-step bin
SMALL_GPC = np.r_[34:40, 78:84]  # the 12 SMs that ran fastest on this H100 (the smallest GPC of TIMELINE_GPCS)
# This H100's GPC layout (one small GPC; the H100-SXM model since stop 35 holds the majority chips' two): the model's
# schedules here run on it, as when the committed sm_pace_h100.json was made (--gpc-bound 0.5).
TIMELINE_GPCS = (12, 16, 16, 16, 18, 18, 18, 18)
TIMELINE_GPC_BOUND = 0.5


def sm_residuals(sm: np.ndarray, start: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, float]:
    """Each SM's mean excess duration (steps) over the programs running at the same time, steady launches only, and
    the share of the programs' excess variance the SM explains."""
    step_ns = float(np.median(steps))
    t = np.concatenate([start[:, None], start[:, None] + np.cumsum(steps, axis=1)[:, :-1]], axis=1)
    bins = (t / (TIME_BIN_STEPS * step_ns)).astype(np.int64)
    s = steps / step_ns
    common = np.bincount(bins.ravel(), s.ravel()) / np.maximum(np.bincount(bins.ravel()), 1)
    excess = (s - common[bins]).sum(axis=1)
    steady = np.arange(sm.size) >= STEADY_FROM
    n_sm = int(sm.max()) + 1
    per_sm = np.bincount(sm[steady], excess[steady], minlength=n_sm) / np.maximum(
        np.bincount(sm[steady], minlength=n_sm), 1)
    explained = float(per_sm[sm[steady]].var() / max(excess[steady].var(), 1e-12))
    return per_sm, explained


def wave_spreads(start: np.ndarray) -> list[float]:
    wave = np.arange(start.size) // WAVE
    return [round(float(np.ptp(start[wave == w])), 1) for w in range(int(wave.max()) + 1)]


def model_starts(case: str, order: str, kw: dict) -> tuple[np.ndarray, np.ndarray, float]:
    """When each launch's first and last steps start (mean step times) in the saturating model's schedule, and its
    DRAM read GB."""
    m, n, k = (int(v) for v in case.split("x"))
    task = load_task("matmul")
    trace = task.access_model({"seed": 0, "m": m, "n": n, "k": k}, config=task.kernel.GPU_CONFIG)
    perm = order_table(order, m, n, k)
    model = replace(get_model("h100"), gpc_sms=TIMELINE_GPCS)
    res = simulate(trace, perm, model, SimParams(lrc_window=0.0, **kw), occupancy=2)
    tile_step_ptr = np.asarray(trace.tile_step_ptr)
    # The saturating model's schedule at the result's values, without the contention terms: what this study drew.
    plain = replace(res, progress="saturating", age_priority=0.0, hot_load=0.0, start_jitter=0.0, page_noise=0.0,
                    program_cv=0.0)
    sched = own_schedule(trace, perm, model, plain)
    when = np.empty(tile_step_ptr[-1])
    when[sched.steps] = sched.start
    return when[tile_step_ptr[perm]], when[tile_step_ptr[perm + 1] - 1], res.dram_read_bytes / 1e9


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("timelines")
    parser.add_argument("--gpc-bound", type=float, default=None)
    parser.add_argument("--dram-saturation", type=float, default=None)
    parser.add_argument("--miss-gain", type=float, default=None)
    args = parser.parse_args(argv)
    kw = {"gpc_bound": args.gpc_bound if args.gpc_bound is not None else TIMELINE_GPC_BOUND,
          "dram_saturation": args.dram_saturation if args.dram_saturation is not None else DRAM_SATURATION,
          "miss_gain": args.miss_gain if args.miss_gain is not None else SATURATION_MISS_GAIN}
    if kw["gpc_bound"] <= 0:
        raise SystemExit("give --gpc-bound > 0 (the saturating progress model is off by default)")
    started = time.time()
    timelines = load_timelines(Path(args.timelines))
    runs, maps = [], {}
    for case, data in timelines.items():
        for order in ("row_major", "column_major", "grouped:GROUP_M=8"):
            key = order_key(order)
            if f"{key}_r0_sm" not in data:
                continue
            sm = data[f"{key}_r0_sm"].astype(np.int64)
            start = data[f"{key}_r0_start"].astype(np.int64)
            steps = data[f"{key}_r0_step"].astype(np.int64)
            step_ns = float(np.median(steps))
            per_sm, explained = sm_residuals(sm, start, steps)
            maps[(case, order)] = per_sm
            steady_steps = float((steps.sum(axis=1) / step_ns)[STEADY_FROM:].mean())
            rest = np.setdiff1d(np.arange(per_sm.size), SMALL_GPC)
            small_gpc = float(per_sm[SMALL_GPC].mean() - per_sm[rest].mean())
            measured_spread = wave_spreads(start / step_ns)
            measured_span = steps[:, :-1].sum(axis=1) / step_ns  # first step's start to last step's
            starts, lasts, dram = model_starts(case, order, kw)
            modelled = wave_spreads(starts)
            mid = len(measured_spread) // 2
            wave = slice(mid * WAVE, (mid + 1) * WAVE)
            runs.append({
                "case": case, "order": order, "k_steps": int(steps.shape[1]),
                "sm_excess_sd_steps": round(float(per_sm.std()), 2),
                "sm_share_of_excess_variance": round(explained, 3),
                "fastest_sms": [int(v) for v in np.argsort(per_sm)[:12]],
                "small_gpc_excess_pct_of_duration": round(100 * small_gpc / steady_steps, 1),
                "start_spread_steps": {"measured_first_8_waves": measured_spread[:8],
                                       "model_first_8_waves": modelled[:8],
                                       "measured_middle_wave": measured_spread[mid],
                                       "model_middle_wave": modelled[mid]},
                # > 0: later starters of a wave run longer and the wave comes apart; < 0: they catch up.
                "duration_on_start_slope_middle_wave": {
                    "measured": start_slope(start[wave] / step_ns, measured_span[wave]),
                    "model": start_slope(starts[wave], (lasts - starts)[wave])},
                "model_dram_read_gb": round(dram, 3),
            })
            print(f"{case} {order}: SM excess sd {runs[-1]['sm_excess_sd_steps']} steps (measured, H100); start "
                  f"spread middle wave measured {measured_spread[mid]} / predicted {modelled[mid]} steps "
                  f"(model H100-SXM, saturating)", flush=True)
    keys = list(maps)
    corr = np.corrcoef(np.array([maps[k] for k in keys]))
    off = corr[~np.eye(len(keys), dtype=bool)]
    record = {
        "script": "benchmarks/sim_validation/sm_pace.py",
        "command": "python -m " + " ".join(["benchmarks.sim_validation.sm_pace", *argv]),
        "device": "NVIDIA H100 80GB HBM3",
        "kind": "measured (NVIDIA H100 80GB HBM3 timelines: %globaltimer per k-step, %smid per program) and "
                "predicted (model H100-SXM, saturating progress model)",
        "model": kw,
        "sm_map_correlation_between_runs": {"median": round(float(np.median(off)), 3),
                                            "min": round(float(off.min()), 3)},
        "runs": runs,
        "elapsed_s": round(time.time() - started, 1),
    }
    atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
