"""One GPU-host call for issue 15: ncu validation rows (every task, orders that differ), matmul 8192 wave-aware
orders against grouped-8 (ncu DRAM bytes + interleaved timing with CI), and the simulator's speed on the host CPU.

Measures only; predictions are made afterwards on any CPU by benchmarks/sim_gpu/validate.py from the JSON.
(The committed H100 results were taken when the child lived at benchmarks/sim_vs_ncu.py, now sim_vs_ncu/run.py.)
Run on the GPU host (stages in this order, each skipped once the deadline is near):
    python -m benchmarks.sim_gpu.run OUT_DIR --deadline-s 330
Writes OUT_DIR/sim_ncu_rows.json, OUT_DIR/sim_speed_gpuhost.json, OUT_DIR/optimize_matmul.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.lab.ncu_launch import METRICS, measure_orders

HERE = Path(__file__).resolve().parent

MATMUL_8192 = ["grouped:GROUP_M=8", "row_major", "grouped:GROUP_M=16"]  # + wave candidates from the command line
CASES: list[tuple[str, dict[str, Any], list[str], str | None]] = [
    ("matmul", {"seed": 11, "m": 4096, "n": 4096, "k": 4096},
     ["row_major", "column_major", "grouped:GROUP_M=8", "hilbert:SIDE=8", "diagonal"], None),
    ("transpose", {"seed": 13, "m": 16384, "n": 16416, "dtype": "float16"},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal", "hilbert:SIDE=8"], None),
    ("spmv", {"seed": 11, "rows": 1048576, "cols": 33554432, "avg_nnz": 32, "communities": 64},
     ["identity1d", "stride:STRIDE=64", "stride:STRIDE=2", "stride:STRIDE=16", "stride:STRIDE=4096"], None),
    ("matmul", {"seed": 14, "m": 4096, "n": 16384, "k": 4096},
     ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=16"], None),
    ("lean_attention", {"seed": 0, "batch": 16, "heads": 64, "kv_heads": 8, "head_dim": 128, "min_ctx": 2048,
                        "max_ctx": 32768, "n_programs": 264},
     ["identity1d", "stride:STRIDE=8", "stride:STRIDE=64", "stride:STRIDE=2"], "lean_attention_kernel"),
    ("flash_attention", {"seed": 0, "batch": 1, "heads": 16, "seq": 8192, "head_dim": 128},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal"], None),
    ("histogram", {"seed": 11, "rows": 1048576, "channels": 512},
     ["row_major", "column_major", "grouped:GROUP_M=8", "diagonal"], "histogram_kernel"),  # not torch's zero fill
    ("matmul", {"seed": 15, "m": 16384, "n": 4096, "k": 8192},
     ["row_major", "column_major", "grouped:GROUP_M=8", "grouped:GROUP_M=16"], None),
]


def time_orders(best: str, base: str = "grouped:GROUP_M=8") -> dict[str, Any]:
    from swizzlelab.harness.timing import compare_interleaved
    from swizzlelab.tasks import load_task

    task = load_task("matmul")
    case = {"seed": 12, "m": 8192, "n": 8192, "k": 8192}
    data = task.generate_input(case)
    fa, fb = task.parse_order(base), task.parse_order(best)
    comparisons = []
    for _ in range(2):  # the same comparison twice: the spread between runs is the noise floor
        cmp = compare_interleaved(lambda d: task.custom_kernel(d, fa), lambda d: task.custom_kernel(d, fb), data,
                                  budget_s=6.0, check_a=lambda out: task.check(data, out),
                                  check_b=lambda out: task.check(data, out))
        comparisons.append(cmp.to_dict(with_samples=False))
    return {"base": base, "best": best, "case": case, "comparisons": comparisons}


def speed(deadline: float, size: int = 8192) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    from swizzlelab.hw import get_model
    from swizzlelab.optimize.search import SearchProposer, coarse_candidates
    from swizzlelab.sim import Engine, default_workers, footprint_of, simulate
    from swizzlelab.swizzle import to_permutation
    from swizzlelab.tasks import load_task
    import threading

    task = load_task("matmul")
    case = {"m": size, "n": size, "k": size}
    config = task.kernel.GPU_CONFIG
    t0 = time.perf_counter()
    trace = task.access_model(case, config=config)
    trace_s = time.perf_counter() - t0
    footprint = footprint_of(trace)
    grid = task.tile_grid(case, config)
    args, consts = task.swizzle_args(case, config)
    cores = default_workers()
    runs = []
    perm = to_permutation(task.parse_order("grouped:GROUP_M=8"), grid, args, consts)
    simulate(trace, perm, "h100", engine=Engine(workers=cores), occupancy=2,
             footprint=footprint)  # set index cache + compile
    for target, workers in (("h100", cores), ("h100", 1), ("mi300x", cores)):
        t0 = time.perf_counter()
        res = simulate(trace, perm, get_model(target), engine=Engine(workers=workers), occupancy=2, footprint=footprint)
        runs.append({"target": res.model, "workers": workers, "order": "grouped:GROUP_M=8",
                     "line_accesses": res.line_accesses, "sim_s": res.elapsed_s, "wall_s": time.perf_counter() - t0,
                     "accesses_per_s": res.accesses_per_s, "l2_hit_pct": 100 * res.l2_hit_rate,
                     "dram_read_bytes": res.dram_read_bytes, "label": f"predicted (model {res.model})"})
        print(f"speed {target} workers={workers}: {res.accesses_per_s / 1e6:.1f} M accesses/s", flush=True)
    lock = threading.Lock()

    def screen(text: str):
        from swizzlelab.swizzle import parse_formula
        with lock:
            formula = task.parse_order(text) if ":" in text or text.isidentifier() else parse_formula(text)
            p = to_permutation(formula, grid, args, consts)
        r = simulate(trace, p, "h100", engine=Engine(workers=1), occupancy=2, footprint=footprint)
        pred = {"dram_bytes": r.dram_read_bytes + r.dram_write_bytes, "dram_read_bytes": r.dram_read_bytes,
                "dram_write_bytes": r.dram_write_bytes, "l2_hit_rate": r.l2_hit_rate, "kind": "predicted"}
        return p.id, pred, None, ""

    budget = max(10.0, min(40.0, deadline - time.time() - 5))
    proposer = SearchProposer(grid=grid, n_domains=1, screen=screen, screen_budget_s=budget, workers=cores)
    t0 = time.perf_counter()
    n = proposer.screen_all(coarse_candidates(grid, 1))
    elapsed = time.perf_counter() - t0
    ranked = sorted((v for v in proposer.screened.values() if v.prediction), key=lambda v: v.prediction["dram_bytes"])
    top = [{"order": v.candidate.spec, "l2_hit_pct": 100 * v.prediction["l2_hit_rate"],
            "dram_read_bytes": v.prediction["dram_read_bytes"]} for v in ranked[:10]]
    return {
        "top_predicted": top,
        "host_cpu": platform.processor() or "unknown", "cores": cores, "trace": f"matmul {size}^3 fp16 (GPU_CONFIG)",
        "line_accesses": int(trace.lines.size), "trace_s": trace_s, "runs": runs,
        "screening": {"budget_s": budget, "elapsed_s": elapsed, "candidates": n,
                      "candidates_per_min": 60 * n / elapsed, "overshoot_s": elapsed - budget,
                      "workers": cores},
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--smoke-speed"]:  # CPU check of the speed stage at a small size
        print(json.dumps(speed(time.time() + 30, size=int(argv[1]))["screening"]))
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--deadline-s", type=float, default=330)
    parser.add_argument("--wave", default="", help="';'-separated extra matmul 8192 orders (best first)")
    args = parser.parse_args(argv)
    start = time.time()
    deadline = start + args.deadline_s
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    device = torch.cuda.get_device_name(0)
    print(f"device: {device}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="simgpu_"))
    waves = [w for w in args.wave.split(";") if w]
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    meta = {"device": device, "script": "benchmarks/sim_gpu/run.py",
            "command": " ".join(["python", "-m", "benchmarks.sim_gpu.run", *argv]), "metrics": list(METRICS)}

    def save_rows() -> None:
        (out / "sim_ncu_rows.json").write_text(json.dumps({**meta, "rows": rows, "failures": failures,
                                                          "elapsed_s": time.time() - start}, indent=1, default=str))

    # 1. The simulator's speed on this host, and its ranking of matmul 8192 orders (wave-aware families included).
    try:
        record = speed(start + 75)
        record.update(device=device, note="times measured on the GPU host's CPU; hit rates and bytes are predictions")
        (out / "sim_speed_gpuhost.json").write_text(json.dumps(record, indent=1, default=str))
        print("screening", record["screening"], flush=True)
        for t in record["top_predicted"]:
            print("  predicted", t, flush=True)
        picks = [t["order"] for t in record["top_predicted"] if t["order"] not in MATMUL_8192 + waves]
        waves = list(dict.fromkeys(waves[:1] + picks[:2] + waves[1:]))[:3]
    except Exception:  # noqa: BLE001 - no simulator here (numba missing?): measure the given orders
        failures.append("speed: " + traceback.format_exc(limit=3))
        print(failures[-1], flush=True)
    print("wave orders to measure:", waves, flush=True)
    plan = [("matmul", {"seed": 12, "m": 8192, "n": 8192, "k": 8192}, MATMUL_8192 + waves, None)] + CASES
    for i, (task_name, case, orders, regex) in enumerate(plan):
        if time.time() > deadline - 30:
            failures.append(f"skipped {task_name} {case}: deadline")
            continue
        t0 = time.time()
        try:
            new = measure_orders(task_name, case, orders, regex, workdir)
            for r in new:
                r["device"] = device
            rows += new
            print(f"{task_name} {case}: {len(new)} rows in {time.time() - t0:.0f} s: " +
                  ", ".join(f"{r['order']} {r['measured_l2_hit_pct']}% {r['measured_dram_read_bytes']}" for r in new),
                  flush=True)
        except Exception:  # noqa: BLE001
            failures.append(f"{task_name} {case}: " + traceback.format_exc(limit=3))
            print(failures[-1], flush=True)
        save_rows()
        if i == 0 and rows:
            # 2. Time the order with the fewest measured DRAM reads against grouped-8, interleaved, twice.
            measured = [r for r in rows if r["measured_dram_read_bytes"]]
            best = min(measured, key=lambda r: r["measured_dram_read_bytes"])["order"]
            if best == "grouped:GROUP_M=8":
                best = min((r for r in measured if r["order"] != best),
                           key=lambda r: r["measured_dram_read_bytes"])["order"]
            try:
                timing = time_orders(best)
                timing.update(device=device, measured_by=f"measured ({device})", ncu_rows=measured)
                (out / "optimize_matmul.json").write_text(json.dumps(timing, indent=1, default=str))
                print("timing", best, [(c["speedup"], c["ci95"]) for c in timing["comparisons"]], flush=True)
            except Exception:  # noqa: BLE001 - keep measuring the rest
                failures.append("timing: " + traceback.format_exc(limit=3))
                print(failures[-1], flush=True)
    save_rows()
    print(f"done in {time.time() - start:.0f} s, {len(rows)} rows, failures: {len(failures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
