"""What the matmul timelines of timeline_probe.py say about the simulator's progress model and ncu's L2 lookups:
per-wave program durations and start spreads, sharer lags, and how many reads two programs of one TPC issue together.

    python -m benchmarks.sim_validation.timeline_analysis OUT_JSON TIMELINES ROWS_JSON [--probe-json FILE] [--pack FILE]

TIMELINES is timeline_probe.py's output folder (timeline_<case>.npz) or the packed archive `--pack` writes from
one (first run of each order, step lengths as int16 ns: timeline_h100_raw.npz); ROWS_JSON is the ncu rows of the
same GPU (sim_ncu_rows_*.json), whose lookup counters the merge estimates are set against. CPU only (numpy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.lab.timelines import STEADY_FROM, WAVE, load_timelines, order_key, order_table, start_slope
from benchmarks.lab.validation import lookup_deficit
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import kernels
from swizzlelab.tasks import load_task

WINDOWS_NS = (1000, 3000)
SCOPES = ("SM", "TPC", "GPU")  # an SM, its TPC (SMs 2j and 2j+1), any SM


def requested_sectors(m: int, n: int, k: int) -> int:
    """Sectors the matmul trace requests (reads and writes), as the simulator counts them."""
    task = load_task("matmul")
    trace = task.access_model({"seed": 11, "m": m, "n": n, "k": k}, config=task.kernel.GPU_CONFIG)
    return int(kernels.popcount_table()[np.asarray(trace.sector_mask)].sum())


def merged_share(t: np.ndarray, sm: np.ndarray, rows: np.ndarray, cols: np.ndarray, scope: str, window: float) -> float:
    """Share of the A and B slab reads (one per program and k-step each) that another program of the same scope read
    no more than `window` ns before: reads that could be served by a request already made there."""
    n_prog, n_k = t.shape
    unit = {"SM": sm, "TPC": sm // 2, "GPU": np.zeros_like(sm)}[scope]
    steps = np.broadcast_to(np.arange(n_k), (n_prog, n_k))
    slab = np.concatenate([(rows[:, None] * n_k + steps).ravel(), (1 << 40) + (cols[:, None] * n_k + steps).ravel()])
    when = np.concatenate([t.ravel(), t.ravel()])
    prog = np.tile(np.repeat(np.arange(n_prog), n_k), 2)
    where = unit[prog]
    order = np.lexsort((when, where, slab))
    slab, when, prog, where = slab[order], when[order], prog[order], where[order]
    again = (slab[1:] == slab[:-1]) & (where[1:] == where[:-1]) & (prog[1:] != prog[:-1])
    return float((again & (when[1:] - when[:-1] <= window)).sum() / slab.size)


def pack(timelines: dict[str, dict[str, np.ndarray]], path: str) -> None:
    """The first run of every order, step lengths as int16 ns (a step over 32.767 us would be refused)."""
    arrays = {}
    for case, data in timelines.items():
        for key, value in data.items():
            if "_r0_" not in key:
                continue
            if key.endswith("_step"):
                if value.max() > np.iinfo(np.int16).max:
                    raise SystemExit(f"{case} {key}: a step over 32767 ns does not fit the packed archive")
                value = value.astype(np.int16)
            arrays[f"{case}__{key}"] = value
    np.savez_compressed(path, **arrays)


def analyse(case: str, data: dict[str, np.ndarray], order: str, rows_by_key: dict, n_requested: int) -> dict:
    m, n, k = (int(v) for v in case.split("x"))
    sm = data[f"{order_key(order)}_r0_sm"].astype(np.int64)
    start = data[f"{order_key(order)}_r0_start"].astype(np.int64)
    steps = data[f"{order_key(order)}_r0_step"].astype(np.int64)
    n_prog, n_k = steps.shape
    t = np.concatenate([start[:, None], start[:, None] + np.cumsum(steps, axis=1)[:, :-1]], axis=1)
    step_ns = float(np.median(steps))
    dur = steps.sum(axis=1) / step_ns
    wave = np.arange(n_prog) // WAVE
    tiles = order_table(order, m, n, k)
    n_cols = n // 128
    rows, cols = tiles // n_cols, tiles % n_cols
    # Programs that share the operand the order walks along: the next row (column) of tiles, this many launches on.
    share = n_cols if order == "row_major" else (m // 128 if order == "column_major" else None)
    steady = np.arange(n_prog) >= STEADY_FROM
    out = {
        "case": case, "order": order, "programs": n_prog, "k_steps": n_k, "median_step_ns": step_ns,
        "first_wave_duration_steps": {"mean": float(dur[:WAVE].mean()), "sd": float(dur[:WAVE].std())},
        "steady_duration_steps": {"mean": float(dur[steady].mean()), "sd": float(dur[steady].std())},
        "per_wave_duration_steps": [[round(float(dur[wave == w].mean()), 1), round(float(dur[wave == w].std()), 1)]
                                    for w in range(int(wave.max()) + 1)],
        "per_wave_start_spread_steps": [round(float((start[wave == w].max() - start[wave == w].min()) / step_ns), 1)
                                        for w in range(int(wave.max()) + 1)],
        # Whether a wave's later starters run longer (> 0: its start spread grows, the wave comes apart) or shorter
        # (< 0: they catch up and the spread stays bounded): least-squares slope of duration on start, steps/step.
        # The progress model draws durations independently of start, a slope of 0 at any step_cv.
        "per_wave_duration_on_start_slope": [start_slope(start[wave == w] / step_ns, dur[wave == w])
                                             for w in range(1, int(wave.max()))],
        # What the progress model gives a program of n_k steps at step_cv 0.5: sd 0.5 sqrt(n_k) steps.
        "model_duration_sd_steps_cv05": 0.5 * float(np.sqrt(n_k)),
    }
    if share:
        lag = np.abs(t[share:] - t[:-share])[STEADY_FROM:] / step_ns
        out["sharer_launches_apart"] = share
        out["sharer_lag_steps_steady"] = {"median": float(np.median(lag)), "p90": float(np.percentile(lag, 90))}
    # Which grouping of the steady programs explains their durations (share of variance of the group means).
    explained = {}
    for name, group in (("row", rows), ("column", cols), ("sm", sm), ("start_time_bin", start // (start.max() // 40 + 1))):
        g, x = group[steady], dur[steady]
        means = {u: x[g == u].mean() for u in np.unique(g)}
        explained[name] = round(float(np.var([means[u] for u in g]) / x.var()), 3)
    out["duration_variance_explained_by"] = explained
    out["merged_read_share"] = {f"{scope}_{w}ns": round(merged_share(t, sm, rows, cols, scope, w), 4)
                                for scope in SCOPES for w in WINDOWS_NS}
    row = rows_by_key.get((case, order))
    if row is not None:
        out["ncu_lookup_deficit"] = round(lookup_deficit(row["counters"], n_requested), 4)
        out["ncu_dram_read_gb"] = row["measured_dram_read_bytes"] / 1e9
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("timelines")
    parser.add_argument("rows")
    parser.add_argument("--probe-json", default=None, help="timeline_probe.py's JSON (device, command, kernel times)")
    parser.add_argument("--orders", default="row_major,column_major,grouped:GROUP_M=8")
    parser.add_argument("--pack", default=None, help="also write the packed archive of the timelines here")
    args = parser.parse_args(argv)
    timelines = load_timelines(Path(args.timelines))
    if args.pack:
        pack(timelines, args.pack)
    started = time.time()
    measured = json.loads(Path(args.rows).read_text())
    rows_by_key = {}
    for r in measured["rows"]:
        if r["task"] == "matmul" and r.get("counters"):
            c = r["case"]
            rows_by_key[(f"{c['m']}x{c['n']}x{c['k']}", r["order"])] = r
    results = []
    for case, data in sorted(timelines.items()):
        m, n, k = (int(v) for v in case.split("x"))
        n_requested = requested_sectors(m, n, k)
        for order in args.orders.split(","):
            results.append(analyse(case, data, order, rows_by_key, n_requested))
            print(json.dumps({k: results[-1][k] for k in ("case", "order", "steady_duration_steps",
                                                           "merged_read_share")}), flush=True)
    probe = json.loads(Path(args.probe_json).read_text()) if args.probe_json else {}
    record = {
        "script": "benchmarks/sim_validation/timeline_analysis.py",
        "command": " ".join(["python", "-m", "benchmarks.sim_validation.timeline_analysis", *argv]),
        "kind": f"measured ({probe.get('device', 'GPU of the timelines')}, %globaltimer and %smid per program and "
                "k-step) and counted from those timelines; ncu rows from " + str(measured.get("device")),
        "device": probe.get("device") or measured.get("device"), "probe": probe, "wave": WAVE,
        "steady_from_launch": STEADY_FROM, "results": results,
        "elapsed_s": time.time() - started,
    }
    atomic_write_text(args.out, json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
