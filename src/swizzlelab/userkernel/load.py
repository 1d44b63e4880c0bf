"""Import a kernel file as people write it and find its kernels: @triton.jit functions, also under
@triton.autotune / @triton.heuristics (unwrapped to the jit function, the autotune configs kept).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.userkernel.shim import ShimInfo, device_shim


@dataclass(frozen=True)
class TuneConfig:
    """One `triton.Config` of an autotuned kernel, as plain values."""

    kwargs: dict[str, Any]
    num_warps: int | None
    num_stages: int | None

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.kwargs.items()]
        parts += [f"num_warps={self.num_warps}"] if self.num_warps is not None else []
        parts += [f"num_stages={self.num_stages}"] if self.num_stages is not None else []
        return ",".join(parts)


@dataclass(frozen=True)
class FoundKernel:
    """A kernel of the file: the module attribute (maybe an Autotuner), its jit function, its source."""

    name: str
    attr: Any  # what the module holds under `name` (JITFunction, Autotuner, Heuristics, ...)
    jit_fn: Any  # the innermost jit function (JITFunction or the interpreter's InterpretedFunction)
    wrappers: tuple[str, ...]  # outermost first, e.g. ("Autotuner",)
    autotune_configs: tuple[TuneConfig, ...]
    source: str  # the function's dedented source, decorators included
    params: tuple[str, ...]
    constexprs: tuple[str, ...]
    defaults: dict[str, Any]  # parameters with a default value in the signature

    @property
    def is_autotuned(self) -> bool:
        return bool(self.autotune_configs)


@dataclass(frozen=True)
class KernelFile:
    """An imported kernel file: its module, every kernel in it, and what the device shim answered."""

    path: Path
    module: ModuleType
    module_source: str
    source_hash: str
    kernels: dict[str, FoundKernel]
    functions: dict[str, Any] = field(default_factory=dict)  # plain Python functions (launcher candidates)
    shim: ShimInfo | None = None


def _unwrap(attr: Any) -> tuple[Any, tuple[str, ...], tuple[TuneConfig, ...]]:
    """Follow `.fn` through autotune/heuristics wrappers down to the jit function."""
    wrappers: list[str] = []
    configs: tuple[TuneConfig, ...] = ()
    current = attr
    for _ in range(8):
        inner = getattr(current, "fn", None)
        if inner is None or not hasattr(current, "arg_names"):
            break
        if inspect.isfunction(inner):
            return current, tuple(wrappers), configs
        wrappers.append(type(current).__name__)
        if hasattr(current, "configs") and not configs:
            configs = tuple(
                TuneConfig(dict(c.kwargs), getattr(c, "num_warps", None), getattr(c, "num_stages", None))
                for c in current.configs
            )
        current = inner
    return None, (), ()


def _is_constexpr(annotation: Any) -> bool:
    # tl.constexpr (the class), or the string "tl.constexpr" under `from __future__ import annotations`
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return str(text).split(".")[-1] == "constexpr"


def _describe(name: str, attr: Any, module_name: str) -> FoundKernel | None:
    jit_fn, wrappers, configs = _unwrap(attr)
    if jit_fn is None or getattr(jit_fn.fn, "__module__", None) != module_name:
        return None
    try:
        source = textwrap.dedent(inspect.getsource(jit_fn.fn))
    except (OSError, TypeError):
        return None
    signature = inspect.signature(jit_fn.fn)
    params = tuple(signature.parameters)
    constexprs = tuple(k for k, p in signature.parameters.items() if _is_constexpr(p.annotation))
    defaults = {k: p.default for k, p in signature.parameters.items() if p.default is not inspect.Parameter.empty}
    return FoundKernel(name, attr, jit_fn, wrappers, configs, source, params, constexprs, defaults)


def load_kernel_file(path: str | Path, model: HardwareModel) -> KernelFile:
    """Import `path` (under the device shim when no GPU is present); UserError with the cause if it fails."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise UserError(f"--kernel {path}: no such file; give a .py file with a @triton.jit kernel")
    from swizzlelab.runtime import ensure_triton_backend

    ensure_triton_backend()
    module_source = file.read_text()
    digest = hashlib.sha256(str(file).encode()).hexdigest()[:12]
    name = f"swizzlelab_user_kernel_{digest}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise UserError(f"--kernel {path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton resolves a kernel's globals through its module
    with device_shim(model) as shim:
        try:
            spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 - a user's file: any import error is theirs to fix
            sys.modules.pop(name, None)
            first = (str(err).splitlines() or [""])[0]
            raise UserError(f"--kernel {path}: importing it failed: {type(err).__name__}: {first}") from None
    kernels: dict[str, FoundKernel] = {}
    functions: dict[str, Any] = {}
    for attr_name, value in vars(module).items():
        found = _describe(attr_name, value, name)
        if found is not None:
            kernels[attr_name] = found
        elif inspect.isfunction(value) and value.__module__ == name:
            functions[attr_name] = value
    if not kernels:
        raise UserError(f"--kernel {path}: the file defines no @triton.jit function")
    return KernelFile(file, module, module_source, hashlib.sha256(module_source.encode()).hexdigest()[:16],
                      kernels, functions, shim)
