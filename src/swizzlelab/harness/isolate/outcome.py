"""The outcome of an isolated evaluation: the IsolatedRun the leaderboard stores, with its verdict, score,
report text and the isolation record (sandbox, transport, clocks, limits, where the time went).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swizzlelab.harness.evaluate import EvalReport
from swizzlelab.harness.isolate.limits import Limits
from swizzlelab.harness.isolate.session import Session
from swizzlelab.harness.timing import geometric_mean


@dataclass
class IsolatedRun:
    """The outcome of one isolated evaluation (the leaderboard worker stores this)."""

    mode: str
    passed: bool
    score_ms: float | None
    reason: str | None
    report_text: str
    report: dict[str, Any]
    stdout_tail: str
    stderr_tail: str
    system: dict[str, Any]
    profile_files: list[Path]
    duration_s: float
    verdicts: list[dict[str, Any]]
    isolation: dict[str, Any] = field(default_factory=dict)
    secret_run: IsolatedRun | None = None  # the secret phase of a ranked run, when one was asked for

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "passed": self.passed, "score_ms": self.score_ms, "reason": self.reason,
            "report_text": self.report_text, "report": self.report, "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail, "system": self.system,
            "profile_files": [str(p) for p in self.profile_files], "duration_s": self.duration_s,
            "verdicts": self.verdicts, "isolation": self.isolation,
            "secret_run": self.secret_run.to_dict() if self.secret_run is not None else None,
        }


def finished_run(report: EvalReport, reason: str | None, ev: Session, limits: Limits, secret: bytes | None,
                 started: float, profile_files: list[Path], notes: dict[str, str],
                 tails: tuple[str, str] | None) -> IsolatedRun:
    """The IsolatedRun of a finished evaluation: verdict, score, text and the isolation record."""
    from swizzlelab.harness.report import HEADLINES, render_text, report_dict

    mode = report.mode
    if reason is None and mode == "ranked":
        means = [row.candidate.mean_ms for row in report.ranked if row.candidate is not None]
        if means and len(means) == len(report.ranked):
            report.score_ms = geometric_mean(means)
    passed = reason is None and report.success
    if not passed and reason is None:
        reason = "the evaluation failed"
    if reason is not None and "MemoryError" in reason and limits.host_mem_bytes is not None:
        # The child's address-space limit refused the allocation before the watcher saw it resident.
        reason += f" (the host memory limit is {limits.host_mem_bytes / 2**30:.2f} GiB)"
    score = None
    if passed and mode == "ranked":
        score = report.score_ms
    elif passed and mode == "benchmark":
        means = [row.candidate.mean_ms for row in report.benchmarks if row.candidate is not None]
        score = geometric_mean(means) if means else None
    text = render_text(report)
    if not passed:
        good, bad = HEADLINES[mode]
        text = text.replace(f"> {good}", f"> {bad}", 1)
    if reason is not None:
        text = text.rstrip("\n") + f"\n\n❌ {reason}\n"
    isolation = {"sandbox": ev.sandbox, "transport": ev.kind, "transport_note": ev.transport_note,
                 "clock": ev.clock_info, "limits": limits.to_dict(), "phases_s": ev.phases,
                 "secret": "given" if secret is not None else "random per run"}
    isolation.update(notes)  # where library rows came from; that a run is a secret phase
    text = text.rstrip("\n") + "\n" + isolation_lines(isolation) + "\n"
    as_dict = report_dict(report)
    as_dict["isolated"] = True
    as_dict["isolation"] = isolation
    as_dict["success"] = passed
    as_dict["reason"] = reason
    stdout, stderr = tails if tails is not None else (ev.child.stdout.text(), ev.child.stderr.text())
    return IsolatedRun(
        mode=mode, passed=passed, score_ms=score, reason=reason, report_text=text, report=as_dict,
        stdout_tail=stdout, stderr_tail=stderr, system=ev.child_system or report.system.to_dict(),
        profile_files=profile_files, duration_s=time.perf_counter() - started, verdicts=ev.verdicts, isolation=isolation,
    )


def isolation_lines(isolation: dict[str, Any]) -> str:
    applied = "; ".join(isolation["sandbox"].get("applied", [])) or "none"
    skipped = "; ".join(isolation["sandbox"].get("skipped", [])) or "none"
    return (f"Isolation: sandboxed child (python -I, private dir, scrubbed env), outputs judged by the parent "
            f"from {isolation['transport']} shared buffers\n  applied: {applied}\n  not applied: {skipped}"
            + (f"\n  library rows: {isolation['library_rows']}" if isolation.get("library_rows") else "")
            + (f"\n  secret phase: {isolation['secret_phase']}" if isolation.get("secret_phase") else ""))


__all__ = ["IsolatedRun", "finished_run", "isolation_lines"]
