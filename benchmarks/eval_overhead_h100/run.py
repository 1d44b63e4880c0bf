"""The cost of isolation on honest kernels: the isolated evaluator's ranked mean vs the in-process (trusted) one,
same run, same GPU, rounds rotated so that clock drift falls on every method alike. Writes NAME.json.

Figures per benchmark case and round (choose with --methods; the default is TCS):
  T  in-process ranked mode as `swizzlelab eval --trusted` runs it now: the shared request loop (harness.requests);
  C  the isolated evaluator (`swizzlelab eval`, the default path), ranked, with a fixed secret;
  S  the sustained in-process loop `--trusted` used before the request loop was shared (one fixed input, L2
     flushed before each call; what method A measured in the first run of this study, eval_overhead.json).
The first run's other methods (B, D, E: git history, README) are superseded by T, which shares the isolated loop.
C vs T is the overhead of isolation proper. The GPU's SM clock, power and temperature are logged by nvidia-smi
over the whole run and averaged per segment.

    python benchmarks/eval_overhead_h100/run.py --out DIR [--rounds 3] [--budget-s 1.0] [--methods TCS]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from swizzlelab.harness.correctness import case_sizes
from swizzlelab.harness.isolate import TASK_KERNEL_CODE, evaluate_isolated
from swizzlelab.io import atomic_write_text

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

SECRET = b"eval-overhead-study"


class ClockLog:
    """nvidia-smi sampling SM clock, power and temperature every 50 ms into a file, read back per segment."""

    def __init__(self, path: Path):
        self.path = path
        self.proc = None
        fields = "timestamp,clocks.sm,power.draw,temperature.gpu"
        try:
            # Why the clock is below its maximum (bit mask; 0x4 SW power cap, 0x20/0x40 thermal), where supported.
            probe = subprocess.run(["nvidia-smi", f"--query-gpu={fields},clocks_event_reasons.active",
                                    "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
            if probe.returncode == 0:
                fields += ",clocks_event_reasons.active"
            self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                                          "-lms", "50"], stdout=path.open("w"), stderr=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            self.proc = None

    def segment(self, start: float, stop: float) -> dict[str, float] | None:
        if self.proc is None:
            return None
        rows = []
        for line in self.path.read_text().splitlines():
            parts = [p.strip() for p in line.split(",")][:4]
            if len(parts) != 4:
                continue
            try:
                stamp = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
                stamp += float("0." + parts[0].split(".")[1]) if "." in parts[0] else 0.0
                rows.append((stamp, float(parts[1]), float(parts[2]), float(parts[3])))
            except ValueError:
                continue
        inside = [r for r in rows if start <= r[0] <= stop]
        if not inside:
            return None
        arr = np.asarray(inside)
        busy = arr[arr[:, 2] >= 0.8 * arr[:, 2].max()]  # the segment's timed part, not its set-up
        return {"sm_mhz": float(arr[:, 1].mean()), "power_w": float(arr[:, 2].mean()),
                "temp_c": float(arr[:, 3].mean()), "samples": len(inside),
                "busy_sm_mhz": float(busy[:, 1].mean()), "busy_power_w": float(busy[:, 2].mean())}

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()


def in_process_fixed(task: Any, budget_s: float) -> list[dict[str, Any]]:
    from swizzlelab.harness.evaluate import make_candidate, run_mode

    report = run_mode(task, make_candidate(task, None, None), "ranked", budget_s=budget_s)
    return [{"mean_ms": row.candidate.mean_ms, "n": row.candidate.n, "sem_ms": row.candidate.sem_ms,
             "gpu_clock": row.candidate.gpu_clock, "stopped_by": row.candidate.stopped_by} if row.candidate else
            {"mean_ms": None, "error": row.error} for row in report.ranked]


def in_process_sustained(task: Any, budget_s: float) -> list[dict[str, Any]]:
    """The loop `--trusted` ranked used before it shared the request loop: the case's fixed ranked input, flush and
    poison before each call, calls back to back (a sustained load)."""
    from swizzlelab.harness.correctness import derive_seed
    from swizzlelab.harness.timing import TimingOptions, time_fn

    rows = []
    for case in task.cases("benchmarks"):
        data = task.generate_input({"seed": derive_seed(case["seed"], "ranked"), **case_sizes(case)})
        timing = time_fn(lambda d: task.custom_kernel(d, None), data, budget_s, check=lambda o: task.check(data, o),
                         options=TimingOptions(sample_clock=True))
        rows.append({"mean_ms": timing.mean_ms, "n": timing.n, "sem_ms": timing.sem_ms, "gpu_clock": timing.gpu_clock})
    return rows


def isolated(name: str, budget_s: float, seed_dir: Path | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    run = evaluate_isolated(name, TASK_KERNEL_CODE, "ranked", secret=SECRET, budget_s=budget_s, with_baseline=False,
                            triton_cache_seed=seed_dir)
    rows = []
    for index, verdict in enumerate(v for v in run.verdicts if v.get("kind") == "benchmark"):
        case_rows = run.report.get("ranked", {}).get("cases", [])
        cand = ((case_rows[index] or {}).get("candidate") or {}) if index < len(case_rows) else {}
        rows.append({"mean_ms": cand.get("mean_ms"), "n": cand.get("n"), "sem_ms": cand.get("sem_ms"),
                     "passed": verdict.get("passed"), "reason": verdict.get("reason"),
                     "clocks": verdict.get("clocks")})
    return rows, {"passed": run.passed, "reason": run.reason}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=1.0, help="timing budget per case and method")
    parser.add_argument("--tasks", nargs="*", default=["histogram", "matmul"])
    parser.add_argument("--deadline-s", type=float, default=500.0, help="stop starting rounds after this")
    parser.add_argument("--methods", default="TCS", help="letters of the methods to run (see the docstring)")
    parser.add_argument("--name", default="eval_overhead_shared_loop", help="stem of the JSON and clock CSV")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seed_dir = Path(tempfile.mkdtemp(prefix="swizzlelab-seed-")) / "triton"
    os.environ["TRITON_CACHE_DIR"] = str(seed_dir)
    started = time.time()

    from swizzlelab.harness.sysinfo import system_info
    from swizzlelab.tasks import load_task

    info = system_info()
    data: dict[str, Any] = {
        "study": "eval_overhead_h100", "script": "benchmarks/eval_overhead_h100/run.py",
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv), "device": info.gpu,
        "label": info.measured_label(), "rounds": args.rounds, "budget_s": args.budget_s,
        "methods": {"T": "in-process ranked (trusted) as `swizzlelab eval --trusted` runs it: the shared request loop",
                    "S": "the sustained in-process loop --trusted used before: the case's fixed ranked input, flush "
                         "before each call",
                    "C": "isolated evaluator (default path), ranked"},
        "segments": [], "cases": []}
    data["methods"] = {m: data["methods"][m] for m in args.methods}
    clock = ClockLog(out / f"{args.name}-clocks.csv")

    def save() -> None:
        data["elapsed_s"] = round(time.time() - started, 1)
        atomic_write_text(out / f"{args.name}.json", json.dumps(data, indent=2) + "\n")

    methods = {
        "T": lambda task: (in_process_fixed(task, args.budget_s), None),
        "S": lambda task: (in_process_sustained(task, args.budget_s), None),
        "C": lambda task: isolated(task.name, args.budget_s, seed_dir if seed_dir.is_dir() else None),
    }
    letters = args.methods
    rotations = [letters, letters[len(letters) // 2:] + letters[:len(letters) // 2], letters[::-1]]
    for name in args.tasks:
        task = load_task(name)
        # Warm the Triton cache the children copy, and the kernels, before any timed segment.
        for kind in ("tests", "benchmarks"):
            task.custom_kernel(task.generate_input(task.cases(kind)[0]), None)
        for rnd in range(args.rounds):
            if time.time() - started > args.deadline_s:
                print(f"deadline: {name} stopped after {rnd} rounds", flush=True)
                break
            for method in rotations[rnd % 3]:
                t0 = time.time()
                try:
                    rows, extra = methods[method](task)
                except Exception as err:  # the study goes on; the segment says what broke
                    rows, extra = [], {"error": f"{type(err).__name__}: {err}"}
                t1 = time.time()
                seg = {"task": name, "round": rnd, "method": method, "rows": rows, "extra": extra,
                       "t0": t0, "t1": t1, "clock": clock.segment(t0, t1)}
                data["segments"].append(seg)
                print(f"[{t1 - started:6.1f}s] {name} round {rnd} {method}: "
                      f"{[r.get('mean_ms') for r in rows]} clock {seg['clock']} {extra or ''}", flush=True)
                save()
    clock.close()
    for name in args.tasks:
        task = load_task(name)
        for index, case in enumerate(task.cases("benchmarks")):
            per = {}
            for method in letters:
                vals = [s["rows"][index]["mean_ms"] for s in data["segments"]
                        if s["task"] == name and s["method"] == method and len(s["rows"]) > index
                        and s["rows"][index].get("mean_ms")]
                per[method] = vals
            entry: dict[str, Any] = {"task": name, "case": dict(case), "means_ms": per}
            mean = {m: float(np.mean(per[m])) for m in letters if per[m]}
            entry["mean_ms"] = mean
            # The overhead of isolation: the isolated mean against the trusted path's, same loop, same run.
            if "C" in mean and "T" in mean:
                entry["isolated_vs_trusted"] = mean["C"] / mean["T"] - 1
                entry["within_2pct"] = abs(entry["isolated_vs_trusted"]) <= 0.02
            for ref in "S":
                if "C" in mean and ref in mean:
                    entry[f"isolated_vs_{ref}"] = mean["C"] / mean[ref] - 1
            data["cases"].append(entry)
            print(json.dumps({k: v for k, v in entry.items() if k != "means_ms"}), flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
