"""The secret phase of a ranked run: every benchmark case timed again on the leaderboard's secret inputs in the
child that ran the public part, returned as a run of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from swizzlelab.harness.evaluate import BenchRow, EvalReport
from swizzlelab.harness.isolate.limits import Limits
from swizzlelab.harness.isolate.outcome import IsolatedRun, finished_run
from swizzlelab.harness.isolate.sandbox import ChildFailed
from swizzlelab.harness.isolate.session import Session
from swizzlelab.harness.isolate.timed_requests import time_cases


@dataclass
class SecretPart:
    """The secret phase of a ranked run: its rows, reason, phases, verdicts and the public part's output."""

    rows: list[BenchRow]
    reason: str | None
    phases: dict[str, float]
    verdicts: list[dict[str, Any]]
    tails: tuple[str, str]  # the child's stdout and stderr before any secret input existed (the public run's)
    started: float
    duration_s: float


def secret_phase(ev: Session, secret: bytes, public_reason: str | None) -> SecretPart:
    """Time every benchmark case again on the leaderboard's secret inputs, in the child that ran the public part
    (no second start, calibration or compile). Not run when the public part failed."""
    tails = (ev.child.stdout.text(), ev.child.stderr.text())
    started = time.perf_counter()
    if public_reason is not None:
        return SecretPart([], f"not run: the public run failed ({public_reason})", {}, [], tails, started, 0.0)
    # The secret phase fills phases and verdicts of its own; the public run's are put back afterwards.
    public_phases, public_verdicts = ev.phases, ev.verdicts
    ev.phases, ev.verdicts = {}, []
    ev.switch_to_secret(secret)
    try:
        rows, reason = time_cases(ev)
    except ChildFailed as failure:
        rows, reason = [], failure.reason
    part = SecretPart(rows, reason, ev.phases, ev.verdicts, tails, started, time.perf_counter() - started)
    ev.phases, ev.verdicts = public_phases, public_verdicts
    return part


def secret_run(part: SecretPart, public: EvalReport, ev: Session, limits: Limits, secret: bytes) -> IsolatedRun:
    """The secret phase as a run of its own (the leaderboard stores it as the submission's secret run): the
    public part's tests, the secret rows; the whole child's output (a secret run's output is never shown to its
    author)."""
    report = EvalReport(task=public.task, mode="ranked", candidate=public.candidate, system=public.system,
                        command=public.command, budget_s=public.budget_s)
    report.tests = public.tests
    report.ranked = part.rows
    ev.phases, ev.verdicts = part.phases, part.verdicts
    run = finished_run(report, part.reason, ev, limits, secret, part.started, [],
                       {"secret_phase": "in the public run's child, after its benchmarks"}, None)
    run.duration_s = part.duration_s  # its own time, not the library rows timed after it
    return run


__all__ = ["SecretPart", "secret_phase", "secret_run"]
