"""GPU benchmark of the transpose, matmul, histogram and spmv tasks: correctness at benchmark size, kernel time
per block order (CUDA events, L2 flushed and output poisoned before each run) and the torch baseline.

Run on a CUDA machine:  python benchmarks/task_orders_h100/run.py OUTDIR [--budget-s 1] [--tasks matmul,spmv]
On the CPU (interpreter) `--cases tests` checks every order on the small test cases and times nothing.
Writes OUTDIR/task_orders_h100.json (system info, command, script, every figure labelled) and prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import Any, Callable

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402

from swizzlelab.harness.correctness import poison_  # noqa: E402
from swizzlelab.harness.sysinfo import system_info  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.swizzle import parse_formula  # noqa: E402
from swizzlelab.tasks.registry import Task, load_task  # noqa: E402

TASKS = ("transpose", "matmul", "histogram", "spmv")
ORDERS = {
    "transpose": ["identity", "column_major", "grouped:GROUP_M=8"],
    "matmul": ["identity", "grouped:GROUP_M=8", "column_major"],
    "histogram": ["identity", "column_major", "grouped:GROUP_M=4"],
    "spmv": ["identity", "communities", "xcd:NUM_XCDS=8"],
}


def community_order(case: dict[str, Any]) -> Any:
    """spmv: launch index i runs row (i % per) * K + i // per, i.e. all rows of community 0 first, then 1..."""
    k, rows = int(case["communities"]), int(case["rows"])
    if rows % k:
        return None  # the simple formula is a bijection only when K divides the row count
    text = f"pid = tl.program_id(0)\nswz_per = n_rows // {k}\npid = (pid % swz_per) * {k} + pid // swz_per\n"
    return parse_formula(text, ("pid",))


def order_formula(task: Task, spec: str, case: dict[str, Any]) -> tuple[bool, Any]:
    """(applicable, formula); formula None = the kernel's own site."""
    if spec == "identity":
        return True, None
    if spec == "communities":
        formula = community_order(case)
        return formula is not None, formula
    return True, task.parse_order(spec)


def work(task: Task, case: dict[str, Any], data: dict[str, Any]) -> tuple[float, str]:
    """(amount, unit) of useful work of one call: FLOPs for matmul, compulsory DRAM bytes otherwise."""
    if task.name == "matmul":
        return 2.0 * case["m"] * case["n"] * case["k"], "TFLOP/s"
    if task.name == "transpose":
        return 2.0 * data["x"].numel() * data["x"].element_size(), "GB/s"
    if task.name == "histogram":
        return float(data["x"].numel() + data["out"].numel() * 4), "GB/s"
    nnz = data["col_idx"].numel()
    return float(nnz * 8 + data["row_ptr"].numel() * 4 + data["x"].numel() * 4 + data["out"].numel() * 4), "GB/s"


def rate(amount: float, unit: str, ms: float) -> float:
    return amount / (ms * 1e-3) / (1e12 if unit == "TFLOP/s" else 1e9)


def check_once(task: Task, data: dict[str, Any], fn: Callable[[dict[str, Any]], Any]) -> tuple[bool, str]:
    poison_(data["out"])
    try:
        output = fn(data)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception as err:  # a kernel that does not compile or crashes is a result, not the end of the run
        return False, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    result = task.check(data, output)
    return result.ok, result.message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--cases", choices=("benchmarks", "tests"), default="benchmarks")
    parser.add_argument("--budget-s", type=float, default=1.0, help="timing budget per (case, order)")
    parser.add_argument("--tasks", default=",".join(TASKS))
    args = parser.parse_args()
    info = system_info()
    timing_on = info.is_gpu
    if args.cases == "benchmarks" and not timing_on:
        sys.exit("benchmark sizes need a CUDA GPU; on the CPU use --cases tests")
    from swizzlelab.harness.timing import time_fn

    rows: list[dict[str, Any]] = []
    for name in args.tasks.split(","):
        task = load_task(name)
        for case in task.cases(args.cases):
            data = task.generate_input(case)
            amount, unit = work(task, case, data)
            variants: list[tuple[str, Callable[[dict[str, Any]], Any]]] = []
            for spec in ORDERS[name]:
                applicable, formula = order_formula(task, spec, case)
                if applicable:
                    variants.append((spec, lambda d, f=formula: task.custom_kernel(d, f)))
            variants.append(("torch baseline", task.baseline))
            for label, fn in variants:
                ok, message = check_once(task, data, fn)
                row: dict[str, Any] = {
                    "task": name, "case": dict(case), "order": label, "grid": list(task.tile_grid(case)),
                    "ok": ok, "check": message, "work": amount, "work_unit": unit,
                }
                if ok and timing_on:
                    timing = time_fn(fn, data, args.budget_s, check=lambda out: task.check(data, out))
                    row["timing"] = timing.to_dict(with_samples=False)
                    row["rate"] = rate(amount, unit, timing.mean_ms)
                rows.append(row)
                shown = (f"{row['timing']['mean_ms']:9.4f} ms ± {row['timing']['sem_ms']:.4f}  "
                         f"{row['rate']:8.1f} {unit}") if "timing" in row else ("not timed" if ok else message)
                print(f"{name:10s} {task.case_label(case):55s} {label:22s} {'ok ' if ok else 'BAD'} {shown}",
                      flush=True)
            del data
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    report = {
        "script": "benchmarks/task_orders_h100/run.py",
        "command": " ".join(["python"] + sys.argv),
        "system": info.to_dict(),
        "label": info.measured_label(),
        "results": rows,
    }
    atomic_write_text(args.outdir / "task_orders_h100.json", json.dumps(report, indent=1))
    print(f"\nall times {info.measured_label()}; rate = useful work / mean time; wrote {args.outdir / 'task_orders_h100.json'}")
    for name in args.tasks.split(","):
        by_case: dict[str, dict[str, float]] = {}
        for row in rows:
            if row["task"] == name and "timing" in row:
                by_case.setdefault(json.dumps(row["case"]), {})[row["order"]] = row["timing"]["mean_ms"]
        for case_key, times in by_case.items():
            base = times.get("identity")
            if base:
                rel = "  ".join(f"{k}: {base / v:.3f}x" for k, v in times.items() if k != "identity")
                print(f"{name:10s} {case_key}: speed-up over identity  {rel}")
    if not all(row["ok"] for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
