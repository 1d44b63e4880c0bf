"""Which orders gain most from alternating K by wave on matmul 8192^3 (H100 model): every candidate of the
optimizer's first sweep (wave-sized nests included) screened forwards and with odd waves walking K backwards.

    python -m benchmarks.matmul_kdir_h100.search [OUT_JSON] [--waves 264,528] [--top 8] [--set-fraction 0.25]
Screening simulates a quarter of the L2 sets (the optimizer's estimate); the best `--top` of each direction are
then simulated exactly. Predictions only (model H100-SXM): predict.py gives the model's error on the 21 measured
K-direction rows. Writes benchmarks/matmul_kdir_h100/matmul_kdir_search.json by default.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from benchmarks.lab.kdir import h100_setup  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.optimize.search import coarse_candidates  # noqa: E402
from swizzlelab.sim import Engine, SimParams, simulate  # noqa: E402
from swizzlelab.sim.params import STEP_TIME_CV  # noqa: E402
from swizzlelab.swizzle import to_permutation  # noqa: E402
from swizzlelab.trace.kdir import alternate_by_wave  # noqa: E402

HERE = Path(__file__).resolve().parent
CASE = {"seed": 12, "m": 8192, "n": 8192, "k": 8192}
TARGET_BYTES = 1.1e9  # issue 15's DRAM-read target for this case (ncu)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=str(HERE / "matmul_kdir_search.json"))
    parser.add_argument("--waves", default="264,528")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--set-fraction", type=float, default=0.25)
    args = parser.parse_args(argv)
    waves = [0] + [int(w) for w in args.waves.split(",") if w.strip()]
    task, model, occupancy, trace, footprint, grid, sw_args, consts = h100_setup(CASE)
    resident = model.units_per_domain * occupancy  # programs resident at once in the one L2 domain (264)
    started = time.time()
    screened = []
    for cand in coarse_candidates(grid, 1, (), resident=resident):
        perm = to_permutation(task.parse_order(cand.spec), grid, sw_args, consts)
        for wave in waves:
            t0 = time.time()
            res = simulate(alternate_by_wave(trace, perm, wave), perm, model, SimParams(progress="random_walk"),
                           Engine(set_fraction=args.set_fraction), occupancy=occupancy, footprint=footprint)
            screened.append({"order": cand.spec, "wave": wave, "screen_dram_read_bytes": int(res.dram_read_bytes),
                             "screen_l2_hit_pct": 100 * res.l2_hit_rate, "seconds": time.time() - t0})
        best = min(screened, key=lambda r: r["screen_dram_read_bytes"])
        print(f"{cand.spec:40s} fwd {screened[-len(waves)]['screen_dram_read_bytes'] / 1e9:.3f} GB, alt "
              + ", ".join(f"{r['screen_dram_read_bytes'] / 1e9:.3f}" for r in screened[-len(waves) + 1:])
              + f"  (best so far {best['order']} wave {best['wave']}: {best['screen_dram_read_bytes'] / 1e9:.3f})",
              flush=True)
    exact = []
    for wave in waves:
        ranked = sorted((r for r in screened if r["wave"] == wave), key=lambda r: r["screen_dram_read_bytes"])
        for row in ranked[:args.top]:
            perm = to_permutation(task.parse_order(row["order"]), grid, sw_args, consts)
            res = simulate(alternate_by_wave(trace, perm, wave), perm, model, SimParams(progress="random_walk"),
                           occupancy=occupancy, footprint=footprint)
            exact.append({"order": row["order"], "wave": wave, "predicted_dram_read_bytes": int(res.dram_read_bytes),
                          "predicted_l2_hit_pct": 100 * res.l2_hit_rate})
    best = {str(w): min((r for r in exact if r["wave"] == w), key=lambda r: r["predicted_dram_read_bytes"])
            for w in waves}
    overall = min(exact, key=lambda r: r["predicted_dram_read_bytes"])
    doc = {"study": "matmul_kdir_h100 search", "script": "benchmarks/matmul_kdir_h100/search.py",
           "command": "python -m benchmarks.matmul_kdir_h100.search " + " ".join(argv), "case": CASE,
           "device": "predictions on this machine's CPU (model H100-SXM); nothing measured",
           "predicted_by": f"predicted (model {model.name}, occupancy {occupancy}, random-walk progress model, step_cv {STEP_TIME_CV}; screening "
                           f"on {args.set_fraction:g} of the L2 sets, top {args.top} per wave exact)",
           "waves": waves, "candidates": len(screened) // len(waves), "screened": screened, "exact": exact,
           "best_by_wave": best, "best": overall, "target_dram_read_bytes": TARGET_BYTES,
           "best_predicted_below_target": overall["predicted_dram_read_bytes"] <= TARGET_BYTES,
           "elapsed_s": time.time() - started}
    atomic_write_text(Path(args.out), json.dumps(doc, indent=2) + "\n")
    print(json.dumps({"best_by_wave": best, "best": overall}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
