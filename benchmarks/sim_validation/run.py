"""GPU-host half of the simulator's validation set (issue 15, part 2): ncu rows of every task, orders that differ.

Measures only (predictions come afterwards, on any CPU, from benchmarks/sim_validation/validate.py). One call per GPU:
    python benchmarks/sim_validation/run.py OUT_DIR --deadline-s 230
CPU check of everything but ncu (tiny test cases under the Triton interpreter):
    python benchmarks/sim_validation/run.py /tmp/simval_dry --dry-run
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

from swizzlelab.io import atomic_write_text, load_module
from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

HERE = Path(__file__).resolve().parent
SIM_VS_NCU = HERE.parent / "sim_vs_ncu" / "run.py"  # its child launches the orders in one profiler range
sim_vs_ncu = load_module(SIM_VS_NCU, "sim_vs_ncu_run", str(SIM_VS_NCU))

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

# (task, case, orders, name of the profiled kernel). Orders are chosen so that they differ in predicted L2 hit.
# Square matmul cases come first: they are the fit set.
CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("matmul", {"seed": 11, "m": 4096, "n": 4096, "k": 4096},
     ["row_major", "column_major", "grouped:GROUP_M=8", "hilbert:SIDE=8", "diagonal"], "matmul_kernel"),
    ("matmul", {"seed": 12, "m": 8192, "n": 8192, "k": 8192},
     ["grouped:GROUP_M=8", "row_major", "grouped:GROUP_M=16", "column_major", "hilbert:SIDE=32"], "matmul_kernel"),
    # Tiles 64 x 8 fp16: each reads 16 bytes (half a sector) of 64 rows of x, so neighbours along n share sectors.
    ("transpose", {"seed": 13, "m": 1048576, "n": 64, "dtype": "float16", "tile_n": 8},
     ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=4096", "diagonal"], "transpose_kernel"),
    # Short contexts and 4 waves of programs: the query heads of one KV group run together under some orders only.
    ("lean_attention", {"seed": 0, "batch": 16, "heads": 64, "kv_heads": 8, "head_dim": 128, "min_ctx": 512,
                        "max_ctx": 2048, "n_programs": 1056},
     ["identity1d", "stride:STRIDE=2", "stride:STRIDE=8", "stride:STRIDE=64", "stride:STRIDE=132"],
     "lean_attention_kernel"),
    ("histogram", {"seed": 11, "rows": 1048576, "channels": 512},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal"], "histogram_kernel"),
    ("spmv", {"seed": 11, "rows": 1048576, "cols": 33554432, "avg_nnz": 32, "communities": 64},
     ["identity1d", "stride:STRIDE=64", "stride:STRIDE=2", "stride:STRIDE=16", "stride:STRIDE=4096"], "spmv_kernel"),
    ("flash_attention", {"seed": 0, "batch": 1, "heads": 16, "seq": 8192, "head_dim": 128},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal", "hilbert:SIDE=8"], "flash_attention_kernel"),
    ("matmul", {"seed": 14, "m": 4096, "n": 16384, "k": 4096},
     ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=16"], "matmul_kernel"),
    ("matmul", {"seed": 15, "m": 16384, "n": 4096, "k": 8192},
     ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=16"], "matmul_kernel"),
    ("matmul", {"seed": 16, "m": 16384, "n": 16384, "k": 4096},
     ["row_major", "grouped:GROUP_M=8", "column_major"], "matmul_kernel"),
]

# A fresh test set (stop 35), chosen and committed before any of it was measured: shapes none of the tables above
# holds, none square (so validate.py never fits on them), orders of the table above. It decides between the
# saturating and the contention progress model by the rule in README ("A fresh test, registered before measuring").
FRESH_ORDERS = ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=16"]
FRESH_CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("matmul", {"seed": 21, "m": 4096, "n": 4096, "k": 8192}, [*FRESH_ORDERS, "hilbert:SIDE=8"], "matmul_kernel"),
    ("matmul", {"seed": 22, "m": 6144, "n": 6144, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 23, "m": 8192, "n": 16384, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 24, "m": 12288, "n": 12288, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 25, "m": 16384, "n": 8192, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 26, "m": 8192, "n": 8192, "k": 16384}, [*FRESH_ORDERS, "hilbert:SIDE=32"], "matmul_kernel"),
    ("flash_attention", {"seed": 1, "batch": 2, "heads": 16, "seq": 8192, "head_dim": 128},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal", "hilbert:SIDE=8"], "flash_attention_kernel"),
]
# The page-noise test set (stop 38), committed before any of it was measured: square and rectangular matmul shapes no
# set above holds, where streaming orders read several times what fits in L2. README ("Page noise") has its rule.
PAGE_CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("matmul", {"seed": 31, "m": 8192, "n": 8192, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 32, "m": 10240, "n": 10240, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 33, "m": 14336, "n": 14336, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 34, "m": 12288, "n": 8192, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 35, "m": 8192, "n": 12288, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 36, "m": 10240, "n": 10240, "k": 8192}, FRESH_ORDERS, "matmul_kernel"),
]
# The program-pace test set (stop 39), committed before any of it was measured: matmul shapes no set above holds, from
# the cliff of 4096^2x8192 (5120^2x8192) to the large squares. README ("A program's own pace") has its rule.
PACE_CASES: list[tuple[str, dict[str, Any], list[str], str]] = [
    ("matmul", {"seed": 41, "m": 5120, "n": 5120, "k": 8192}, [*FRESH_ORDERS, "hilbert:SIDE=8"], "matmul_kernel"),
    ("matmul", {"seed": 42, "m": 6144, "n": 6144, "k": 8192}, [*FRESH_ORDERS, "hilbert:SIDE=8"], "matmul_kernel"),
    ("matmul", {"seed": 43, "m": 7168, "n": 7168, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 44, "m": 9216, "n": 9216, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 45, "m": 11264, "n": 11264, "k": 4096}, FRESH_ORDERS, "matmul_kernel"),
    ("matmul", {"seed": 46, "m": 8192, "n": 6144, "k": 8192}, FRESH_ORDERS, "matmul_kernel"),
]
CASE_SETS = {"table": CASES, "fresh": FRESH_CASES, "page": PAGE_CASES, "pace": PACE_CASES}


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
    # launch__* are launch statistics, which the query does not list; ncu knows them (benchmarks/sim_gpu rows).
    keep = [m for m in metrics if m.rsplit(".", 1)[0] in names or m.startswith("launch__")]
    return keep, [m for m in metrics if m not in keep]


def device_info() -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(0)
    info: dict[str, Any] = {"device": torch.cuda.get_device_name(0), "sm_count": props.multi_processor_count,
                            "l2_cache_bytes": getattr(props, "L2_cache_size", None),
                            "total_memory_bytes": props.total_memory, "torch": torch.__version__}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,ecc.mode.current,memory.total,clocks.max.memory,"
                              "driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        info["nvidia_smi"] = smi.stdout.strip()
        # Which chip: two chips of one kind can rank a pair of orders differently (placement probe, README).
        ids = subprocess.run(["nvidia-smi", "--query-gpu=uuid,serial", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        info["gpu_uuid_serial"] = ids.stdout.strip()
    except Exception as err:  # noqa: BLE001
        info["nvidia_smi"] = f"unavailable: {err}"
    try:
        from swizzlelab.harness.ncu import find_ncu

        info["ncu_version"] = subprocess.run([find_ncu(), "--version"], capture_output=True, text=True,
                                             timeout=30).stdout.strip().splitlines()[-1]
    except Exception as err:  # noqa: BLE001
        info["ncu_version"] = f"unavailable: {err}"
    return info


def measure_case(task_name: str, case: dict[str, Any], orders: list[str], kernel_name: str, metrics: list[str],
                 workdir: Path, timeout_s: float, dry_run: bool, repeat: int = 0) -> list[dict[str, Any]]:
    tag = f"{task_name}_{case['seed']}_{repeat}"
    result_path = workdir / f"child_{tag}.json"
    cmd = [sys.executable, str(SIM_VS_NCU), "--child", task_name, json.dumps(case), json.dumps(orders),
           str(result_path)]
    if dry_run:
        subprocess.run(cmd, check=True, timeout=timeout_s)
        kernels: list[Any] = [None] * len(orders)
    else:
        from swizzlelab.errors import UserError
        from swizzlelab.harness.ncu import run_ncu

        report = workdir / f"ncu_{tag}.ncu-rep"
        try:
            kernels = run_ncu(cmd, metrics, kernel_regex=kernel_name, profile_from_start=False, timeout_s=timeout_s,
                              report_path=report)
        except UserError as err:
            print(f"{tag}: ncu failed with all metrics ({err}); retrying with the base list", flush=True)
            kernels = run_ncu(cmd, list(sim_vs_ncu.METRICS), kernel_regex=kernel_name, profile_from_start=False,
                              timeout_s=timeout_s, report_path=report)
        # The name filter again: a torch fill kernel launched beside the task's kernel must not shift the match.
        named = [k for k in kernels if kernel_name in k.kernel_name]
        if len(named) != len(orders):
            names = ", ".join(k.kernel_name[:40] for k in kernels[:10])
            raise RuntimeError(f"ncu profiled {len(named)} {kernel_name} launches for {len(orders)} orders ({names})")
        kernels = named
    verdicts = json.loads(result_path.read_text())["orders"]
    rows = []
    for spec, verdict, km in zip(orders, verdicts, kernels):
        occupancy, source = sim_vs_ncu.occupancy_of(km, verdict, 1)
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
                            "command": " ".join(["python", "benchmarks/sim_validation/run.py", *argv])}
    if args.dry_run:
        meta.update(device="cpu (dry run: no measurement)")
        metrics = list(sim_vs_ncu.METRICS) + list(EXTRA_METRICS)
        plan = dry_cases()
    else:
        meta.update(device_info())
        metrics, unknown = known_metrics(list(sim_vs_ncu.METRICS) + list(EXTRA_METRICS))
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
