"""What a worker is given (JobSpec, built from a claimed job) and what it hands back (Outcome, becomes a Run).

Both are plain dataclasses so that they travel to Ray tasks and back by pickling.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JobSpec:
    """What a claimed job asks for; built from the database row by queue.claim."""

    job_id: int
    claim_token: str
    submission_id: int
    task: str
    mode: str
    secret: bool
    secret_seed: int | None  # the leaderboard's, for secret runs only
    code: str
    filename: str
    gpu_type: str
    attempt: int
    # A ranked public job claimed together with its submission's secret job: one child runs both parts (one
    # start, one calibration, one compile; both timed on the same GPU), and both jobs are completed from it.
    paired: JobSpec | None = None

    def secret_bytes(self) -> bytes | None:
        return None if not self.secret or self.secret_seed is None else self.secret_seed.to_bytes(8, "big")

    def specs(self) -> list[JobSpec]:
        """The jobs this claim holds: itself, then its paired secret job if any."""
        return [self] if self.paired is None else [self, self.paired]


@dataclass
class Outcome:
    """A finished evaluation, ready to become a Run row."""

    passed: bool
    score_ms: float | None
    reason: str
    report_text: str
    result: dict[str, Any]
    stdout_tail: str
    stderr_tail: str
    system: dict[str, Any]
    gpu: str
    started_at: dt.datetime
    ended_at: dt.datetime
    duration_s: float
    host: str = ""
    profile: list[Any] | None = None
    profile_files: list[tuple[str, bytes]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    paired: Outcome | None = None  # the paired secret job's, when the spec had one
