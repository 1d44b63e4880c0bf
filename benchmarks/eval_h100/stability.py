"""Timing stability of the harness: N back-to-back `time_fn` runs of one task case (default matmul 8192^3),
reporting each run's mean, std/mean and sem, and the spread of the run means (target: within 0.5%).

Usage: python benchmarks/eval_h100/stability.py OUTDIR [--task matmul] [--case m=8192,n=8192,k=8192] [--runs 3]
       [--budget-s 4]. Writes OUTDIR/eval_stability.json; needs a CUDA GPU (on the CPU it says so in one line).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

from swizzlelab.errors import UserError  # noqa: E402
from swizzlelab.harness.correctness import case_sizes, check_correctness  # noqa: E402
from swizzlelab.harness.sysinfo import system_info  # noqa: E402
from swizzlelab.harness.timing import time_fn  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402
from swizzlelab.tasks import load_task  # noqa: E402

SPREAD_TARGET = 0.005


def parse_case(text: str) -> dict[str, int]:
    """'m=8192,n=8192,k=8192' -> {'m': 8192, ...}."""
    sizes = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if not key or not value:
            raise UserError(f"--case expects NAME=VALUE pairs separated by commas, got {text!r}")
        sizes[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return sizes


def pick_case(task, sizes: dict[str, int]) -> dict:
    """The benchmark case of the task with these sizes (its seed), else a new case with seed 0."""
    for case in task.cases("benchmarks"):
        if all(case.get(k) == v for k, v in sizes.items()):
            return dict(case)
    return {"seed": 0, **sizes}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument("--task", default="matmul")
    parser.add_argument("--case", default="m=8192,n=8192,k=8192")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=4.0)
    args = parser.parse_args(argv)
    try:
        info = system_info()
        if not info.is_gpu:
            raise UserError("eval_stability needs a CUDA GPU; run it on the GPU machine")
        task = load_task(args.task)
        case = pick_case(task, parse_case(args.case))
        fn = lambda data: task.custom_kernel(data)  # noqa: E731
        verdict = check_correctness(task, fn, case)
        if not verdict.passed:
            raise UserError(f"{args.task} is wrong on {case}: {verdict.message}")
        data = task.generate_input({"seed": case["seed"], **case_sizes(case)})
        runs = []
        for index in range(args.runs):
            start = time.perf_counter()
            timing = time_fn(fn, data, args.budget_s, check=lambda out: task.check(data, out))
            runs.append({"run": index, "wall_s": time.perf_counter() - start, **timing.to_dict(with_samples=False)})
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    means = [run["mean_ms"] for run in runs]
    mean_of_means = sum(means) / len(means)
    spread = (max(means) - min(means)) / mean_of_means
    result = {
        "script": str(Path(__file__).resolve()),
        "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *argv]),
        "device": info.gpu,
        "label": info.measured_label(),
        "system": info.to_dict(),
        "task": args.task,
        "case": case,
        "runs": runs,
        "spread_of_means": spread,
        "spread_target": SPREAD_TARGET,
        "within_target": spread <= SPREAD_TARGET,
    }
    out = atomic_write_text(Path(args.outdir) / "eval_stability.json", json.dumps(result, indent=2) + "\n")
    print(f"{args.task} {case}: {args.runs} back-to-back runs, {info.measured_label()}")
    print(f"{'run':>3} {'mean ms':>10} {'std/mean':>9} {'sem/mean':>9} {'n':>6} {'stop':>8}")
    for run in runs:
        print(f"{run['run']:>3} {run['mean_ms']:>10.4f} {run['std_ms'] / run['mean_ms']:>9.3%} "
              f"{run['rel_sem']:>9.3%} {run['n']:>6} {run['stopped_by']:>8}")
    print(f"spread of means (max-min)/mean: {spread:.3%} (target <= {SPREAD_TARGET:.1%}: "
          f"{'met' if spread <= SPREAD_TARGET else 'NOT met'}); {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
