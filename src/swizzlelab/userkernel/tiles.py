"""Which tile each program (or each iteration of a persistent program) of a user kernel works on, found by
evaluating the kernel's own swizzle site with the values of its traced launch.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass

import numpy as np

from swizzlelab.errors import KernelSiteError, UserError
from swizzlelab.swizzle import evaluate, parse_formula
from swizzlelab.swizzle.site import plain_assignment

LOOP_NAMES = ("swz_loop_lo", "swz_loop_hi", "swz_loop_step")
N0, N1 = "swz_launch_n0", "swz_launch_n1"  # programs along axes 0 and 1 of a 2-D launch


class _Linear(ast.NodeTransformer):
    """tl.program_id(0/1) and tl.num_programs(0/1) of a 2-D launch over one launch index (axis 0 fastest)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("program_id", "num_programs")):
            return node
        args = list(node.args) + [k.value for k in node.keywords if k.arg == "axis"]
        if len(args) != 1 or not isinstance(args[0], ast.Constant) or args[0].value not in (0, 1):
            return node
        axis = args[0].value
        if func.attr == "num_programs":
            text = N0 if axis == 0 else N1
        else:
            text = f"(tl.program_id(0) % {N0})" if axis == 0 else f"(tl.program_id(0) // {N0})"
        return ast.copy_location(ast.parse(text, mode="eval").body, node)


def _plain_text(text: str) -> str:
    """In-kernel constants (`NAME: tl.constexpr = VALUE`) as the formula language's `NAME = VALUE`."""
    tree = ast.parse(text)
    tree.body = [plain_assignment(stmt) for stmt in tree.body]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _linear_launch(text: str) -> str:
    return ast.unparse(ast.fix_missing_locations(_Linear().visit(ast.parse(text)))) + "\n"


@dataclass(frozen=True)
class SiteSpan:
    """The site as this package needs it: body lines [start, stop) of the dedented kernel source, the names
    it yields, and (persistent kernels) the loop variable it maps to tiles."""

    start: int
    stop: int
    outputs: tuple[str, ...]
    loop_var: str | None = None  # set when the site sits in a `for <loop_var> in range(...)` over tiles
    how: str = ""  # "found automatically", "between the swizzle markers", "given with --site"
    # the launch index the block remaps, read from before it (the loop variable, or stream-K's `pid` under
    # `if pid < total_ddp_tiles:`); None where the block reads the program id itself
    index: str | None = None

    def lines_label(self, first_line: int) -> str:
        """'lines A-B' in the file's numbering, given the file line of the source's first line."""
        lo, hi = first_line + self.start, first_line + self.stop - 1
        return f"line {lo}" if hi <= lo else f"lines {lo}-{hi}"


@dataclass(frozen=True)
class OwnOrder:
    """The kernel's own order: tile grid, tile of each launch index, the formula that says it."""

    grid: tuple[int, ...]
    perm: np.ndarray  # launch index (or tile-loop index) -> row-major tile
    formula_text: str  # prelude + site, the names it needs from before the site included
    args: dict[str, int]
    consts: dict[str, int]
    # persistent kernels: per program, the loop indices it runs, in order
    iterations: list[np.ndarray] | None = None
    # names the site's formula reads that the kernel computes before it, the same for every program
    defined: dict[str, int] | None = None


def _function(source: str) -> ast.FunctionDef:
    tree = ast.parse(source)
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        raise KernelSiteError("kernel source holds no function definition")
    return func


def _assignments_before(func: ast.FunctionDef, line: int) -> dict[str, list[ast.Assign]]:
    """Plain-name assignments in the kernel body before 1-based `line`, any nesting, in source order; an
    in-kernel constant `NAME: tl.constexpr = VALUE` counts as `NAME = VALUE`."""
    out: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(func):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.lineno >= line:
            continue
        plain = plain_assignment(node)
        if isinstance(plain, ast.Assign) and len(plain.targets) == 1 and isinstance(plain.targets[0], ast.Name):
            out.setdefault(plain.targets[0].id, []).append(plain)
    for nodes in out.values():
        nodes.sort(key=lambda n: n.lineno)
    return out


def _loop_of(func: ast.FunctionDef, site: SiteSpan) -> ast.For | None:
    if site.loop_var is None:
        return None
    for node in ast.walk(func):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == site.loop_var \
                and node.lineno < site.start + 1 <= max(getattr(n, "end_lineno", 0) or 0 for n in node.body):
            return node
    raise KernelSiteError(f"the site reads loop variable {site.loop_var!r} but no `for {site.loop_var} in ...` holds it")


def _range_args(loop: ast.For) -> tuple[str, str, str]:
    call = loop.iter
    if not (isinstance(call, ast.Call) and ast.unparse(call.func) in ("range", "tl.range", "tl.static_range")):
        raise KernelSiteError(f"persistent loop `for {ast.unparse(loop.target)} in {ast.unparse(call)}`: only range(...) / tl.range(...) loops are understood")
    args = [ast.unparse(a) for a in call.args]
    if len(args) == 1:
        return "0", args[0], "1"
    if len(args) == 2:
        return args[0], args[1], "1"
    return args[0], args[1], args[2]


def _with_prelude(func: ast.FunctionDef, body: str, before_line: int, known: set[str],
                  outputs: tuple[str, ...]) -> str:
    """`body` preceded by the kernel's own assignments (before `before_line`) of the names it needs."""
    defs = _assignments_before(func, before_line)
    text = body
    for _ in range(32):
        formula = parse_formula(text, outputs)
        missing = [n for n in formula.free_names if n not in known]
        if not missing:
            return text
        added = False
        for name in missing:
            if name in defs:
                text = ast.unparse(defs[name][-1]) + "\n" + text
                added = True
        if not added:
            raise KernelSiteError(
                f"the swizzle site reads {', '.join(missing)}, which is neither a kernel argument nor assigned before "
                "the site: if it is a constexpr parameter, give its value with --config NAME=VALUE, else take lines "
                "that assign it with --site A-B"
            )
    raise KernelSiteError("the names the swizzle site needs are defined in a cycle")


def own_order(source: str, site: SiteSpan, launch_grid: tuple[int, int, int], args: dict[str, int],
              consts: dict[str, int]) -> OwnOrder:
    """Evaluate the site for every program of `launch_grid` (or every persistent-loop index)."""
    func = _function(source)
    lines = source.splitlines()
    site_text = _plain_text(textwrap.dedent("\n".join(lines[site.start:site.stop])).strip() + "\n")
    known = set(args) | set(consts)
    launch = tuple(g for g in launch_grid)
    while len(launch) > 1 and launch[-1] == 1:
        launch = launch[:-1]
    n_programs = int(np.prod(launch))
    iterations = None
    if site.loop_var is not None:
        loop = _loop_of(func, site)
        lo, hi, step = _range_args(loop)
        bounds_text = "\n".join(f"{n} = {e}" for n, e in zip(LOOP_NAMES, (lo, hi, step)))
        bounds_text = _with_prelude(func, bounds_text + "\n", loop.lineno, known, LOOP_NAMES)
        bounds = evaluate(parse_formula(bounds_text, LOOP_NAMES), launch, args, consts)
        iterations = [np.arange(bounds[LOOP_NAMES[0]][p], bounds[LOOP_NAMES[1]][p], bounds[LOOP_NAMES[2]][p],
                                dtype=np.int64) for p in range(n_programs)]
        indices = np.concatenate(iterations) if iterations else np.zeros(0, np.int64)
        n_virtual = int(indices.size)
        if n_virtual == 0 or np.unique(indices).size != n_virtual or indices.min() != 0 or indices.max() != n_virtual - 1:
            raise UserError(
                f"the persistent loop over {site.loop_var} does not visit 0..N-1 once each across programs: "
                "swizzlelab cannot map its iterations to tiles"
            )
        launch = (n_virtual,)
        n_programs = n_virtual
    # the loop variable is the launch index: lines before the site that read it (best_kernel.py's
    # `swz_launch = tile_id`) come after it
    text = _with_prelude(func, site_text, site.start + 1, known | {site.loop_var} - {None}, site.outputs)
    if site.loop_var is not None:
        text = f"{site.loop_var} = tl.program_id(0)\n" + text
    formula = parse_formula(text, site.outputs)
    if formula.launch_rank > 1:
        # a 2-D launch (axis 0 fastest, as dispatched) read through one launch index: the launch grid need not
        # be the tile grid (split-K's `pid_z = tl.program_id(1)` on a (tiles, 1) launch)
        full = tuple(launch_grid) + (1,) * 3
        text = _linear_launch(text)
        args = {**args, N0: int(full[0]), N1: int(full[1])}
        formula = parse_formula(text, site.outputs)
    values = evaluate(formula, (n_programs,), args, consts)
    if len(site.outputs) == 1:
        tiles = values[site.outputs[0]]
        grid: tuple[int, ...] = (n_programs,)
    else:
        first, second = (values[name] for name in site.outputs[:2])
        grid = (int(first.max()) + 1, int(second.max()) + 1)
        tiles = first * grid[1] + second
    if int(np.prod(grid)) != n_programs or np.unique(tiles).size != n_programs or tiles.min() < 0:
        raise UserError(
            f"the kernel's own site maps its {n_programs} programs onto tile grid {'x'.join(map(str, grid))} "
            "without covering each tile once: its launch grid does not match the block sizes (pass --config "
            "values the wrapper's grid follows)"
        )
    everything = parse_formula(text, formula.assigned_names)
    all_values = evaluate(everything, (n_programs,), args, consts)
    defined = {
        name: int(v[0]) for name, v in all_values.items()
        if name not in site.outputs and name != site.loop_var and v.size and np.all(v == v[0])
    }
    return OwnOrder(grid, tiles.astype(np.int64), text, args, consts, iterations, defined)
