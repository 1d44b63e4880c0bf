"""The job queue in the database: atomic claims, heartbeats, re-claims after a missed heartbeat, and completion
that writes the run and the submission's verdict in one transaction.

Claims: Postgres locks the chosen row with FOR UPDATE SKIP LOCKED; SQLite runs the claim in one BEGIN IMMEDIATE
writer transaction. Each claim gets a fresh claim_token; heartbeats and completion only succeed for the current
token, so a worker that was presumed dead and comes back can never complete a job a second time.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from swizzlelab.leaderboard import suggestions
from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.db.claims import claimable, oldest_claimable
from swizzlelab.leaderboard.db.models import (
    Job,
    JobStatus,
    Leaderboard,
    ProfileFile,
    Run,
    Submission,
    SubmissionStatus,
    utcnow,
)
from swizzlelab.leaderboard.outcome import JobSpec, Outcome
from swizzlelab.leaderboard.settings import Settings


# A job whose worker dies this many times while running it is judged, not retried (the issue's "kills its
# evaluator twice"): one re-run after a death, exactly once, then a verdict.
KILLS_FOR_VERDICT = 2
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class WorkerCaps:
    """What a worker can run: test jobs always (the Triton interpreter); other modes only on its GPU type."""

    worker_id: str
    gpu_type: str | None  # None: no GPU, test jobs only
    gpu_types: tuple[str, ...] = ()  # a Ray dispatcher may serve several types at once

    def types(self) -> tuple[str, ...]:
        return tuple(t for t in (self.gpu_type, *self.gpu_types) if t)


def _eligible(caps: WorkerCaps):  # type: ignore[no-untyped-def]
    types = caps.types()
    if not types:
        return Job.mode == "test"
    return or_(Job.mode == "test", Job.gpu_type.in_(types))


def claim(db: Database, caps: WorkerCaps, settings: Settings, pair: bool = True) -> JobSpec | None:
    """Atomically take the oldest queued job this worker can run, or one whose holder stopped heartbeating. With
    `pair`, a ranked public job comes with its submission's secret job when that one is free (JobSpec.paired)."""
    while True:
        with db.write() as session:
            now = utcnow()
            expired = now - dt.timedelta(seconds=settings.heartbeat_timeout_s)
            job = oldest_claimable(session, Job, JobStatus, _eligible(caps), expired)
            if job is None:
                return None
            if job.status == JobStatus.RUNNING and job.attempts >= KILLS_FOR_VERDICT:
                # Its worker died (or went silent) while running it, again: the evaluation itself takes its
                # evaluator down. A verdict on the submission, not a service failure; nothing runs it a third time.
                _killed_evaluator(session, job, now)
                continue
            if job.attempts >= settings.max_attempts:
                _give_up(session, job, f"evaluation failed {job.attempts} times: {job.error or 'no result'}; this "
                                       "is a service failure, not a verdict on the code")
                continue  # the transaction commits the give-up; look for the next job
            _take(job, caps, now)
            sub = job.submission
            if sub.status == SubmissionStatus.QUEUED:
                sub.status = SubmissionStatus.RUNNING
            paired = None
            if pair and job.mode == "ranked" and not job.secret:
                sibling = _free_secret_sibling(session, job, expired, settings)
                if sibling is not None:
                    _take(sibling, caps, now)
                    paired = _spec(sibling)
            return _spec(job, paired)


def job_waiting(db: Database, caps: WorkerCaps) -> bool:
    """Whether a queued job waits that this worker could run: a suggestion it is making gives way to it."""
    with db.read() as session:
        return session.scalar(select(Job.id).where(Job.status == JobStatus.QUEUED).where(_eligible(caps))
                              .limit(1)) is not None


def _take(job: Job, caps: WorkerCaps, now: dt.datetime) -> None:
    job.status = JobStatus.RUNNING
    job.claimed_by = caps.worker_id
    job.claim_token = secrets.token_hex(16)
    job.claimed_at = job.heartbeat_at = now
    job.attempts += 1


def _spec(job: Job, paired: JobSpec | None = None) -> JobSpec:
    sub = job.submission
    board = sub.leaderboard
    return JobSpec(job_id=job.id, claim_token=job.claim_token, submission_id=sub.id, task=board.task,
                   mode=job.mode, secret=job.secret, secret_seed=board.secret_seed if job.secret else None,
                   code=sub.code.code, filename=sub.filename, gpu_type=job.gpu_type, attempt=job.attempts,
                   paired=paired)


def _free_secret_sibling(session: Session, job: Job, expired: dt.datetime, settings: Settings) -> Job | None:
    """The submission's secret job, if no live worker holds it and it may run again (else it waits for a claim
    of its own, which judges it as before)."""
    sibling = session.scalar(
        select(Job)
        .where(Job.submission_id == job.submission_id, Job.secret.is_(True), Job.mode == job.mode,
               claimable(Job, JobStatus, expired))
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    if sibling is None or sibling.attempts >= settings.max_attempts:
        return None
    if sibling.status == JobStatus.RUNNING and sibling.attempts >= KILLS_FOR_VERDICT:
        return None
    return sibling


def gpu_tasks(db: Database, caps: WorkerCaps) -> list[str]:
    """The tasks of the leaderboards on this worker's GPU types (what its ranked jobs will be)."""
    types = caps.types()
    if not types:
        return []
    with db.read() as session:
        return sorted(set(session.scalars(select(Leaderboard.task).where(Leaderboard.gpu_type.in_(types))).all()))


def worker_lost(db: Database, worker_id: str) -> list[int]:
    """A supervised worker died: the jobs (and suggestions) it held are claimable now, not after the heartbeat
    timeout (their claim tokens stay, so the dead worker could never complete them). Returns the jobs' ids."""
    with db.write() as session:
        jobs = session.scalars(select(Job).where(Job.claimed_by == worker_id, Job.status == JobStatus.RUNNING)).all()
        for job in jobs:
            job.heartbeat_at = EPOCH
            job.error = f"worker {worker_id} died while running it (claim {job.attempts})"
        ids = [job.id for job in jobs]
    suggestions.worker_lost(db, worker_id)
    return ids


def heartbeat(db: Database, spec: JobSpec) -> bool:
    """Refresh the claim (and its paired job's); False when the job is no longer this claim's (another worker
    re-claimed it)."""
    with db.write() as session:
        held = 0
        for one in spec.specs():
            result = session.execute(
                update(Job)
                .where(Job.id == one.job_id, Job.claim_token == one.claim_token, Job.status == JobStatus.RUNNING)
                .values(heartbeat_at=utcnow())
            )
            held += result.rowcount
        return held == len(spec.specs())


def complete(db: Database, spec: JobSpec, outcome: Outcome, worker_id: str, settings: Settings) -> bool:
    """Write the run and close the job (and its paired job with outcome.paired), each in one transaction; False
    when the first claim was lost (then nothing was written)."""
    recorded = _complete_one(db, spec, outcome, worker_id, settings)
    if recorded and spec.paired is not None:
        if outcome.paired is None:
            release(db, spec.paired, "the paired evaluation returned no secret run", settings)
        else:
            _complete_one(db, spec.paired, outcome.paired, worker_id, settings)
    return recorded


def _complete_one(db: Database, spec: JobSpec, outcome: Outcome, worker_id: str, settings: Settings) -> bool:
    with db.write() as session:
        closed = session.execute(
            update(Job)
            .where(Job.id == spec.job_id, Job.claim_token == spec.claim_token, Job.status == JobStatus.RUNNING)
            .values(status=JobStatus.DONE, finished_at=utcnow(), error="\n".join(outcome.notes))
        )
        if closed.rowcount != 1:
            return False
        run = Run(submission_id=spec.submission_id, job_id=spec.job_id, mode=spec.mode, secret=spec.secret,
                  worker=worker_id, gpu=outcome.gpu, system=outcome.system, started_at=outcome.started_at,
                  ended_at=outcome.ended_at, duration_s=outcome.duration_s, passed=outcome.passed,
                  score_ms=outcome.score_ms, reason=outcome.reason, result=outcome.result,
                  report_text=outcome.report_text, stdout_tail=outcome.stdout_tail,
                  stderr_tail=outcome.stderr_tail, profile=outcome.profile)
        session.add(run)
        for name, content in outcome.profile_files:
            session.add(ProfileFile(run=run, name=name, size_bytes=len(content), content=content))
        session.flush()
        _finalize(session, session.get(Submission, spec.submission_id), settings)
        return True


def release(db: Database, spec: JobSpec, error: str, settings: Settings) -> None:
    """The service failed to evaluate (not the submission's fault): put the job (and its paired one) back, or give
    up after max_attempts."""
    if spec.paired is not None:
        release(db, spec.paired, error, settings)
    with db.write() as session:
        job = session.get(Job, spec.job_id)
        if job is None or job.claim_token != spec.claim_token or job.status != JobStatus.RUNNING:
            return
        if job.attempts >= settings.max_attempts:
            _give_up(session, job, f"evaluation failed {job.attempts} times: {error}; this is a service failure, "
                                   "not a verdict on the code")
        else:
            job.status, job.error, job.claim_token = JobStatus.QUEUED, error, ""


def cancel_jobs_of(session: Session, user_id: int, reason: str) -> int:
    """Cancel every job of the user's submissions that no worker has claimed (one UPDATE of the queued ones, so a
    claim that wins the race keeps its job running); submissions left with no open job are closed as cancelled.
    Returns how many jobs were cancelled."""
    theirs = select(Submission.id).where(Submission.user_id == user_id)
    cancelled = session.execute(
        update(Job).where(Job.status == JobStatus.QUEUED, Job.submission_id.in_(theirs))
        .values(status=JobStatus.CANCELLED, finished_at=utcnow(), error=reason)
    ).rowcount
    for sub in session.scalars(select(Submission).where(Submission.user_id == user_id,
                                                          Submission.status.in_((SubmissionStatus.QUEUED,
                                                                                 SubmissionStatus.RUNNING)))).all():
        _finalize(session, sub, None)
    return int(cancelled or 0)


def give_back(db: Database, spec: JobSpec) -> None:
    """A worker that is stopping hands its claimed job (and the paired one) back: queued again, the claim not
    counted as an attempt (a stopped service is no verdict on the code)."""
    with db.write() as session:
        for one in spec.specs():
            session.execute(
                update(Job).where(Job.id == one.job_id, Job.claim_token == one.claim_token,
                                  Job.status == JobStatus.RUNNING)
                .values(status=JobStatus.QUEUED, claim_token="", attempts=Job.attempts - 1,
                        error="given back: its worker stopped")
            )


def _killed_evaluator(session: Session, job: Job, now: dt.datetime) -> None:
    """Close a job whose evaluation killed its worker KILLS_FOR_VERDICT times with a failed run (the verdict)."""
    reason = (f"the submission killed its evaluator: the worker running it died {job.attempts} times "
              f"({job.error or 'no heartbeat'})")
    job.status, job.finished_at, job.claim_token, job.error = JobStatus.DONE, now, "", reason
    started = job.claimed_at or now
    session.add(Run(submission_id=job.submission_id, job_id=job.id, mode=job.mode, secret=job.secret,
                    worker=job.claimed_by, gpu="", system={}, started_at=started, ended_at=now,
                    duration_s=max((now - started).total_seconds(), 0.0), passed=False, score_ms=None, reason=reason,
                    result={"success": False, "reason": reason}, report_text=f"> Evaluation failed\n\n{reason}\n"))
    session.flush()
    _finalize(session, job.submission, None)


def _give_up(session: Session, job: Job, error: str) -> None:
    job.status, job.error, job.finished_at, job.claim_token = JobStatus.ERROR, error, utcnow(), ""
    _finalize(session, job.submission, None)


def _finalize(session: Session, sub: Submission | None, settings: Settings | None) -> None:
    """Once every job of a submission is closed: its verdict, score and (ranked) secret-run flag."""
    if sub is None:
        return
    session.expire(sub)  # jobs and runs were changed by UPDATEs and new rows in this transaction
    if any(job.status in (JobStatus.QUEUED, JobStatus.RUNNING) for job in sub.jobs):
        return
    sub.finished_at = utcnow()
    cancelled = [job.error for job in sub.jobs if job.status == JobStatus.CANCELLED]
    if cancelled:  # its user was banned while a job of it waited: no verdict
        sub.status, sub.passed, sub.error = SubmissionStatus.CANCELLED, None, cancelled[0]
        return
    errors = [job.error for job in sub.jobs if job.status == JobStatus.ERROR]
    public = next((run for run in sub.runs if not run.secret), None)
    if errors or public is None:
        sub.status, sub.passed, sub.error = SubmissionStatus.ERROR, None, errors[0] if errors else "no run recorded"
        return
    sub.status, sub.passed, sub.score_ms = SubmissionStatus.DONE, public.passed, public.score_ms
    if sub.mode == "ranked" and public.passed:
        secret = next((run for run in sub.runs if run.secret), None)
        tolerance = settings.secret_rel_tolerance if settings is not None else Settings().secret_rel_tolerance
        sub.flagged, sub.flag_reason = secret_verdict(public, secret, tolerance)
    # In the same transaction: a trusted result queues its suggestion job (claimed after every submission's job).
    suggestions.queue_after(session, sub, settings or Settings())


def secret_verdict(public: Run, secret: Run | None, tolerance: float) -> tuple[bool, str]:
    """(flagged, reason): a ranked run is trusted only if the secret-seed run also passed and took about as long."""
    if secret is None:
        return True, "the secret run is missing"
    if not secret.passed:
        return True, f"the secret run failed: {secret.reason or 'wrong output'}"
    if public.score_ms is None or secret.score_ms is None:
        return True, "the public or the secret run has no score"
    low, high = sorted((public.score_ms, secret.score_ms))
    if low <= 0 or (high - low) / low > tolerance:
        return True, (f"the secret run took {secret.score_ms:.4g} ms against {public.score_ms:.4g} ms public, "
                      f"more than {tolerance:.0%} apart")
    return False, ""
