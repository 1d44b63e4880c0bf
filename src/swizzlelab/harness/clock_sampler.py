"""The GPU's SM clock and power while something is timed, sampled by nvidia-smi every 50 ms in the background.

A power-bound kernel's time follows the clock (measured on an H100: an 8192^3 GEMM 7% faster at ~1900 MHz than
at the ~1600 MHz a sustained loop of it holds), so reports say at which clock a figure was measured.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from typing import Any

import numpy as np

PERIOD_MS = 50


def parse_sample(line: str) -> tuple[float, float] | None:
    """(SM MHz, W) from one `clocks.sm,power.draw` csv line without units; None for anything else."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 2:
        return None
    try:
        mhz, watts = float(parts[0]), float(parts[1])
    except ValueError:
        return None
    return (mhz, watts) if mhz > 0 else None


def summarize_samples(samples: list[tuple[float, float]]) -> dict[str, Any] | None:
    """Mean, min and max SM clock and mean power over the samples, or None when there are none."""
    if not samples:
        return None
    arr = np.asarray(samples, dtype=np.float64)
    return {"sm_mhz_mean": float(arr[:, 0].mean()), "sm_mhz_min": float(arr[:, 0].min()),
            "sm_mhz_max": float(arr[:, 0].max()), "power_w_mean": float(arr[:, 1].mean()), "samples": len(samples),
            "source": f"nvidia-smi every {PERIOD_MS} ms"}


def device_selector(torch: Any) -> str:
    """The `nvidia-smi -i` argument of the current CUDA device: its UUID (indices differ under
    CUDA_VISIBLE_DEVICES), else its index."""
    index = torch.cuda.current_device()
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    return f"GPU-{uuid}" if uuid and not uuid.startswith("GPU-") else (uuid or str(index))


class ClockSampler:
    """`with ClockSampler(selector) as clock: ...` then `clock.summary()`; a no-op without nvidia-smi."""

    def __init__(self, selector: str | None, command: str = "nvidia-smi"):
        self.selector = selector
        self.command = shutil.which(command) if selector is not None else None
        self.proc: subprocess.Popen[str] | None = None
        self.samples: list[tuple[float, float]] = []
        self.thread: threading.Thread | None = None

    def __enter__(self) -> ClockSampler:
        if self.command is None:
            return self
        try:
            self.proc = subprocess.Popen(
                [self.command, "-i", str(self.selector), "--query-gpu=clocks.sm,power.draw",
                 "--format=csv,noheader,nounits", "-lms", str(PERIOD_MS)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None
            return self
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            sample = parse_sample(line)
            if sample is not None:
                self.samples.append(sample)

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.thread is not None:
            self.thread.join(timeout=2)

    def summary(self) -> dict[str, Any] | None:
        return summarize_samples(list(self.samples))


def sampler_for(torch: Any | None) -> ClockSampler:
    """A sampler of the current CUDA device, or a no-op one (no torch, no GPU, no nvidia-smi)."""
    if torch is None or not torch.cuda.is_available():
        return ClockSampler(None)
    return ClockSampler(device_selector(torch))


def wait_for_first_sample(sampler: ClockSampler, timeout_s: float = 1.0) -> None:
    """nvidia-smi takes a moment to start; waiting for its first line keeps a short timed phase covered."""
    deadline = time.monotonic() + timeout_s
    while sampler.proc is not None and not sampler.samples and time.monotonic() < deadline:
        time.sleep(0.01)
