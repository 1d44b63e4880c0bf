"""Pairs every stamped run of timeline_probe.py with ncu's counters of that same launch and replays its schedule through
the simulator's cache model: the cache model's error on one run, free of the progress model and of run-to-run noise.

    python -m benchmarks.sim_validation.replay_launch measure OUT_DIR [--cases 16384x4096x8192] [--orders ...] [--repeats 4]
    python -m benchmarks.sim_validation.replay_launch replay OUT_JSON LAUNCHES_JSON [LAUNCHES_JSON ...]
    python -m benchmarks.sim_validation.replay_launch stamps OUT_JSON LAUNCHES_JSON [LAUNCHES_JSON ...]

`measure` (GPU) runs timeline_probe.py under ncu (ncu's default clock control, as run.py measures the table) and
writes OUT_DIR/launches_<gpu>_<cases>.json (the counters of every launch, the probe's record) and the .npz beside it
(each stamped run's SM, start and duration per program: the start times are all a schedule is, README). `replay`
(CPU) replays each stamped run with its programs' steps
evenly spaced over their measured durations, and predicts each order with the progress model as fitted in the
validation table (its `progress_model`: saturating until stop 35, contention since). `stamps` (CPU) compares ncu's
DRAM reads of the probe's plain launches (the same kernel without its stamps) with its stamped ones: how far the
stamps themselves move what is replayed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.lab import child_env, module_command
from benchmarks.lab.chips import chip_layout, on_chip
from benchmarks.lab.timelines import (
    even_schedule, labelled_launches, load_timelines, order_key, order_table, stamped_counters)
from benchmarks.lab.validation import model_name
from swizzlelab.harness.ncu import run_ncu
from swizzlelab.hw import SET_MAPS, get_model
from swizzlelab.io import atomic_write_text
from swizzlelab.sim import SimParams, footprint_of, simulate
from swizzlelab.tasks import load_task

HERE = Path(__file__).resolve().parent
# One metric, so ncu runs each launch once: with two or more it replays the kernel once per pass (3 passes for DRAM
# reads with the L2 hit rate on an H100, 1 for DRAM reads alone) and the stamps left are those of the last pass,
# while the counters may come from another, a schedule of its own (paired that way, H200 16384x16384x4096
# row-major measured 11.6 GB on a launch whose stamps replay to 14.6, and the other way round).
METRICS = ("dram__bytes_read.sum",)
DRAM_TIE = 0.02  # validate.py's tie rule for DRAM reads
FIELDS = ("measured_dram_read_bytes", "replayed_dram_read_bytes", "model_dram_read_bytes", "chip_model_dram_read_bytes")


def pack(folder: Path, launches: list[dict], command: str) -> Path:
    """launches_<gpu>_<cases>.json and .npz from a probe folder and the profiler's per-launch counters."""
    probe = json.loads((folder / "timeline_probe.json").read_text())
    arrays = {}
    timelines = load_timelines(folder)
    for case, data in timelines.items():
        for name in data:
            if name.endswith("_start"):
                stem = name.removesuffix("_start")
                arrays[f"{case}__{stem}_sm"] = data[f"{stem}_sm"].astype(np.int16)
                arrays[f"{case}__{stem}_start"] = data[name].astype(np.int32)
                arrays[f"{case}__{stem}_duration"] = data[f"{stem}_step"].astype(np.int64).sum(axis=1).astype(np.int32)
    slug = "_".join([model_name(probe["device"]), *timelines])
    np.savez_compressed(folder / f"launches_{slug}.npz", **arrays)
    for row in probe["rows"]:
        # Under ncu the probe's event times are the profiler's (each launch replayed and saved, 170-270 ms), not the
        # kernel's: they are left out rather than kept under the probe's names.
        row.pop("plain_ms", None)
        row.pop("stamped_ms", None)
    record = {"script": "benchmarks/sim_validation/replay_launch.py", "command": command, "device": probe["device"],
              "kind": "measured (ncu with its default clock control; %globaltimer stamps of the same launches)",
              "metrics": list(METRICS), "probe": probe, "launches": launches}
    path = folder / f"launches_{slug}.json"
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return path


def measure(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = module_command("benchmarks.sim_validation.timeline_probe", str(out), "--cases", args.cases,
                         "--orders", args.orders, "--repeats", str(args.repeats))
    started = time.time()
    kernels = run_ncu(cmd, list(METRICS), kernel_regex="stamped_matmul", timeout_s=540, env=child_env())
    launches = [{"launch_index": k.launch_index, **{m: k.values.get(m) for m in METRICS}} for k in kernels]
    path = pack(out, launches, "python -m benchmarks.sim_validation.replay_launch " + " ".join(args.argv))
    for full in out.glob("timeline_*.npz"):
        full.unlink()  # every k-step's stamp: 10-20 MB a case, and the replay needs the starts and durations only
    print(f"{len(kernels)} launches profiled in {time.time() - started:.0f} s -> {path}")
    return 0


def replay(args: argparse.Namespace) -> int:
    started = time.time()
    validation = json.loads(Path(args.validation).read_text())
    fitted = {"step_cv": validation["fitted_step_cv"], "lrc_window": validation["fitted_lrc_window"],
              # "model": each GPU model's own share (validate.py --gpc-grid model), simulate's default.
              "gpc_bound": None if validation["fitted_gpc_bound"] == "model" else validation["fitted_gpc_bound"],
              "dram_saturation": validation["fitted_dram_saturation"],
              "miss_gain": validation["fitted_miss_gain"]}
    if validation.get("progress_model") == "contention":
        # The table's model since stop 36; "model" page noise is each GPU model's own (simulate's default: None).
        fitted.update(progress="contention", age_priority=validation["fitted_age_priority"],
                      hot_load=validation["fitted_hot_load"], start_jitter=validation["fitted_start_jitter"],
                      page_noise=None if validation["fitted_page_noise"] == "model" else validation["fitted_page_noise"])
    else:
        fitted["progress"] = "saturating"
    task = load_task("matmul")
    rows = []
    layouts: dict[str, dict] = {}
    for source in args.launches:
        record = json.loads(Path(source).read_text())
        arrays = np.load(Path(source).with_suffix(".npz"))
        probe, device = record["probe"], record["device"]
        counters = stamped_counters(probe, record["launches"])
        model = get_model(model_name(device))
        if args.set_map:
            model = replace(model, l2_set_map=args.set_map)
        label = model.name + (f" with set map {args.set_map}" if args.set_map else "")
        layout = chip_layout(arrays, model.units_per_domain, len(model.gpc_sms))
        layouts[Path(source).name] = {"device": device, **layout}  # one chip per file; chips of one product differ
        chip_model = on_chip(model, layout) if layout["found"] else None
        chip_fitted = {**fitted, "gpc_bound": layout["gpc_bound"]} if layout["found"] else None
        print(f"{device}: {layout['fast_sms']} SMs run {100 * (1 - layout['pace_ratio']):.1f}% faster in the grouped "
              f"orders; GPCs {layout.get('gpc_sms')}, gpc_bound {layout.get('gpc_bound')}", flush=True)
        for case_name in dict.fromkeys(name.split("__")[0] for name in arrays.files):
            m, n, k = (int(v) for v in case_name.split("x"))
            case = {"seed": 11, "m": m, "n": n, "k": k}  # the seed picks input values only: the trace is the same
            trace = task.access_model(case, config=task.kernel.GPU_CONFIG)
            tile_step_ptr = np.asarray(trace.tile_step_ptr, dtype=np.int64)
            footprint = footprint_of(trace)
            for order in [r["order"] for r in probe["rows"] if r["case"] == case_name]:
                perm = order_table(order, m, n, k)
                own = simulate(trace, perm, model, SimParams(**fitted), occupancy=2, footprint=footprint)
                chip = (simulate(trace, perm, chip_model, SimParams(**chip_fitted), occupancy=2, footprint=footprint)
                        if chip_model is not None else None)
                for run in sorted(r for c, o, r in counters if (c, o) == (case_name, order)):
                    stem = f"{case_name}__{order_key(order)}_{run}"
                    schedule, step_ns = even_schedule(arrays[f"{stem}_sm"], arrays[f"{stem}_start"],
                                                      arrays[f"{stem}_duration"], k // task.kernel.GPU_CONFIG.block_k,
                                                      order, tile_step_ptr, perm, model.l2_partitions)
                    res = simulate(trace, perm, model, SimParams(lrc_window=fitted["lrc_window"]), occupancy=2,
                                   schedule=schedule, footprint=footprint)
                    c = counters[(case_name, order, run)]
                    rows.append({
                        "case": case_name, "order": order, "run": run, "device": device,
                        "mean_step_ns": round(step_ns, 1),
                        "measured_dram_read_bytes": c["dram__bytes_read.sum"],
                        "replayed_dram_read_bytes": int(res.dram_read_bytes),
                        "replayed_l2_hit_pct": round(100 * res.l2_hit_rate, 2),
                        "model_dram_read_bytes": int(own.dram_read_bytes),
                        "model_l2_hit_pct": round(100 * own.l2_hit_rate, 2),
                        "chip_model_dram_read_bytes": int(chip.dram_read_bytes) if chip is not None else None,
                        "predicted_by": f"model {label}",
                    })
                    print(f"{case_name} {order} {run}: DRAM read measured (ncu, {device}) "
                          f"{c['dram__bytes_read.sum'] / 1e9:.3f} GB, replayed (model {label}, measured schedule) "
                          f"{res.dram_read_bytes / 1e9:.3f} GB, predicted (model {label}, own schedule) "
                          f"{own.dram_read_bytes / 1e9:.3f} GB", flush=True)
    devices = list(dict.fromkeys(r["device"] for r in rows))
    out = {
        "script": "benchmarks/sim_validation/replay_launch.py",
        "command": "python -m benchmarks.sim_validation.replay_launch " + " ".join(args.argv),
        "device": f"measured on {' and '.join(devices)} (ncu, %globaltimer); replayed and predicted on the CPU",
        "kind": "measured: ncu, one row per stamped launch; replayed: the model of that GPU (H100-SXM, H200-SXM) on "
                "that launch's measured schedule; model: the same model on its own (saturating) schedule; chip_model: "
                "the same with the measured chip's GPC layout and gpc_bound (chip_layouts)",
        "fitted": fitted,
        "chip_layouts": layouts,
        "set_map": args.set_map or "the model's (hash)",
        "summary": {device: summarize([r for r in rows if r["device"] == device])
                    for device in devices},
        "rows": rows,
        "elapsed_s": round(time.time() - started, 1),
    }
    atomic_write_text(args.out_json, json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["summary"], indent=1))
    return 0


def summarize(rows: list[dict]) -> dict:
    """Per row: the replay's error against the same launch; per case and pair of orders: which reads more, measured
    (mean over runs), replayed (mean) and predicted; a pair measured less than DRAM_TIE apart is a tie."""
    out: dict = {}
    pairs = []
    for case in sorted({r["case"] for r in rows}):
        means = {}
        for order in dict.fromkeys(r["order"] for r in rows if r["case"] == case):
            sel = [r for r in rows if (r["case"], r["order"]) == (case, order)]
            means[order] = {f: float(np.mean([r[f] for r in sel])) for f in FIELDS if sel[0][f] is not None}
            means[order]["runs"] = len(sel)
        names = list(means)
        for i in range(len(names)):
            for j in range(i + 1, len(names)):
                a, b = means[names[i]], means[names[j]]
                gap = {f: b[f] / a[f] - 1 for f in FIELDS if f in a and f in b}
                tie = abs(gap["measured_dram_read_bytes"]) < DRAM_TIE
                pairs.append({
                    "case": case, "orders": [names[i], names[j]], "runs": [a["runs"], b["runs"]],
                    "measured_gap": round(gap["measured_dram_read_bytes"], 4),
                    "replayed_gap": round(gap["replayed_dram_read_bytes"], 4),
                    "model_gap": round(gap["model_dram_read_bytes"], 4),
                    "measured_tie": tie,
                    "replay_agrees": None if tie else bool(np.sign(gap["replayed_dram_read_bytes"])
                                                           == np.sign(gap["measured_dram_read_bytes"])),
                    "model_agrees": None if tie else bool(np.sign(gap["model_dram_read_bytes"])
                                                          == np.sign(gap["measured_dram_read_bytes"])),
                })
                if "chip_model_dram_read_bytes" in gap:
                    pairs[-1]["chip_model_gap"] = round(gap["chip_model_dram_read_bytes"], 4)
                    pairs[-1]["chip_model_agrees"] = None if tie else bool(
                        np.sign(gap["chip_model_dram_read_bytes"]) == np.sign(gap["measured_dram_read_bytes"]))
    out["pairs"] = pairs
    ranked = [p for p in pairs if not p["measured_tie"]]
    out["pairs_untied"] = len(ranked)
    out["pairs_replay_agrees"] = sum(bool(p["replay_agrees"]) for p in ranked)
    out["pairs_model_agrees"] = sum(bool(p["model_agrees"]) for p in ranked)
    out["pairs_chip_model_agrees"] = sum(bool(p.get("chip_model_agrees")) for p in ranked)
    for field, name in (("replayed_dram_read_bytes", "replay"), ("model_dram_read_bytes", "model"),
                        ("chip_model_dram_read_bytes", "chip_model")):
        errors = [abs(r[field] / r["measured_dram_read_bytes"] - 1) for r in rows if r.get(field) is not None]
        out[f"{name}_dram_mean_rel_error"] = round(float(np.mean(errors)), 4) if errors else None
    return out


def stamp_effect(record: dict) -> list[dict]:
    """Per (case, order) of one launches file: ncu's DRAM reads of the plain and of the stamped launches (mean, sd,
    count) and stamped / plain."""
    reads: dict[tuple[str, str], dict[str, list[float]]] = {}
    for (case, order, label), counters in labelled_launches(record["probe"], record["launches"]):
        kind = "stamped" if label.startswith("stamped") else "plain"
        reads.setdefault((case, order), {"plain": [], "stamped": []})[kind].append(counters[METRICS[0]])
    out = []
    for (case, order), got in reads.items():
        plain, stamped = np.asarray(got["plain"]), np.asarray(got["stamped"])
        out.append({"device": record["device"], "case": case, "order": order,
                    "plain_dram_read_bytes": float(plain.mean()), "plain_sd": float(plain.std(ddof=1)),
                    "plain_launches": int(plain.size), "stamped_dram_read_bytes": float(stamped.mean()),
                    "stamped_sd": float(stamped.std(ddof=1)), "stamped_launches": int(stamped.size),
                    "stamped_over_plain": round(float(stamped.mean() / plain.mean()), 4)})
    return out


def stamps(args: argparse.Namespace) -> int:
    rows = [row for source in args.launches for row in stamp_effect(json.loads(Path(source).read_text()))]
    for row in rows:
        print(f"{row['device']} {row['case']} {row['order']}: DRAM read measured (ncu) plain "
              f"{row['plain_dram_read_bytes'] / 1e9:.3f} GB (sd {row['plain_sd'] / 1e9:.3f}, {row['plain_launches']}), "
              f"stamped {row['stamped_dram_read_bytes'] / 1e9:.3f} (sd {row['stamped_sd'] / 1e9:.3f}, "
              f"{row['stamped_launches']}): {row['stamped_over_plain']:.3f}")
    out = {"script": "benchmarks/sim_validation/replay_launch.py",
           "command": "python -m benchmarks.sim_validation.replay_launch " + " ".join(args.argv),
           "device": "measured on " + " and ".join(dict.fromkeys(row["device"] for row in rows)) + " (ncu)",
           "kind": "measured: ncu DRAM reads of each launch of timeline_probe.py's kernel, plain (no stamps; the "
                   "first plain launch of an order included) and stamped, in the same process",
           "rows": rows}
    atomic_write_text(args.out_json, json.dumps(out, indent=1) + "\n")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("measure")
    m.add_argument("out")
    m.add_argument("--cases", default="16384x4096x8192,16384x16384x4096")
    m.add_argument("--orders", default="grouped:GROUP_M=8,grouped:GROUP_M=16,row_major,column_major")
    m.add_argument("--repeats", type=int, default=3)
    r = sub.add_parser("replay")
    r.add_argument("out_json")
    r.add_argument("launches", nargs="+")
    r.add_argument("--validation", default=str(HERE / "sim_validation.json"))
    r.add_argument("--set-map", choices=SET_MAPS, default=None,
                   help="replay and predict with this L2 set map instead of the model's (HardwareModel.l2_set_map)")
    st = sub.add_parser("stamps")
    st.add_argument("out_json")
    st.add_argument("launches", nargs="+")
    args = parser.parse_args(argv)
    args.argv = argv
    return {"measure": measure, "replay": replay, "stamps": stamps}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
