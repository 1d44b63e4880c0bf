"""torch.compile's output (Inductor's `output_code.py`) as a kernel file: its Triton kernels are source strings in
`NAME = async_compile.triton('NAME', '''...''')`, launched from `call(args)` as `NAME.run(buf0, arg1_1, ..., 8, 1, 1,
stream=...)`, their sizes fixed in their own text and in call()'s `assert_size_stride` / `empty_strided_*` lines.

The kernels are imported from their strings, each at its own lines of the file (the module swizzlelab builds is
blank everywhere else, Inductor's run-time decorators included), so the site, the messages and the file a user
takes home count the output file's lines; each kernel is launched alone, as call() launches it, on seeded inputs
of the sizes, strides and dtypes call() gives them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swizzlelab.errors import UserError

# Inductor's pointer types in a kernel's triton_meta signature -> torch dtype names.
POINTER_DTYPES = {"*fp16": "float16", "*bf16": "bfloat16", "*fp32": "float32", "*fp64": "float64", "*i8": "int8",
                  "*i16": "int16", "*i32": "int32", "*i64": "int64", "*u8": "uint8", "*i1": "bool",
                  "*fp8e4nv": "float8_e4m3fn", "*fp8e5": "float8_e5m2"}
ALLOCATORS = ("empty_strided", "empty_strided_cuda", "empty_strided_cpu", "empty_strided_xpu", "rand_strided")


@dataclass(frozen=True)
class TensorArg:
    """A tensor a launch passes: its size, stride and dtype as call() (or get_args()) makes it."""

    name: str
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Launch:
    """One `NAME.run(...)` of call(): the kernel's arguments (tensors by name, integers as given) and its grid."""

    kernel: str
    args: tuple[TensorArg | int, ...]
    grid: tuple[int, int, int] | None  # None: Inductor's autotuner sizes it at run time (pointwise kernels)
    line: int
    options: dict[str, int]  # num_warps / num_stages from the kernel's Inductor decorator

    @property
    def programs(self) -> int:
        return 0 if self.grid is None else self.grid[0] * self.grid[1] * self.grid[2]


@dataclass(frozen=True)
class InductorFile:
    """What swizzlelab reads of an output_code.py: the module text it imports (the kernels at their lines), each
    kernel's first launch, and why a kernel cannot be launched alone."""

    path: Path
    module_text: str
    launches: dict[str, Launch]
    unlaunchable: dict[str, str]  # kernel -> why

    def default_kernel(self, with_site: list[str]) -> tuple[str, str]:
        """(kernel, the line saying why): the kernel with a site whose launch has the most programs."""
        ranked = sorted((k for k in with_site if k in self.launches), key=lambda k: -self.launches[k].programs)
        if not ranked:
            raise UserError(f"{self.path.name}: no kernel of this torch.compile output has both a swizzle site and a "
                            f"launch swizzlelab can make alone ({'; '.join(f'{k}: {w}' for k, w in self.unlaunchable.items())[:300]})")
        best = ranked[0]
        others = ", ".join(f"{k} ({self.launches[k].programs})" for k in ranked[1:]) or "none"
        return best, (f"kernel {best}: of the kernels torch.compile wrote with a swizzle site, the one with the most "
                      f"programs ({self.launches[best].programs}; others: {others}); name another with --kernel "
                      f"{self.path.name}:KERNEL")


def is_inductor_output(text: str) -> bool:
    """Whether a file is torch.compile's generated module (kernels in async_compile.triton(...) strings)."""
    return "async_compile.triton(" in text and ("def call(" in text or "def partition_" in text)


def find_output_code(folder: Path) -> Path:
    """The output_code.py in a TORCH_COMPILE_DEBUG folder (or any folder holding one generated module)."""
    found = sorted(folder.rglob("output_code.py"))
    if not found:
        found = sorted(p for p in folder.rglob("*.py") if p.is_file() and is_inductor_output(_text(p)))
    if len(found) == 1:
        return found[0]
    if not found:
        raise UserError(f"--kernel {folder}: the folder holds no torch.compile output (output_code.py, or a module with "
                        "async_compile.triton(...) kernels); run with TORCH_COMPILE_DEBUG=1 or TORCH_LOGS=output_code")
    shown = ", ".join(str(p) for p in found[:5])
    raise UserError(f"--kernel {folder}: it holds {len(found)} torch.compile outputs ({shown}{', ...' if len(found) > 5 else ''}): "
                    "give the one to optimize")


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _kernel_strings(tree: ast.Module) -> list[tuple[str, ast.Constant, ast.Call]]:
    """(kernel name, its source string node, the async_compile.triton call) for each kernel of the module."""
    out = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) \
                and ast.unparse(stmt.value.func).endswith("async_compile.triton") and len(stmt.value.args) >= 2 \
                and isinstance(stmt.value.args[1], ast.Constant) and isinstance(stmt.value.args[1].value, str):
            name = stmt.value.args[0].value if isinstance(stmt.value.args[0], ast.Constant) else stmt.targets[0].id  # type: ignore[attr-defined]
            out.append((str(name), stmt.value.args[1], stmt.value))
    return out


def _literal(node: ast.expr) -> Any:
    """A decorator keyword's value: Python literals, with the calls Inductor writes in them read as what they
    hold (`set()`, `DeviceProperties(type='cuda', ...)` as a dict of its keywords)."""
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_literal(e) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else set(items) if isinstance(node, ast.Set) else items
    if isinstance(node, ast.Call):
        return {k.arg: _literal(k.value) for k in node.keywords if k.arg} if node.keywords else set()
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def _decorator(func: ast.FunctionDef) -> tuple[ast.Call | None, dict[str, Any]]:
    """Inductor's run-time decorator of a kernel (`@triton_heuristics.template(...)`) and its keywords' values."""
    for deco in func.decorator_list:
        if isinstance(deco, ast.Call) and "triton_heuristics" in ast.unparse(deco.func):
            return deco, {k.arg: _literal(k.value) for k in deco.keywords if k.arg}
    return None, {}


def module_text(text: str, path: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """The module swizzlelab imports: line for line the file's, blank but for the kernels' strings without
    Inductor's decorators and driver calls; and each kernel's decorator keywords."""
    try:
        tree = ast.parse(text, str(path))
    except SyntaxError as err:
        raise UserError(f"--kernel {path}: {path.name}:{err.lineno}: SyntaxError: {err.msg}") from None
    lines = text.splitlines()
    out = [""] * len(lines)
    decorations: dict[str, dict[str, Any]] = {}
    for name, node, _ in _kernel_strings(tree):
        body = node.value.split("\n")
        first = node.lineno - 1  # the string starts after ''' on this line: its first line is that line's rest
        # the string's last line is the start of the line that closes it (its quotes, then device_str=...)
        if body[0].strip() or lines[first + 1:first + len(body) - 1] != body[1:-1] \
                or not lines[first + len(body) - 1].startswith(body[-1]):
            raise UserError(f"{path.name}:{node.lineno}: kernel {name}'s source string is not the file's own lines "
                            "(escapes in it?): swizzlelab reads Inductor's output as torch.compile writes it")
        inner = ast.parse(node.value)
        blank: set[int] = set()
        for stmt in inner.body:
            if isinstance(stmt, ast.Expr) and "set_driver_to" in ast.unparse(stmt):
                blank.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
            if isinstance(stmt, ast.FunctionDef):
                deco, values = _decorator(stmt)
                if deco is not None:
                    blank.update(range(deco.lineno - 1, (deco.end_lineno or deco.lineno) + 1))  # the '@' line too
                    decorations[stmt.name] = values
        for i, line in enumerate(body[1:-1], start=2):
            if i not in blank:
                out[first + i - 1] = line
    return "\n".join(out) + "\n", decorations


def _ints(node: ast.expr) -> tuple[int, ...] | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    if isinstance(value, int):
        return (value,)
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def _dtype(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    text = ast.unparse(node)
    return text.removeprefix("torch.") if text.startswith("torch.") else None


class _Buffers:
    """Sizes, strides and dtypes of the names call() and get_args() hold, as each line leaves them."""

    def __init__(self) -> None:
        self.known: dict[str, tuple[tuple[int, ...] | None, tuple[int, ...] | None, str | None]] = {}

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                and ast.unparse(stmt.value.func).endswith("assert_size_stride") and len(stmt.value.args) >= 3:
            name = stmt.value.args[0]
            if isinstance(name, ast.Name):
                _, _, dtype = self.known.get(name.id, (None, None, None))
                self.known[name.id] = (_ints(stmt.value.args[1]), _ints(stmt.value.args[2]), dtype)
            return
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return
        target, value = stmt.targets[0].id, stmt.value
        if isinstance(value, ast.Name) and value.id in self.known:
            self.known[target] = self.known[value.id]
        elif isinstance(value, ast.Call):
            callee = ast.unparse(value.func).split(".")[-1]
            args = value.args
            dtype = next((_dtype(k.value) for k in value.keywords if k.arg == "dtype"), None)
            if callee in ALLOCATORS and len(args) >= 2:
                self.known[target] = (_ints(args[0]), _ints(args[1]), dtype or _dtype(args[2] if len(args) > 2 else None))
            elif callee == "reinterpret_tensor" and len(args) >= 3 and isinstance(args[0], ast.Name):
                base = self.known.get(args[0].id, (None, None, None))
                self.known[target] = (_ints(args[1]), _ints(args[2]), base[2])


def _launches(tree: ast.Module, decorations: dict[str, dict[str, Any]], signatures: dict[str, list[str]],
              kernels: set[str]) -> tuple[dict[str, Launch], dict[str, str]]:
    """Each kernel's first launch in call() (or a graph partition), with its tensors sized."""
    buffers = _Buffers()
    getter = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_args"), None)
    for stmt in getter.body if getter else []:
        buffers.statement(stmt)
    launches: dict[str, Launch] = {}
    why: dict[str, str] = {}
    callers = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and (n.name == "call" or n.name.startswith("partition_"))]
    for caller in callers:
        statements = sorted((s for s in ast.walk(caller) if isinstance(s, ast.stmt) and not hasattr(s, "body")),
                            key=lambda s: s.lineno)
        for stmt in statements:
            buffers.statement(stmt)
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "run"
                    and isinstance(call.func.value, ast.Name) and call.func.value.id in kernels):
                continue
            name = call.func.value.id
            if name in launches:
                continue
            launch, reason = _launch(name, call, buffers, decorations.get(name, {}), signatures.get(name, []))
            if launch is None:
                why.setdefault(name, reason)
            else:
                launches[name] = launch
    for name in kernels:
        if name not in launches and name not in why:
            why[name] = "call() does not launch it"
    return launches, why


def _launch(name: str, call: ast.Call, buffers: _Buffers, decoration: dict[str, Any],
            signature: list[str]) -> tuple[Launch | None, str]:
    meta = decoration.get("inductor_meta", {}) or {}
    if meta.get("grid_type") != "FixedGrid":
        return None, (f"its grid ({meta.get('grid_type', 'unknown')}) follows the block size Inductor's autotuner "
                      "picks when it runs")
    params = list(signature)
    n_grid = len(meta.get("extra_launcher_args", ())) or 3
    values = call.args
    if len(values) != len(params) + n_grid:
        return None, f"its launch passes {len(values)} arguments, its signature has {len(params)} and a {n_grid}-D grid"
    grid = tuple(int(ast.literal_eval(v)) for v in values[len(params):])
    args: list[TensorArg | int] = []
    types = (decoration.get("triton_meta", {}) or {}).get("signature", {})
    for param, value in zip(params, values):
        if isinstance(value, ast.Constant) and isinstance(value.value, int):
            args.append(int(value.value))
            continue
        if not isinstance(value, ast.Name):
            return None, f"its argument {param} is {ast.unparse(value)}, not a buffer call() names"
        size, stride, dtype = buffers.known.get(value.id, (None, None, None))
        dtype = dtype or POINTER_DTYPES.get(str(types.get(param, "")))
        if size is None or stride is None or dtype is None:
            return None, f"call() does not say the size, stride and dtype of {value.id} (its {param})"
        args.append(TensorArg(value.id, size, stride, dtype))
    options = {k: int(decoration[k]) for k in ("num_warps", "num_stages") if isinstance(decoration.get(k), int)}
    padded = (grid + (1, 1, 1))[:3]
    return Launch(name, tuple(args), (padded[0], padded[1], padded[2]), call.lineno, options), ""


def read_inductor_file(path: Path, text: str) -> InductorFile:
    """The output file's kernels (module text to import) and their launches."""
    module, decorations = module_text(text, path)
    tree = ast.parse(text, str(path))
    signatures: dict[str, list[str]] = {}
    for name, node, _ in _kernel_strings(tree):
        inner = ast.parse(node.value)
        func = next((f for f in inner.body if isinstance(f, ast.FunctionDef) and f.name == name), None)
        if func is not None:
            signatures[name] = [a.arg for a in func.args.args]
    launches, why = _launches(tree, decorations, signatures, set(signatures))
    return InductorFile(path, module, launches, why)


def launcher_for(launch: Launch, kernel_attr: Any) -> Any:
    """A function launching the kernel as call() does: `kernel[grid](*args, num_warps=..., num_stages=...)`, taking
    its tensors by the names call() gives them (arg0_1, buf1, ...)."""
    names = list(dict.fromkeys(a.name for a in launch.args if isinstance(a, TensorArg)))
    template = "def {fn}({params}):\n    KERNEL[GRID]({args}, **OPTIONS)\n"
    text = template.format(fn=f"launch_{launch.kernel}", params=", ".join(names),
                           args=", ".join(a.name if isinstance(a, TensorArg) else str(a) for a in launch.args))
    namespace: dict[str, Any] = {"KERNEL": kernel_attr, "GRID": launch.grid, "OPTIONS": dict(launch.options)}
    exec(compile(text, f"<swizzlelab: {launch.kernel} as call() launches it>", "exec"), namespace)  # noqa: S102 - our own text
    fn = namespace[f"launch_{launch.kernel}"]
    fn.__swizzlelab_text__ = text
    return fn


def seeded_inputs(launch: Launch, seed: int, device: str) -> dict[str, Any]:
    """The launch's tensors, seeded: floats from a normal distribution, integers small, at call()'s strides."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for arg in launch.args:
        if not isinstance(arg, TensorArg) or arg.name in out:
            continue
        dtype = getattr(torch, arg.dtype)
        span = 1 + sum((n - 1) * s for n, s in zip(arg.size, arg.stride) if n > 0)
        if dtype.is_floating_point:
            flat = torch.randn(span, generator=generator, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            flat = torch.randint(0, 2, (span,), generator=generator).to(dtype)
        else:
            flat = torch.randint(-8, 8, (span,), generator=generator, dtype=torch.int64).to(dtype)
        out[arg.name] = torch.as_strided(flat, arg.size, arg.stride).to(device)
    return out
