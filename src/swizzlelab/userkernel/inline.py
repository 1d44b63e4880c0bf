"""Inline a kernel's calls of small index helpers of its own file (e.g. tutorial 09's `pid_m, pid_n =
_compute_pid(tile_id, ...)`, called once for the tile's loads and again for its store), each on the line of its
call, so the site finder sees the remap itself and every line keeps its number in the file.

A helper qualifies when it is a @triton.jit function of the same module whose body is straight-line
assignments ending in `return` of what it computed, with no parameter reassigned.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HelperCall:
    """One inlined call: lines [start, stop) of the source (0-based), the helper, its arguments' text in the
    helper's parameter order, and the names it assigned."""

    helper: str
    start: int
    stop: int
    args: tuple[str, ...]
    targets: tuple[str, ...]
    indent: str


@dataclass(frozen=True)
class Inlined:
    source: str  # the kernel source, each qualifying call replaced on its own line(s)
    calls: tuple[HelperCall, ...]


def _jit_python_function(value: Any, module_name: str) -> Any:
    fn = getattr(value, "fn", None)
    if fn is None or not callable(fn) or getattr(fn, "__module__", None) != module_name or hasattr(fn, "fn"):
        return None
    return fn


def _helper_tree(fn: Any) -> ast.FunctionDef | None:
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if func is None or func.args.vararg or func.args.kwarg or func.args.kwonlyargs:
        return None
    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # docstring
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return None
    params = {a.arg for a in func.args.args}
    for stmt in body[:-1]:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        if stmt.targets[0].id in params:
            return None
    return func


def _returned(func: ast.FunctionDef) -> list[ast.expr]:
    value = func.body[-1].value  # type: ignore[attr-defined]
    return list(value.elts) if isinstance(value, ast.Tuple) else [value]


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, ast.expr]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            new = self.names[node.id]
            if isinstance(new, ast.Name):
                return ast.copy_location(ast.Name(id=new.id, ctx=node.ctx), node)
            return ast.copy_location(new, node)
        return node


def _inline_text(func: ast.FunctionDef, call: ast.Call, targets: list[str], kernel_names: set[str],
                 defaults: dict[str, Any]) -> list[str] | None:
    params = [a.arg for a in func.args.args]
    bound: dict[str, ast.expr] = dict(zip(params, call.args))
    for keyword in call.keywords:
        if keyword.arg is None or keyword.arg not in params or keyword.arg in bound:
            return None
        bound[keyword.arg] = keyword.value
    for name in params:
        if name not in bound:
            if name not in defaults:
                return None
            bound[name] = ast.Constant(value=defaults[name])
    returned = _returned(func)
    if len(returned) != len(targets):
        return None
    out: list[str] = []
    mapping: dict[str, ast.expr] = {}
    for name, expr in bound.items():
        mapping[name] = expr if isinstance(expr, (ast.Name, ast.Constant)) else ast.parse(f"({ast.unparse(expr)})", mode="eval").body
    body = func.body[1:-1] if isinstance(func.body[0], ast.Expr) else func.body[:-1]
    locals_ = [s.targets[0].id for s in body]  # type: ignore[attr-defined]
    for local, value in zip(returned, targets):
        if isinstance(local, ast.Name) and local.id in locals_ and local.id not in mapping:
            mapping[local.id] = ast.Name(id=value, ctx=ast.Store())
    for local in locals_:
        if local not in mapping and local in kernel_names:
            mapping[local] = ast.Name(id=f"_{func.name.strip('_')}_{local}", ctx=ast.Store())
    rename = _Rename(mapping)
    for stmt in body:
        out.append(ast.unparse(ast.fix_missing_locations(rename.visit(ast.parse(ast.unparse(stmt)).body[0]))))
    for local, value in zip(returned, targets):
        text = ast.unparse(ast.fix_missing_locations(rename.visit(ast.parse(ast.unparse(local), mode="eval").body)))
        if text != value:
            out.append(f"{value} = {text}")
    return out


def inline_helpers(source: str, fn_globals: dict[str, Any], module_name: str) -> Inlined:
    """`source` (a dedented kernel function) with its qualifying helper calls inlined, line for line."""
    import inspect

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return Inlined(source, ())
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        return Inlined(source, ())
    kernel_names = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)} | {a.arg for a in func.args.args}
    lines = source.splitlines()
    statement_lines: dict[int, int] = {}  # line -> statements starting on it
    for node in ast.walk(func):
        if isinstance(node, ast.stmt):
            statement_lines[node.lineno] = statement_lines.get(node.lineno, 0) + 1
    calls: list[HelperCall] = []
    for stmt in ast.walk(func):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Name)):
            continue
        target = stmt.targets[0]
        names = [target] if isinstance(target, ast.Name) else list(getattr(target, "elts", []))
        if not names or not all(isinstance(n, ast.Name) for n in names):
            continue
        helper_fn = _jit_python_function(fn_globals.get(stmt.value.func.id), module_name)
        helper = _helper_tree(helper_fn) if helper_fn is not None else None
        if helper is None:
            continue
        start, stop = stmt.lineno - 1, stmt.end_lineno or stmt.lineno
        indent = re.match(r"\s*", lines[start]).group(0)  # type: ignore[union-attr]
        if stmt.col_offset != len(indent) or statement_lines.get(stmt.lineno, 0) != 1 \
                or any(statement_lines.get(line) for line in range(stmt.lineno + 1, stop + 1)):
            continue  # not a statement of its own on its lines
        signature = inspect.signature(helper_fn)
        defaults = {k: p.default for k, p in signature.parameters.items() if p.default is not inspect.Parameter.empty}
        targets = [n.id for n in names]  # type: ignore[union-attr]
        text = _inline_text(helper, stmt.value, targets, kernel_names, defaults)
        if text is None:
            continue
        params = [a.arg for a in helper.args.args]
        bound = dict(zip(params, (ast.unparse(a) for a in stmt.value.args)))
        bound.update({k.arg: ast.unparse(k.value) for k in stmt.value.keywords if k.arg})
        calls.append(HelperCall(stmt.value.func.id, start, stop, tuple(bound.get(p, "") for p in params),
                                tuple(targets), indent))
        lines[start] = indent + "; ".join(text)
        for i in range(start + 1, stop):
            lines[i] = ""
    calls.sort(key=lambda c: c.start)
    return Inlined("\n".join(lines) + ("\n" if source.endswith("\n") else ""), tuple(calls))


def _branch_lines(lines: list[str], original: list[str], body: list[ast.stmt], header_indent: str) -> None:
    """Move the lines of a taken branch out to its `if`'s indentation, in place. Every line of the branch is
    indented at least as deep as its first statement (folds inside it moved lines to their own `if`'s depth)."""
    first, last = body[0].lineno - 1, max((s.end_lineno or s.lineno) for s in body)
    shift = len(re.match(r"\s*", original[first]).group(0)) - len(header_indent)  # type: ignore[union-attr]
    for i in range(first, last):
        if lines[i].strip():
            lines[i] = lines[i][shift:]


def fold_constexpr_ifs(source: str, values: dict[str, Any]) -> str:
    """`source` with each `if` whose condition reads only names of known value (constexprs chosen for this
    run) replaced by the branch taken, line for line: the header, `else:` and the branch not taken become
    blank lines, the taken branch moves out one level. What Triton does at compile time, done to read the
    remap that such blocks hold (XCD remaps under `if NUM_XCDS != 1:`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source
    lines = source.splitlines()
    original = list(lines)
    folds: list[tuple[ast.If, bool]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        if not names or not names <= set(values) or any(isinstance(n, ast.Call) for n in ast.walk(node.test)):
            continue
        try:
            taken = bool(eval(compile(ast.Expression(node.test), "<constexpr>", "eval"), {"__builtins__": {}},  # noqa: S307
                              dict(values)))
        except Exception:  # noqa: BLE001 - a condition we cannot decide stays as it is
            continue
        folds.append((node, taken))
    # innermost first, so an outer fold moves lines already folded inside it
    for node, taken in sorted(folds, key=lambda f: -f[0].lineno):
        header_indent = re.match(r"\s*", lines[node.lineno - 1]).group(0)  # type: ignore[union-attr]
        end = node.end_lineno or node.lineno
        keep = node.body if taken else node.orelse
        keep_range = set()
        if keep:
            keep_range = set(range(keep[0].lineno - 1, max((s.end_lineno or s.lineno) for s in keep)))
            _branch_lines(lines, original, keep, header_indent)
        for i in range(node.lineno - 1, end):
            if i not in keep_range:
                lines[i] = ""
        if not keep:
            lines[node.lineno - 1] = header_indent + "pass"
    return "\n".join(lines) + ("\n" if source.endswith("\n") else "")


_CAST_PROGRAM_ID = re.compile(r"(tl\.program_id\([^()]*\))\.to\([^()]*\)")


def plain_program_ids(source: str) -> str:
    """`tl.program_id(0).to(INDEX_DTYPE)` (Inductor's templates) read as `tl.program_id(0)`, line for line: the
    launch index is the same number in either type, and an order's splice reads the launch index itself."""
    return _CAST_PROGRAM_ID.sub(r"\1", source)
