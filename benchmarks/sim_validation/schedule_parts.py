"""Which part of a measured schedule carries its DRAM reads: the start times, the durations or the dispatch order, and
whether the model's own schedule errs in its steps' spacing.

    python -m benchmarks.sim_validation.schedule_parts OUT.json LAUNCHES_STEM CASE ORDERS [--runs r0,r1]

CPU only. Measured side (stamped launches, replay_launch.py): each launch replayed through the cache model as
measured, with every program's duration set to the launch's median, with the measured start times handed out in
launch order, and with both. Model side (contention model at its defaults): its own schedule replayed as it is and
with each program's steps evenly spaced between its first and last step (the spacing replay_launch.py gives a
measured launch), at step_cv 0.3 (the default) and 0.1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.lab.timelines import even_schedule, near_of, order_key, order_table, stamped_counters, stamped_schedule
from benchmarks.lab.validation import model_name
from swizzlelab.hw import get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import SimParams, footprint_of, own_schedule, simulate
from swizzlelab.tasks import load_task

LRC_WINDOW = 0.1  # the table's coalescer window, as replay_launch.py replays with it


def model_even(trace, perm: np.ndarray, model, footprint, step_cv: float, n_k: int) -> tuple[float, float]:
    """(DRAM read GB of the model's own schedule, of the same with each program's steps evenly spaced)."""
    tile_step_ptr = np.asarray(trace.tile_step_ptr)
    res = simulate(trace, perm, model, SimParams(step_cv=step_cv), occupancy=2, footprint=footprint)
    start, end = own_schedule(trace, perm, model, res).program_span(tile_step_ptr, perm)
    # stamped_schedule takes integer times (ns on the GPU): model step times x 1000 keep three decimals.
    lengths = np.repeat(((end - start) * 1000.0 / (n_k - 1))[:, None], n_k, axis=1)
    near = near_of("hash", np.zeros(perm.size, dtype=np.int64), model.l2_partitions)
    even, _ = stamped_schedule((start - start.min()) * 1000.0, lengths, "model", tile_step_ptr, perm, near)
    evened = simulate(trace, perm, model, SimParams(lrc_window=LRC_WINDOW), occupancy=2, schedule=even,
                      footprint=footprint)
    return res.dram_read_bytes / 1e9, evened.dram_read_bytes / 1e9


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("launches", help="a launches file of replay_launch.py measure, without .json / .npz")
    parser.add_argument("case", help="MxNxK")
    parser.add_argument("orders", help="comma-separated orders of that file")
    parser.add_argument("--runs", default="r0,r1")
    args = parser.parse_args(argv)
    started = time.time()
    stamps = np.load(args.launches + ".npz")
    record = json.loads(Path(args.launches + ".json").read_text())
    counters = stamped_counters(record["probe"], record["launches"])
    model = get_model(model_name(record["device"]))
    m, n, k = (int(v) for v in args.case.split("x"))
    n_k = k // record["probe"]["config"]["block_k"]
    task = load_task("matmul")
    trace = task.access_model({"seed": 11, "m": m, "n": n, "k": k}, config=task.kernel.GPU_CONFIG)
    footprint = footprint_of(trace)
    tile_step_ptr = np.asarray(trace.tile_step_ptr)
    rows = []
    for order in args.orders.split(","):
        perm = order_table(order, m, n, k)
        for run in args.runs.split(","):
            stem = f"{args.case}__{order_key(order)}_{run}"
            sm = stamps[f"{stem}_sm"]
            start = stamps[f"{stem}_start"].astype(np.int64)
            duration = stamps[f"{stem}_duration"].astype(np.int64)
            median = np.full_like(duration, int(np.median(duration)))

            def replayed(begin: np.ndarray, length: np.ndarray) -> float:
                schedule, _ = even_schedule(sm, begin, length, n_k, order, tile_step_ptr, perm, model.l2_partitions)
                return simulate(trace, perm, model, SimParams(lrc_window=LRC_WINDOW), occupancy=2, schedule=schedule,
                                footprint=footprint).dram_read_bytes / 1e9

            rows.append({"case": args.case, "order": order, "run": run,
                         "measured_dram_read_gb": counters[(args.case, order, run)]["dram__bytes_read.sum"] / 1e9,
                         "replayed_gb": replayed(start, duration),
                         "median_durations_gb": replayed(start, median),
                         "starts_in_launch_order_gb": replayed(np.sort(start), duration),
                         "both_gb": replayed(np.sort(start), median)})
            print(json.dumps(rows[-1]), flush=True)
        for step_cv in (0.3, 0.1):
            own, evened = model_even(trace, perm, model, footprint, step_cv, n_k)
            rows.append({"case": args.case, "order": order, "model_step_cv": step_cv, "model_gb": own,
                         "model_evened_steps_gb": evened})
            print(json.dumps(rows[-1]), flush=True)
    out = {"script": "benchmarks/sim_validation/schedule_parts.py",
           "command": "python -m benchmarks.sim_validation.schedule_parts " + " ".join(argv),
           "device": f"measured on {record['device']} (ncu, %globaltimer: {Path(args.launches).name}); replayed and "
                     f"predicted on the CPU with model {model.name}",
           "kind": "DRAM read GB: measured (ncu, that launch); replayed through the cache model as measured, with "
                   "median durations, with the start times in launch order, both; the model's own schedule and "
                   "the same with evenly spaced steps",
           "rows": rows, "elapsed_s": round(time.time() - started, 1)}
    atomic_write_text(args.out, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
