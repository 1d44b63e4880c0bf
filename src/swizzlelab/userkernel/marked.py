"""swizzlelab's own marked copy of a user kernel: the user's file stays as it is; the copy carries
`# swizzle: begin/end` around the site, with the site's pid-independent lines (e.g. `num_pid_m = ...`) hoisted
before it and builtin min/max on integers written as tl.minimum/tl.maximum, so that the swizzle language and
its splicer work on it unchanged.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from swizzlelab.errors import KernelSiteError
from swizzlelab.userkernel.tiles import SiteSpan


@dataclass(frozen=True)
class MarkedKernel:
    """The marked source (decorators dropped), its site in that source, and the jit function built from it."""

    source: str
    site: SiteSpan
    jit_fn: Any
    hoisted: tuple[str, ...]  # names moved before the site


class _Builtins(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and len(node.args) == 2 and not node.keywords:
            attr = "minimum" if node.func.id == "min" else "maximum"
            func = ast.Attribute(value=ast.Name(id="tl", ctx=ast.Load()), attr=attr, ctx=ast.Load())
            return ast.copy_location(ast.Call(func=func, args=node.args, keywords=[]), node)
        return node


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _depends_on_program(value: ast.AST, tainted: set[str]) -> bool:
    text = ast.unparse(value)
    return "program_id" in text or "num_programs" in text or bool(_reads(value) & tainted)


def mark(source: str, site: SiteSpan, fn_globals: dict[str, Any]) -> MarkedKernel:
    """Build the marked copy of `source` (a dedented kernel function) around `site`."""
    from swizzlelab.swizzle.emit import _compile_function

    lines = source.splitlines()
    block = lines[site.start:site.stop]
    indent = re.match(r"\s*", next((l for l in block if l.strip()), "")).group(0)  # type: ignore[union-attr]
    try:
        tree = ast.parse(textwrap.dedent("\n".join(block)))
    except SyntaxError as err:
        raise KernelSiteError(f"the swizzle site (lines {site.start}-{site.stop}) does not parse on its own: {err.msg}") from None
    tainted: set[str] = {site.loop_var} if site.loop_var else set()
    hoisted: list[ast.stmt] = []
    kept: list[ast.stmt] = []
    for stmt in tree.body:
        targets = [t.id for t in getattr(stmt, "targets", []) if isinstance(t, ast.Name)]
        kept_targets = {t.id for s in kept for t in getattr(s, "targets", []) if isinstance(t, ast.Name)}
        movable = (
            isinstance(stmt, ast.Assign) and len(targets) == 1 and targets[0] not in site.outputs
            and not _depends_on_program(stmt.value, tainted) and not (_reads(stmt.value) & kept_targets)
        )
        if movable:
            hoisted.append(stmt)
            continue
        kept.append(stmt)
        tainted.update(targets)
    rewrite = _Builtins()
    body = [indent + ast.unparse(ast.fix_missing_locations(rewrite.visit(s))) for s in kept]
    pre = [indent + ast.unparse(ast.fix_missing_locations(rewrite.visit(s))) for s in hoisted]
    new_lines = lines[:site.start] + pre + [indent + "# swizzle: begin"] + body + [indent + "# swizzle: end"] + lines[site.stop:]
    def_index = next(i for i, line in enumerate(new_lines) if re.match(r"^def\s+\w+\s*\(", line))
    new_lines = new_lines[def_index:]
    start = site.start - def_index + len(pre) + 1
    marked_site = SiteSpan(start, start + len(body), site.outputs, site.loop_var)
    text = "\n".join(new_lines) + "\n"
    name = re.match(r"^def\s+(\w+)", new_lines[0]).group(1)  # type: ignore[union-attr]
    import triton

    fn = _compile_function(text, name, fn_globals)
    return MarkedKernel(text, marked_site, triton.jit(fn), tuple(getattr(s.targets[0], "id", "") for s in hoisted))
