"""No function in src/ over 120 lines or 10 parameters without a reason: a `# size:` comment right above it (or
above its decorators) saying why, one of the two rules below, or an entry of ALLOWED naming why it waits."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "swizzlelab"
MAX_LINES = 120
MAX_PARAMS = 10
MARKER = "# size:"

# Functions over a limit for a reason that lives outside them: path (under src/swizzlelab) and name -> why.
ALLOWED = {
    ("leaderboard/db/migrations/versions/0001_initial_schema.py", "upgrade"):
        "an applied Alembic migration is frozen: the schema it creates is history, not code to refactor",
}


@dataclass(frozen=True)
class Shape:
    path: str
    name: str
    line: int
    lines: int  # its own lines: nested functions and classes are measured on their own
    params: int  # self and cls not counted
    why: str  # the reason it may exceed a limit, "" if none


def _own_lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1 - sum(c.end_lineno - c.lineno + 1 for c in _direct_nested(node))


def _direct_nested(node: ast.AST) -> list[ast.AST]:
    """The functions and classes defined in `node` that no other definition in it encloses."""
    found: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(child)
        else:
            stack.extend(ast.iter_child_nodes(child))
    return found


def _param_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return len([n for n in names if n not in ("self", "cls")])


def _decorator_text(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list]


def _marker(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The `# size:` comment in the comment block right above the function's first decorator (or its def)."""
    first = min([d.lineno for d in node.decorator_list] + [node.lineno])
    index = first - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        if lines[index].strip().startswith(MARKER):
            return lines[index].strip()[len(MARKER):].strip()
        index -= 1
    return ""


def _rule(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: int) -> str:
    """Parameters that are an interface's own units, where a limit on lines still holds."""
    decorators = _decorator_text(node)
    if lines > MAX_LINES:
        return ""
    if any(d.endswith(".command") for d in decorators):
        return "a typer command: each parameter is one of its command-line options"
    if any(d in ("triton.jit", "jit") for d in decorators):
        return "a Triton kernel: its pointers, sizes, strides and constexprs are parameters Triton types one by one"
    return ""


def shapes() -> list[Shape]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(text, str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            own = _own_lines(node)
            why = ALLOWED.get((rel, node.name)) or _marker(lines, node) or _rule(node, own)
            out.append(Shape(rel, node.name, node.lineno, own, _param_count(node), why))
    return out


def over_limit() -> list[Shape]:
    return [s for s in shapes() if s.lines > MAX_LINES or s.params > MAX_PARAMS]


def test_no_function_over_the_limits_without_a_reason() -> None:
    bare = [f"{s.path}:{s.line} {s.name}: {s.lines} lines, {s.params} parameters" for s in over_limit() if not s.why]
    assert not bare, (f"over {MAX_LINES} lines or {MAX_PARAMS} parameters with no reason: split them, or put a "
                      f"'{MARKER} why' comment above the ones that must stay:\n" + "\n".join(bare))


def test_allowed_entries_exist_and_are_still_over_a_limit() -> None:
    # an entry outlives its reason once the function is split or renamed: then it goes
    found = {(s.path, s.name): s for s in shapes()}
    for key in ALLOWED:
        assert key in found, f"ALLOWED names {key}, which no longer exists"
        shape = found[key]
        assert shape.lines > MAX_LINES or shape.params > MAX_PARAMS, f"{key} is within the limits now: drop it"


def test_the_checker_sees_a_long_function_and_honours_a_marker(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES + 1))
    source = f"def long():\n{body}\n\n\n# {MARKER[2:]} a reason\ndef marked(a, b, c, d, e, f, g, h, i, j, k):\n    pass\n"
    tree = ast.parse(source)
    long_fn, marked = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    lines = source.splitlines()
    assert _own_lines(long_fn) == MAX_LINES + 2 and _marker(lines, long_fn) == ""
    assert _param_count(marked) == 11 and _marker(lines, marked) == "a reason"
    outer = ast.parse("def outer():\n    def inner():\n        return 1\n    return inner\n").body[0]
    assert _own_lines(outer) == 2  # the inner function counts for itself
