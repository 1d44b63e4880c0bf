"""The SM-clock sampler: nvidia-smi's csv lines parsed and summarised, the background reader, and the report line
that carries the clock next to a measured figure."""

from __future__ import annotations

import stat
import time
from pathlib import Path

from swizzlelab.harness.clock_sampler import ClockSampler, parse_sample, sampler_for, summarize_samples
from swizzlelab.harness.report import timing_lines
from swizzlelab.harness.timing import summarize


def test_parse_sample_reads_clock_and_power_and_nothing_else():
    assert parse_sample("1905, 612.35\n") == (1905.0, 612.35)
    assert parse_sample("[N/A], 100") is None
    assert parse_sample("0, 100") is None
    assert parse_sample("No devices were found") is None


def test_summary_of_samples():
    summary = summarize_samples([(1980.0, 300.0), (1600.0, 650.0), (1700.0, 640.0)])
    assert summary["sm_mhz_min"] == 1600.0 and summary["sm_mhz_max"] == 1980.0 and summary["samples"] == 3
    assert abs(summary["sm_mhz_mean"] - 1760.0) < 1e-9 and abs(summary["power_w_mean"] - 530.0) < 1e-9
    assert summarize_samples([]) is None


def test_sampler_reads_a_running_tool_in_the_background(tmp_path: Path):
    # A stand-in for nvidia-smi (absent on CI) that prints what the real one prints with -lms, then a bad line.
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\nfor c in 1980 1755 1590; do echo \"$c, 640.5\"; sleep 0.05; done\n"
                    "echo 'Unable to determine'\nsleep 5\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    with ClockSampler("0", command=str(tool)) as clock:
        for _ in range(100):
            if len(clock.samples) == 3:
                break
            time.sleep(0.02)
    summary = clock.summary()
    assert summary is not None and summary["samples"] == 3 and summary["sm_mhz_min"] == 1590.0
    assert clock.proc is not None and clock.proc.poll() is not None  # stopped at the end of the block


def test_no_gpu_no_sampler_and_no_clock_in_the_report():
    with sampler_for(None) as clock:
        pass
    assert clock.summary() is None
    timing = summarize([0.5, 0.52, 0.51], "budget", device="NVIDIA H100 80GB HBM3")
    assert "SM clock" not in timing_lines(timing)[2]
    timing.gpu_clock = summarize_samples([(1905.0, 612.0), (1895.0, 618.0)])
    assert "SM clock 1900 MHz mean (min 1895), 615 W" in timing_lines(timing)[2]
