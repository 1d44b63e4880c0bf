"""Why the task kernel's K alternation gains less than the probe's did (issue 15): the same order timed in the probe
kernel (benchmarks/lab/kdir.py) and in the task kernel (tasks/matmul/kernel.py), K forwards and alternating, interleaved.

    python -m benchmarks.matmul_kdir_h100.probe_vs_task OUT_JSON [--time-s 3]
The probe walks K by recomputing addresses from the k-block index in every step, also forwards (REVERSE=0); the
task kernel forwards advances its pointers (its alternating path recomputes them as the probe does).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks.lab import kdir as run
from swizzlelab.harness.timing import TimingOptions, compare_interleaved
from swizzlelab.io import atomic_write_text
from swizzlelab.tasks import load_task

PAIRS = (  # (label, (base kernel, order, wave), (variant kernel, order, wave))
    ("forward: probe vs task kernel", ("task", "grouped:GROUP_M=8", 0), ("probe", "grouped:GROUP_M=8", 0)),
    ("alternating: probe vs task kernel", ("task", "serpentine>column_major@11x16", 264),
     ("probe", "serpentine>column_major@11x16", 264)),
    ("probe: alternating vs forward", ("probe", "grouped:GROUP_M=8", 0), ("probe", "serpentine>column_major@11x16", 264)),
    ("task: alternating vs forward", ("task", "grouped:GROUP_M=8", 0), ("task", "serpentine>column_major@11x16", 264)),
)


def launcher(task, kind: str, order: str, wave: int):
    return run.launcher(task, order, wave, task_kernel=kind == "task")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--time-s", type=float, default=3.0)
    args = parser.parse_args(argv)
    task = load_task("matmul")
    data = task.generate_input(run.CASE)
    device = torch.cuda.get_device_name(0)
    doc = {"study": "matmul_kdir probe vs task kernel", "script": "benchmarks/matmul_kdir_h100/probe_vs_task.py",
           "command": "python -m benchmarks.matmul_kdir_h100.probe_vs_task " + " ".join(argv), "device": device,
           "case": run.CASE, "label": f"measured ({device}; CUDA events, interleaved, L2 flushed)", "rows": []}
    for label, base, variant in PAIRS:
        a, b = launcher(task, *base), launcher(task, *variant)
        cmp = compare_interleaved(a, b, data, budget_s=args.time_s, check_a=lambda o: task.check(data, o),
                                  check_b=lambda o: task.check(data, o), options=TimingOptions(sample_clock=True))
        row = {"label": label, "base": list(base), "variant": list(variant), "speedup": cmp.speedup,
               "ci95": [cmp.ci_low, cmp.ci_high], "base_mean_ms": cmp.a.mean_ms, "variant_mean_ms": cmp.b.mean_ms,
               "n": cmp.a.n}
        doc["rows"].append(row)
        print(f"{label}: {cmp.a.mean_ms:.4f} -> {cmp.b.mean_ms:.4f} ms, {cmp.speedup:.4f}x "
              f"[{cmp.ci_low:.4f}, {cmp.ci_high:.4f}]", flush=True)
        atomic_write_text(Path(args.out), json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
