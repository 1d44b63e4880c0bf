"""Nsight Compute through its CLI: run a command under `ncu`, read the report back as CSV, normalise units.

Only the `ncu` executable is used (nsight-python is not available on the GPU machine); values come back per kernel.
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from swizzlelab.errors import ToolMissingError, UserError

# The per-kernel summary a profile prints, in this order: (display name, ncu metric, scale to the display unit,
# display unit). Choice of metrics and why: docs/ncu-metrics.md.
NAMED_METRICS: tuple[tuple[str, str, float, str], ...] = (
    ("Duration", "gpu__time_duration.sum", 1.0, "ns"),
    ("Compute_Throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1.0, "%"),
    ("SM_Busy", "sm__instruction_throughput.avg.pct_of_peak_sustained_active", 1.0, "%"),
    ("L1_Cache_Throughput", "l1tex__throughput.avg.pct_of_peak_sustained_active", 1.0, "%"),
    ("L2_Cache_Throughput", "lts__throughput.avg.pct_of_peak_sustained_elapsed", 1.0, "%"),
    ("DRAM_Throughput", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 1.0, "%"),
    ("L1_Cache_Hit_Rate", "l1tex__t_sector_hit_rate.pct", 1.0, "%"),
    ("L2_Cache_Hit_Rate", "lts__t_sector_hit_rate.pct", 1.0, "%"),
    ("DRAM_Read", "dram__bytes_read.sum", 1.0, "bytes"),
    ("DRAM_Write", "dram__bytes_write.sum", 1.0, "bytes"),
    ("L2_to_L1_Traffic", "l1tex__m_xbar2l1tex_read_bytes.sum", 1.0, "bytes"),
    ("L1_to_L2_Traffic", "l1tex__m_l1tex2xbar_write_bytes.sum", 1.0, "bytes"),
    (
        "L2_to_SHMEM_Traffic",
        "sm__sass_l1tex_m_xbar2l1tex_read_bytes_mem_global_op_ldgsts_cache_bypass.sum",
        1.0,
        "bytes",
    ),
)

NAMED_METRIC_IDS: tuple[str, ...] = tuple(metric for _, metric, _, _ in NAMED_METRICS)

# Columns of ncu's raw/details CSV pages that describe the launch rather than hold a metric.
_ID_COLUMNS = frozenset(
    {
        "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Function Name", "Kernel Time", "Context", "Stream",
        "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value",
        "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup",
    }
)

# Unit normalisation: ncu unit string -> (normalised unit, factor). Byte prefixes in ncu are decimal (SI).
_BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
               "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "B": 1.0,
               "Kibyte": 1024.0, "Mibyte": 1024.0**2, "Gibyte": 1024.0**3, "KiB": 1024.0, "MiB": 1024.0**2,
               "GiB": 1024.0**3}
_TIME_UNITS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9, "ns": 1.0, "us": 1e3,
               "ms": 1e6, "s": 1e9}
_RATE_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


@dataclass
class KernelMetrics:
    """One profiled kernel launch: its name, its index among profiled launches, and its metric values.

    `values` holds normalised numbers (bytes, ns, %; other units as ncu's base unit); `units` names each unit.
    A metric ncu could not compute ("n/a") is absent from `values`.
    """

    kernel_name: str
    launch_index: int
    values: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    block_size: str = ""
    grid_size: str = ""

    def named(self) -> dict[str, float | None]:
        """The summary metrics by display name (Duration, L2_Cache_Hit_Rate, ...); None where not collected."""
        return {
            name: (self.values[metric] * scale if metric in self.values else None)
            for name, metric, scale, _ in NAMED_METRICS
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "kernel_name": self.kernel_name,
            "launch_index": self.launch_index,
            "block_size": self.block_size,
            "grid_size": self.grid_size,
            "values": dict(self.values),
            "units": dict(self.units),
            "named": self.named(),
        }


def normalize_unit(unit: str, value: float) -> tuple[float, str]:
    """Convert one ncu value to swizzlelab's units: bytes, ns, %, bytes_per_s; others pass through unchanged."""
    unit = unit.strip()
    if unit in _BYTE_UNITS:
        return value * _BYTE_UNITS[unit], "bytes"
    if unit in _TIME_UNITS:
        return value * _TIME_UNITS[unit], "ns"
    if unit in ("%", "pct"):
        return value, "%"
    if unit.endswith("byte/second") or unit.endswith("byte/s"):
        prefix = unit.split("byte/")[0]
        if prefix in _RATE_PREFIX:
            return value * _RATE_PREFIX[prefix], "bytes_per_s"
    return value, unit


def parse_number(text: str) -> float | None:
    """Parse an ncu value cell: thousands separators allowed; 'n/a', '' and non-numbers give None."""
    cleaned = text.strip().replace(",", "")
    if not cleaned or cleaned.lower() in ("n/a", "nan", "-"):
        return None
    try:
        number = float(cleaned)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _csv_rows(text: str) -> list[list[str]]:
    """The CSV part of ncu's output: from the first header row (starting with "ID") on, skipping ==PROF== lines."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    return [row for row in csv.reader(io.StringIO("\n".join(body)))]


def parse_ncu_csv(text: str) -> list[KernelMetrics]:
    """Parse `ncu --csv` output of the raw page (one row per kernel, a units row) or the details page
    (one row per metric with 'Metric Name', 'Metric Unit', 'Metric Value' columns); returns kernels in order."""
    rows = _csv_rows(text)
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _parse_details(header, rows[1:])
    return _parse_raw(header, rows[1:])


def _cell(row: list[str], header: list[str], name: str) -> str:
    return row[header.index(name)] if name in header and header.index(name) < len(row) else ""


def _kernel_name(row: list[str], header: list[str]) -> str:
    # Older ncu versions name the column "Function Name".
    return _cell(row, header, "Kernel Name") or _cell(row, header, "Function Name")


def _launch_index(row: list[str], header: list[str], fallback: int) -> int:
    number = parse_number(_cell(row, header, "ID"))
    return int(number) if number is not None else fallback


def _parse_raw(header: list[str], rows: list[list[str]]) -> list[KernelMetrics]:
    units_row: list[str] = []
    # The raw page's second row holds units; it has an empty ID cell.
    if rows and _cell(rows[0], header, "ID") == "":
        units_row, rows = rows[0], rows[1:]
    kernels: list[KernelMetrics] = []
    for position, row in enumerate(rows):
        kernel = KernelMetrics(
            kernel_name=_kernel_name(row, header),
            launch_index=_launch_index(row, header, position),
            block_size=_cell(row, header, "Block Size"),
            grid_size=_cell(row, header, "Grid Size"),
        )
        for column, metric in enumerate(header):
            if metric in _ID_COLUMNS or column >= len(row):
                continue
            number = parse_number(row[column])
            if number is None:
                continue
            unit = units_row[column] if column < len(units_row) else ""
            kernel.values[metric], kernel.units[metric] = normalize_unit(unit, number)
        kernels.append(kernel)
    return kernels


def _parse_details(header: list[str], rows: list[list[str]]) -> list[KernelMetrics]:
    by_launch: dict[int, KernelMetrics] = {}
    for position, row in enumerate(rows):
        launch = _launch_index(row, header, position)
        kernel = by_launch.get(launch)
        if kernel is None:
            kernel = KernelMetrics(
                kernel_name=_kernel_name(row, header),
                launch_index=launch,
                block_size=_cell(row, header, "Block Size"),
                grid_size=_cell(row, header, "Grid Size"),
            )
            by_launch[launch] = kernel
        number = parse_number(_cell(row, header, "Metric Value"))
        if number is None:
            continue
        metric = _cell(row, header, "Metric Name")
        kernel.values[metric], kernel.units[metric] = normalize_unit(_cell(row, header, "Metric Unit"), number)
    return [by_launch[key] for key in sorted(by_launch)]


def find_ncu() -> str:
    """Path of the `ncu` executable ($NCU, PATH, or the usual CUDA folders); ToolMissingError if absent."""
    candidates = [os.environ.get("NCU", ""), shutil.which("ncu") or ""]
    candidates += sorted(str(p) for p in Path("/usr/local").glob("cuda*/bin/ncu"))
    candidates += sorted(str(p) for p in Path("/opt/nvidia").glob("nsight-compute/*/ncu"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ToolMissingError(
        "Nsight Compute's `ncu` was not found; install Nsight Compute and put `ncu` on PATH (or set NCU=/path/to/ncu)"
    )


def _error_line(output: str) -> str:
    """The most telling line of a failed ncu run, for a one-line error."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for marker in ("==ERROR==", "ERR_NVGPUCTRPERM", "Error", "error"):
        for line in lines:
            if marker in line:
                return line
    return lines[-1] if lines else "no output"


def ncu_profile_command(
    ncu: str,
    cmd: list[str],
    metrics: list[str],
    report_path: str,
    kernel_regex: str | None = None,
    launch_skip: int = 0,
    launch_count: int | None = None,
    profile_from_start: bool = True,
) -> list[str]:
    """The `ncu` command line that profiles `cmd` and exports a .ncu-rep report (without running it)."""
    args = [ncu, "--target-processes", "all", "--force-overwrite", "--export", report_path,
            "--metrics", ",".join(metrics)]
    if not profile_from_start:
        # Only launches between cudaProfilerStart/Stop (torch.cuda.profiler.start/stop) are profiled.
        args += ["--profile-from-start", "off"]
    if kernel_regex:
        args += ["--kernel-name", f"regex:{kernel_regex}"]
    if launch_skip:
        args += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        args += ["--launch-count", str(launch_count)]
    return args + list(cmd)


def run_ncu(
    cmd: list[str],
    metrics: list[str],
    kernel_regex: str | None = None,
    launch_skip: int = 0,
    launch_count: int | None = None,
    *,
    profile_from_start: bool = True,
    report_path: str | os.PathLike[str] | None = None,
    timeout_s: float = 600.0,
    env: dict[str, str] | None = None,
    wrapper: list[str] | None = None,
) -> list[KernelMetrics]:
    """Profile `cmd` under Nsight Compute collecting `metrics`; one KernelMetrics per profiled kernel launch.

    The report is exported (to `report_path`, else a temporary file) and read back with
    `ncu --import --csv --page raw --print-units base`, so the program's own stdout never mixes with the CSV.
    """
    if not metrics:
        raise UserError("run_ncu needs at least one metric name, e.g. lts__t_sector_hit_rate.pct")
    ncu = find_ncu()
    with tempfile.TemporaryDirectory(prefix=f"swizzlelab-ncu-{os.getpid()}-") as tmp:
        rep = Path(report_path) if report_path is not None else Path(tmp) / "profile.ncu-rep"
        rep.parent.mkdir(parents=True, exist_ok=True)
        stem = str(rep)[: -len(".ncu-rep")] if str(rep).endswith(".ncu-rep") else str(rep)
        # `wrapper` runs ncu itself inside something (the isolated profile's PID namespace).
        profile_cmd = list(wrapper or []) + ncu_profile_command(
            ncu, cmd, metrics, stem, kernel_regex, launch_skip, launch_count, profile_from_start
        )
        try:
            done = subprocess.run(profile_cmd, capture_output=True, text=True, timeout=timeout_s,
                                  env=env, check=False)
        except subprocess.TimeoutExpired:
            raise UserError(f"ncu ran past {timeout_s:.0f} s profiling {' '.join(cmd[:4])} ...; "
                            "profile fewer launches (launch_count) or a smaller case") from None
        output = done.stdout + "\n" + done.stderr
        if "ERR_NVGPUCTRPERM" in output:
            raise UserError("ncu has no permission for GPU performance counters (ERR_NVGPUCTRPERM); "
                            "run as root or set NVreg_RestrictProfilingToAdminUsers=0")
        report_file = Path(stem + ".ncu-rep")
        if done.returncode != 0 or not report_file.exists():
            if "No kernels were profiled" in output:
                raise UserError("ncu profiled no kernels; check kernel_regex / launch_skip / launch_count "
                                f"(ncu said: {_error_line(output)})")
            raise UserError(f"ncu failed (exit {done.returncode}): {_error_line(output)}")
        imported = subprocess.run(
            [ncu, "--import", str(report_file), "--csv", "--page", "raw", "--print-units", "base"],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )
        if imported.returncode != 0:
            raise UserError(f"ncu could not read back {report_file}: {_error_line(imported.stderr)}")
        kernels = parse_ncu_csv(imported.stdout)
    missing = [m for m in metrics if kernels and all(m not in k.values for k in kernels)]
    if kernels and len(missing) == len(metrics):
        raise UserError(f"ncu returned none of the metrics asked for ({', '.join(missing[:3])} ...); "
                        "check the names with `ncu --query-metrics`")
    return kernels
