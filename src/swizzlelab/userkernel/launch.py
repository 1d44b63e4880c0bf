"""Run a user kernel through the user's own wrapper (e.g. `matmul(a, b)`, `attention = _attention.apply`): inputs
from `--tensor`/`--arg`/`--size`, a task's generate_input or an `--inputs` function, the chosen config, its
pre_hook and the file's heuristics applied, an order spliced in.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.userkernel import config as config_mod
from swizzlelab.userkernel.inductor import launcher_for
from swizzlelab.userkernel.load import FoundKernel, KernelFile, folder_on_path, launch_source
from swizzlelab.userkernel.shim import device_shim

TENSOR_SPEC = re.compile(r"^(?P<name>\w+)=(?P<body>.+)$")
ONE_TENSOR = re.compile(r"(?P<dtype>\w+)\[(?P<dims>[^\]]*)\]")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "float8_e4m3fn", "float8_e5m2")


@dataclass(frozen=True)
class TensorSpec:
    """`--tensor a=float16[M,K]`: a seeded random input tensor of that dtype and shape; `--tensor
    group_a=[float16[M,K],float16[64,K]]`: a list of them (grouped GEMMs take lists)."""

    name: str
    dtype: str
    dims: tuple[str, ...]  # ints or size names
    items: tuple[TensorSpec, ...] = ()  # set for a list: its tensors, in order

    @property
    def is_list(self) -> bool:
        return bool(self.items)

    def shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        out = []
        for dim in self.dims:
            if dim.isdigit():
                out.append(int(dim))
            elif dim in sizes:
                out.append(int(sizes[dim]))
            else:
                given = f" (sizes given: {', '.join(sizes)})" if sizes else ""
                raise UserError(
                    f"--tensor {self.name}: dimension {dim!r} is neither a number nor a size given with --size "
                    f"{dim}=N{given}"
                )
        return tuple(out)


def _one_tensor(name: str, text: str, whole: str) -> TensorSpec:
    match = ONE_TENSOR.fullmatch(text)
    if not match:
        raise UserError(f"--tensor {whole!r}: write NAME=DTYPE[DIM,...] or NAME=[DTYPE[DIM,...],...], e.g. "
                        "--tensor a=float16[M,K]")
    dtype = match["dtype"]
    if dtype not in DTYPES:
        raise UserError(f"--tensor {whole!r}: dtype {dtype!r} is unknown; use one of {', '.join(DTYPES)}")
    dims = tuple(d for d in match["dims"].split(",") if d)
    if not dims:
        raise UserError(f"--tensor {whole!r}: give at least one dimension")
    return TensorSpec(name, dtype, dims)


def parse_tensor_spec(text: str) -> TensorSpec:
    compact = text.replace(" ", "")
    match = TENSOR_SPEC.match(compact)
    if not match:
        raise UserError(f"--tensor {text!r}: write NAME=DTYPE[DIM,...], e.g. --tensor a=float16[M,K]")
    name, body = match["name"], match["body"]
    if body.startswith("[") and body.endswith("]"):
        parts = [m.group(0) for m in ONE_TENSOR.finditer(body[1:-1])]
        if not parts or ",".join(parts) != body[1:-1]:
            raise UserError(f"--tensor {text!r}: a list is [DTYPE[DIM,...],DTYPE[DIM,...],...]")
        items = tuple(_one_tensor(f"{name}[{i}]", part, text) for i, part in enumerate(parts))
        return TensorSpec(name, items[0].dtype, (), items)
    return _one_tensor(name, body, text)


def parse_scalar(text: str) -> tuple[str, Any]:
    """`--arg NAME=VALUE`: a Python literal, or a dtype as torch or Triton spells it (`torch.float16`,
    `tl.float32`), which launchers take as arguments (vLLM's `out_dtype`)."""
    name, sep, raw = text.partition("=")
    if not sep or not name.isidentifier():
        raise UserError(f"--arg {text!r}: write NAME=VALUE, e.g. --arg sm_scale=0.125")
    dtype = re.fullmatch(r"(torch|tl|triton\.language)\.(\w+)", raw.strip())
    if dtype:
        import torch
        import triton.language as tl

        value = getattr(torch if dtype[1] == "torch" else tl, dtype[2], None)
        if not isinstance(value, (torch.dtype, tl.dtype)):
            raise UserError(f"--arg {text!r}: {raw.strip()} is not a {dtype[1]} dtype (e.g. {dtype[1]}.float16)")
        return name, value
    return name, config_mod._value(raw)


@dataclass(frozen=True)
class Inputs:
    """How to build the wrapper's arguments: a task's generate_input and/or an `--inputs` function, overlaid by
    tensor specs and scalars."""

    tensors: tuple[TensorSpec, ...] = ()
    scalars: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    task: Any = None  # a swizzlelab Task: generate_input({seed, **sizes}) gives the data dict
    builder: str | None = None  # `--inputs FILE.py:FUNCTION`: FUNCTION(**sizes, seed) -> the wrapper's kwargs


class Wrapper:
    """The user's launcher, called with keyword arguments: a function, or an autograd Function's `apply`
    (called positionally in `forward`'s order, ctx left out). A leaderboard submission's `custom_kernel(data)`
    takes its inputs as one dict: given a task, its arguments are the task's data keys, packed into `data`."""

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.__name__ = name
        self.fn = fn
        owner = getattr(fn, "__self__", None)
        self.positional = inspect.isclass(owner) and hasattr(owner, "forward") and getattr(fn, "__name__", "") == "apply"
        if self.positional:
            forward = inspect.signature(owner.forward)
            self.signature = forward.replace(parameters=list(forward.parameters.values())[1:])
        else:
            self.signature = inspect.signature(fn)
        self.source = launch_source(fn)

    @property
    def takes_data(self) -> bool:
        """Whether it is shaped like a task's custom_kernel(data): one parameter, `data`, without a default."""
        params = list(self.signature.parameters.values())
        return (not self.positional and len(params) == 1 and params[0].name == "data"
                and params[0].default is inspect.Parameter.empty)

    @property
    def globals(self) -> dict[str, Any]:
        fn = self.fn
        owner = getattr(fn, "__self__", None)
        if self.positional:
            fn = owner.forward
        return getattr(fn, "__globals__", {})

    def __call__(self, **kwargs: Any) -> Any:
        if self.takes_data and "data" not in kwargs:
            return self.fn(dict(kwargs))
        if not self.positional:
            return self.fn(**kwargs)
        args = []
        for name, param in self.signature.parameters.items():
            if name in kwargs:
                args.append(kwargs[name])
            elif param.default is not inspect.Parameter.empty:
                args.append(param.default)
            else:
                raise UserError(f"{self.__name__}{self.signature} needs {name}")
        return self.fn(*args)


def _import_launch_file(module_part: str, kfile: KernelFile) -> Any:
    """A launcher in another file: imported with the kernel file's folder on sys.path and the kernel file's
    module name bound to swizzlelab's copy of it, so `from KERNELFILE import kernel` finds the copy that runs."""
    stem = kfile.path.stem
    saved = sys.modules.get(stem)
    sys.modules[stem] = kfile.module
    try:
        with kfile.folder_on_path():
            if module_part.endswith(".py"):
                name = f"swizzlelab_launch_{abs(hash((module_part, kfile.module.__name__)))}"
                mod_spec = importlib.util.spec_from_file_location(name, module_part)
                if mod_spec is None or mod_spec.loader is None:
                    raise ImportError(module_part)
                module = importlib.util.module_from_spec(mod_spec)
                mod_spec.loader.exec_module(module)
                return module
            return importlib.import_module(module_part)
    finally:
        if saved is None:
            sys.modules.pop(stem, None)
        else:
            sys.modules[stem] = saved


def resolve_wrapper(kfile: KernelFile, spec: str | None, kernel: FoundKernel) -> Wrapper:
    """`--launch NAME` (a function of the kernel file, or a module-level name such as `attention =
    _attention.apply`), `--launch FILE.py:FUNCTION` or `module:function`; without it, the file's single
    function that launches the kernel (the one public one, where private helpers launch it too); for torch.compile's
    output, the kernel launched as call() launches it."""
    if kfile.inductor is not None:
        launch = kfile.inductor.launches.get(kernel.name)
        if launch is None:
            why = kfile.inductor.unlaunchable.get(kernel.name, "call() does not launch it")
            raise UserError(f"{kfile.path.name}: kernel {kernel.name} cannot be launched alone: {why}")
        if spec:
            raise UserError(f"--launch {spec}: a torch.compile output's kernel is launched as its call() launches it")
        return Wrapper(f"launch_{kernel.name}", launcher_for(launch, kernel.attr))
    if spec:
        module_part, sep, func_name = spec.rpartition(":")
        if not sep:
            func_name, module_part = spec, ""
        if not module_part or module_part in (str(kfile.path), kfile.path.name, kfile.path.stem):
            fn = kfile.functions.get(func_name)
            if fn is None:
                names = ", ".join(kfile.functions) or "none"
                raise UserError(f"--launch {spec}: {kfile.path.name} has no function {func_name!r} (functions: {names})")
            return Wrapper(func_name, fn)
        try:
            module = _import_launch_file(module_part, kfile)
        except Exception as err:  # noqa: BLE001 - the user's module
            raise UserError(f"--launch {spec}: cannot import {module_part}: {type(err).__name__}: {err}") from None
        fn = getattr(module, func_name, None)
        if not callable(fn):
            raise UserError(f"--launch {spec}: {module_part} has no function {func_name!r}")
        return Wrapper(func_name, fn)
    pattern = re.compile(rf"\b{re.escape(kernel.name)}\s*\[")
    callers = [Wrapper(name, fn) for name, fn in kfile.functions.items() if pattern.search(launch_source(fn))]
    public = [w for w in callers if not w.__name__.startswith("_")]
    if len(callers) > 1 and len(public) == 1:
        return public[0]
    if len(callers) != 1:
        found = ", ".join(w.__name__ for w in callers) or "none"
        raise UserError(
            f"{kfile.path.name}: cannot tell which function launches {kernel.name} (found: {found}); "
            f"name it with --launch FUNCTION"
        )
    return callers[0]


def _inputs_function(spec: str, folder: Any) -> Callable[..., Any]:
    module_part, sep, func_name = spec.rpartition(":")
    if not sep or not module_part.endswith(".py"):
        raise UserError(f"--inputs {spec!r}: write FILE.py:FUNCTION (a function returning the launcher's arguments)")
    try:
        with folder_on_path(folder):
            mod_spec = importlib.util.spec_from_file_location(f"swizzlelab_inputs_{abs(hash(spec))}", module_part)
            if mod_spec is None or mod_spec.loader is None:
                raise ImportError(module_part)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's module
        raise UserError(f"--inputs {spec}: cannot import {module_part}: {type(err).__name__}: {err}") from None
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise UserError(f"--inputs {spec}: {module_part} has no function {func_name!r}")
    return fn


def _from_builder(spec: str, inputs: Inputs, device: str, folder: Any) -> dict[str, Any]:
    fn = _inputs_function(spec, folder)
    params = inspect.signature(fn).parameters
    given = {**inputs.sizes, "seed": inputs.seed, "device": device}
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in given
               and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if missing:
        raise UserError(f"--inputs {spec}: {fn.__name__} needs {', '.join(missing)}: give each with --size NAME=N")
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    values = fn(**{k: v for k, v in given.items() if k in params or takes_any})
    if not isinstance(values, dict):
        raise UserError(f"--inputs {spec}: {fn.__name__} returned {type(values).__name__}, not a dict of the "
                        "launcher's arguments")
    return values


def _random_tensor(spec: TensorSpec, sizes: dict[str, int], generator: Any, device: str) -> Any:
    import torch

    if spec.is_list:
        return [_random_tensor(item, sizes, generator, device) for item in spec.items]
    shape = spec.shape(sizes)
    dtype = getattr(torch, spec.dtype)
    if dtype.is_floating_point:
        tensor = torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)
    else:
        tensor = torch.randint(-8, 8, shape, generator=generator, dtype=torch.int64).to(dtype)
    return tensor.to(device)


def build_arguments(wrapper: Wrapper, inputs: Inputs, device: str, folder: Any = None,
                    defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments for the wrapper: `defaults` (a torch.compile output's call() buffers), a task's data and
    an --inputs function's, overlaid by --tensor and --arg; every parameter without a default must be given."""
    import torch

    values: dict[str, Any] = dict(defaults or {})
    if inputs.task is not None:
        # on `device`, where the copy's kernels run (the CPU for an interpreted copy, also beside a GPU)
        data = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                for k, v in inputs.task.generate_input({"seed": inputs.seed, **inputs.sizes}).items()}
        if wrapper.takes_data and not (inputs.tensors or inputs.scalars or inputs.builder):
            # custom_kernel(data) of a task: the task's data dict, its output buffer included, kept flat here (so
            # copies and poisoning see each tensor) and packed into one dict by Wrapper.__call__
            return data
        values.update({k: v for k, v in data.items() if k != "out"})
    if inputs.builder:
        values.update(_from_builder(inputs.builder, inputs, device, folder))
    generator = torch.Generator(device="cpu").manual_seed(inputs.seed)
    _refuse_too_large(inputs)
    for spec in inputs.tensors:
        values[spec.name] = _random_tensor(spec, inputs.sizes, generator, device)
    values.update(inputs.scalars)
    params = wrapper.signature.parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in values.items() if k in params or accepts_any}
    missing = [
        name for name, p in params.items()
        if p.default is inspect.Parameter.empty and name not in kwargs
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if missing:
        raise UserError(
            f"{wrapper.__name__}{wrapper.signature} needs {', '.join(missing)}: give each tensor with --tensor "
            f"NAME=DTYPE[DIM,...] (a list as NAME=[DTYPE[DIM,...],...]; sizes with --size), each scalar with --arg "
            f"NAME=VALUE, or all of them from a function with --inputs FILE.py:FUNCTION; a task (the TASK "
            f"argument, --task on check) supplies the ones it names"
        )
    return kwargs


def _refuse_too_large(inputs: Inputs) -> None:
    """Refuse up front inputs that (with the kernel's outputs, assumed as large again) would not fit in memory."""
    import torch

    from swizzlelab.runtime import available_memory_bytes

    need = 0
    for spec in inputs.tensors:
        for item in spec.items or (spec,):
            n = 1
            for dim in item.shape(inputs.sizes):
                n *= dim
            need += n * torch.empty(0, dtype=getattr(torch, item.dtype)).element_size()
    available = available_memory_bytes()
    if 2 * need > available:
        raise UserError(
            f"the --tensor inputs take {need / 2**30:.1f} GiB (and outputs about as much); this machine has "
            f"{available / 2**30:.1f} GiB available: use smaller --size values"
        )


class _ForcedLaunch:
    """Stands in for the kernel in the launcher's namespaces while it runs: `kernel[grid](...)` launches the
    chosen jit function with the chosen config forced in, the file's heuristics computed and the config's
    pre_hook run, as the autotuner and heuristics wrappers it bypasses would."""

    def __init__(self, jit_fn: Any, kernel: FoundKernel, choice: config_mod.Choice, probe: bool = False,
                 warmup: bool = False) -> None:
        self.jit_fn = jit_fn
        self.kernel = kernel
        self.choice = choice
        self.probe = probe  # record the launches' arguments only, run nothing
        self.warmup = warmup  # compile the launches (JITFunction.warmup), run nothing
        self.compiled: list[Any] = []
        self.calls: list[dict[str, Any]] = []  # each launch's arguments by name, choice applied
        self.interpreted = type(jit_fn).__name__ == "InterpretedFunction"

    def _kwargs(self, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) > len(self.kernel.params):
            raise UserError(f"{self.kernel.name} was launched with {len(args)} positional arguments but takes "
                            f"{len(self.kernel.params)}")
        named = dict(zip(self.kernel.params, args))
        twice = [k for k in kwargs if k in named]
        if twice:
            raise UserError(f"{self.kernel.name} got {', '.join(twice)} both by position and by keyword")
        named.update(kwargs)
        named = config_mod.apply(self.choice, self.kernel, named, self.interpreted)
        for values in self.kernel.heuristics:
            for key, heuristic in values.items():
                if key not in self.choice.values:  # a --config value of a heuristic's name wins
                    named[key] = heuristic({**self.kernel.defaults, **named})
        return named

    def _pre_hooks(self, named: dict[str, Any]) -> None:
        hooks = [self.kernel.autotune_pre_hook, self.choice.pre_hook]
        full = {**self.kernel.defaults, **named, **self.choice.extra}
        for hook in filter(None, hooks):
            hook(full)

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            named = self._kwargs(args, kwargs)
            self.calls.append({**self.kernel.defaults, **named})
            if self.probe:
                return None
            self._pre_hooks(named)
            if self.warmup:
                self.compiled.append(self.jit_fn.warmup(grid=grid, **named))
                return None
            return self.jit_fn[grid](**named)

        return launch

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        return self[grid](*args, **kwargs)


@contextlib.contextmanager
def running(kfile: KernelFile, model: HardwareModel) -> Iterator[None]:
    """Where the user's wrapper runs: under the device shim, with its file's folder on sys.path and what the
    file prints sent to stderr (stdout stays the command's own, e.g. --json)."""
    with device_shim(model, kfile.interpreted), kfile.folder_on_path(), contextlib.redirect_stdout(sys.stderr):
        yield


@dataclass
class Launcher:
    """Calls the user's wrapper with fixed inputs; `__call__(formula)` runs it with `formula` at the site."""

    kfile: KernelFile
    kernel: FoundKernel
    wrapper: Wrapper
    arguments: dict[str, Any]
    choice: config_mod.Choice
    model: HardwareModel
    splice: Callable[[Any, Any], Any] = lambda jit_fn, formula: jit_fn  # (jit_fn, formula) -> jit fn
    seed: int = 0
    launch_spec: str | None = None  # --launch as given (the interpreted copy resolves it again)

    @contextlib.contextmanager
    def forced(self, formula: Any = None, probe: bool = False, warmup: bool = False) -> Iterator[_ForcedLaunch]:
        """While active, the kernel's name launches `formula`'s variant with the chosen config, in the kernel
        file's module and in the launcher's (when it lives in another file and imported the kernel); with
        `probe`, launches are recorded and not run."""
        jit_fn = self.splice(self.kernel.jit_fn, formula) if formula is not None else self.kernel.jit_fn
        proxy = _ForcedLaunch(jit_fn, self.kernel, self.choice, probe, warmup)
        namespaces = [self.kfile.module.__dict__]
        if self.wrapper.globals is not self.kfile.module.__dict__:
            namespaces.append(self.wrapper.globals)
        replaced = [(ns, key) for ns in namespaces for key, value in list(ns.items()) if value is self.kernel.attr]
        for ns, key in replaced:
            ns[key] = proxy
        try:
            with running(self.kfile, self.model):
                yield proxy
        finally:
            for ns, key in replaced:
                ns[key] = self.kernel.attr

    def __call__(self, formula: Any = None, arguments: dict[str, Any] | None = None) -> Any:
        with self.forced(formula):
            return self.wrapper(**(arguments if arguments is not None else self.arguments))

    def probe(self) -> dict[str, Any]:
        """The arguments of the wrapper's first launch of the kernel (config, heuristics and defaults applied),
        found by running the wrapper with the launch itself skipped; {} when it launches nothing or fails so."""
        try:
            with self.forced(probe=True) as proxy:
                self.wrapper(**self.arguments)
        except Exception:  # noqa: BLE001 - the wrapper may need the kernel's output; what it launched is enough
            pass
        return dict(proxy.calls[0]) if proxy.calls else {}

    def for_data(self, formula: Any = None) -> Callable[[dict[str, Any]], Any]:
        """fn(data) for the harness's timing: data is the wrapper's keyword arguments."""
        return lambda data: self(formula, data)

    def warmup(self) -> Any:
        """Compile the kernel as the wrapper launches it (nothing runs); its first CompiledKernel."""
        compiled: list[Any] = []
        try:
            with self.forced(warmup=True) as proxy:
                compiled = proxy.compiled
                self.wrapper(**self.arguments)
        except Exception:  # noqa: BLE001 - the wrapper may need the kernel's output; the compile is what counts
            if not compiled:
                raise
        if not compiled:
            raise UserError(f"{self.wrapper.__name__} launched no {self.kernel.name}: nothing to compile")
        return compiled[0]

    def describe(self) -> str:
        shown = ", ".join(f"{k}={_shown(v)}" for k, v in self.arguments.items())
        inductor = self.kfile.inductor
        launch = inductor.launches.get(self.kernel.name) if inductor is not None else None
        if launch is not None:
            return (f"launcher: {self.kernel.name} alone, as call() launches it at line {launch.line} of "
                    f"{self.kfile.path.name} (grid {launch.grid}, {', '.join(f'{k}={v}' for k, v in launch.options.items()) or 'no options'}): "
                    f"seeded {shown}")
        return f"launcher: {self.wrapper.__name__}({shown}) from {self.kfile.path.name}"


def case_value(value: Any) -> Any:
    """A wrapper argument as a case records it (a JSON value: the run's identity and logs hold it): tensors and
    lists of them by shape and dtype, numbers, text, True/False/None as they are, anything else (a torch dtype, a
    triton.Config) as its text."""
    if _is_tensors(value) or hasattr(value, "shape"):
        return _shown(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _is_tensors(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(hasattr(v, "shape") for v in value)


def _shown(value: Any) -> str:
    if _is_tensors(value):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if hasattr(value, "shape"):
        return "x".join(map(str, value.shape)) + " " + str(value.dtype).replace("torch.", "")
    return str(value)
