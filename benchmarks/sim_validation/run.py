"""GPU-host half of the simulator's validation set (issue 15, part 2): ncu rows of every task, orders that differ.

Measures only (predictions come afterwards, on any CPU, from benchmarks/sim_validation/validate.py). One call per GPU:
    python -m benchmarks.sim_validation.run OUT_DIR --deadline-s 230
CPU check of everything but ncu (tiny test cases under the Triton interpreter):
    python -m benchmarks.sim_validation.run /tmp/simval_dry --dry-run
Writes OUT_DIR/sim_ncu_rows_<gpu>.json after every case (a timeout still leaves the rows measured so far).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.lab import child_env
from benchmarks.lab.case_sets import CASE_SETS, CASES
from benchmarks.lab.ncu_launch import METRICS, child_command, device_info, occupancy_of
from swizzlelab.io import atomic_write_text

# Counters beside ncu's hit rate: the raw lookups behind it (hit / miss, fabric, by operation), so a figure above
# 100% (flash attention row-major read 105.8% on the H100) can be traced to the counters it is made of.
EXTRA_METRICS = (
    "lts__t_sectors_lookup_hit.sum",
    "lts__t_sectors_lookup_miss.sum",
    "lts__t_sectors_srcunit_ltcfabric.sum",
    "lts__t_sectors_op_read.sum",
    "lts__t_sectors_op_write.sum",
    "lts__t_sectors_op_atom.sum",
    "lts__t_sectors_op_red.sum",
    "lts__t_sector_op_read_hit_rate.pct",
    "lts__t_sector_op_write_hit_rate.pct",
    "dram__sectors_read.sum",
)


def dry_cases() -> list[tuple[str, dict[str, Any], list[str], str]]:
    """The same tasks and orders on each task's first small test case (CPU interpreter)."""
    from swizzlelab.tasks import load_task

    out = []
    for task_name, case, orders, name in CASES:
        small = next((c for c in load_task(task_name).cases("tests") if set(c) == set(case)), None)
        if small is None:
            small = load_task(task_name).cases("tests")[0]
        if all(c[1] != small for c in out):
            out.append((task_name, dict(small), orders, name))
    return out


def known_metrics(metrics: list[str]) -> tuple[list[str], list[str]]:
    """(metrics this ncu knows on this GPU, those it does not), from `ncu --query-metrics`; all when unsure."""
    from swizzlelab.harness.ncu import find_ncu

    try:
        text = subprocess.run([find_ncu(), "--query-metrics"], capture_output=True, text=True, timeout=60).stdout
    except Exception:  # noqa: BLE001 - keep every metric; run_ncu falls back to the core ones on error
        return metrics, []
    names = set(re.findall(r"^\s*([a-z0-9_]+__[a-z0-9_]+)", text, flags=re.M))
    if len(names) < 50:
        return metrics, []
    # launch__* are launch statistics, which the query does not list; ncu knows them (the sim_gpu study's rows).
    keep = [m for m in metrics if m.rsplit(".", 1)[0] in names or m.startswith("launch__")]
    return keep, [m for m in metrics if m not in keep]


def measure_case(task_name: str, case: dict[str, Any], orders: list[str], kernel_name: str, metrics: list[str],
                 workdir: Path, timeout_s: float, dry_run: bool, repeat: int = 0) -> list[dict[str, Any]]:
    tag = f"{task_name}_{case['seed']}_{repeat}"
    result_path = workdir / f"child_{tag}.json"
    cmd = child_command(task_name, case, orders, str(result_path))  # launches the orders in one profiler range
    if dry_run:
        subprocess.run(cmd, check=True, timeout=timeout_s, env=child_env())
        kernels: list[Any] = [None] * len(orders)
    else:
        from swizzlelab.errors import UserError
        from swizzlelab.harness.ncu import run_ncu

        report = workdir / f"ncu_{tag}.ncu-rep"
        try:
            kernels = run_ncu(cmd, metrics, kernel_regex=kernel_name, profile_from_start=False, timeout_s=timeout_s,
                              report_path=report, env=child_env())
        except UserError as err:
            print(f"{tag}: ncu failed with all metrics ({err}); retrying with the base list", flush=True)
            kernels = run_ncu(cmd, list(METRICS), kernel_regex=kernel_name, profile_from_start=False,
                              timeout_s=timeout_s, report_path=report, env=child_env())
        # The name filter again: a torch fill kernel launched beside the task's kernel must not shift the match.
        named = [k for k in kernels if kernel_name in k.kernel_name]
        if len(named) != len(orders):
            names = ", ".join(k.kernel_name[:40] for k in kernels[:10])
            raise RuntimeError(f"ncu profiled {len(named)} {kernel_name} launches for {len(orders)} orders ({names})")
        kernels = named
    verdicts = json.loads(result_path.read_text())["orders"]
    rows = []
    for spec, verdict, km in zip(orders, verdicts, kernels):
        occupancy, source = occupancy_of(km, verdict, 1)
        values = dict(km.values) if km is not None else {}
        rows.append({
            "task": task_name, "case": case, "order": spec,
            "kernel_name": km.kernel_name if km is not None else None,
            "measured_l2_hit_pct": values.get("lts__t_sector_hit_rate.pct"),
            "measured_dram_read_bytes": values.get("dram__bytes_read.sum"),
            "measured_dram_write_bytes": values.get("dram__bytes_write.sum"),
            "measured_l2_sectors": values.get("lts__t_sectors.sum"),
            "counters": values, "occupancy": occupancy, "occupancy_source": source,
            "output_correct": verdict["passed"], "resources": verdict.get("resources"),
        })
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--deadline-s", type=float, default=230.0, help="stop starting cases after this many s")
    parser.add_argument("--dry-run", action="store_true", help="CPU: tiny cases, no ncu")
    parser.add_argument("--only", default="", help="comma-separated task names to measure (default: all)")
    parser.add_argument("--set", choices=sorted(CASE_SETS), default="table",
                        help="which cases: the validation table's (CASES), the fresh test set (FRESH_CASES), the "
                             "page-noise test set (PAGE_CASES) or the program-pace test set (PACE_CASES)")
    parser.add_argument("--cases", default="", help="comma-separated indices into the set's cases (default: all)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure each case this many times in turn (rows carry `repeat`): run-to-run spread")
    args = parser.parse_args(argv)
    start = time.time()
    deadline = start + args.deadline_s
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="simval_"))
    meta: dict[str, Any] = {"script": "benchmarks/sim_validation/run.py",
                            "command": " ".join(["python", "-m", "benchmarks.sim_validation.run", *argv])}
    if args.dry_run:
        meta.update(device="cpu (dry run: no measurement)")
        metrics = list(METRICS) + list(EXTRA_METRICS)
        plan = dry_cases()
    else:
        meta.update(device_info())
        metrics, unknown = known_metrics(list(METRICS) + list(EXTRA_METRICS))
        meta["metrics_not_on_this_ncu"] = unknown
        plan = CASE_SETS[args.set]
    if args.cases:
        plan = [plan[int(i)] for i in args.cases.split(",")]
    if args.only:
        plan = [c for c in plan if c[0] in args.only.split(",")]
    plan = [(*c, r) for r in range(max(args.repeat, 1)) for c in plan]
    meta["metrics"] = metrics
    print(json.dumps(meta), flush=True)
    tag = re.sub(r"[^a-z0-9]+", "_", meta["device"].lower()).strip("_")[:40]
    path = out / f"sim_ncu_rows_{tag}.json"
    rows: list[dict[str, Any]] = []
    failures: list[str] = []

    def save() -> None:
        atomic_write_text(str(path), json.dumps({**meta, "rows": rows, "failures": failures,
                                                 "elapsed_s": time.time() - start}, indent=1, default=str))

    for task_name, case, orders, kernel_name, repeat in plan:
        left = deadline - time.time()
        if left < 20:
            failures.append(f"skipped {task_name} {case}: deadline")
            continue
        t0 = time.time()
        try:
            new = measure_case(task_name, case, orders, kernel_name, metrics, workdir, min(150.0, left), args.dry_run,
                               repeat)
            for r in new:
                r["device"] = meta["device"]
                if args.repeat > 1:
                    r["repeat"] = repeat
            rows += new
            print(f"{task_name} {case}: {len(new)} rows in {time.time() - t0:.0f} s: " + ", ".join(
                f"{r['order']} {r['measured_l2_hit_pct']}% {r['measured_dram_read_bytes']}" for r in new), flush=True)
        except Exception:  # noqa: BLE001 - keep measuring the other cases
            failures.append(f"{task_name} {case}: " + traceback.format_exc(limit=3))
            print(failures[-1], flush=True)
        save()
    save()
    print(f"done in {time.time() - start:.0f} s, {len(rows)} rows, failures: {len(failures)} -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
