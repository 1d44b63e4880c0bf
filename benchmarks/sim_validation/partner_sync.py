"""How closely the two programs that share a streamed panel run, from the stamped launches (launches/*.npz).

    python benchmarks/sim_validation/partner_sync.py OUT.json [--case 16384x16384x4096] [--within 12] [--launches DIR]

Row- and column-major of a square output launch the programs that share the streamed panel `n_tiles` apart (one row
or column of tiles). Per GPU and order, over the 4 stamped launches: the share of such pairs that start within
`--within` mean step times of each other, and for pairs that run together (within 16 steps) how much of their start
gap they close by the end (steps; negative: they close it). Measured data only, no model.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

import numpy as np

from swizzlelab.io import atomic_write_text

HERE = Path(__file__).resolve().parent
TOGETHER_STEPS = 16  # pairs that start this close count as running together
ORDERS = ("row_major", "column_major")


def pair_stats(start: np.ndarray, duration: np.ndarray, apart: int, k_steps: int, within: float) -> dict[str, float]:
    """Partner pairs (p, p + apart) of one launch: share starting within `within` steps, and their mean gap change."""
    step = float(np.median(duration)) / k_steps
    begin = (start[apart:] - start[:-apart]) / step
    end = ((start + duration)[apart:] - (start + duration)[:-apart]) / step
    together = np.abs(begin) < TOGETHER_STEPS
    return {"share_within": float(np.mean(np.abs(begin) < within)),
            "gap_change_steps": float(np.mean(np.abs(end[together]) - np.abs(begin[together])))}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--case", default="16384x16384x4096")
    parser.add_argument("--within", type=float, default=12.0)
    parser.add_argument("--launches", default=str(HERE / "launches"), help="folder of stamped launches (*.json, *.npz)")
    args = parser.parse_args(argv)
    m, n, k = (int(v) for v in args.case.split("x"))
    if m != n:
        raise SystemExit(f"--case {args.case}: give a square output (m = n), whose orders mirror each other")
    rows = []
    for path in sorted(glob.glob(str(Path(args.launches) / "*.json"))):
        meta = json.loads(Path(path).read_text())
        config = meta["probe"]["config"]
        stamps = np.load(path[:-5] + ".npz")
        for order in ORDERS:
            keys = sorted({key.rsplit("_", 1)[0] for key in stamps.files if key.startswith(f"{args.case}__{order}_r")})
            if not keys:
                continue
            runs = [pair_stats(stamps[f"{key}_start"].astype(np.float64), stamps[f"{key}_duration"].astype(np.float64),
                               n // config["block_n"], k // config["block_k"], args.within) for key in keys]
            rows.append({"device": meta["device"], "case": args.case, "order": order, "launches": len(runs),
                         **{name: float(np.mean([r[name] for r in runs])) for name in runs[0]},
                         **{f"{name}_runs": [r[name] for r in runs] for name in runs[0]}})
            print(f"{meta['device']} {order}: {100 * rows[-1]['share_within']:.1f}% of partner pairs start within "
                  f"{args.within:g} steps; running together they change their gap by "
                  f"{rows[-1]['gap_change_steps']:+.2f} steps (measured, {len(runs)} launches)")
    if not rows:
        raise SystemExit(f"no stamped launches of {args.case} in {args.launches}")
    atomic_write_text(args.out, json.dumps({
        "script": "benchmarks/sim_validation/partner_sync.py",
        "command": " ".join(["python", "benchmarks/sim_validation/partner_sync.py", *argv]),
        "device": " + ".join(sorted({r["device"] for r in rows})) + " (measured: %globaltimer stamps of launches/)",
        "within_steps": args.within, "together_steps": TOGETHER_STEPS, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
