"""Import a kernel file as people write it and find its kernels: @triton.jit functions, also under
@triton.autotune / @triton.heuristics (unwrapped to the jit function, the autotune configs and heuristics kept).

The file runs statement by statement with its own folder on sys.path. What it does at import that is not
defining things is skipped and said: a kernel launched or a benchmark run at import (tutorials test themselves
at module level), an import of a package not installed here, and what needs one of those. A file is imported
once as it runs here (compiled on a GPU, else interpreted) and, where that is compiled, once more interpreted:
swizzlelab traces only under the interpreter.
"""

from __future__ import annotations

import __future__
import ast
import contextlib
import hashlib
import importlib.util
import inspect
import os
import re
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.hw import HardwareModel
from swizzlelab.io import module_name_for
from swizzlelab.tasks.registry import KERNEL_FUNCTIONS
from swizzlelab.userkernel.inductor import InductorFile, find_output_code, is_inductor_output, read_inductor_file
from swizzlelab.userkernel.shim import ShimInfo, device_shim, interpreting


@dataclass(frozen=True)
class TuneConfig:
    """One `triton.Config` of an autotuned kernel, as plain values (its pre_hook kept as is)."""

    kwargs: dict[str, Any]
    num_warps: int | None
    num_stages: int | None
    pre_hook: Any = field(default=None, compare=False)

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
    # @triton.heuristics value functions, outermost wrapper first: {name: fn(args) -> value}
    heuristics: tuple[dict[str, Callable[[dict[str, Any]], Any]], ...] = ()
    autotune_pre_hook: Any = None  # @triton.autotune(pre_hook=...), when the user gave one

    @property
    def is_autotuned(self) -> bool:
        return bool(self.autotune_configs)

    @property
    def interpreted(self) -> bool:
        return type(self.jit_fn).__name__ == "InterpretedFunction"

    @property
    def first_line(self) -> int:
        """File line of the source's first line (the first decorator's)."""
        return int(self.jit_fn.fn.__code__.co_firstlineno)


@dataclass(frozen=True)
class KernelFile:
    """An imported kernel file: its module, every kernel in it, what the device shim answered and what the
    import skipped."""

    path: Path
    module: ModuleType
    module_source: str
    source_hash: str
    kernels: dict[str, FoundKernel]
    functions: dict[str, Any] = field(default_factory=dict)  # callables defined by the file (launcher candidates)
    shim: ShimInfo | None = None
    notes: tuple[str, ...] = ()  # one line per statement the import skipped
    model: HardwareModel | None = None
    interpreted: bool = True  # whether its kernels run under the interpreter
    inductor: InductorFile | None = None  # torch.compile's output: its kernels' launches from call()

    def folder_on_path(self) -> contextlib.AbstractContextManager[None]:
        return folder_on_path(self.path.parent)

    @property
    def is_task_kernel(self) -> bool:
        """Whether the file is a task's kernel module (a task folder's kernel.py, or a copy of one): it defines
        custom_kernel, tile_grid and swizzle_args (tasks/README.md), so a task scenario takes its grid and names
        from it. Otherwise it is a kernel file as people write it, traced through its own wrapper."""
        return all(callable(getattr(self.module, name, None)) for name in KERNEL_FUNCTIONS)


class _ImportTimeWork(BaseException):
    """Raised inside a statement that launches a kernel or runs a benchmark at import (a BaseException, so the
    file's own `except Exception` does not swallow it)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _unwrap(attr: Any) -> tuple[Any, tuple[str, ...], tuple[TuneConfig, ...], tuple[dict[str, Any], ...], Any]:
    """Follow `.fn` through autotune/heuristics wrappers down to the jit function."""
    wrappers: list[str] = []
    configs: tuple[TuneConfig, ...] = ()
    heuristics: list[dict[str, Any]] = []
    pre_hook = None
    current = attr
    for _ in range(8):
        inner = getattr(current, "fn", None)
        if inner is None or not hasattr(current, "arg_names"):
            break
        if inspect.isfunction(inner):
            return current, tuple(wrappers), configs, tuple(heuristics), pre_hook
        wrappers.append(type(current).__name__)
        if hasattr(current, "configs") and not configs:
            configs = tuple(
                TuneConfig(dict(c.kwargs), getattr(c, "num_warps", None), getattr(c, "num_stages", None),
                           getattr(c, "pre_hook", None))
                for c in current.configs
            )
            if getattr(current, "user_defined_pre_hook", False):
                pre_hook = current.pre_hook
        if isinstance(getattr(current, "values", None), dict):
            heuristics.append(dict(current.values))
        current = inner
    return None, (), (), (), None


def _is_constexpr(annotation: Any) -> bool:
    # tl.constexpr (the class), or the string "tl.constexpr" under `from __future__ import annotations`
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return str(text).split(".")[-1] == "constexpr"


def _describe(name: str, attr: Any, module_name: str) -> FoundKernel | None:
    jit_fn, wrappers, configs, heuristics, pre_hook = _unwrap(attr)
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
    return FoundKernel(name, attr, jit_fn, wrappers, configs, source, params, constexprs, defaults, heuristics,
                       pre_hook)


def _defined_here(value: Any, module_name: str) -> bool:
    """A launcher candidate: a function of the file, or a method bound to a class of the file (e.g.
    `attention = _attention.apply` of a torch.autograd.Function)."""
    if inspect.isfunction(value):
        return value.__module__ == module_name
    owner = getattr(value, "__self__", None)
    return inspect.ismethod(value) and inspect.isclass(owner) and owner.__module__ == module_name


@contextlib.contextmanager
def folder_on_path(folder: Path) -> Iterator[None]:
    """The kernel file's folder first on sys.path (its sibling modules import as they do beside it)."""
    entry = str(folder)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


@contextlib.contextmanager
def _interpret(on: bool) -> Iterator[None]:
    """TRITON_INTERPRET as `on` while the file's decorators run: @triton.jit reads it to build either a
    compiled JITFunction or an InterpretedFunction."""
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if on else "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved


@contextlib.contextmanager
def _no_import_time_work() -> Iterator[None]:
    """Kernel launches and perf_report benchmarks raise _ImportTimeWork while a statement of the file runs at
    import (do_bench itself is left alone: a file may bind it by name, and what it times launches kernels)."""
    import triton.testing as testing
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    def refuse(what: str) -> Callable[..., Any]:
        def stand_in(self_or_first: Any = None, *args: Any, **kwargs: Any) -> Any:
            name = getattr(self_or_first, "__name__", None) or getattr(getattr(self_or_first, "fn", None), "__name__", "")
            raise _ImportTimeWork(what.format(name=name or "a kernel"))
        return stand_in

    patches = [
        (JITFunction, "run", refuse("it launches kernel {name}")),
        (InterpretedFunction, "run", refuse("it launches kernel {name}")),
        (testing.Mark, "run", refuse("it runs a benchmark (triton.testing.perf_report(...).run)")),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def _future_flags(tree: ast.Module) -> int:
    flags = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            for alias in stmt.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
    return flags


def _bound_names(stmt: ast.stmt) -> set[str]:
    """Every name the statement binds, at any depth (over-approximated: it only decides what to skip)."""
    names: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _error_line(err: BaseException, file: Path, fallback: int) -> int:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == file]
    return frames[-1].lineno if frames and frames[-1].lineno else fallback


def _statement_text(source_lines: list[str], stmt: ast.stmt) -> str:
    text = source_lines[stmt.lineno - 1].strip()
    return text if len(text) <= 70 else text[:67] + "..."


# Names a file imports from a package not installed here that swizzlelab can stand in for: Triton itself
# re-exported (vLLM's `from vllm.triton_utils import tl, triton`), and predicates on the GPU the code runs on
# (tritonbench's `is_cuda`, `is_hip_mi300`), answered for the target, not the host.
_TRITON_NAMES = {"triton": "triton", "tl": "triton.language"}
_PREDICATES = (
    (re.compile(r"is_(cuda|nvidia)"), lambda model: model.vendor == "nvidia"),
    (re.compile(r"is_(hip|rocm|amd)"), lambda model: model.vendor == "amd"),
    (re.compile(r"is_(hip_)?mi30\d"), lambda model: model.name.upper() in ("MI300X", "MI325X")),
    (re.compile(r"is_(hip_)?mi35\d"), lambda model: model.name.upper().startswith("MI35")),
    (re.compile(r"is_fbcode"), lambda model: False),  # Meta's internal build: never here
)


def _stand_ins(stmt: ast.stmt, model: HardwareModel | None) -> dict[str, Any]:
    """What a `from MISSING import ...` binds that swizzlelab stands in for (see _TRITON_NAMES, _PREDICATES)."""
    if not isinstance(stmt, ast.ImportFrom):
        return {}
    out: dict[str, Any] = {}
    for alias in stmt.names:
        bound = alias.asname or alias.name
        if alias.name in _TRITON_NAMES:
            out[bound] = importlib.import_module(_TRITON_NAMES[alias.name])
            continue
        answer = next((rule for pattern, rule in _PREDICATES if pattern.fullmatch(alias.name)), None)
        if answer is not None and model is not None:
            value = bool(answer(model))
            out[bound] = lambda *args, _value=value, **kwargs: _value
    return out


def _stand_in_note(values: dict[str, Any], model: HardwareModel | None) -> str:
    triton_names = [n for n, v in values.items() if isinstance(v, ModuleType)]
    predicates = [f"{n}() = {v()}" for n, v in values.items() if not isinstance(v, ModuleType)]
    parts = [f"{', '.join(triton_names)} bound to the installed Triton"] if triton_names else []
    if predicates:
        parts.append(f"{', '.join(predicates)} answered for the target {model.name if model else ''}")
    return "; ".join(parts)


# What torch says when a statement needs a CUDA device this machine does not have.
_NO_GPU = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver", "No CUDA GPUs are available",
           "no CUDA-capable device")
_REGISTERED_TWICE = ("Tried to register an operator", "already a kernel registered")


def _skip_reason(err: BaseException) -> str | None:
    """Why a statement that failed at import is skipped rather than reported: it needs a GPU this machine lacks,
    or it registers a torch.library op this process registered before (the same file imported again)."""
    text = str(err)
    if any(hint in text for hint in _NO_GPU):
        return "it needs a CUDA device, which this machine does not have"
    if any(hint in text for hint in _REGISTERED_TWICE):
        return "it registers a torch.library op this process registered before (an earlier import of the file)"
    return None


def run_module_file(file: Path, module: ModuleType, spec_text: str,
                    model: HardwareModel | None = None, source: str | None = None) -> tuple[str, ...]:
    """Execute `file` in `module` one top-level statement at a time; returns notes on the statements skipped.
    UserError naming FILE:LINE when a statement fails for any other reason. `model`: the target, whose values
    stand in for device predicates a missing package would have defined; `source`: the text to run in the file's
    name and lines (torch.compile's output: its kernels, out of their strings), else the file's."""
    source = file.read_text() if source is None else source
    try:
        tree = ast.parse(source, str(file))
    except SyntaxError as err:
        raise UserError(f"--kernel {spec_text}: {file.name}:{err.lineno}: SyntaxError: {err.msg}") from None
    lines = source.splitlines()
    flags = _future_flags(tree)
    namespace = module.__dict__
    unavailable: dict[str, int] = {}  # name -> line of the skipped statement that would have bound it
    notes: list[str] = []
    for stmt in tree.body:
        code = compile(ast.Module(body=[stmt], type_ignores=[]), str(file), "exec", flags=flags, dont_inherit=True)
        where = f"{file.name}:{stmt.lineno}"
        reason = None
        standing: dict[str, Any] = {}
        try:
            with _no_import_time_work():
                exec(code, namespace)  # noqa: S102 - the user's own kernel file, which they asked us to import
        except _ImportTimeWork as work:
            reason = f"{work.what} at import"
        except ImportError as err:
            if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                raise _import_failure(spec_text, file, stmt, err) from None
            reason = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"
            standing = _stand_ins(stmt, model)
            if standing:
                namespace.update(standing)
                reason += f" ({_stand_in_note(standing, model)})"
        except NameError as err:
            name = getattr(err, "name", None)
            if name not in unavailable:
                raise _import_failure(spec_text, file, stmt, err) from None
            reason = f"it needs {name}, which line {unavailable[name]} did not define"
        except Exception as err:  # noqa: BLE001 - a user's file: any import error is theirs to fix
            reason = _skip_reason(err)
            if reason is None:
                raise _import_failure(spec_text, file, stmt, err) from None
        if reason is not None:
            for name in _bound_names(stmt) - set(standing):
                unavailable.setdefault(name, stmt.lineno)
            notes.append(f"{where} `{_statement_text(lines, stmt)}` skipped: {reason}")
    return tuple(notes)


def _import_failure(spec_text: str, file: Path, stmt: ast.stmt, err: BaseException) -> UserError:
    line = _error_line(err, file, stmt.lineno)
    first = (str(err).splitlines() or [""])[0]
    return UserError(f"--kernel {spec_text}: importing it failed at {file.name}:{line}: {type(err).__name__}: {first}")


def split_kernel_spec(spec: str) -> tuple[str, str]:
    """--kernel FILE[:KERNEL] (FILE a .py file, or a TORCH_COMPILE_DEBUG folder) -> (FILE, KERNEL or "")."""
    path, sep, kernel_name = spec.rpartition(":")
    if not sep or not (path.endswith(".py") or Path(path).expanduser().is_dir()):
        return spec, ""
    return path, kernel_name


def load_kernel_file(path: str | Path, model: HardwareModel, interpret: bool | None = None) -> KernelFile:
    """THE loader of a --kernel file, a task kernel module or one as people write it (KernelFile.is_task_kernel
    tells them apart): import `path` (under the device shim when no GPU is present); UserError with FILE:LINE if it
    fails.

    `interpret`: build interpreted kernels (True), compiled ones (False) or as kernels run here (None)."""
    file = Path(path).expanduser().resolve()
    if file.is_dir():
        file = find_output_code(file)  # a TORCH_COMPILE_DEBUG folder: the output_code.py in it
    if not file.is_file():
        raise UserError(f"--kernel {path}: no such file; give a .py file with a @triton.jit kernel")
    from swizzlelab.runtime import ensure_triton_backend

    ensure_triton_backend()
    interpreted = interpreting() if interpret is None else interpret
    module_source = file.read_text()
    inductor = read_inductor_file(file, module_source) if is_inductor_output(module_source) else None
    # a copy of the file in the other mode than kernels run here (traced, or compiled for resources) is a second
    # module of its own
    suffix = "" if interpreted == interpreting() else ("_interpreted" if interpreted else "_compiled")
    name = module_name_for(file, "swizzlelab_user_kernel") + suffix
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise UserError(f"--kernel {path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton resolves a kernel's globals through its module
    try:
        # what the file prints at import goes to stderr: stdout stays the command's own (e.g. --json)
        with _interpret(interpreted), folder_on_path(file.parent), device_shim(model, interpreted) as shim, \
                contextlib.redirect_stdout(sys.stderr):
            if interpreted:
                from swizzlelab.interpreter_compat import fix_interpreter_scalar_index

                fix_interpreter_scalar_index(force=True)
            notes = run_module_file(file, module, str(path), model, inductor.module_text if inductor else None)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    kernels: dict[str, FoundKernel] = {}
    functions: dict[str, Any] = {}
    for attr_name, value in vars(module).items():
        found = _describe(attr_name, value, name)
        if found is not None:
            kernels[attr_name] = found
        elif _defined_here(value, name):
            functions[attr_name] = value
    if not kernels:
        raise UserError(f"--kernel {path}: the file defines no @triton.jit function")
    return KernelFile(file, module, module_source, hashlib.sha256(module_source.encode()).hexdigest()[:16],
                      kernels, functions, shim, notes, model, interpreted, inductor)


def launch_source(fn: Any) -> str:
    """The text searched for a kernel launch: a function's source, or an autograd Function's forward."""
    target = fn
    owner = getattr(fn, "__self__", None)
    if inspect.isclass(owner) and hasattr(owner, "forward"):
        target = owner.forward
    try:
        return inspect.getsource(target)
    except (OSError, TypeError):
        return ""
