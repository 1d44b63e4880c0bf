"""Loads benchmarks/sim_validation's scripts for the tests: they import their neighbours, so their folder joins
sys.path while they are in use."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from swizzlelab.io import load_module

FOLDER = Path(__file__).resolve().parents[1] / "benchmarks" / "sim_validation"


@contextmanager
def loaded(*names: str) -> Iterator[Any]:
    """The script `names[0]` (one name) or a tuple of them, their folder on sys.path until the block ends."""
    sys.path.insert(0, str(FOLDER))
    try:
        modules = tuple(load_module(FOLDER / f"{name}.py", name, f"{name}.py") for name in names)
        yield modules[0] if len(modules) == 1 else modules
    finally:
        sys.path.remove(str(FOLDER))
