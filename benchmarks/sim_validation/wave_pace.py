"""How a matmul's waves come apart on the GPU and in the progress models: per wave, the start spread of its programs and
how much faster the chip's fast SMs run, from the stamped launches replay_launch.py measured, beside each model's own.

    python -m benchmarks.sim_validation.wave_pace OUT_JSON LAUNCHES_JSON [LAUNCHES_JSON ...]

CPU only. Measured: %globaltimer / %smid stamps of every program of the first stamped launch of each (case, order), and
ncu's DRAM reads of every stamped launch (their mean); predicted: the saturating and the contention progress models of
that GPU (H100-SXM, H200-SXM) with the chip's own GPC layout and share (benchmarks/lab/chips.py), at the points the chip table fitted
(sim_validation_chip.json, sim_validation_contention_chip.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.lab.chips import chip_layout, on_chip
from benchmarks.lab.timelines import order_key, order_table, stamped_counters
from benchmarks.lab.validation import model_name
from swizzlelab.hw import get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import SimParams, footprint_of, own_schedule, simulate
from swizzlelab.tasks import load_task

HERE = Path(__file__).resolve().parent
WAVE = 264  # programs resident at once: 132 SMs x 2
MAX_WAVES = 16
MODELS = {  # each model's point as the chip table fitted it (with every chip's own layout)
    "saturating": {"file": "sim_validation_chip.json", "progress": "saturating"},
    "contention": {"file": "sim_validation_contention_chip.json", "progress": "contention"},
}


def fitted(name: str) -> dict:
    """The fitted parameters of a chip-table validation file (its single point)."""
    record = json.loads((HERE / MODELS[name]["file"]).read_text())
    point = {key: record[f"fitted_{key}"] for key in ("step_cv", "lrc_window", "dram_saturation", "miss_gain")}
    if name == "contention":
        point.update({key: record[f"fitted_{key}"] for key in ("age_priority", "hot_load", "start_jitter")})
    return point


def per_wave(start: np.ndarray, duration: np.ndarray, fast: np.ndarray | None) -> dict:
    """Per wave of launch positions: the programs' start spread (p90 - p10) and, where `fast` marks the chip's fast
    SMs' programs, their mean duration over the others'."""
    n = min(start.size // WAVE, MAX_WAVES)
    waves = [slice(w * WAVE, (w + 1) * WAVE) for w in range(n)]
    out = {"start_spread_steps": [round(float(np.percentile(start[w], 90) - np.percentile(start[w], 10)), 1)
                                  for w in waves]}
    if fast is not None:
        out["fast_over_slow_duration"] = [round(float(duration[w][fast[w]].mean() / duration[w][~fast[w]].mean()), 3)
                                          if fast[w].any() and (~fast[w]).any() else None for w in waves]
    return out


def mate_effect(sm: np.ndarray, start: np.ndarray, duration: np.ndarray) -> dict:
    """Whether sharing an SM with an older program slows a program: its duration (over the median) regressed on the
    share of its life an older program ran on its SM and the share it ran alone (programs over 3x the median left
    out), least squares."""
    end = start + duration
    younger = np.zeros(start.size)
    alone = np.zeros(start.size)
    for unit in np.unique(sm):
        mine = np.flatnonzero(sm == unit)
        for i in mine:
            others = mine[mine != i]
            overlap = np.clip(np.minimum(end[i], end[others]) - np.maximum(start[i], start[others]), 0.0, None)
            older = (start[others] < start[i]) | ((start[others] == start[i]) & (others < i))
            younger[i] = overlap[older].sum() / duration[i]
            alone[i] = 1.0 - min(overlap.sum() / duration[i], 1.0)
    rel = duration / np.median(duration)
    keep = rel < 3.0
    coef = np.linalg.lstsq(np.c_[np.ones(keep.sum()), younger[keep], alone[keep]], rel[keep], rcond=None)[0]
    return {"younger_coef": round(float(coef[1]), 4), "alone_coef": round(float(coef[2]), 4),
            "younger_share_mean": round(float(younger.mean()), 3)}


def model_row(trace, footprint, perm, model, gpc_bound: float, point: dict, progress: str) -> dict:
    """The model's DRAM reads, L2 hit rate and per-wave start spread on its own schedule (launch positions' first
    steps, in mean step times)."""
    kw = {k: v for k, v in point.items() if k not in ("lrc_window", "page_noise")}
    # The chip table's points predate page noise (stop 38): 0 unless a point names it, in the prediction and the
    # schedule alike (simulate's own default would be the model's, 0.9 on the H200).
    if progress == "contention":
        kw["page_noise"] = point.get("page_noise", 0.0)
    res = simulate(trace, perm, model,
                   SimParams(progress=progress, lrc_window=point["lrc_window"], gpc_bound=gpc_bound, **kw), occupancy=2,
                   footprint=footprint)
    starts, _ = own_schedule(trace, perm, model, res).program_span(np.asarray(trace.tile_step_ptr), perm)
    return {"dram_read_bytes": int(res.dram_read_bytes), "l2_hit_pct": round(100 * res.l2_hit_rate, 2),
            **per_wave(starts - starts.min(), np.zeros(starts.size), None)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("launches", nargs="+")
    args = parser.parse_args(argv)
    started = time.time()
    task = load_task("matmul")
    points = {name: fitted(name) for name in MODELS}
    rows, chips = [], {}
    for source in args.launches:
        record = json.loads(Path(source).read_text())
        arrays = np.load(Path(source).with_suffix(".npz"))
        counters = stamped_counters(record["probe"], record["launches"])
        base = get_model(model_name(record["device"]))
        layout = chip_layout(arrays, base.units_per_domain, len(base.gpc_sms))
        if not layout["found"]:
            raise SystemExit(f"{source}: {layout['why']}")
        chips[Path(source).name] = {k: v for k, v in layout.items() if k != "sm_pace_sorted"}
        model = on_chip(base, layout)
        fast_ids = np.array(layout["fast_sm_ids"])
        for case in dict.fromkeys(name.split("__")[0] for name in arrays.files):
            m, n, k = (int(v) for v in case.split("x"))
            trace = task.access_model({"seed": 11, "m": m, "n": n, "k": k}, config=task.kernel.GPU_CONFIG)
            footprint = footprint_of(trace)
            n_k = k // task.kernel.GPU_CONFIG.block_k
            for order in [r["order"] for r in record["probe"]["rows"] if r["case"] == case]:
                stem = f"{case}__{order_key(order)}_r0"
                start = arrays[f"{stem}_start"].astype(np.float64)
                duration = arrays[f"{stem}_duration"].astype(np.float64)
                step_ns = float(np.median(duration)) / n_k
                fast = np.isin(arrays[f"{stem}_sm"].astype(np.int64), fast_ids) if layout["gpc_sms"] else None
                measured = [c["dram__bytes_read.sum"] for (c_, o, _), c in counters.items() if (c_, o) == (case, order)]
                perm = order_table(order, m, n, k)
                row = {"device": record["device"], "launches": Path(source).name, "case": case, "order": order,
                       "measured": {"dram_read_bytes": float(np.mean(measured)), "launches": len(measured),
                                    **per_wave((start - start.min()) / step_ns, duration / step_ns, fast),
                                    "sm_mate": mate_effect(arrays[f"{stem}_sm"].astype(np.int64), start, duration)}}
                for name, point in points.items():
                    row[name] = model_row(trace, footprint, perm, model, layout["gpc_bound"], point, name)
                rows.append(row)
                print(f"{record['device']} {case} {order}: DRAM read measured "
                      f"{row['measured']['dram_read_bytes'] / 1e9:.3f} GB (ncu, mean of {len(measured)}), predicted "
                      f"saturating "
                      f"{row['saturating']['dram_read_bytes'] / 1e9:.3f} / contention "
                      f"{row['contention']['dram_read_bytes'] / 1e9:.3f} GB (models on this chip's layout)", flush=True)
    summary = {}
    for device in dict.fromkeys(r["device"] for r in rows):
        mine = [r for r in rows if r["device"] == device]
        summary[device] = {name: round(float(np.mean([abs(r[name]["dram_read_bytes"] / r["measured"]["dram_read_bytes"]
                                                            - 1) for r in mine])), 4) for name in MODELS}
    out = {
        "script": "benchmarks/sim_validation/wave_pace.py",
        "command": "python -m benchmarks.sim_validation.wave_pace " + " ".join(argv),
        "device": "measured on " + " and ".join(dict.fromkeys(r["device"] for r in rows))
                  + " (ncu, %globaltimer, %smid; stop 32's launches); predicted on the CPU",
        "kind": "measured: per wave of 264 launch positions, the start spread (p90 - p10, median step lengths) and the "
                "chip's fast SMs' mean program duration over the others' (first stamped launch), and sm_mate: a "
                "program's duration / median regressed on the share of its life an older program shared its SM "
                "(younger_coef) and the share it ran alone; DRAM reads the mean of the stamped launches; "
                "predicted: models H100-SXM / H200-SXM with each chip's GPC layout and share, "
                "saturating and contention progress at the chip table's fitted points",
        "points": points, "chips": chips,
        "mean_abs_rel_error_dram_read": summary,
        "rows": rows, "elapsed_s": round(time.time() - started, 1),
    }
    atomic_write_text(args.out, json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
