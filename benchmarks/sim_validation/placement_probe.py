"""Does ncu's order of two swizzle orders belong to the orders or to where the operands lie in memory? The
validation table's missed pairs, measured under several seeded placements of a, b and out (issue 15, part 2).

    python -m benchmarks.sim_validation.placement_probe OUT_DIR [--gpu h100|h200] [--placements 6]
        [--repeat-placements 0,1] [--deadline-s 500]
    python -m benchmarks.sim_validation.placement_probe OUT_DIR --dry-run      (CPU: tiny case, no ncu)
    python -m benchmarks.sim_validation.placement_probe --analyse OUT_DIR/placement_probe_<gpu>.json

Placement 0 is the table's own (the task's generate_input, as run.py's child allocates). Placement p > 0, seeded by
(case seed, p): a pad of 0-510 MiB (2 MiB steps) is allocated first, then a, b and out in a random order, each at a
random 4 KiB multiple (0-1020 KiB) into a buffer of its own, and the data copied there. The L2's set and partition
hashes act on physical addresses, which no model of ours sees; a pair whose measured order follows the placement has
no order of its own to predict. Each placement is one process (one ncu call) that launches every order twice in
the profiled range (ncu flushes the caches before each launch); some placements get a second process, which says
whether a placement reproduces. The rule applied to the result was committed before any of it was measured
(README, "Placement probe").
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from benchmarks.lab import child_env, module_command
from benchmarks.lab.ncu_launch import device_info, launch_profiled, warm_and_check
from benchmarks.lab.placement import METRIC_FIELDS, case_key, launch_differences
from swizzlelab.io import atomic_write_text

METRICS = ["lts__t_sector_hit_rate.pct", "dram__bytes_read.sum", "lts__t_sectors_lookup_hit.sum",
           "lts__t_sectors_lookup_miss.sum", "gpu__time_duration.sum"]
LAUNCHES = 2  # launches of each order per process, interleaved (a b a b)
KERNEL = "matmul_kernel"
ROW_COL = ["row_major", "column_major"]
# The held-out cases below tau 0.8 on each GPU (sim_validation.json, stop 36), each with the orders of its missed
# pairs; the same case seeds as the table so that placement 0 is the table's allocation.
CASES: dict[str, list[tuple[dict[str, int], list[str]]]] = {
    "h200": [
        ({"seed": 16, "m": 16384, "n": 16384, "k": 4096}, ROW_COL),
        ({"seed": 22, "m": 6144, "n": 6144, "k": 4096}, ROW_COL),
        ({"seed": 21, "m": 4096, "n": 4096, "k": 8192}, [*ROW_COL, "hilbert:SIDE=8"]),
        ({"seed": 14, "m": 4096, "n": 16384, "k": 4096}, ["column_major", "grouped:GROUP_M=8"]),
    ],
    "h100": [
        ({"seed": 21, "m": 4096, "n": 4096, "k": 8192}, ["row_major", "grouped:GROUP_M=8", "hilbert:SIDE=8"]),
        ({"seed": 24, "m": 12288, "n": 12288, "k": 4096}, ROW_COL),
        ({"seed": 16, "m": 16384, "n": 16384, "k": 4096}, ROW_COL),
    ],
}
DRY_CASE = ({"seed": 3, "m": 64, "n": 64, "k": 32}, ROW_COL)
# Operand layouts (--layouts): "default" a [m, k] and b [k, n] row-major, as the task allocates them; "b_kmajor" b
# stored as [n, k] (its tile rows are 128-byte k-runs, as a's are); "mirror" a stored as [k, m] and b as [n, k], so
# each operand lies as the other does by default. Under "mirror", row- and column-major orders swap the layout of
# the panel they share and the one they stream, and nothing else.
LAYOUTS = ("default", "b_kmajor", "mirror")
P_ANOVA = 0.05


# ---- child: one placement, every order launched LAUNCHES times in the profiled range -----------------------------
def place(data: dict[str, Any], case_seed: int, placement: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The data copied to placement `placement` (0: as generated), and what was done."""
    import torch

    if placement == 0:
        return data, {"pad_bytes": 0, "alloc_order": list(data), "offset_bytes": {n: 0 for n in data}}
    rng = np.random.default_rng([case_seed, placement])
    pad = torch.empty(int(rng.integers(0, 256)) * 2**21, dtype=torch.uint8, device=data["a"].device)
    names = list(data)
    rng.shuffle(names)
    placed, offsets = {}, {}
    for name in names:
        t = data[name]
        offsets[name] = int(rng.integers(0, 256)) * 4096
        skip = offsets[name] // t.element_size()
        buf = torch.empty(t.numel() + skip, dtype=t.dtype, device=t.device)
        placed[name] = buf[skip:].view(t.shape).copy_(t)
    placed["_pad"] = pad  # kept alive so that the placement holds while the kernels run
    return placed, {"pad_bytes": pad.numel(), "alloc_order": names, "offset_bytes": offsets}


def relayout(data: dict[str, Any], layout: str) -> dict[str, Any]:
    """The same values with a and b stored as `layout` says (views of the logical shapes the kernel takes)."""
    out = dict(data)
    if layout in ("b_kmajor", "mirror"):
        out["b"] = data["b"].t().contiguous().t()
    if layout == "mirror":
        out["a"] = data["a"].t().contiguous().t()
    return out


def child(case: dict[str, int], orders: list[str], placement: int, result_path: str, layout: str = "default") -> int:
    from swizzlelab.runtime import device
    from swizzlelab.tasks import load_task

    on_gpu = device() == "cuda"
    task = load_task("matmul")
    generated = relayout(task.generate_input(case), layout)
    data, how = place(generated, case["seed"], placement)
    del generated
    how["data_ptr"] = {n: int(data[n].data_ptr()) for n in ("a", "b", "out")}
    kernel_data = {n: data[n] for n in ("a", "b", "out")}
    formulas = [task.parse_order(spec) for spec in orders]
    verdicts = [warm_and_check(task, kernel_data, spec, formula) for spec, formula in zip(orders, formulas)]
    launch_profiled(task, kernel_data, formulas, on_gpu, LAUNCHES)
    how["strides"] = {n: list(kernel_data[n].stride()) for n in ("a", "b")}
    atomic_write_text(result_path, json.dumps({"orders": verdicts, "placement": how}))
    return 0


# ---- parent ------------------------------------------------------------------------------------------------------
def measure(case: dict[str, int], orders: list[str], placement: int, process: int, workdir: Path, dry_run: bool,
            timeout_s: float, layout: str = "default") -> list[dict[str, Any]]:
    """Rows (one per launch) of one process at one placement."""
    tag = f"{case['seed']}_{placement}_{process}_{layout}"
    result = workdir / f"child_{tag}.json"
    cmd = module_command("benchmarks.sim_validation.placement_probe", "--child", json.dumps(case), json.dumps(orders),
                         str(placement), str(result), layout)
    if dry_run:
        subprocess.run(cmd, check=True, timeout=timeout_s, env=child_env())
        kernels: list[Any] = [None] * (LAUNCHES * len(orders))
    else:
        from swizzlelab.harness.ncu import run_ncu

        kernels = [k for k in run_ncu(cmd, METRICS, kernel_regex=KERNEL, profile_from_start=False,
                                      timeout_s=timeout_s, report_path=workdir / f"ncu_{tag}.ncu-rep", env=child_env())
                   if KERNEL in k.kernel_name]
        if len(kernels) != LAUNCHES * len(orders):
            raise RuntimeError(f"ncu profiled {len(kernels)} {KERNEL} launches, expected {LAUNCHES * len(orders)}")
    child_out = json.loads(result.read_text())
    passed = {v["order"]: v["passed"] for v in child_out["orders"]}
    rows = []
    for i, km in enumerate(kernels):
        order = orders[i % len(orders)]
        values = dict(km.values) if km is not None else {}
        rows.append({"case": case, "order": order, "placement": placement, "process": process, "layout": layout,
                     "launch": i // len(orders), "output_correct": passed[order],
                     "measured_l2_hit_pct": values.get("lts__t_sector_hit_rate.pct"),
                     "measured_dram_read_bytes": values.get("dram__bytes_read.sum"),
                     "measured_duration_ns": values.get("gpu__time_duration.sum"), "counters": values,
                     "placement_detail": child_out["placement"]})
    return rows


def analyse(doc: dict[str, Any]) -> dict[str, Any]:
    """Per missed pair and metric: the difference at each placement, whether its sign changes, one-way ANOVA of the
    per-launch differences over placements, and the registered verdict (placement-bound or not)."""
    rows = [r for r in doc["rows"] if r["measured_dram_read_bytes"] is not None]
    out: dict[str, Any] = {}
    for key in sorted({case_key(r["case"], r.get("layout", "default")) for r in rows}):
        crows = [r for r in rows if case_key(r["case"], r.get("layout", "default")) == key]
        orders = list(dict.fromkeys(r["order"] for r in crows))
        for o1, o2 in itertools.combinations(orders, 2):
            for metric in METRIC_FIELDS:
                by_placement = launch_differences(crows, o1, o2, metric)
                means = {p: float(np.mean(v)) for p, v in sorted(by_placement.items())}
                groups = [v for v in by_placement.values() if len(v) >= 2]
                p_anova = float(stats.f_oneway(*groups).pvalue) if len(groups) >= 2 else None
                # A sign change counts only where placements sit on both sides beyond their own noise: the pooled
                # within-placement spread of a placement's mean, twice over.
                spread = [x - np.mean(v) for v in groups for x in v]
                dof = len(spread) - len(groups)
                se = float(np.sqrt(np.sum(np.square(spread)) / dof / LAUNCHES)) if dof > 0 else float("inf")
                both_sides = bool(means) and max(means.values()) > 2 * se and min(means.values()) < -2 * se
                bound = bool(p_anova is not None and p_anova < P_ANOVA and both_sides)
                out[f"{key} {o1} - {o2} {metric}"] = {
                    "case": key, "orders": [o1, o2], "metric": metric,
                    "unit": "relative difference" if metric == "dram" else "pp",
                    "difference_by_placement": means, "launch_differences": by_placement,
                    "anova_p_over_placements": p_anova, "placement_mean_noise": se,
                    "sign_changes_beyond_noise": both_sides,
                    "placement_bound": bound}
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--gpu", choices=sorted(CASES), default=None, help="whose missed cases (default: by name)")
    parser.add_argument("--placements", type=int, default=6)
    parser.add_argument("--repeat-placements", default="0,1", help="placements measured in a second process too")
    parser.add_argument("--deadline-s", type=float, default=500.0)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--analyse", metavar="JSON", help="print and store the analysis of a measured file")
    parser.add_argument("--layouts", default="default", help=f"comma-separated operand layouts of {LAYOUTS}")
    parser.add_argument("--cases", default="", help="comma-separated indices into the GPU's cases (default: all)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        case, orders, placement, result, layout = args.child
        return child(json.loads(case), json.loads(orders), int(placement), result, layout)
    if args.analyse:
        doc = json.loads(Path(args.analyse).read_text())
        doc["analysis"] = analyse(doc)
        atomic_write_text(args.analyse, json.dumps(doc, indent=1))
        for name, a in doc["analysis"].items():
            scale = 100 if a["metric"] == "dram" else 1
            diffs = " ".join(f"{p}:{m * scale:+.1f}" for p, m in a["difference_by_placement"].items())
            print(f"{name}: by placement ({'%' if scale == 100 else 'pp'}) {diffs}; ANOVA p "
                  f"{a['anova_p_over_placements']}; placement-bound: {a['placement_bound']}")
        return 0
    if not args.out:
        parser.error("OUT directory needed")
    start = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="placement_"))
    meta: dict[str, Any] = {"script": "benchmarks/sim_validation/placement_probe.py",
                            "command": " ".join(["python", "-m", "benchmarks.sim_validation.placement_probe", *argv]),
                            "launches_per_order_per_process": LAUNCHES, "metrics": METRICS}
    if args.dry_run:
        meta["device"] = "cpu (dry run: no measurement)"
        plan = [DRY_CASE]
    else:
        meta.update(device_info())
        gpu = args.gpu or ("h200" if "H200" in meta["device"] else "h100")
        meta["cases_of"] = gpu
        plan = CASES[gpu]
    if args.cases:
        plan = [plan[int(i)] for i in args.cases.split(",")]
    layouts = args.layouts.split(",")
    if set(layouts) - set(LAYOUTS):
        parser.error(f"--layouts: choose from {', '.join(LAYOUTS)}")
    meta["layouts"] = layouts
    repeats = [int(p) for p in args.repeat_placements.split(",") if p]
    schedule = [(p, 0) for p in range(args.placements)] + [(p, 1) for p in repeats]
    print(json.dumps(meta), flush=True)
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    tag = ("dry" if args.dry_run else meta["cases_of"]) + ("" if layouts == ["default"] else "_layouts")
    path = out / f"placement_probe_{tag}.json"

    def save() -> None:
        atomic_write_text(str(path), json.dumps({**meta, "rows": rows, "failures": failures,
                                                 "elapsed_s": time.time() - start}, indent=1, default=str))

    # Placements in the outer loop: a deadline cuts placements of every case rather than whole cases.
    for placement, process in schedule:
        for (case, orders), layout in itertools.product(plan, layouts):
            left = start + args.deadline_s - time.time()
            if left < 15:
                failures.append(f"skipped {case_key(case, layout)} placement {placement} process {process}: deadline")
                continue
            t0 = time.time()
            try:
                new = measure(case, orders, placement, process, workdir, args.dry_run, min(120.0, left), layout)
                rows += new
                print(f"{case_key(case, layout)} placement {placement} process {process} ({time.time() - t0:.0f} s): "
                      + ", ".join(f"{r['order']} {r['measured_l2_hit_pct']} {r['measured_dram_read_bytes']}"
                                  for r in new), flush=True)
            except Exception as err:  # noqa: BLE001 - keep measuring the other placements
                failures.append(f"{case_key(case, layout)} placement {placement} process {process}: {err!r}"[:2000])
                print(failures[-1], flush=True)
            save()
    bad = [r for r in rows if not r["output_correct"]]
    if bad:
        failures.append(f"{len(bad)} launches with a wrong output")
    save()
    print(f"done in {time.time() - start:.0f} s, {len(rows)} rows, failures: {len(failures)} -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
