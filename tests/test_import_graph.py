"""The import graph of src/swizzlelab, read from the AST (imports inside functions included): no circles, and no
import from a lower layer to a higher one."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "swizzlelab"

# Lowest first. A module may import its own layer and the ones below, never one above.
LAYERS = (
    ("swizzlelab", "swizzlelab.errors", "swizzlelab.io", "swizzlelab.fmt", "swizzlelab.runtime",
     "swizzlelab.interpreter_compat", "swizzlelab.names"),
    ("swizzlelab.hw",),
    ("swizzlelab.swizzle",),
    ("swizzlelab.trace",),
    ("swizzlelab.tasks",),
    ("swizzlelab.userkernel",),
    ("swizzlelab.scenario",),
    ("swizzlelab.sim",),
    ("swizzlelab.harness",),
    ("swizzlelab.optimize",),
    ("swizzlelab.leaderboard",),
    ("swizzlelab.cli",),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    # Every file of the package is a module: the exploit suite lives in tests/fixtures/submissions/, not here.
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package `name` imports anywhere in its file; `from pkg import sub` counts as pkg.sub."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                out.add(full if full in known else source)
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def layer_of(name: str) -> int:
    best, index = -1, -1
    for i, members in enumerate(LAYERS):
        for member in members:
            if (name == member or name.startswith(member + ".")) and len(member) > best:
                best, index = len(member), i
    assert index >= 0, f"{name} belongs to no layer: add it to LAYERS"
    return index


def test_every_module_has_a_layer() -> None:
    for name in graph():
        layer_of(name)


def test_no_import_reaches_a_higher_layer() -> None:
    upward = sorted(
        f"{name} (layer {layer_of(name)}) imports {target} (layer {layer_of(target)})"
        for name, targets in graph().items()
        for target in targets
        if layer_of(target) > layer_of(name)
    )
    assert not upward, "\n".join(upward)


def test_trace_never_imports_tasks() -> None:
    bad = [(n, t) for n, ts in graph().items() if n.startswith("swizzlelab.trace") for t in ts
           if t.startswith("swizzlelab.tasks")]
    assert not bad


def test_only_cli_imports_cli() -> None:
    bad = [(n, t) for n, ts in graph().items() if not n.startswith("swizzlelab.cli") for t in ts
           if t.startswith("swizzlelab.cli")]
    assert not bad


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (as a path that returns to its start), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circles() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_checker_sees_circles_and_function_level_imports(tmp_path: Path) -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from swizzlelab.cli import main\n")
    assert imports_of("swizzlelab.x", module, {"swizzlelab.cli", "swizzlelab.cli.main"}) == {"swizzlelab.cli.main"}
