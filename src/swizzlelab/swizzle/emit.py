"""Emit a Formula as Triton source and splice it into a @triton.jit kernel at its swizzle site.

A site is the line `pid = tl.program_id(0)` or the lines between `# swizzle: begin` and `# swizzle: end`.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import linecache
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from swizzlelab.errors import KernelSiteError
from swizzlelab.swizzle.lang import Formula, parse_formula

SITE_LINE = re.compile(r"^(?P<indent>\s*)pid\s*=\s*tl\.program_id\(\s*(axis\s*=\s*)?0\s*\)\s*(#.*)?$")
BEGIN_MARK = re.compile(r"^\s*#\s*swizzle:\s*begin\b")
END_MARK = re.compile(r"^\s*#\s*swizzle:\s*end\b")
SITE_OUTPUT_NAMES = ("pid", "pid_m", "pid_n")


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


@dataclass(frozen=True)
class KernelSite:
    """Where a kernel's swizzle site is: body lines [start, stop) of the dedented source."""

    start: int
    stop: int
    indent: str
    outputs: tuple[str, ...]


def _kernel_source(jit_fn: Any) -> tuple[str, Any]:
    fn = getattr(jit_fn, "fn", jit_fn)
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as err:
        raise KernelSiteError(f"cannot read the source of kernel {getattr(fn, '__name__', fn)!r}: {err}") from None
    return source, fn


def find_site(source: str, kernel_name: str = "kernel") -> KernelSite:
    """Locate the swizzle site in a kernel's source; KernelSiteError when there is none or it is ambiguous."""
    lines = source.splitlines()
    begins = [i for i, line in enumerate(lines) if BEGIN_MARK.match(line)]
    ends = [i for i, line in enumerate(lines) if END_MARK.match(line)]
    if begins or ends:
        if len(begins) != 1 or len(ends) != 1 or ends[0] <= begins[0]:
            raise KernelSiteError(
                f"kernel {kernel_name!r} must have exactly one '# swizzle: begin' followed by one '# swizzle: end'"
            )
        start, stop = begins[0] + 1, ends[0]
        block = textwrap.dedent("\n".join(lines[start:stop]))
        try:
            assigned = {
                t.id
                for node in ast.walk(ast.parse(block))
                if isinstance(node, ast.Assign)
                for t in node.targets
                if isinstance(t, ast.Name)
            }
        except SyntaxError as err:
            raise KernelSiteError(f"kernel {kernel_name!r}: its swizzle block does not parse: {err.msg}") from None
        outputs = tuple(n for n in ("pid_m", "pid_n") if n in assigned) or ("pid",)
        indent = re.match(r"\s*", lines[begins[0]]).group(0)  # type: ignore[union-attr]
        return KernelSite(start, stop, indent, outputs)
    matches = [i for i, line in enumerate(lines) if SITE_LINE.match(line)]
    if not matches:
        raise KernelSiteError(
            f"kernel {kernel_name!r} has no swizzle site: add the line `pid = tl.program_id(0)` "
            "or wrap the block that computes pid_m/pid_n in '# swizzle: begin' / '# swizzle: end'"
        )
    if len(matches) > 1:
        raise KernelSiteError(
            f"kernel {kernel_name!r} has {len(matches)} lines `pid = tl.program_id(0)`: mark the one to replace "
            "with '# swizzle: begin' / '# swizzle: end'"
        )
    indent = SITE_LINE.match(lines[matches[0]]).group("indent")  # type: ignore[union-attr]
    return KernelSite(matches[0], matches[0] + 1, indent, ("pid",))


def _names_before_site(source: str, site: KernelSite) -> tuple[set[str], list[str]]:
    """Names defined before the site (parameters + assignments) and the kernel's parameter list."""
    tree = ast.parse(source)
    func = next(node for node in tree.body if isinstance(node, ast.FunctionDef))
    params = [a.arg for a in func.args.args + func.args.kwonlyargs]
    defined = set(params)
    site_first_line = site.start + 1  # ast line numbers are 1-based
    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.lineno < site_first_line:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        defined.add(sub.id)
    return defined, params


def splice_source(source: str, formula: Formula, kernel_name: str, new_name: str) -> str:
    """The kernel source with the formula in place of its site, renamed to `new_name`, without decorators."""
    site = find_site(source, kernel_name)
    missing_outputs = [name for name in site.outputs if name not in formula.outputs]
    if missing_outputs:
        raise KernelSiteError(
            f"kernel {kernel_name!r} needs {', '.join(site.outputs)} from its swizzle site but the formula yields "
            f"{', '.join(formula.outputs)}: end the formula with assignments to {', '.join(missing_outputs)}"
        )
    if formula.launch_rank > 1:
        raise KernelSiteError(
            f"formula reads tl.program_id({formula.launch_rank - 1}) but task kernels launch a 1-D grid: "
            "derive 2-D ids from pid = tl.program_id(0)"
        )
    defined, params = _names_before_site(source, site)
    undefined = [n for n in formula.free_names if n not in defined]
    if undefined:
        raise KernelSiteError(
            f"formula uses {', '.join(repr(n) for n in undefined)} which kernel {kernel_name!r} does not define "
            "before its swizzle site: assign it in the formula or pass it as a kernel argument"
        )
    clobbered = [n for n in formula.assigned_names if n in defined and n not in SITE_OUTPUT_NAMES]
    if clobbered:
        raise KernelSiteError(
            f"formula reassigns {', '.join(repr(n) for n in clobbered)}, which kernel {kernel_name!r} already "
            "defines: rename the formula's temporary"
        )
    lines = source.splitlines()
    body = emit_triton(formula, indent=site.indent).rstrip("\n").splitlines()
    new_lines = lines[: site.start] + body + lines[site.stop :]
    def_index = next(i for i, line in enumerate(new_lines) if re.match(r"^def\s+\w+\s*\(", line))
    new_lines = new_lines[def_index:]
    new_lines[0] = re.sub(r"^def\s+\w+", f"def {new_name}", new_lines[0])
    return "\n".join(new_lines) + "\n"


def _compile_function(source: str, name: str, fn_globals: dict[str, Any]) -> Any:
    # Triton reads kernel source with inspect.getsource, so the generated text must be findable through
    # linecache under the code object's file name.
    filename = f"<swizzlelab:{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(fn_globals)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own validated, spliced source
    return namespace[name]


@functools.lru_cache(maxsize=512)
def _apply_cached(jit_fn: Any, formula_text: str, outputs: tuple[str, ...]) -> Any:
    import triton

    formula = parse_formula(formula_text, outputs)
    source, fn = _kernel_source(jit_fn)
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
        return triton.jit(new_fn, **options)
    except TypeError:
        return triton.jit(new_fn)


def apply_swizzle(jit_fn: Any, formula: Formula | None) -> Any:
    """A new jit kernel with `formula` at `jit_fn`'s swizzle site (cached); `jit_fn` itself when None."""
    if formula is None:
        return jit_fn
    # Keyed by the normalised text, so equal formulas parsed twice share one compiled kernel.
    return _apply_cached(jit_fn, formula.normalized_source(), formula.outputs)


def spliced_source(jit_fn: Any, formula: Formula, new_name: str | None = None) -> str:
    """The kernel's source with the formula spliced in, decorated with @triton.jit, for writing to a file."""
    source, fn = _kernel_source(jit_fn)
    name = new_name or fn.__name__
    return "@triton.jit\n" + splice_source(source, formula, fn.__name__, name)
