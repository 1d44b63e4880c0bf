"""Code the studies under benchmarks/ share, in one package instead of scripts importing each other's files: imported
as benchmarks.lab.<module> by scripts run as `python -m benchmarks.<study>.<script>` from the repository root, or run
by their path with the repository root put first on sys.path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def module_command(module: str, *args: str) -> list[str]:
    """The command that runs module `module` (benchmarks.<...>) in a child process of this interpreter."""
    return [sys.executable, "-m", module, *args]


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default os.environ) with the repository root first on PYTHONPATH: a child started from anywhere (ncu
    starts it as it likes) imports benchmarks.lab as its parent does."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    return env
