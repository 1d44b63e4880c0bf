"""Formulas as people write them for their kernel: a fragment continuing the kernel's own lines before its site, and
a 2-D launch's program ids read through the launch index of a 1-D evaluation.

Used by the scenario for every order it is given; names the formula assigns itself are its own.
"""

from __future__ import annotations

import ast
from collections.abc import Collection

from swizzlelab.errors import FormulaError
from swizzlelab.swizzle.lang import Formula, parse_formula
from swizzlelab.swizzle.site import Site


def continue_kernel(formula: Formula, site: Site, given: Collection[str], kernel: str,
                    where: str = "formula") -> Formula:
    """`formula` after the kernel's own lines (before its site, then the site's) that compute the names it reads and
    is not `given` (arguments, constexprs, the grid's sizes): `new_pid = ...` from the tile ids `pid_m`, `pid_n` the
    kernel's site computes and its `total_blocks`. A name the kernel lacks, or computes in a way no formula can
    evaluate (a load, a loop), is a one-line FormulaError saying what the kernel has. `kernel` names it in messages
    ("matmul's kernel")."""
    wanted = [name for name in formula.free_names if name not in given]
    if not wanted:
        return formula
    lines = site.lines_for(wanted, given)
    continued = formula
    if lines:
        text = "\n".join(lines) + "\n" + formula.normalized_source()
        continued = parse_formula(text, formula.outputs)
    lacking = [name for name in continued.free_names if name not in given]
    if not lacking:
        return continued
    opaque = dict(site.opaque)
    hidden = [name for name in lacking if name in opaque]
    if hidden:
        name = hidden[0]
        raise FormulaError(
            f"{where} reads {name}, which {kernel} computes before its swizzle site in a way a formula cannot "
            f"evaluate ({opaque[name]}): compute {name} in the formula"
        )
    has = sorted(set(given) | set(site.computed_names()))
    raise FormulaError(
        f"{where} reads {', '.join(lacking)}, which {kernel} does not define up to its swizzle site: it has "
        f"{', '.join(has)} (sizes come from the case; change them with --size)"
    )


class _AxesThroughIndex(ast.NodeTransformer):
    """tl.program_id(0|1) / tl.num_programs(0|1) of a 2-D launch as expressions of the launch index."""

    def __init__(self, n_axis0: str):
        self.n_axis0 = n_axis0

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("program_id", "num_programs") and node.args):
            return node
        axis = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
        forms = {
            ("program_id", 0): f"(tl.program_id(0) % {self.n_axis0})",
            ("program_id", 1): f"(tl.program_id(0) // {self.n_axis0})",
            ("num_programs", 0): self.n_axis0,
            ("num_programs", 1): f"(tl.num_programs(0) // {self.n_axis0})",
        }
        text = forms.get((func.attr, axis))
        return node if text is None else ast.copy_location(ast.parse(text, mode="eval").body, node)


def over_launch_index(formula: Formula, n_axis0: str) -> Formula:
    """A formula over a 2-D launch (tl.program_id(0) and (1), axis 0 fastest) rewritten over the launch index
    tl.program_id(0) of a 1-D launch of the same programs, with `n_axis0` the programs along axis 0: the form a
    kernel whose site is evaluated over its launch index (swizzlelab's marked copies of a user's kernel) takes."""
    if formula.launch_rank <= 1:
        return formula
    lines = []
    for stmt in formula.statements:
        expr = _AxesThroughIndex(n_axis0).visit(ast.parse(ast.unparse(stmt.expr), mode="eval").body)
        lines.append(f"{stmt.target} = {ast.unparse(ast.fix_missing_locations(expr))}")
    return parse_formula("\n".join(lines) + "\n", formula.outputs)
