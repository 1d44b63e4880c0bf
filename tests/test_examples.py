"""Every example in examples/ runs with the command written in it ('# Run: swizzlelab ...'), with the exit
code it states ('(exit N' after the command; 0 when none is stated)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def run_line(path: Path) -> tuple[list[str], int]:
    for line in path.read_text().splitlines():
        match = re.match(r"#\s*Run:\s*swizzlelab\s+(.*?)\s*(?:\(exit (\d+).*)?$", line)
        if match:
            return shlex.split(match.group(1)), int(match.group(2) or 0)
    raise AssertionError(f"{path.name} has no '# Run: swizzlelab ...' line")


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_with_its_command(path: Path) -> None:
    argv, expected = run_line(path)
    assert str(path.relative_to(ROOT)) in argv, "the command must use the example itself"
    done = subprocess.run([sys.executable, "-m", "swizzlelab.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == expected, done.stdout[-1500:] + done.stderr[-1500:]
    assert "Traceback" not in done.stderr
