"""Child process profiled by ncu: runs a task's kernel (or a submission) once on one case between
cudaProfilerStart/Stop, after an unprofiled warm-up, then checks the output and writes a JSON verdict.

Usage: python -m swizzlelab.harness.profile_child --task PATH --case JSON --result PATH [--submission F] [--order S]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from swizzlelab.runtime import ensure_triton_backend


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="swizzlelab.harness.profile_child")
    parser.add_argument("--task", required=True, help="task name or folder")
    parser.add_argument("--case", required=True, help="the case as JSON: {seed, ...sizes}")
    parser.add_argument("--result", required=True, help="where to write the JSON verdict")
    parser.add_argument("--submission", default=None)
    parser.add_argument("--order", default=None)
    parser.add_argument("--warmup", type=int, default=2, help="unprofiled runs before the profiled one")
    return parser.parse_args(argv)


def run_profiled_once(task: Any, fn: Any, case: dict[str, Any], warmup: int) -> dict[str, Any]:
    """Warm up (compile, autotune) outside the profiled range, then one profiled run; returns the verdict."""
    import torch

    from swizzlelab.harness.correctness import case_sizes, count_poisoned, poison_
    from swizzlelab.runtime import device

    on_gpu = device() == "cuda"
    data = task.generate_input({"seed": int(case["seed"]), **case_sizes(case)})
    for _ in range(max(warmup, 0)):
        fn(data)
    poison_(data.get("out"))
    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    output = fn(data)
    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    verdict = task.check(data, output)
    n_poisoned, first = count_poisoned(output, getattr(data.get("out"), "dtype", None))
    message = str(getattr(verdict, "message", ""))
    if n_poisoned:
        message += f"; {n_poisoned} elements still poisoned, first at {first}"
    return {"passed": bool(getattr(verdict, "ok", verdict)), "message": message}


def main(argv: list[str] | None = None) -> int:
    ensure_triton_backend()
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    from swizzlelab.errors import UserError
    from swizzlelab.harness.evaluate import make_candidate
    from swizzlelab.io import atomic_write_text
    from swizzlelab.tasks import load_task

    try:
        task = load_task(args.task)
        candidate = make_candidate(task, args.submission, args.order)
        verdict = run_profiled_once(task, candidate.fn, json.loads(args.case), args.warmup)
    except UserError as err:
        verdict = {"passed": False, "message": str(err)}
    except Exception as err:  # reported to the parent in one line; ncu still sees the exit code
        verdict = {"passed": False, "message": f"{type(err).__name__}: {err}".splitlines()[0]}
        atomic_write_text(args.result, json.dumps(verdict))
        return 1
    atomic_write_text(args.result, json.dumps(verdict))
    # A wrong output is reported through the verdict file, not the exit code, so ncu still exports its report.
    return 0


if __name__ == "__main__":
    sys.exit(main())
