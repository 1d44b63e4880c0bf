"""Run a user kernel through the user's own wrapper function (e.g. `matmul(a, b)`): inputs from
`--tensor`/`--arg`/`--size` or a task's generate_input, the chosen config forced, an order spliced in.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.userkernel import config as config_mod
from swizzlelab.userkernel.load import FoundKernel, KernelFile
from swizzlelab.userkernel.shim import device_shim, interpreting

TENSOR_SPEC = re.compile(r"^(?P<name>\w+)=(?P<dtype>\w+)\[(?P<dims>[^\]]*)\]$")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "float8_e4m3fn", "float8_e5m2")


@dataclass(frozen=True)
class TensorSpec:
    """`--tensor a=float16[M,K]`: a seeded random input tensor of that dtype and shape."""

    name: str
    dtype: str
    dims: tuple[str, ...]  # ints or size names

    def shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        out = []
        for dim in self.dims:
            if dim.isdigit():
                out.append(int(dim))
            elif dim in sizes:
                out.append(int(sizes[dim]))
            else:
                raise UserError(
                    f"--tensor {self.name}: dimension {dim!r} is neither a number nor a size given with --size {dim}=N"
                )
        return tuple(out)


def parse_tensor_spec(text: str) -> TensorSpec:
    match = TENSOR_SPEC.match(text.replace(" ", ""))
    if not match:
        raise UserError(f"--tensor {text!r}: write NAME=DTYPE[DIM,...], e.g. --tensor a=float16[M,K]")
    dtype = match["dtype"]
    if dtype not in DTYPES:
        raise UserError(f"--tensor {text!r}: dtype {dtype!r} is unknown; use one of {', '.join(DTYPES)}")
    dims = tuple(d for d in match["dims"].split(",") if d)
    if not dims:
        raise UserError(f"--tensor {text!r}: give at least one dimension")
    return TensorSpec(match["name"], dtype, dims)


def parse_scalar(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or not name.isidentifier():
        raise UserError(f"--arg {text!r}: write NAME=VALUE, e.g. --arg sm_scale=0.125")
    return name, config_mod._value(raw)


@dataclass(frozen=True)
class Inputs:
    """How to build the wrapper's arguments: tensor specs and scalars, or a task's generate_input."""

    tensors: tuple[TensorSpec, ...] = ()
    scalars: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    task: Any = None  # a swizzlelab Task: generate_input({seed, **sizes}) gives the data dict


def resolve_wrapper(kfile: KernelFile, spec: str | None, kernel: FoundKernel) -> Callable[..., Any]:
    """`--launch FUNCTION` (a function of the kernel file), `--launch FILE.py:FUNCTION` or `module:function`;
    without it, the file's single function that launches the kernel."""
    if spec:
        module_part, sep, func_name = spec.rpartition(":")
        if not sep:
            func_name, module_part = spec, ""
        if not module_part or module_part in (str(kfile.path), kfile.path.name, kfile.path.stem):
            fn = kfile.functions.get(func_name)
            if fn is None:
                names = ", ".join(kfile.functions) or "none"
                raise UserError(f"--launch {spec}: {kfile.path.name} has no function {func_name!r} (functions: {names})")
            return fn
        try:
            if module_part.endswith(".py"):
                mod_spec = importlib.util.spec_from_file_location(f"swizzlelab_launch_{abs(hash(module_part))}", module_part)
                if mod_spec is None or mod_spec.loader is None:
                    raise ImportError(module_part)
                module = importlib.util.module_from_spec(mod_spec)
                mod_spec.loader.exec_module(module)
            else:
                module = importlib.import_module(module_part)
        except Exception as err:  # noqa: BLE001 - the user's module
            raise UserError(f"--launch {spec}: cannot import {module_part}: {type(err).__name__}: {err}") from None
        fn = getattr(module, func_name, None)
        if not callable(fn):
            raise UserError(f"--launch {spec}: {module_part} has no function {func_name!r}")
        return fn
    callers = [fn for fn in kfile.functions.values() if re.search(rf"\b{re.escape(kernel.name)}\s*\[", inspect.getsource(fn))]
    if len(callers) != 1:
        found = ", ".join(f.__name__ for f in callers) or "none"
        raise UserError(
            f"{kfile.path.name}: cannot tell which function launches {kernel.name} (found: {found}); "
            f"name it with --launch FUNCTION"
        )
    return callers[0]


def build_arguments(wrapper: Callable[..., Any], inputs: Inputs, device: str) -> dict[str, Any]:
    """Keyword arguments for the wrapper: every parameter without a default must be given."""
    import torch

    values: dict[str, Any] = {}
    if inputs.task is not None:
        data = inputs.task.generate_input({"seed": inputs.seed, **inputs.sizes})
        values.update({k: v for k, v in data.items() if k != "out"})
    generator = torch.Generator(device="cpu").manual_seed(inputs.seed)
    _refuse_too_large(inputs)
    for spec in inputs.tensors:
        shape = spec.shape(inputs.sizes)
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point:
            tensor = torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)
        else:
            tensor = torch.randint(-8, 8, shape, generator=generator, dtype=torch.int64).to(dtype)
        values[spec.name] = tensor.to(device)
    values.update(inputs.scalars)
    signature = inspect.signature(wrapper)
    params = signature.parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in values.items() if k in params or accepts_any}
    missing = [
        name for name, p in params.items()
        if p.default is inspect.Parameter.empty and name not in kwargs
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if missing:
        raise UserError(
            f"{wrapper.__name__}{signature} needs {', '.join(missing)}: give each tensor with --tensor "
            f"NAME=DTYPE[DIM,...] (sizes with --size) and each scalar with --arg NAME=VALUE, or --task TASK"
        )
    return kwargs


def _refuse_too_large(inputs: Inputs) -> None:
    """Refuse up front inputs that (with the kernel's outputs, assumed as large again) would not fit in memory."""
    import torch

    from swizzlelab.runtime import available_memory_bytes

    need = 0
    for spec in inputs.tensors:
        n = 1
        for dim in spec.shape(inputs.sizes):
            n *= dim
        need += n * torch.empty(0, dtype=getattr(torch, spec.dtype)).element_size()
    available = available_memory_bytes()
    if 2 * need > available:
        raise UserError(
            f"the --tensor inputs take {need / 2**30:.1f} GiB (and outputs about as much); this machine has "
            f"{available / 2**30:.1f} GiB available: use smaller --size values"
        )


class _ForcedLaunch:
    """Stands in for the kernel in the wrapper's module while it runs: `kernel[grid](...)` launches the
    chosen jit function with the chosen config forced in."""

    def __init__(self, jit_fn: Any, kernel: FoundKernel, choice: config_mod.Choice) -> None:
        self.jit_fn = jit_fn
        self.kernel = kernel
        self.choice = choice
        self.calls: list[dict[str, Any]] = []  # each launch's arguments by name, choice applied

    def _kwargs(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) > len(self.kernel.params):
            raise UserError(f"{self.kernel.name} was launched with {len(args)} positional arguments but takes "
                            f"{len(self.kernel.params)}")
        named = dict(zip(self.kernel.params, args))
        twice = [k for k in kwargs if k in named]
        if twice:
            raise UserError(f"{self.kernel.name} got {', '.join(twice)} both by position and by keyword")
        named.update(kwargs)
        return config_mod.apply(self.choice, self.kernel, named, interpreting())

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            named = self._kwargs(args, kwargs)
            self.calls.append({**self.kernel.defaults, **named})
            return self.jit_fn[grid](**named)

        return launch

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        return self[grid](*args, **kwargs)


@dataclass
class Launcher:
    """Calls the user's wrapper with fixed inputs; `__call__(formula)` runs it with `formula` at the site."""

    kfile: KernelFile
    kernel: FoundKernel
    wrapper: Callable[..., Any]
    arguments: dict[str, Any]
    choice: config_mod.Choice
    model: HardwareModel
    splice: Callable[[Any, Any], Any] = lambda jit_fn, formula: jit_fn  # (jit_fn, formula) -> jit fn
    seed: int = 0

    @contextlib.contextmanager
    def forced(self, formula: Any = None) -> Iterator[_ForcedLaunch]:
        """While active, the module's kernel name launches `formula`'s variant with the chosen config."""
        namespace = self.kfile.module.__dict__
        jit_fn = self.splice(self.kernel.jit_fn, formula) if formula is not None else self.kernel.jit_fn
        proxy = _ForcedLaunch(jit_fn, self.kernel, self.choice)
        saved = namespace[self.kernel.name]
        namespace[self.kernel.name] = proxy
        try:
            with device_shim(self.model):
                yield proxy
        finally:
            namespace[self.kernel.name] = saved

    def __call__(self, formula: Any = None, arguments: dict[str, Any] | None = None) -> Any:
        with self.forced(formula):
            return self.wrapper(**(arguments if arguments is not None else self.arguments))

    def for_data(self, formula: Any = None) -> Callable[[dict[str, Any]], Any]:
        """fn(data) for the harness's timing: data is the wrapper's keyword arguments."""
        return lambda data: self(formula, data)

    def describe(self) -> str:
        shown = ", ".join(
            f"{k}={'x'.join(map(str, v.shape)) + ' ' + str(v.dtype).replace('torch.', '') if hasattr(v, 'shape') else v}"
            for k, v in self.arguments.items()
        )
        return f"launcher: {self.wrapper.__name__}({shown}) from {self.kfile.path.name}"
