"""The tile grid's quantities in a user kernel's own terms: which of its names (grid_m, num_tile_n, ...) counts the
tiles along each output axis, so every family order is written with them, and what swizzlelab computes where the
kernel has none (vLLM's scaled_mm computes only the count along N: the count along M is tl.cdiv(M, BLOCK_SIZE_M)).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import FormulaError
from swizzlelab.swizzle.lang import Formula, parse_formula, rename

# The names family orders read for the tile counts along pid_m and pid_n (swizzle.families).
COUNTS = ("num_pid_m", "num_pid_n")
CDIV_CALLS = ("tl.cdiv", "triton.cdiv", "cdiv", "triton.language.cdiv")


@dataclass(frozen=True)
class GridTerms:
    """For each of COUNTS the kernel does not define before its site: the kernel's own name for that count, or an
    expression of names it defines (`derived`), or why neither was found (`missing`)."""

    names: dict[str, str] = field(default_factory=dict)  # COUNTS name -> kernel name or expression
    derived: tuple[str, ...] = ()  # the COUNTS names whose value is an expression swizzlelab adds
    missing: dict[str, str] = field(default_factory=dict)  # COUNTS name -> why the kernel's terms lack it
    axes: tuple[str, str] = ("pid_m", "pid_n")  # the kernel's own names of the two tile ids

    def rewrite(self, formula: Formula) -> Formula:
        """`formula` reading the kernel's names for the counts it reads and does not assign itself; FormulaError,
        the same line for every such order, where it reads a count the kernel's terms lack."""
        free = set(formula.free_names) - set(formula.assigned_names)
        lacking = [(axis, name) for axis, name in zip(self.axes, COUNTS) if name in free and name in self.missing]
        if lacking:
            axis, name = lacking[0]
            raise FormulaError(f"the order reads the tile count along {axis} ({name}), which this kernel's terms lack: "
                               f"{self.missing[name]}")
        plain = {n: self.names[n] for n in COUNTS if n in free and n in self.names and n not in self.derived}
        if plain:
            formula = rename(formula, plain)
        added = [f"{n} = {self.names[n]}\n" for n in self.derived if n in free]
        if added:
            formula = parse_formula("".join(added) + formula.normalized_source(), formula.outputs)
        return formula

    def describe(self) -> str | None:
        """One line for the run's header; None where nothing is renamed, added or missing."""
        parts = []
        for axis, name in zip(self.axes, COUNTS):
            if name in self.missing:
                parts.append(f"tiles along {axis}: {self.missing[name]}; orders that need them are refused")
            elif name in self.derived:
                parts.append(f"tiles along {axis}: {self.names[name]} (the kernel computes no such count; the orders "
                             "compute it)")
            elif name in self.names:
                parts.append(f"tiles along {axis} = {self.names[name]}")
        return "orders are written in the kernel's own terms: " + "; ".join(parts) if parts else None

    def checked(self, values: dict[str, Any], grid: tuple[int, ...]) -> GridTerms:
        """The terms whose value at the traced launch is the tile grid's (a name matched by its form alone
        could count something else); the others move to `missing`, saying so."""
        names, missing = dict(self.names), dict(self.missing)
        for axis, name in enumerate(COUNTS[:len(grid)]):
            if name not in names:
                continue
            value = _value(names[name], values)
            if value is not None and value != grid[axis]:
                missing[name] = f"{names.pop(name)} is {value} at this launch, the tile grid has {grid[axis]}"
        derived = tuple(n for n in self.derived if n in names)
        return GridTerms(names, derived, missing, self.axes)


def _value(text: str, values: dict[str, Any]) -> int | None:
    """A term's value: a name's, or tl.cdiv(X, B)'s; None when it reads a name without a known value."""
    tree = ast.parse(text, mode="eval").body
    if isinstance(tree, ast.Name):
        return _int(values.get(tree.id))
    if isinstance(tree, ast.Call) and len(tree.args) == 2 and all(isinstance(a, ast.Name) for a in tree.args):
        extent, block = (_int(values.get(a.id)) for a in tree.args)  # type: ignore[attr-defined]
        return None if extent is None or not block else math.ceil(extent / block)
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _cdiv_block(expr: ast.expr) -> tuple[str, str] | None:
    """(extent, block) of `tl.cdiv(X, B)` or `(X + B - 1) // B`; None for any other expression."""
    if isinstance(expr, ast.Call) and ast.unparse(expr.func) in CDIV_CALLS and len(expr.args) == 2:
        extent, block = expr.args
        if isinstance(block, ast.Name):
            return ast.unparse(extent), block.id
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.FloorDiv) and isinstance(expr.right, ast.Name):
        block = expr.right.id
        left = expr.left
        # X + B - 1, or X + (B - 1)
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub) and isinstance(left.left, ast.BinOp) \
                and isinstance(left.left.op, ast.Add) and block in _names(left.left.right):
            return ast.unparse(left.left.left), block
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add) and block in _names(left.right):
            return ast.unparse(left.left), block
    return None


def _block_of(after: list[ast.stmt], ids: set[str]) -> str | None:
    """The block size a tile id is multiplied by after the site (`offs_am = pid_m * BLOCK_M + ...`)."""
    for stmt in after:
        for node in ast.walk(stmt):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                left, right = node.left, node.right
                for one, other in ((left, right), (right, left)):
                    if isinstance(one, ast.Name) and one.id in ids and isinstance(other, ast.Name):
                        return other.id
    return None


def _derived(after: list[ast.stmt], ids: set[str]) -> set[str]:
    """Names assigned after the site from the tile id (offsets, masks of its rows or columns)."""
    out = set(ids)
    for stmt in after:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Assign, ast.AugAssign)) and _names(node.value) & out:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def _extent(after: list[ast.stmt], mine: set[str], other: set[str], known: set[str]) -> str | None:
    """The extent a tile id's offsets are bounded by: `offs_am < M`, `rm % M` (M known before the site)."""
    for stmt in after:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt):
                left, right = node.left, node.comparators[0]
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                left, right = node.left, node.right
            else:
                continue
            reads = _names(left)
            if isinstance(right, ast.Name) and right.id in known and reads & mine and not reads & other:
                return right.id
    return None


def grid_terms(source: str, start: int, stop: int, outputs: tuple[str, ...], kernel_names: tuple[str, str],
               params: set[str]) -> GridTerms:
    """The terms of the kernel whose (marked, evaluation-copy) `source` has its site at lines [start, stop) with
    `outputs` pid_m, pid_n; `kernel_names` are the kernel's own names of them (for the header line)."""
    if tuple(outputs) != ("pid_m", "pid_n"):
        return GridTerms()
    func = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))
    before: dict[str, ast.expr] = {}
    for node in sorted((n for n in ast.walk(func) if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.lineno <= start:
            before[node.targets[0].id] = node.value
    # the simple statements after the site at any depth (a persistent loop's body included), in source order
    after = sorted((n for n in ast.walk(func) if isinstance(n, ast.stmt) and not hasattr(n, "body")
                    and n.lineno > stop), key=lambda n: n.lineno)
    known = set(before) | params
    # the site's tile ids, and the kernel's own names assigned from them right after (`tile_m = pid_m`)
    ids = [{axis} | {s.targets[0].id for s in after if isinstance(s, ast.Assign) and len(s.targets) == 1
                     and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Name) and s.value.id == axis}
           for axis in outputs]
    derived = [_derived(after, i) for i in ids]
    names: dict[str, str] = {}
    added: list[str] = []
    missing: dict[str, str] = {}
    for axis, count in enumerate(COUNTS):
        if count in known:
            continue
        block = _block_of(after, ids[axis])
        if block is None:
            missing[count] = f"no block size multiplies {kernel_names[axis]} after the site"
            continue
        own = [name for name, expr in before.items() if (found := _cdiv_block(expr)) and found[1] == block]
        if own:
            names[count] = own[-1]
            continue
        extent = _extent(after, derived[axis], derived[1 - axis], known)
        if extent is None:
            missing[count] = f"the kernel computes no count of {block} blocks and bounds {kernel_names[axis]}'s offsets by no size"
            continue
        names[count] = f"tl.cdiv({extent}, {block})"
        added.append(count)
    return GridTerms(names, tuple(added), missing, kernel_names)
