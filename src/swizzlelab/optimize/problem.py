"""What one optimize run works on: the task, its sizes and tile grid, the kernel with its swizzle site, the target.

Everything here is built once per run; `load_problem` turns CLI-level choices into a validated Problem.
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

from swizzlelab.errors import KernelSiteError, UserError
from swizzlelab.hw import HardwareModel, get_model

TARGETS = ("h100", "h200", "mi300x", "mi325x", "mi355x", "auto")


@dataclass(frozen=True)
class KernelInfo:
    """The @triton.jit function whose site the optimizer rewrites, where it lives, and how to launch it."""

    jit_fn: Any
    name: str
    module: ModuleType
    path: Path
    source: str  # the function's own source (decorator included)
    module_source: str
    source_hash: str  # sha256 prefix of the module source: the cache key's kernel part
    launcher: Any  # custom_kernel(data, order) or None when the file has no launcher
    is_user_file: bool


@dataclass(frozen=True)
class Target:
    """The hardware model predictions use, and whether this machine can measure on it."""

    model: HardwareModel
    requested: str
    note: str  # one line saying how the target was chosen
    local_gpu: str  # torch's name of the local CUDA GPU, "" when there is none
    can_measure: bool


@dataclass
class Problem:
    """A task case on a concrete tile grid, with its kernel, target model and (lazily) its access trace."""

    task: Any
    case: dict[str, Any]
    config: Any
    grid: tuple[int, ...]
    args: dict[str, Any]
    consts: dict[str, Any]
    kernel: KernelInfo
    target: Target
    occupancy: int = 1
    occupancy_source: str = "given"
    _trace: Any = field(default=None, repr=False)
    _footprint: Any = field(default=None, repr=False)

    @property
    def sizes(self) -> dict[str, Any]:
        return {k: v for k, v in self.case.items() if k != "seed"}

    @property
    def rank(self) -> int:
        return len(self.grid)

    @property
    def n_tiles(self) -> int:
        n = 1
        for g in self.grid:
            n *= g
        return n

    def sizes_label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.sizes.items())

    @property
    def trace(self) -> Any:
        if self._trace is None:
            if not self.task.has_access_model:
                raise UserError(
                    f"task {self.task.name} has no access model (access.py): the optimizer needs one to predict"
                )
            trace = (
                self.task.access_model(self.case, config=self.config)
                if self.config is not None
                else self.task.access_model(self.case)
            )
            if tuple(trace.grid) != self.grid:
                raise UserError(
                    f"task {self.task.name}: access model grid {tuple(trace.grid)} differs from tile_grid {self.grid}"
                )
            self._trace = trace
        return self._trace

    @property
    def footprint(self) -> Any:
        if self._footprint is None:
            from swizzlelab.sim import footprint_of

            self._footprint = footprint_of(self.trace)
        return self._footprint

    def identity(self) -> dict[str, Any]:
        """The run's identity: a resumed run must match it exactly."""
        return {
            "task": self.task.name,
            "sizes": self.sizes,
            "seed": self.case.get("seed"),
            "grid": list(self.grid),
            "target": self.target.model.name,
            "kernel": str(self.kernel.path),
            "kernel_hash": self.kernel.source_hash,
            "occupancy": self.occupancy,
            "occupancy_source": self.occupancy_source,
        }


def local_gpu_name() -> str:
    """The CUDA GPU kernels run on here, or '' (no GPU, or the interpreter is forced)."""
    from swizzlelab.runtime import device

    if device() != "cuda":
        return ""
    import torch

    return str(torch.cuda.get_device_name(torch.cuda.current_device()))


def resolve_target(requested: str, gpu_name: str | None = None) -> Target:
    """The hardware model for --target; 'auto' takes the local GPU's model, else h100 (said in `note`)."""
    key = requested.strip().lower()
    if key not in TARGETS:
        raise UserError(f"--target {requested!r} is unknown: use one of {', '.join(TARGETS)}")
    gpu = local_gpu_name() if gpu_name is None else gpu_name
    if key == "auto":
        if gpu:
            from swizzlelab.hw import from_torch_device

            model = from_torch_device()
            note = f"target auto: the local GPU {gpu} (model {model.name})"
        else:
            model = get_model("h100")
            note = f"target auto: no CUDA GPU here, predicting for {model.name}"
    else:
        model = get_model(key)
        note = f"target {model.name}"
    can_measure = bool(gpu) and _same_gpu(model, gpu)
    if gpu and not can_measure:
        note += f" (the local GPU {gpu} is not a {model.name}: predictions only, nothing measured)"
    elif not gpu:
        note += " (no CUDA GPU: every figure is a prediction)"
    return Target(model=model, requested=key, note=note, local_gpu=gpu, can_measure=can_measure)


def _same_gpu(model: HardwareModel, gpu_name: str) -> bool:
    """Whether the local GPU (torch's name) is the kind `model` describes."""
    lowered = gpu_name.lower()
    if model.name.lower() == lowered:
        return True
    tokens = {model.name.lower().split("-")[0]} | {a.split("-")[0].split("_")[0] for a in model.aliases}
    return any(token and token in lowered for token in tokens)


def _has_site(source: str, name: str) -> bool:
    from swizzlelab.swizzle import find_site

    try:
        find_site(source, name)
    except KernelSiteError:
        return False
    return True


def _jit_functions(module: ModuleType) -> list[tuple[str, Any, str]]:
    """(name, jit fn, source) of every @triton.jit function defined in `module`."""
    out = []
    for name, value in vars(module).items():
        fn = getattr(value, "fn", None)
        if fn is None or not callable(fn) or getattr(fn, "__module__", None) != module.__name__:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            continue
        out.append((name, value, source))
    return out


def kernel_from_module(module: ModuleType, path: Path, is_user_file: bool) -> KernelInfo:
    """The one jit function of `module` that has a swizzle site; KernelSiteError when none (or several) do."""
    with_site = [(n, fn, src) for n, fn, src in _jit_functions(module) if _has_site(src, n)]
    if not with_site:
        raise KernelSiteError(
            f"{path}: no @triton.jit function with a swizzle site: add the line `pid = tl.program_id(0)` or wrap "
            "the block computing pid_m/pid_n in '# swizzle: begin' / '# swizzle: end'"
        )
    if len(with_site) > 1:
        raise KernelSiteError(
            f"{path}: {len(with_site)} @triton.jit functions have a swizzle site "
            f"({', '.join(n for n, _, _ in with_site)}): keep the site in one of them"
        )
    name, jit_fn, source = with_site[0]
    module_source = path.read_text()
    return KernelInfo(
        jit_fn=jit_fn,
        name=name,
        module=module,
        path=path,
        source=source,
        module_source=module_source,
        source_hash=hashlib.sha256(module_source.encode()).hexdigest()[:16],
        launcher=getattr(module, "custom_kernel", None),
        is_user_file=is_user_file,
    )


def load_kernel_file(path: str | Path) -> KernelInfo:
    """A user's kernel file, imported under a name derived from its path; UserError if it cannot be."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise UserError(f"--kernel {path}: no such file; give a .py file with a @triton.jit kernel")
    from swizzlelab.runtime import ensure_triton_backend

    ensure_triton_backend()
    digest = hashlib.sha256(str(file).encode()).hexdigest()[:12]
    name = f"swizzlelab_user_kernel_{digest}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise UserError(f"--kernel {path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton resolves a kernel's globals through its module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - a user's file: any import error is theirs to fix
        sys.modules.pop(name, None)
        raise UserError(f"--kernel {path}: importing it failed: {type(err).__name__}: {err}") from None
    return kernel_from_module(module, file, is_user_file=True)


def load_problem(
    task_name: str,
    case: dict[str, Any] | None = None,
    target: str = "auto",
    kernel_file: str | None = None,
    occupancy: int | None = None,
    gpu_name: str | None = None,
) -> Problem:
    """Everything an optimize run needs; `case` defaults to the task's first benchmark case. `occupancy`
    (programs resident per SM/CU) defaults to the kernel's measured one where it has one for the target."""
    from swizzlelab.tasks import load_task

    task = load_task(task_name)
    if case is None:
        cases = task.cases("benchmarks") or task.cases("tests")
        if not cases:
            raise UserError(f"task {task.name} lists no cases in task.yml: add a benchmark case")
        case = dict(cases[0])
    if kernel_file:
        kernel = load_kernel_file(kernel_file)
    else:
        kernel = kernel_from_module(task.kernel, Path(task.kernel.__file__), is_user_file=False)
    grid_module = kernel.module if hasattr(kernel.module, "tile_grid") else task.kernel
    config = getattr(grid_module, "GPU_CONFIG", None) or getattr(task.kernel, "GPU_CONFIG", None)
    sizes = {k: v for k, v in case.items() if k != "seed"}
    try:
        grid = tuple(int(g) for g in grid_module.tile_grid(**sizes, config=config))
        args, consts = grid_module.swizzle_args(**sizes, config=config)
    except TypeError as err:
        raise UserError(f"task {task.name}: sizes {sizes} do not fit its kernel ({err})") from None
    resolved = resolve_target(target, gpu_name)
    if occupancy is None:
        occupancy, occupancy_source = default_occupancy(grid_module, resolved.model)
    else:
        occupancy_source = "given (--occupancy)"
    if occupancy < 1:
        raise UserError(f"--occupancy {occupancy}: give at least 1 resident program per SM/CU")
    return Problem(
        task=task,
        case=dict(case),
        config=config,
        grid=grid,
        args=dict(args),
        consts=dict(consts),
        kernel=kernel,
        target=resolved,
        occupancy=int(occupancy),
        occupancy_source=occupancy_source,
    )


def default_occupancy(kernel_module: Any, model: Any) -> tuple[int, str]:
    """(programs per SM/CU, where that figure comes from): the kernel module's H100_OCCUPANCY (measured by
    ncu for its GPU_CONFIG) on NVIDIA targets; else 1, which under-fills the GPU and says so."""
    measured = getattr(kernel_module, "H100_OCCUPANCY", None)
    if measured and model.vendor == "nvidia":
        return int(measured), "the kernel's, measured by ncu on an H100"
    return 1, "1: no measured occupancy for this kernel on this target (set --occupancy)"


@dataclass(frozen=True)
class UserTaskInfo:
    """Stands in for a task when the kernel is the user's own file: names the run, no access model (the
    prediction trace is the user kernel's own, traced)."""

    name: str
    has_access_model: bool = False


def load_user_problem(user_kernel: Any, target: str = "auto", occupancy: int | None = None,
                      gpu_name: str | None = None) -> Problem:
    """A Problem for a kernel file as people write it (swizzlelab.userkernel): tile grid, args and the trace
    all come from tracing that kernel through its own wrapper; its swizzle site is the one the finder took."""
    resolved = resolve_target(target, gpu_name)
    traced = user_kernel.trace()
    order = traced.order
    kernel = KernelInfo(
        jit_fn=user_kernel.marked.jit_fn,
        name=user_kernel.kernel.name,
        module=user_kernel.kfile.module,
        path=user_kernel.kfile.path,
        source=user_kernel.marked.source,  # swizzlelab's marked copy: the file itself is untouched
        module_source=user_kernel.kfile.module_source,
        source_hash=user_kernel.kfile.source_hash,
        launcher=lambda data, order_formula=None: user_kernel.launcher(order_formula, data),
        is_user_file=True,
    )
    if occupancy is None:
        occupancy, occupancy_source = 1, "1: no measured occupancy for a user kernel (set --occupancy)"
    else:
        occupancy_source = "given (--occupancy)"
    if occupancy < 1:
        raise UserError(f"--occupancy {occupancy}: give at least 1 resident program per SM/CU")
    sizes = {k: v for k, v in user_kernel.launcher.arguments.items() if not hasattr(v, "shape")}
    sizes.update({k: "x".join(map(str, v.shape)) for k, v in user_kernel.launcher.arguments.items() if hasattr(v, "shape")})
    return Problem(
        task=UserTaskInfo(f"{user_kernel.kfile.path.stem}:{user_kernel.kernel.name}"),
        case={"seed": 0, **sizes, "config": user_kernel.choice.label()},
        config=user_kernel.choice,
        grid=order.grid,
        # names the kernel computes before its site (marked copy) are runtime values formulas may read
        args={**dict(order.args), **{k: v for k, v in (order.defined or {}).items()
                                     if k in user_kernel.marked.hoisted}},
        consts=dict(order.consts),
        kernel=kernel,
        target=resolved,
        occupancy=int(occupancy),
        occupancy_source=occupancy_source,
        _trace=traced.trace,
    )
