"""Leader-speed kernels on one GPU: times the step variants of histogram and flash attention (and profiles some
with ncu), or times the leader rows (our submissions, the task kernels, the library baselines) from one run.

Usage (from the repository root, on a CUDA machine with ncu):
  python -m benchmarks.submissions_h100.run steps --out DIR [--only NAME,...] [--profile NAME,...]  # -> DIR/steps.json
  python -m benchmarks.submissions_h100.run isolated --out DIR    # the leader rows via the isolated ranked evaluator
  python -m benchmarks.submissions_h100.run final --out DIR       # the same rows by the in-process loop (earlier runs)
The variants, their inputs, timing and ncu child are benchmarks/lab/submissions.py.
Every time is the harness's (swizzlelab.harness.timing.time_fn: CUDA events, L2 flushed and the output poisoned
before each repetition, warm-up first, SEM stop rule) on inputs from the ranked seed of the task's benchmark
case; every timed variant's last output is checked against the task's reference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from swizzlelab.runtime import ensure_triton_backend

ensure_triton_backend()

import torch  # noqa: E402

from benchmarks.lab import REPO as ROOT  # noqa: E402
from benchmarks.lab.submissions import (  # noqa: E402
    FLASH_SUB, HIST_SUB, Inputs, all_variants, environment, profile_variant, task_of, time_variant)
from swizzlelab.harness.timing import t_quantile_975  # noqa: E402
from swizzlelab.io import atomic_write_text  # noqa: E402


# ---------------------------------------------------------------- variants


# ---------------------------------------------------------------- inputs and timing


def steps(args: argparse.Namespace, argv: list[str]) -> int:
    variants = all_variants()
    names = [n for n in variants if not args.only or any(n.startswith(p) for p in args.only.split(","))]
    inputs = Inputs()
    # Group by task so each task's inputs are made once.
    names.sort(key=lambda n: task_of(n))
    out_dir = Path(args.out)
    doc: dict[str, Any] = {**environment(argv), "kind": "steps", "rows": [], "profiles": []}

    def save() -> None:  # after every row: a run cut short by its time limit keeps what it measured
        atomic_write_text(out_dir / args.name, json.dumps(doc, indent=2, default=str) + "\n")

    for n in names:
        doc["rows"].append(time_variant(n, variants[n], inputs, args.budget_s))
        save()
    inputs.cache.clear()
    torch.cuda.empty_cache()
    for n in args.profile.split(",") if args.profile else []:
        doc["profiles"].append(profile_variant(n, out_dir))
        save()
    return 0


# The leader rows: (task, kind, variant name, submission path).
FINAL_ROWS = (
    ("histogram", "ours", "hist.submission", "examples/leaderboard/histogram/submission.py"),
    ("histogram", "task_kernel", "hist.task_kernel", "src/swizzlelab/tasks/histogram/kernel.py"),
    ("histogram", "baseline:torch", "hist.baseline_torch", "src/swizzlelab/tasks/histogram/reference.py"),
    ("flash_attention", "ours", "fa.submission", "examples/leaderboard/flash_attention/submission.py"),
    ("flash_attention", "task_kernel", "fa.task_kernel", "src/swizzlelab/tasks/flash_attention/kernel.py"),
    ("flash_attention", "baseline:cudnn", "fa.baseline_cudnn", "src/swizzlelab/tasks/flash_attention/reference.py"),
    ("flash_attention", "baseline:torch", "fa.baseline_flash", "src/swizzlelab/tasks/flash_attention/reference.py"),
)


def final(args: argparse.Namespace, argv: list[str]) -> int:
    variants = all_variants()
    inputs = Inputs()
    rows = []
    for task_name, kind, name, path in FINAL_ROWS:
        row = time_variant(name, variants[name], inputs, args.budget_s)
        rows.append({"task": task_name, "kind": kind, "mean_ms": row.get("mean_ms"), "ci95_ms": row.get("ci95_ms"),
                     "submission": path, "variant": name, **{k: v for k, v in row.items() if k not in (
                         "task", "mean_ms", "ci95_ms", "name")}})
    flash_sub = sys.modules.get("leader_flash_attention")
    autotune = list(getattr(flash_sub, "AUTOTUNE_LOG", []))
    doc = {**environment(argv), "kind": "final", "rows": rows, "flash_attention_autotune": autotune}
    atomic_write_text(Path(args.out) / args.name, json.dumps(doc, indent=2, default=str) + "\n")
    return 0


# The leaderboard's own ranked path, with a fixed secret so that every row of one run sees the same inputs.
LEADER_SECRET = b"leader-h100"
LIBRARY_PATHS = {"histogram": "src/swizzlelab/tasks/histogram/reference.py",
                 "flash_attention": "src/swizzlelab/tasks/flash_attention/reference.py"}


def _timing_row(task_name: str, kind: str, path: str, timing: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"task": task_name, "kind": kind, "submission": path, "mean_ms": None, "ci95_ms": None, **extra}
    if timing:
        n = int(timing["n"])
        row.update(mean_ms=timing["mean_ms"], ci95_ms=t_quantile_975(n - 1) * timing["sem_ms"] if n > 1 else None,
                   n=n, std_ms=timing["std_ms"], best_ms=timing["best_ms"], stopped_by=timing["stopped_by"],
                   gpu_clock=timing.get("gpu_clock"), check=timing.get("check_after"), device=timing.get("device"))
    return row


def final_isolated(args: argparse.Namespace, argv: list[str]) -> int:
    """Every leader row from one run of the isolated ranked evaluator (`swizzlelab eval` without --trusted):
    each submission in its sandboxed child, the task's library rows each in a child of its own through the same
    loop, the task kernel as a submission too; the same secret, so the same inputs, for all of them."""
    from swizzlelab.harness.isolate import TASK_KERNEL_CODE, evaluate_isolated

    doc: dict[str, Any] = {**environment(argv), "kind": "final_isolated", "rows": [], "runs": []}
    doc["timing"] = ("the isolated evaluator's ranked path (harness.isolate + harness.requests): requests of k "
                     "back-to-back calls on fresh inputs from a fixed secret, outputs checked by the parent between "
                     "requests, clocks cross-checked; library rows through the same loop in their own children; "
                     "ci95_ms = t(0.975, n-1) x sem")

    def save() -> None:
        atomic_write_text(Path(args.out) / args.name, json.dumps(doc, indent=2, default=str) + "\n")

    for task_name, sub in (("histogram", HIST_SUB), ("flash_attention", FLASH_SUB)):
        started = time.time()
        run = evaluate_isolated(task_name, sub.read_text(), "ranked", filename=sub.name, secret=LEADER_SECRET,
                                budget_s=args.budget_s, with_baseline=True,
                                command=f"swizzlelab eval {task_name} {sub.relative_to(ROOT)} --mode ranked")
        doc["runs"].append({"task": task_name, "submission": str(sub.relative_to(ROOT)), "passed": run.passed,
                            "reason": run.reason, "score_ms": run.score_ms, "wall_s": round(time.time() - started, 1),
                            "report_text": run.report_text})
        for case in run.report.get("ranked", {}).get("cases", []):
            doc["rows"].append(_timing_row(task_name, "ours", str(sub.relative_to(ROOT)), case.get("candidate"),
                                           case=case.get("case"), passed=run.passed, reason=run.reason))
            speed = case.get("speedup_vs_baseline") or {}
            doc["rows"].append(_timing_row(task_name, "baseline:torch", LIBRARY_PATHS[task_name], case.get("baseline"),
                                           case=case.get("case"), ours_speedup=speed.get("speedup"),
                                           ours_speedup_ci95=speed.get("ci95"), error=case.get("baseline_error")))
            for extra in case.get("extra_baselines", []):
                speed = extra.get("speedup_vs_baseline") or {}
                doc["rows"].append(_timing_row(task_name, f"baseline:{extra['name']}", LIBRARY_PATHS[task_name],
                                               extra.get("timing"), case=case.get("case"),
                                               ours_speedup=speed.get("speedup"), ours_speedup_ci95=speed.get("ci95"),
                                               error=extra.get("error")))
        save()
        started = time.time()
        own = evaluate_isolated(task_name, TASK_KERNEL_CODE, "ranked", secret=LEADER_SECRET, budget_s=args.budget_s,
                                with_baseline=False, tests=False)
        doc["runs"].append({"task": task_name, "submission": "task kernel", "passed": own.passed,
                            "reason": own.reason, "score_ms": own.score_ms, "wall_s": round(time.time() - started, 1)})
        for case in own.report.get("ranked", {}).get("cases", []):
            doc["rows"].append(_timing_row(task_name, "task_kernel", f"src/swizzlelab/tasks/{task_name}/kernel.py",
                                           case.get("candidate"), case=case.get("case")))
        save()
        print(json.dumps([{k: r.get(k) for k in ("task", "kind", "mean_ms", "ci95_ms", "ours_speedup")}
                          for r in doc["rows"] if r["task"] == task_name]), flush=True)
    save()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.submissions_h100.run")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_steps = sub.add_parser("steps")
    p_steps.add_argument("--out", required=True)
    p_steps.add_argument("--name", default="steps.json")
    p_steps.add_argument("--only", default="")
    p_steps.add_argument("--profile", default="")
    p_steps.add_argument("--budget-s", type=float, default=1.0)
    p_final = sub.add_parser("final")
    p_final.add_argument("--out", required=True)
    p_final.add_argument("--name", default="leader_h100.json")
    p_final.add_argument("--budget-s", type=float, default=2.0)
    p_iso = sub.add_parser("isolated")
    p_iso.add_argument("--out", required=True)
    p_iso.add_argument("--name", default="leader_h100.json")
    p_iso.add_argument("--budget-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("run.py needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.cmd == "isolated":
        return final_isolated(args, argv)
    return steps(args, argv) if args.cmd == "steps" else final(args, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
