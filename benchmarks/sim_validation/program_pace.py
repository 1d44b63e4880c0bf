"""How much a matmul's program durations spread on the GPU and in the progress model, and what a program's own pace
(simulate's program_cv) does to the model's DRAM reads.

    python -m benchmarks.sim_validation.program_pace OUT.json [--program-cv 0,0.01,0.02] [--gpu h100]

CPU only. Measured: every stamped launch in launches/*.npz of that GPU: per (case, order), the programs' duration
spread (sd / median) and what is left of it after each program's 16-step start-time bin's mean is taken out (how
much of the spread is the whole GPU's pace at the time). Predicted: the contention model of that GPU (the table's
point) on its own schedule: its programs' duration spread and its DRAM reads at each --program-cv, beside the table's
measured mean (sim_validation.json, held-out and fit rows of that GPU).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.lab.timelines import order_table, stamped_stems
from benchmarks.lab.validation import model_name
from swizzlelab.hw import get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import SimParams, footprint_of, own_schedule, simulate
from swizzlelab.tasks import load_task

HERE = Path(__file__).resolve().parent
BIN_STEPS = 16  # programs that start within one bin share the GPU's pace of that time


def duration_spread(start: np.ndarray, duration: np.ndarray, step: float) -> tuple[float, float]:
    """(sd of duration / its median, sd left after each 16-step start bin's mean is taken out) of one launch."""
    d = duration / np.median(duration)
    bins = ((start - start.min()) / step // BIN_STEPS).astype(np.int64)
    means = np.bincount(bins, weights=d) / np.maximum(np.bincount(bins), 1)
    return float(d.std()), float((d - means[bins]).std())


def model_spread(trace, perm: np.ndarray, model, res) -> float:
    """The programs' duration sd / median on the schedule the contention model ran for `res` (first to last step
    start + 1)."""
    first, last = own_schedule(trace, perm, model, res).program_span(np.asarray(trace.tile_step_ptr), perm)
    d = last - first + 1
    return float(d.std() / np.median(d))


def table_means(gpu: str) -> dict[tuple[str, str], float]:
    """{(MxNxK, order): measured DRAM read bytes} of the validation table's matmul rows of that GPU."""
    table = json.loads((HERE / "sim_validation.json").read_text())
    return {(f"{r['case']['m']}x{r['case']['n']}x{r['case']['k']}", r["order"]): r["measured_dram_read_bytes"]
            for r in table["rows"] if r["task"] == "matmul" and model_name(r["device"]) == gpu}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--program-cv", default="0,0.01,0.02")
    parser.add_argument("--gpu", default="h100", choices=["h100", "h200"])
    args = parser.parse_args(argv)
    try:
        grid = [float(v) for v in args.program_cv.split(",")]
    except ValueError:
        raise SystemExit(f"--program-cv {args.program_cv!r}: give comma-separated numbers in 0..1") from None
    started = time.time()
    task = load_task("matmul")
    model = get_model(args.gpu)
    measured_dram = table_means(args.gpu)
    rows = []
    traces: dict[str, tuple] = {}
    for path in sorted(glob.glob(str(HERE / "launches" / f"launches_{args.gpu}_*.npz"))):
        stamps = np.load(path)
        meta = json.loads(Path(path[:-4] + ".json").read_text())
        block_k = meta["probe"]["config"]["block_k"]
        for row in meta["probe"]["rows"]:
            case, order = row["case"], row["order"]
            m, n, k = (int(v) for v in case.split("x"))
            runs = stamped_stems(stamps.files, case, order)
            spreads = [duration_spread(stamps[f"{key}_start"].astype(np.float64),
                                       stamps[f"{key}_duration"].astype(np.float64),
                                       float(np.median(stamps[f"{key}_duration"])) / (k // block_k)) for key in runs]
            if case not in traces:  # one trace per case, shared by its orders (the probe lists them together)
                trace = task.access_model({"seed": 11, "m": m, "n": n, "k": k}, config=task.kernel.GPU_CONFIG)
                traces = {case: (trace, footprint_of(trace))}
            trace, footprint = traces[case]
            perm = order_table(order, m, n, k)
            results = {f"{cv:g}": simulate(trace, perm, model, SimParams(program_cv=cv), occupancy=2,
                                           footprint=footprint)
                       for cv in grid}
            predicted = {cv: int(res.dram_read_bytes) for cv, res in results.items()}
            out = {"case": case, "order": order, "launches": len(runs), "file": Path(path).name,
                   "measured_duration_spread": round(float(np.mean([s[0] for s in spreads])), 4),
                   "measured_spread_after_start_bins": round(float(np.mean([s[1] for s in spreads])), 4),
                   "model_duration_spread": {cv: round(model_spread(trace, perm, model, results[cv]), 4)
                                             for cv in list(results)[:2]},
                   "table_measured_dram_read_bytes": measured_dram.get((case, order)),
                   "predicted_dram_read_bytes": predicted}
            rows.append(out)
            table = out["table_measured_dram_read_bytes"]
            print(f"{case} {order}: duration spread measured ({meta['device']}, {len(runs)} launches) "
                  f"{out['measured_duration_spread']:.3f}, {out['measured_spread_after_start_bins']:.3f} after start "
                  f"bins; model {model.name} {out['model_duration_spread']}; DRAM read table "
                  f"{'-' if table is None else f'{table / 1e9:.3f}'} GB, predicted "
                  + ", ".join(f"{cv}: {v / 1e9:.3f}" for cv, v in predicted.items()), flush=True)
    record = {"script": "benchmarks/sim_validation/program_pace.py",
              "command": "python -m benchmarks.sim_validation.program_pace " + " ".join(argv),
              "device": f"measured: the stamped launches of {args.gpu} in launches/ (ncu, %globaltimer); predicted on "
                        f"the CPU with model {model.name}",
              "kind": "measured duration spread: sd / median of the programs' durations per launch, mean over the "
                      f"launches, and the same after each {BIN_STEPS}-step start bin's mean is taken out; model: the "
                      "contention model at its defaults with program_cv as given",
              "program_cv_grid": grid, "rows": rows, "elapsed_s": round(time.time() - started, 1)}
    atomic_write_text(args.out, json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
