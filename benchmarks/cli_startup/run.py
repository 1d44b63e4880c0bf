"""Start-up time of the `swizzlelab` command: wall time of short commands that must not load torch or triton,
and a check that they do not. Measured on this machine's CPU; no GPU involved.

Run: python benchmarks/cli_startup/run.py [--runs 10] [--out benchmarks/cli_startup/cli_startup_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from swizzlelab.harness.sysinfo import cpu_name
from swizzlelab.io import atomic_write_text

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TARGET_S = 0.5  # issue 10: `check` on a small grid under half a second of wall time
COMMANDS = (
    ("check", ["check", "examples/xcd_chunked.py", "--grid", "1003"]),
    ("version", ["version"]),
    ("families", ["families"]),
)
# Prints the heavy modules a command imported, from inside its own process.
PROBE = (
    "import sys, runpy; sys.argv = ['swizzlelab'] + sys.argv[1:]\n"
    "try:\n    runpy.run_module('swizzlelab.cli', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "print('HEAVY=' + ','.join(m for m in ('torch', 'triton', 'numba') if m in sys.modules), file=sys.stderr)\n"
)


def timed_runs(argv: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds user+system) of `swizzlelab ARGV`, `runs` times after one untimed warm-up.
    CPU seconds are what the command itself costs; wall seconds also carry waiting for a busy machine."""
    exe = shutil.which("swizzlelab")
    command = [exe, *argv] if exe else [sys.executable, "-m", "swizzlelab.cli", *argv]
    subprocess.run(command, cwd=ROOT, capture_output=True, check=False)
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        if done.returncode != 0:
            raise SystemExit(f"swizzlelab {' '.join(argv)} failed: {done.stderr.strip()[-300:]}")
    return walls, cpus


def heavy_imports(argv: list[str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=ROOT, capture_output=True, text=True)
    line = next((ln for ln in done.stderr.splitlines() if ln.startswith("HEAVY=")), "HEAVY=?")
    return [m for m in line.removeprefix("HEAVY=").split(",") if m]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", default=str(HERE / "cli_startup_cpu.json"))
    args = parser.parse_args()
    results = []
    for name, argv in COMMANDS:
        load = os.getloadavg()[0]
        times, cpus = timed_runs(argv, args.runs)
        row = {
            "command": "swizzlelab " + " ".join(argv),
            "runs": args.runs,
            "median_s": statistics.median(times),
            "min_s": min(times),
            "max_s": max(times),
            "median_cpu_s": statistics.median(cpus),
            "load_average_1min_before": load,
            "wall_s": times,
            "cpu_s": cpus,
            "heavy_modules_imported": heavy_imports(argv),
            "kind": f"measured (CPU: {cpu_name()})",
        }
        results.append(row)
        print(f"{row['command']:<50} wall median {row['median_s']:.3f} s  min {row['min_s']:.3f} s  "
              f"max {row['max_s']:.3f} s  CPU median {row['median_cpu_s']:.3f} s  load {load:.1f}  heavy imports: {','.join(row['heavy_modules_imported']) or 'none'}"
              f"  (measured, CPU)")
    check = results[0]
    report = {
        "what": "wall time of short swizzlelab commands (process start to exit), measured on the CPU",
        "device": f"CPU: {cpu_name()}, {os.cpu_count()} cores (shared machine; other jobs may run)",
        "command": " ".join([Path(sys.executable).name, "benchmarks/cli_startup/run.py", *sys.argv[1:]]),
        "script": "benchmarks/cli_startup/run.py",
        "python": platform.python_version(),
        "target_s": TARGET_S,
        "check_median_under_target": check["median_s"] < TARGET_S,
        "check_min_under_target": check["min_s"] < TARGET_S,
        "results": results,
    }
    atomic_write_text(args.out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
