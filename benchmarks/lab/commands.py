"""Running a swizzlelab command as a user types it, from a study: the console script (or `python -m
swizzlelab.cli`), in its own process group under a timeout, with when each output line appeared.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def sizes(**named: object) -> list[str]:
    """`--size NAME=VALUE` arguments, as a user types them."""
    return [arg for name, value in named.items() for arg in ("--size", f"{name}={value}")]


def swizzlelab_command() -> list[str]:
    """The console script a user runs; `python -m swizzlelab.cli` where it is not on PATH (same program)."""
    found = shutil.which("swizzlelab")
    return [found] if found else [sys.executable, "-m", "swizzlelab.cli"]


def run_command(argv: list[str], log: Path, timeout_s: float) -> tuple[int, float, str, list[list]]:
    """(exit code, wall seconds, output, timeline) of argv in its own process group; past `timeout_s` the whole
    group is killed and the code is 124. The timeline holds [seconds since start, line] for each output line
    but progress bars: when the trace, the baseline, the sweep and each iteration finished."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the user sets nothing
    env["PYTHONUNBUFFERED"] = "1"  # output only: each line arrives when printed, so the timeline is its time
    timeline: list[list] = []
    started = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                   start_new_session=True, text=True, errors="replace")

        def read() -> None:
            for line in process.stdout:
                out.write(line)
                out.flush()
                text = line.rstrip()
                if text and "━" not in text:
                    # whole lines up to 1,000 characters: an autotuned config's line states its seconds near 450
                    timeline.append([round(time.perf_counter() - started, 1), text[:1000]])

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = 124
        reader.join(timeout=10)
    return code, time.perf_counter() - started, log.read_text(errors="replace"), timeline
