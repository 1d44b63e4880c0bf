"""How fast swizzlelab.trace builds analytic access models and traces kernels under the interpreter (CPU).

Each case runs in a fresh subprocess so that its peak RSS is its own. Writes JSON and prints a table.
Usage: python benchmarks/trace_speed/run.py [--out benchmarks/trace_speed/trace_speed_cpu.json] [--all]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from swizzlelab.io import atomic_write_text

# (label, task, case sizes, config name): GPU_CONFIG = the configuration the benchmarks run with
MODEL_CASES = [
    ("matmul 4096^3 model", "matmul", {"seed": 11, "m": 4096, "n": 4096, "k": 4096}, "GPU_CONFIG"),
    ("matmul 8192^3 model", "matmul", {"seed": 12, "m": 8192, "n": 8192, "k": 8192}, "GPU_CONFIG"),
]
HEAVY_CASES = [
    ("transpose 16384^2 fp16 model", "transpose", {"seed": 11, "m": 16384, "n": 16384, "dtype": "float16"}, "GPU_CONFIG"),
    ("lean_attention GQA benchmark model", "lean_attention",
     {"seed": 0, "batch": 16, "heads": 64, "kv_heads": 8, "head_dim": 128, "min_ctx": 2048, "max_ctx": 32768,
      "n_programs": 264}, "GPU_CONFIG"),
    ("histogram 1M x 512 model (merged loads)", "histogram", {"seed": 11, "rows": 1048576, "channels": 512}, "GPU_CONFIG"),
    ("spmv 4M rows model (+ generate_input, ~14 GB)", "spmv",
     {"seed": 11, "rows": 4194304, "cols": 33554432, "avg_nnz": 32, "communities": 64}, "GPU_CONFIG"),
    ("flash_attention 4x64x8192x128 model", "flash_attention",
     {"seed": 0, "batch": 4, "heads": 64, "seq": 8192, "head_dim": 128}, "GPU_CONFIG"),
]
TRACE_CASES = [
    ("trace matmul 256^3 CPU config (256 programs)", "matmul", {"seed": 1, "m": 256, "n": 256, "k": 256}, "CPU_CONFIG"),
    ("trace matmul 512x512x256 GPU config (16 prog)", "matmul", {"seed": 1, "m": 512, "n": 512, "k": 256}, "GPU_CONFIG"),
    ("trace spmv 2000 rows CPU config", "spmv", {"seed": 1, "rows": 2000, "cols": 20000, "avg_nnz": 16, "communities": 8}, "CPU_CONFIG"),
]


def run_one(kind: str, task_name: str, case: dict, config_name: str) -> dict:
    """Build (kind=model) or trace (kind=trace) one case; returns timings, sizes and this process's peak RSS."""
    from swizzlelab.scenario import load_scenario

    config = {"GPU_CONFIG": "gpu", "CPU_CONFIG": "cpu"}[config_name]
    scenario = load_scenario(task_name, case, config=config, target="h100", gpu_name="")
    if kind == "model":
        # numba compile/cache load, not timed
        _ = load_scenario(task_name, {"seed": 0, **_tiny(task_name)}, config=config, target="h100", gpu_name="").trace
        start = time.perf_counter()
        trace = scenario.trace
        elapsed_s = time.perf_counter() - start
    else:
        data = scenario.task.generate_input(scenario.case)
        start = time.perf_counter()
        trace = scenario.recorded_trace(data=data)
        elapsed_s = time.perf_counter() - start
    array_bytes = sum(getattr(trace, n).nbytes for n in ("lines", "sector_mask", "is_write", "step_ptr", "tile_step_ptr"))
    return {
        "kind": kind,
        "task": task_name,
        "case": case,
        "config": f"{config_name} {scenario.config!r}",
        "grid": list(trace.grid),
        "n_tiles": trace.n_tiles,
        "n_steps": trace.n_steps,
        "n_accesses": trace.n_accesses,
        "seconds": round(elapsed_s, 3),
        "accesses_per_s": round(trace.n_accesses / elapsed_s) if elapsed_s > 0 else None,
        "trace_bytes": array_bytes,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def _tiny(task_name: str) -> dict:
    return {
        "matmul": {"m": 64, "n": 64, "k": 64},
        "transpose": {"m": 64, "n": 64, "dtype": "float16"},
        "lean_attention": {"batch": 1, "heads": 2, "kv_heads": 1, "head_dim": 64, "min_ctx": 10, "max_ctx": 100, "n_programs": 3},
        "histogram": {"rows": 100, "channels": 64},
        "flash_attention": {"batch": 1, "heads": 1, "seq": 128, "head_dim": 128},
        "spmv": {"rows": 10, "cols": 100, "avg_nnz": 4, "communities": 1},
    }[task_name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).with_name("trace_speed_cpu.json")))
    parser.add_argument("--all", action="store_true", help="also the other tasks' benchmark-size models (spmv ~14 GB, flash ~7 GB of memory)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(*json.loads(args.one))))
        return
    cases = [("model", *c) for c in MODEL_CASES + (HEAVY_CASES if args.all else [])] + [("trace", *c) for c in TRACE_CASES]
    results = []
    for kind, label, task_name, case, config_name in cases:
        spec = json.dumps([kind, task_name, case, config_name])
        proc = subprocess.run([sys.executable, __file__, "--one", spec], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            results.append({"label": label, "kind": kind, "task": task_name, "case": case, "error": tail})
            print(f"{label:45s} FAILED: {tail}")
            continue
        row = {"label": label, **json.loads(proc.stdout.strip().splitlines()[-1])}
        results.append(row)
        rate = (
            f"{row['accesses_per_s'] / 1e6:7.1f} M accesses/s" if kind == "model"
            else f"{1e3 * row['seconds'] / row['n_tiles']:7.1f} ms/program"
        )
        print(
            f"{label:47s} {row['seconds']:8.2f} s  {row['n_accesses']:>12,d} accesses  {rate}  "
            f"peak RSS {row['peak_rss_bytes'] / 2**30:5.2f} GiB  (measured, CPU)"
        )
    report = {
        "what": "swizzlelab.trace build/trace speed, measured on the CPU (no GPU involved)",
        "device": f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "script": "benchmarks/trace_speed/run.py",
        "python": platform.python_version(),
        "results": results,
    }
    atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
