"""The lab's code layout (issue 47): study scripts share code through benchmarks/lab only, never edit sys.path, never
import another script by file or bare name, and use swizzlelab's public names; every study package imports."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*.py") if "__pycache__" not in p.parts)


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    rel = path.relative_to(BENCHMARKS)
    siblings = {p.stem for p in path.parent.glob("*.py")}
    study = rel.parts[0] if len(rel.parts) > 1 else None
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "path" and \
                isinstance(node.func.value.value, ast.Name) and node.func.value.value.id == "sys":
            out.append(f"{rel}:{node.lineno}: edits sys.path")
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            if top in siblings and top != "benchmarks":
                out.append(f"{rel}:{node.lineno}: imports the script {top} by its bare name")
            if top == "swizzlelab":
                out += [f"{rel}:{node.lineno}: imports swizzlelab's private {a.name}" for a in node.names
                        if a.name.startswith("_")]
            parts = node.module.split(".")
            if top == "benchmarks" and study not in (None, "lab") and len(parts) > 1 and parts[1] != "lab":
                out.append(f"{rel}:{node.lineno}: imports {node.module}; shared code belongs in benchmarks/lab")
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "load_module":
            target = ast.unparse(node.args[0]) if node.args else ""
            # A submission is user code and is loaded as the evaluator loads it; a script of the lab is not.
            if any(word in target for word in ("HERE", "benchmarks", "__file__", '.py"', ".py'")):
                out.append(f"{rel}:{node.lineno}: loads {target} by path")
    return out


def test_scripts_share_code_through_lab_and_public_names_only():
    problems = [p for path in SCRIPTS for p in _problems(path)]
    assert not problems, "\n".join(problems)


def test_the_layout_check_can_fail(tmp_path, monkeypatch):
    study = tmp_path / "toy"
    study.mkdir()
    (study / "helper.py").write_text("X = 1\n")
    (study / "run.py").write_text("import sys\nsys.path.insert(0, 'x')\nfrom helper import X\n"
                                  "from swizzlelab.sim.simulate import _position_schedule\n"
                                  "from benchmarks.other.run import main\n"
                                  "load_module(HERE / 'helper.py', 'helper', 'helper.py')\n")
    monkeypatch.setitem(globals(), "BENCHMARKS", tmp_path)
    found = sorted(_problems(study / "run.py"), key=lambda p: int(p.split(":")[1]))
    assert [p.split(": ", 1)[1] for p in found] == [
        "edits sys.path", "imports the script helper by its bare name",
        "imports swizzlelab's private _position_schedule",
        "imports benchmarks.other.run; shared code belongs in benchmarks/lab", "loads HERE / 'helper.py' by path"]


@pytest.mark.parametrize("module", sorted(f"benchmarks.lab.{p.stem}" for p in (BENCHMARKS / "lab").glob("[!_]*.py")))
def test_every_lab_module_imports(module):
    assert importlib.import_module(module).__doc__


def test_the_lab_stays_small():
    """Issue 59: the lab keeps what it proves; its Python stays within 6,000 lines."""
    lines = sum(len(path.read_text().splitlines()) for path in SCRIPTS)
    assert lines <= 6000, f"benchmarks/ holds {lines} lines of Python"
