"""What an isolated evaluation is asked to do besides the task, the code and the mode: one frozen bundle that
evaluate_isolated takes whole or field by field, and that library rows reuse with a few fields replaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from swizzlelab.harness.isolate.limits import Limits

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class IsolatedOptions:
    """evaluate_isolated's options: the submission's file name; the seeds' secret (None: random per run); the
    child's limits (None: Limits()); a progress callback per case; the time budget per case; whether library rows
    are timed; the command shown in the report; where profile files go; an order (and the outputs it names) the
    parent proves and the child applies; CPU timing for tests of the timed flow; a Triton cache to start from;
    the label of the code's source; whether tests run before a ranked/profile run; the folder of kept caches and
    library rows; and the leaderboard's secret for a ranked run's secret phase in the same child."""

    filename: str = "submission.py"
    secret: bytes | None = None
    limits: Limits | None = None
    progress: ProgressFn | None = None
    budget_s: float = 3.0
    with_baseline: bool = True
    command: str = ""
    out_dir: Path | None = None
    order: str | None = None
    cpu_timing: bool = False
    outputs: list[str] | None = None
    triton_cache_seed: Path | None = None
    source: str | None = None
    tests: bool = True
    kept_caches: Path | None = None
    secret_phase: bytes | None = None


__all__ = ["IsolatedOptions", "ProgressFn"]
