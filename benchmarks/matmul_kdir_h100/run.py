"""Probe (issue 15, DRAM reads of matmul 8192^3): does alternating the K direction from one wave of programs to
the next let a wave start on the panel data the previous wave read last, while it is still in L2?

An order alone cannot go much below ~1.06 GB here: with 264 resident 128x128 programs a wave covers ~4.3 M
outputs of C, reads a ~2076-row A panel and ~2076-column B panel (~68 MB) streaming along K, and by the time
the next wave starts the first k-steps it shares with it were evicted (L2 50 MB). If odd waves walk K backwards,
their first k-steps are the previous wave's last ones. This script measures it on the GPU: the task kernel's
structure with a REVERSE flag (k-blocks in reverse order on odd waves, wave = launch index // WAVE), under a few
orders, with ncu (DRAM read bytes, L2 hit rate, duration; caches flushed before the profiled launch), then
interleaved timings against the forward kernel.

    python -m benchmarks.matmul_kdir_h100.run OUT_DIR [--orders 'grouped:GROUP_M=8;...'] [--waves 264,528]
        [--time-top N] [--deadline-s 200]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402

from benchmarks.lab import child_env, module_command  # noqa: E402
from benchmarks.lab.kdir import BK, BM, BN, CASE, STAGES, WARPS, WAVE, launcher  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402

METRICS = ["dram__bytes_read.sum", "lts__t_sector_hit_rate.pct", "gpu__time_duration.sum"]


def child(order: str, wave: int, result: Path, task_kernel: bool, sync: bool = False) -> int:
    """Two launches (the first compiles; ncu profiles the second) and the task's check of the output."""
    from swizzlelab.tasks import load_task

    task = load_task("matmul")
    data = task.generate_input(CASE)
    run = launcher(task, order, wave, task_kernel, sync)
    run(data)
    torch.cuda.synchronize()
    data["out"].fill_(float("nan"))
    run(data)
    torch.cuda.synchronize()
    verdict = task.check(data, data["out"])
    atomic_write_text(result, json.dumps({"ok": bool(getattr(verdict, "ok", verdict)),
                                          "message": str(getattr(verdict, "message", ""))}))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir", nargs="?")
    parser.add_argument("--orders", default="grouped:GROUP_M=8;serpentine>column_major@11x8;grouped:GROUP_M=16")
    parser.add_argument("--deadline-s", type=float, default=200)
    parser.add_argument("--time-s", type=float, default=3.0, help="budget per interleaved timing")
    parser.add_argument("--waves", default=str(WAVE), help="comma-separated launches per wave for alternating K")
    parser.add_argument("--time-top", type=int, default=0,
                        help="time only this many alternating variants with the fewest DRAM reads (0: one per order)")
    parser.add_argument("--name", default="matmul_kdir_h100", help="stem of the JSON written")
    parser.add_argument("--child", nargs=3, metavar=("ORDER", "WAVE", "RESULT"))
    parser.add_argument("--task-kernel", action="store_true", help="measure tasks/matmul/kernel.py, not the probe")
    parser.add_argument("--sync", action="store_true",
                        help="the probe's programs of each wave start only once the previous wave has finished")
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child[0], int(args.child[1]), Path(args.child[2]), args.task_kernel, args.sync)
    from swizzlelab.harness.ncu import run_ncu
    from swizzlelab.harness.timing import TimingOptions, compare_interleaved
    from swizzlelab.tasks import load_task

    start = time.time()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0)
    orders = [o.strip() for o in args.orders.split(";") if o.strip()]
    record: dict[str, Any] = {
        "study": "matmul_kdir_h100", "out_name": args.name, "script": "benchmarks/matmul_kdir_h100/run.py",
        "command": "python -m benchmarks.matmul_kdir_h100.run " + " ".join(shlex.quote(a) for a in argv),
        "device": device, "case": CASE,
        "kernel": ("tasks/matmul/kernel.py (config k_wave" + (", sync_wave" if args.sync else "") + ")")
        if args.task_kernel else "benchmarks/lab/kdir.py's matmul_kdir_kernel",
        "config": {"BLOCK_M": BM, "BLOCK_N": BN, "BLOCK_K": BK, "num_warps": WARPS,
                                                    "num_stages": STAGES, "WAVE": WAVE},
        "sync": args.sync, "label": f"measured ({device}, ncu; CUDA events for timings)", "rows": [], "timings": [],
        "failures": []}

    def save() -> None:
        record["elapsed_s"] = round(time.time() - start, 1)
        atomic_write_text(out / f"{args.name}.json", json.dumps(record, indent=1) + "\n")

    waves = [int(w) for w in args.waves.split(",") if w.strip()]
    for order in orders:
        for wave in [0] + waves:
            reverse = 1 if wave else 0
            if time.time() - start > args.deadline_s - 40:
                record["failures"].append(f"ncu skipped (deadline): {order} wave={wave}")
                continue
            # Outside OUT: only the study's JSON should come back from the GPU machine.
            result = Path(tempfile.mkdtemp(prefix="kdir-")) / "child.json"
            try:
                child_cmd = module_command("benchmarks.matmul_kdir_h100.run", "--child", order, str(wave), str(result))
                kernels = run_ncu(child_cmd + (["--task-kernel"] if args.task_kernel else [])
                                  + (["--sync"] if args.sync else []), METRICS,
                                  kernel_regex="matmul_kernel" if args.task_kernel else "matmul_kdir", launch_skip=1,
                                  launch_count=1, timeout_s=120, env=child_env())
                metrics = kernels[0].values if kernels else {}
                verdict = json.loads(result.read_text()) if result.exists() else {"ok": False, "message": "no result"}
                row = {"order": order, "reverse": reverse, "wave": wave, "sync": args.sync, "metrics": {k: metrics.get(k) for k in METRICS},
                       "output_ok": verdict["ok"], "check": verdict["message"]}
            except Exception as err:  # noqa: BLE001 - the other variants still run
                record["failures"].append(f"{order} wave={wave}: {type(err).__name__}: {err}")
                save()
                continue
            record["rows"].append(row)
            print(json.dumps(row), flush=True)
            save()
    task = load_task("matmul")
    data = task.generate_input(CASE)
    base = launcher(task, "grouped:GROUP_M=8", 0, args.task_kernel)
    alternating = [r for r in record["rows"] if r["wave"] and r["output_ok"] and r["metrics"]["dram__bytes_read.sum"]]
    if args.time_top:
        plan = sorted(alternating, key=lambda r: r["metrics"]["dram__bytes_read.sum"])[:args.time_top]
    else:
        plan = [next(r for r in alternating if r["order"] == o) for o in orders if any(r["order"] == o for r in alternating)]
    for row in plan:
        order, wave = row["order"], row["wave"]
        if time.time() - start > args.deadline_s - args.time_s - 10:
            record["failures"].append(f"timing skipped (deadline): {order} wave={wave}")
            continue
        variant = launcher(task, order, wave, args.task_kernel, args.sync)
        cmp = compare_interleaved(base, variant, data, budget_s=args.time_s, check_a=lambda o: task.check(data, o),
                                  check_b=lambda o: task.check(data, o), options=TimingOptions(sample_clock=True))
        entry = {**cmp.to_dict(with_samples=False), "base": "grouped:GROUP_M=8 reverse=0",
                 "variant": f"{order} reverse=1" + (f" wave={wave}" if wave != WAVE else "") + (" sync" if args.sync else "")}
        record["timings"].append(entry)
        print(f"time {entry['variant']} vs {entry['base']}: {cmp.speedup:.4f}x [{cmp.ci_low:.4f}, {cmp.ci_high:.4f}] "
              f"({cmp.a.mean_ms:.4f} vs {cmp.b.mean_ms:.4f} ms)", flush=True)
        save()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
