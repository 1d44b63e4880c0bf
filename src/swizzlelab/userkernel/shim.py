"""Answer the device queries kernel files make at import or launch (`driver.active`, device properties)
for the interpreted copy of a file (and anywhere no GPU is present), so a file written for a GPU runs unchanged.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from swizzlelab.hw import HardwareModel

# What `get_current_target()` reports for each vendor's target model: (backend, arch, warp size).
_TARGETS = {"nvidia": ("cuda", 90, 32), "amd": ("hip", "gfx942", 64)}


@dataclass(frozen=True)
class ShimInfo:
    """What the interpreter-mode shim told the kernel file it runs on."""

    model: str
    backend: str
    arch: str
    n_units: int
    gpu_here: bool = False  # a GPU is present: only the interpreted copy (the trace's) is answered so

    def describe(self) -> str:
        who = "the file's interpreted copy (the trace's; inputs on the CPU)" if self.gpu_here else "no GPU here: the file"
        return (f"{who}: its device queries (Triton's driver, torch.cuda's device properties, torch.accelerator) "
                f"are answered as a {self.model} (backend {self.backend}, arch {self.arch}, {self.n_units} SMs/CUs), "
                "the target, not this host, and it runs under the Triton interpreter")


# The device queries a file made while the shim answered them (what, and the answer), since `asked()` began.
_ASKED: dict[str, str] = {}


@contextlib.contextmanager
def asked() -> Iterator[dict[str, str]]:
    """Collect the device queries the shim answers within this block (a file sizing its grid by the SM count)."""
    _ASKED.clear()
    collected: dict[str, str] = {}
    try:
        yield collected
    finally:
        collected.update(_ASKED)
        _ASKED.clear()


class _Recorded(dict):  # type: ignore[type-arg]
    """Triton's `driver.active.utils.get_device_properties()` answer, each key read recorded."""

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        _ASKED[f"driver.active.utils.get_device_properties()[{key!r}]"] = str(value)
        return value


class _Properties:
    """torch.cuda.get_device_properties() for the target, each attribute read recorded."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__["_values"]
        if name not in values:
            raise AttributeError(name)
        _ASKED[f"torch.cuda.get_device_properties().{name}"] = str(values[name])
        return values[name]


class _Utils:
    def __init__(self, model: HardwareModel) -> None:
        self._model = model

    def get_device_properties(self, device: Any = 0) -> dict[str, Any]:
        return _Recorded({
            "multiprocessor_count": self._model.n_units,
            "max_shared_mem": 228 * 1024,
            "max_num_regs": 65536,
            "warpSize": _TARGETS[self._model.vendor][2],
            "sm_clock_rate": 1_755_000,
            "mem_clock_rate": 2_619_000,
            "mem_bus_width": 5120,
        })


class InterpreterDriver:
    """Stands in for `triton.runtime.driver.active` under the interpreter, describing the target model."""

    def __init__(self, model: HardwareModel) -> None:
        self.model = model
        self.utils = _Utils(model)

    def is_active(self) -> bool:
        return True

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        backend, arch, warp = _TARGETS[self.model.vendor]
        return GPUTarget(backend, arch, warp)

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        return None

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_device_interface(self) -> Any:
        import torch

        return torch.cuda

    def get_benchmarker(self) -> Any:
        from triton.testing import do_bench

        return do_bench

    def get_empty_cache_for_benchmark(self) -> Any:
        import torch

        return torch.empty(1, dtype=torch.int8)

    def clear_cache(self, cache: Any) -> None:
        return None


def _device_properties(model: HardwareModel) -> Any:
    return _Properties(dict(
        name=f"{model.name} (described by swizzlelab for the Triton interpreter)",
        multi_processor_count=model.n_units,
        total_memory=80 * 2**30,
        L2_cache_size=int(model.l2_bytes_per_domain * model.n_domains),
        major=9,  # sm_90 (H100/H200); gfx942 (MI300) reports 9.4 through torch's ROCm build
        minor=0 if model.vendor == "nvidia" else 4,
        warp_size=_TARGETS[model.vendor][2],
        gcnArchName="gfx942" if model.vendor == "amd" else "",
    ))


def _current_accelerator(check_available: bool = False) -> Any:
    """torch.accelerator.current_accelerator() for the target: a CUDA device (torch's ROCm build says cuda too),
    so a file asking which accelerator it runs on sizes its launch for the target's (batch_invariant_ops reads
    the SM count only when the answer is cuda)."""
    import torch

    _ASKED["torch.accelerator.current_accelerator()"] = "cuda"
    return torch.device("cuda")


def interpreting() -> bool:
    """Whether kernels built now run under the interpreter (what @triton.jit reads when it runs)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gpu_present() -> bool:
    """Whether a CUDA GPU answers device queries here (then no shim is needed, interpreted or not)."""
    from swizzlelab.runtime import cuda_available

    return cuda_available()


@contextlib.contextmanager
def device_shim(model: HardwareModel, interpreted: bool) -> Iterator[ShimInfo | None]:
    """Within this block, for an interpreted copy or when no GPU is present, Triton's active driver and
    torch.cuda's device queries describe `model`; both are restored after. Yields None (and changes nothing)
    for a compiled copy where a GPU answers them. An interpreted copy is answered so even beside a GPU: its
    inputs live on the CPU, where the interpreter can follow pointers a file stores in tensors (a grouped
    GEMM's arrays of `x.data_ptr()`; GPU addresses there would be read as host memory)."""
    gpu_here = gpu_present()
    if gpu_here and not interpreted:
        yield None
        return
    import torch
    import triton

    config = triton.runtime.driver
    saved_active = config._active
    saved_props = torch.cuda.get_device_properties
    saved_capability = torch.cuda.get_device_capability
    saved_accelerator = torch.accelerator.current_accelerator
    driver = InterpreterDriver(model)
    config.set_active(driver)
    props = _device_properties(model)
    torch.cuda.get_device_properties = lambda device=None: props  # type: ignore[assignment]
    torch.cuda.get_device_capability = lambda device=None: (props.major, props.minor)  # type: ignore[assignment]
    torch.accelerator.current_accelerator = _current_accelerator  # type: ignore[assignment]
    backend, arch, _ = _TARGETS[model.vendor]
    try:
        yield ShimInfo(model.name, backend, str(arch), model.n_units, gpu_here)
    finally:
        config._active = saved_active
        torch.cuda.get_device_properties = saved_props  # type: ignore[assignment]
        torch.cuda.get_device_capability = saved_capability  # type: ignore[assignment]
        torch.accelerator.current_accelerator = saved_accelerator  # type: ignore[assignment]
