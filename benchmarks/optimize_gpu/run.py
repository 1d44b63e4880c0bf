"""The optimizer as a user runs it on a GPU machine: the commands of issue 43, typed as written (each in a fresh
folder, so each writes its own default ./swizzlelab-out/), watched while they run: when the first candidate was
measured, every measured candidate's predicted and measured speedup, how each run ended, and the wall time.

    python benchmarks/optimize_gpu/run.py --out $OUT/optimize_gpu_h100.json [--only matmul_4096,spmv]
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COMMANDS = {
    "matmul_4096": ("swizzlelab optimize matmul --target auto --budget 6", 240),
    "matmul_8192": ("swizzlelab optimize matmul --target auto --budget 6 --size m=8192 --size n=8192 --size k=8192",
                    300),
    "spmv": ("swizzlelab optimize spmv --target auto --budget 4", 300),
}


def _report(folder: Path) -> dict | None:
    for path in folder.glob("swizzlelab-out/*/report.json"):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # being rewritten: read it on the next poll
    return None


def _candidates(report: dict) -> list[dict]:
    out = []
    for it in report.get("iterations", [])[1:]:
        comparison = ((it.get("measurement") or {}).get("comparison")) or None
        time_figures = it.get("time") or {}
        out.append({
            "iteration": it["iteration"], "order": it.get("label"), "status": it.get("status"),
            "predicted_speedup": time_figures.get("speedup"), "predicted_ci": [time_figures.get("low"),
                                                                              time_figures.get("high")],
            "predicted_corrected": time_figures.get("corrected"),
            "predicted_dram_bytes": ((it.get("prediction") or {}).get("dram_read_bytes")),
            "measured_speedup": comparison.get("speedup") if comparison else None,
            "measured_ci": comparison.get("ci95") if comparison else None,
            "regression_outside_noise": bool(comparison and comparison["ci95"][1] < 1.0),
            "gain_outside_noise": bool(comparison and comparison["ci95"][0] > 1.0),
        })
    return out


def run_one(name: str, command: str, timeout_s: float, env: dict) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"optimize-{name}-"))
    started = time.monotonic()
    log = open(folder / "stdout.txt", "w")
    proc = subprocess.Popen(shlex.split(command), cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    first_measured = None
    reached = {}
    while proc.poll() is None and time.monotonic() - started < timeout_s:
        time.sleep(1.0)
        report = _report(folder)
        if report is None:
            continue
        for cand in _candidates(report):
            if cand["measured_speedup"] is not None and first_measured is None:
                first_measured = time.monotonic() - started
            for level in (1.2, 1.4):
                if (cand["measured_speedup"] or 0) >= level and cand["gain_outside_noise"]:
                    reached.setdefault(f"{level}x", time.monotonic() - started)
    timed_out = proc.poll() is None
    if timed_out:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    wall = time.monotonic() - started
    report = _report(folder) or {}
    candidates = _candidates(report)
    measured = [c for c in candidates if c["measured_speedup"] is not None]
    stdout = (folder / "stdout.txt").read_text(errors="replace")
    stop = next((n for n in report.get("notes", []) if "nothing measurable to gain" in n), None)
    return {"name": name, "command": command, "rc": proc.returncode, "timed_out": timed_out, "wall_s": wall,
            "first_candidate_measured_s": first_measured, "reached_s": reached, "stop_reason": stop,
            "device": report.get("device"), "baseline": (((report.get("baseline") or {}).get("measurement") or {})
                                                         .get("timing")),
            "candidates": candidates, "measured": len(measured),
            "regressions_outside_noise": sum(c["regression_outside_noise"] for c in measured),
            "gains_outside_noise": sum(c["gain_outside_noise"] for c in measured),
            "best": report.get("best"), "notes": report.get("notes"), "stdout_tail": stdout[-4000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", default="")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each command this many times: the first on a fresh machine pays numba's JIT and "
                             "matplotlib's font cache (once per installation), the later ones show a user's usual run")
    args = parser.parse_args()
    bin_dir = Path(tempfile.mkdtemp(prefix="swizzlelab-bin-"))
    # The console script as `pip install -e .` makes it: `swizzlelab` runs this checkout's CLI.
    (bin_dir / "swizzlelab").write_text(f"#!/bin/sh\nexec {sys.executable} -m swizzlelab.cli \"$@\"\n")
    (bin_dir / "swizzlelab").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("TRITON_INTERPRET", None)  # a user sets nothing
    runs = []
    for name, (command, timeout_s) in COMMANDS.items():
        if args.only and name not in args.only.split(","):
            continue
        for rep in range(args.repeat):
            runs.append(run_one(name, command, timeout_s, env))
            r = runs[-1]
            r["caches"] = ("cold: first run on this machine (numba JIT, matplotlib font cache)" if rep == 0
                           else "warm: caches of the run before")
            print(f"{name} ({r['caches'][:4]}): rc {r['rc']} {r['wall_s']:.0f} s, measured {r['measured']} (gains "
                  f"{r['gains_outside_noise']}, regressions {r['regressions_outside_noise']}), first measured at "
                  f"{r['first_candidate_measured_s']}, stop: {r['stop_reason']}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"script": "benchmarks/optimize_gpu/run.py", "runs": runs}, indent=1,
                                       default=str) + "\n")
    measured = [c for r in runs for c in r["candidates"] if c["measured_speedup"] is not None]
    summary = {"measured_candidates": len(measured),
               "not_regressions_share": (sum(not c["regression_outside_noise"] for c in measured) / len(measured)
                                         if measured else None)}
    args.out.write_text(json.dumps({"script": "benchmarks/optimize_gpu/run.py",
                                    "command": "python benchmarks/optimize_gpu/run.py " + " ".join(sys.argv[1:]),
                                    "device": next((r["device"] for r in runs if r["device"]), None),
                                    "summary": summary, "runs": runs}, indent=1, default=str) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
