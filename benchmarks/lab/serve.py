"""`swizzlelab serve` for the studies that drive the leaderboard end to end: this checkout's code on a free local
port, returned once healthy, and stopped with its workers (they share its process group); its workers' pids.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.lab import REPO
from swizzlelab.harness.isolate import reaper


@dataclass
class Served:
    """A running `swizzlelab serve`: its process, base URL and command line."""

    process: subprocess.Popen
    base: str
    command: list[str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_env(compiled: bool = False) -> dict[str, str]:
    """os.environ with this checkout's src first on PYTHONPATH; `compiled`: without TRITON_INTERPRET, so that
    where a GPU serves its kernels compile (serve decides the backend itself)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    if compiled:
        env.pop("TRITON_INTERPRET", None)
    return env


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to serve's process group (its workers and their children), SIGKILL after 30 s."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def start(db_url: str, data_dir: Path, log: Path, *options: str, env: dict[str, str] | None = None,
          timeout_s: float = 120.0, cwd: Path | None = None) -> Served:
    """`swizzlelab serve --db db_url --data-dir data_dir OPTIONS` on a free port, its output in `log`, returned
    once /api/health answers; SystemExit with the log's tail if it exits or is not healthy within `timeout_s`."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "swizzlelab.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--db", db_url, "--data-dir", str(data_dir), *options]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env or serve_env(), cwd=cwd,
                                   start_new_session=True)
    started = time.monotonic()
    while True:
        try:
            if httpx.get(base + "/api/health", timeout=2).status_code == 200:
                return Served(process, base, command)
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() - started > timeout_s:
            stop(process)
            raise SystemExit(f"serve did not come up: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)



def workers_of(serve_pid: int) -> list[int]:
    """The `swizzlelab worker` processes serve started (its children)."""
    return [pid for pid in reaper.all_pids() if reaper.parent_of(pid) == serve_pid and b"worker" in reaper.argv_of(pid)]


def processes_with_argument(word: str) -> list[int]:
    """Processes with `word` among their arguments (a marker a submission starts `sleep` with)."""
    return [pid for pid in reaper.all_pids() if word.encode() in reaper.argv_of(pid)]
