"""What a result was measured on: GPU, CPU, runtime (CUDA or the Triton CPU interpreter), platform, versions.

Every report carries one SystemInfo so that each figure can say where it came from.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from swizzlelab.runtime import device


@dataclass(frozen=True)
class SystemInfo:
    """The machine and software a run used."""

    gpu: str
    cpu: str
    runtime: str  # "CUDA" or "Triton interpreter (CPU)"
    platform: str
    torch: str
    triton: str
    cuda: str
    python: str
    l2_bytes: int | None = None
    n_sms: int | None = None

    @property
    def is_gpu(self) -> bool:
        return self.runtime == "CUDA"

    def measured_label(self) -> str:
        """How a timing from this machine is labelled in reports."""
        return f"measured ({self.gpu})" if self.is_gpu else "measured (CPU, Triton interpreter: not a GPU timing)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo, else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _version(module: str) -> str:
    try:
        return str(__import__(module).__version__)
    except Exception:
        return "not installed"


def system_info() -> SystemInfo:
    """Collect the SystemInfo of this process (never raises)."""
    gpu, cuda, l2_bytes, n_sms = "none", "none", None, None
    on_gpu = device() == "cuda"
    try:
        import torch

        cuda = str(torch.version.cuda or "none")
        if on_gpu:
            index = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            gpu = str(props.name)
            l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0) or None
            n_sms = int(props.multi_processor_count)
    except Exception:
        pass
    # device() is "cpu" whenever TRITON_INTERPRET=1, even with a GPU present: kernels then run on the CPU.
    runtime = "CUDA" if on_gpu else "Triton interpreter (CPU)"
    return SystemInfo(
        gpu=gpu,
        cpu=cpu_name(),
        runtime=runtime,
        platform=platform.platform(),
        torch=_version("torch"),
        triton=_version("triton"),
        cuda=cuda,
        python=platform.python_version(),
        l2_bytes=l2_bytes,
        n_sms=n_sms,
    )
