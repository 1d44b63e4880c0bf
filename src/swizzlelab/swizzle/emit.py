"""Emit a Formula as Triton source and splice it into a @triton.jit kernel at its swizzle site.

The site (see swizzle.site) is found automatically or between `# swizzle: begin` and `# swizzle: end`.
"""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import inspect
import linecache
import re
import textwrap
from typing import Any

from swizzlelab.errors import FormulaError, KernelSiteError
from swizzlelab.swizzle.lang import Formula, parse_formula, parse_statements, rename
from swizzlelab.swizzle.site import KernelSite, Site, find_site

__all__ = ["KernelSite", "Site", "apply_swizzle", "emit_triton", "find_site", "splice_source", "spliced_source"]

SITE_OUTPUT_NAMES = ("pid", "pid_m", "pid_n")
IMPLICIT_2D = ("num_pid_m", "num_pid_n")


class _WhereForIfExp(ast.NodeTransformer):
    """Triton's jit does not accept a conditional expression on runtime values; tl.where does the same."""

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        call = ast.Call(
            func=ast.Attribute(value=ast.Name(id="tl", ctx=ast.Load()), attr="where", ctx=ast.Load()),
            args=[node.test, node.body, node.orelse],
            keywords=[],
        )
        return ast.copy_location(call, node)


def emit_triton(formula: Formula, indent: str = "    ") -> str:
    """Triton source lines for a kernel body, one assignment per line, indented by `indent`."""
    lines = []
    for stmt in formula.statements:
        expr = _WhereForIfExp().visit(ast.parse(ast.unparse(stmt.expr), mode="eval").body)
        lines.append(f"{indent}{stmt.target} = {ast.unparse(ast.fix_missing_locations(expr))}")
    return "\n".join(lines) + "\n"


def _kernel_source(jit_fn: Any) -> tuple[str, Any]:
    fn = jit_fn
    # @triton.autotune / @triton.heuristics wrap the JITFunction, which wraps the Python function: unwrap all.
    while hasattr(fn, "fn"):
        fn = fn.fn
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as err:
        raise KernelSiteError(f"cannot read the source of kernel {getattr(fn, '__name__', fn)!r}: {err}") from None
    return source, fn


def _names_before_site(source: str, site: Site) -> tuple[set[str], list[str]]:
    """Names defined before the site (parameters, assignments, loop variables) and the kernel's parameters."""
    tree = ast.parse(source)
    func = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    params = [a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs]
    defined = set(params)
    site_first_line = site.start + 1  # ast line numbers are 1-based
    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For)) and node.lineno < site_first_line:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        defined.add(sub.id)
    return defined, params


def _names_read_after(source: str, site: Site) -> set[str]:
    tree = ast.parse(source)
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.lineno > site.stop
    }


class _Launch(ast.NodeTransformer):
    """Replace tl.program_id(0) / tl.num_programs(0) by what the launch index and count are at this site."""

    def __init__(self, index: ast.expr, count: ast.expr):
        self.index, self.count = index, count

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("program_id", "num_programs") and node.args:
            axis = node.args[0]
            if isinstance(axis, ast.Constant) and axis.value == 0:
                return ast.copy_location(self.index if func.attr == "program_id" else self.count, node)
        self.generic_visit(node)
        return node


def _at_site(formula: Formula, site: Site, kernel_name: str) -> Formula:
    """The formula as it must read at `site`: outputs renamed to the site's names, and the launch index of a
    1-D formula mapped onto a persistent loop's tile index or a 2-D launch (axis 0 fastest)."""
    if formula.launch_rank > site.launch_rank or (site.kind == "loop" and formula.launch_rank > 1):
        where = "its tile loop" if site.kind == "loop" else f"a {site.launch_rank}-D grid"
        raise KernelSiteError(
            f"formula reads tl.program_id({formula.launch_rank - 1}) but kernel {kernel_name!r} launches {where}: "
            "derive the tile ids from pid = tl.program_id(0)"
        )
    missing = [name for name in site.outputs if name not in formula.outputs]
    if missing and len(formula.outputs) == len(site.outputs):
        # Temporaries named like the site's outputs (a formula's own `pid` when it yields `new_pid`) step aside.
        taken = set(formula.assigned_names) - set(formula.outputs)
        mapping = {n: f"swz_{n}" for n in site.outputs if n in taken}
        mapping.update(zip(formula.outputs, site.outputs))
        formula = rename(formula, mapping)
    elif missing:
        raise KernelSiteError(
            f"kernel {kernel_name!r} needs {', '.join(site.outputs)} from its swizzle site but the formula yields "
            f"{', '.join(formula.outputs)}: end the formula with assignments to {', '.join(missing)}"
        )
    if site.kind == "loop" and site.index_name:
        index: ast.expr = ast.Name(id=site.index_name, ctx=ast.Load())
        count: ast.expr = ast.parse(site.loop_count or "tl.num_programs(0)", mode="eval").body
    elif site.launch_rank == 2 and formula.launch_rank == 1:
        index = ast.parse("(tl.program_id(0) + tl.program_id(1) * tl.num_programs(0))", mode="eval").body
        count = ast.parse("(tl.num_programs(0) * tl.num_programs(1))", mode="eval").body
    else:
        return formula
    lines = []
    for stmt in formula.statements:
        expr = _Launch(index, count).visit(ast.parse(ast.unparse(stmt.expr), mode="eval").body)
        lines.append(f"{stmt.target} = {ast.unparse(ast.fix_missing_locations(expr))}")
    return parse_formula("\n".join(lines) + "\n", formula.outputs)


def _without_kernel_lines(formula: Formula, source: str, site: Site) -> Formula:
    """Drop formula lines the kernel already runs before its site (`num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)`
    repeated from Site.formula_text) and self-assignments (`tile_id = tile_id`): the kernel's own order then
    splices back unchanged."""
    func = next(node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef))
    before: dict[str, str] = {}
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and node.lineno <= site.start
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            before[node.targets[0].id] = ast.unparse(node.value)
    kernel_forms = {name: _normalised(text) for name, text in before.items()}
    keep = []
    for stmt in formula.statements:
        text = ast.unparse(stmt.expr)
        if text == stmt.target and stmt.target not in formula.outputs:
            continue
        if kernel_forms.get(stmt.target) == text and stmt.target not in formula.outputs:
            continue
        keep.append(stmt)
    if len(keep) == len(formula.statements) or not keep:
        return formula
    return parse_formula("".join(f"{s.target} = {ast.unparse(s.expr)}\n" for s in keep), formula.outputs)


def _normalised(expression: str) -> str | None:
    """The expression as a formula normalises it (min -> tl.minimum), None when it is not in the language."""
    try:
        statements = parse_statements(f"_ = {expression}\n")
    except (FormulaError, SyntaxError):
        return None
    return ast.unparse(statements[0].expr) if statements else None


def splice_source(source: str, formula: Formula, kernel_name: str, new_name: str) -> str:
    """The kernel source with the formula in place of its site, renamed to `new_name`, without decorators.

    Lines of the site that do not depend on the launch index (e.g. `num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)` in
    the Triton tutorial's remap block) are kept ahead of the formula."""
    site = find_site(source, kernel_name)
    formula = _without_kernel_lines(_at_site(formula, site, kernel_name), source, site)
    defined, _ = _names_before_site(source, site)
    read_after = _names_read_after(source, site)
    kept = list(site.kept)
    index = site.index_name
    if site.kind != "loop" and index and index in read_after and index not in site.outputs:
        # The kernel reads its launch index after the site: keep it, and keep the formula's own copy apart.
        if index in formula.assigned_names:
            formula = rename(formula, {index: f"swz_{index}"})
        kept.insert(0, f"{index} = tl.program_id(0)")
    kept_names = {s.target for line in kept for s in _statement_targets(line)}
    available = defined | kept_names | ({site.index_name} if site.index_name else set())
    implicit = []
    if site.launch_rank == 2 and site.kind != "loop":
        # A 2-D launch gives the tile grid's shape itself.
        for axis, name in enumerate(IMPLICIT_2D):
            if name in formula.free_names and name not in available:
                implicit.append(f"{name} = tl.num_programs({axis})")
                available.add(name)
    undefined = [n for n in formula.free_names if n not in available]
    if undefined:
        raise KernelSiteError(
            f"formula uses {', '.join(repr(n) for n in undefined)} which kernel {kernel_name!r} does not define "
            "before its swizzle site: assign it in the formula or pass it as a kernel argument"
        )
    allowed = set(SITE_OUTPUT_NAMES) | set(site.outputs) | ({site.index_name} if site.index_name else set())
    clobbered = [n for n in formula.assigned_names if n in defined and n not in allowed]
    if clobbered:
        raise KernelSiteError(
            f"formula reassigns {', '.join(repr(n) for n in clobbered)}, which kernel {kernel_name!r} already "
            "defines: rename the formula's temporary"
        )
    shadowing = [n for n in formula.assigned_names if n in read_after and n not in allowed and n not in kept_names]
    if shadowing:
        raise KernelSiteError(
            f"formula assigns {', '.join(repr(n) for n in shadowing)}, which kernel {kernel_name!r} reads after "
            "its swizzle site: rename the formula's temporary"
        )
    lines = source.splitlines()
    body = [f"{site.indent}{line}" for line in kept + implicit]
    body += emit_triton(formula, indent=site.indent).rstrip("\n").splitlines()
    new_lines = lines[: site.start] + body + lines[site.stop :]
    def_index = next(i for i, line in enumerate(new_lines) if re.match(r"^def\s+\w+\s*\(", line))
    new_lines = new_lines[def_index:]
    new_lines[0] = re.sub(r"^def\s+\w+", f"def {new_name}", new_lines[0])
    return "\n".join(new_lines) + "\n"


def _statement_targets(line: str) -> list[Any]:
    try:
        return parse_statements(line)
    except (SyntaxError, FormulaError):
        return []


def _compile_function(source: str, name: str, fn_globals: dict[str, Any]) -> Any:
    # Triton reads kernel source with inspect.getsource, so the generated text must be findable through
    # linecache under the code object's file name.
    filename = f"<swizzlelab:{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(fn_globals)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own validated, spliced source
    return namespace[name]


def _jit_of(kernel: Any) -> Any:
    """The JITFunction inside `kernel` (itself, or under @triton.autotune / @triton.heuristics wrappers)."""
    while hasattr(kernel, "fn") and not inspect.isfunction(kernel.fn):
        kernel = kernel.fn
    return kernel


def _rewrap(kernel: Any, new_jit: Any) -> Any:
    """`kernel`'s autotune/heuristics wrappers around `new_jit` instead of its own JITFunction: same configs,
    keys and hooks, with an empty tuning cache."""
    if not hasattr(kernel, "fn") or inspect.isfunction(kernel.fn):
        return new_jit
    wrapper = copy.copy(kernel)
    wrapper.fn = _rewrap(kernel.fn, new_jit)
    if isinstance(getattr(wrapper, "cache", None), dict):
        wrapper.cache = {}
    if hasattr(wrapper, "base_fn"):
        wrapper.base_fn = new_jit.fn
    return wrapper


@functools.lru_cache(maxsize=512)
def _apply_cached(kernel: Any, formula_text: str, outputs: tuple[str, ...]) -> Any:
    import triton

    formula = parse_formula(formula_text, outputs)
    source, fn = _kernel_source(kernel)
    jit_fn = _jit_of(kernel)
    digest = hashlib.sha256((source + formula.normalized_source()).encode()).hexdigest()[:10]
    new_name = f"{fn.__name__}__swz_{digest}"
    new_source = splice_source(source, formula, fn.__name__, new_name)
    new_fn = _compile_function(new_source, new_name, fn.__globals__)
    options = {}
    for key in ("do_not_specialize", "debug", "noinline"):
        value = getattr(jit_fn, key, None)
        if value:
            options[key] = value
    try:
        new_jit = triton.jit(new_fn, **options)
    except TypeError:
        new_jit = triton.jit(new_fn)
    return _rewrap(kernel, new_jit)


def apply_swizzle(jit_fn: Any, formula: Formula | None) -> Any:
    """A new jit kernel with `formula` at `jit_fn`'s swizzle site (cached); `jit_fn` itself when None.

    An autotuned kernel comes back autotuned the same way (its configs, keys and hooks)."""
    if formula is None:
        return jit_fn
    # Keyed by the normalised text, so equal formulas parsed twice share one compiled kernel.
    return _apply_cached(jit_fn, formula.normalized_source(), formula.outputs)


def spliced_source(jit_fn: Any, formula: Formula, new_name: str | None = None) -> str:
    """The kernel's source with the formula spliced in, decorated with @triton.jit, for writing to a file."""
    source, fn = _kernel_source(jit_fn)
    name = new_name or fn.__name__
    return "@triton.jit\n" + splice_source(source, formula, fn.__name__, name)
