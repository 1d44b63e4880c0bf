"""What the API and the CLI do to the database: seed, leaderboards, submissions with their jobs (and their
cancelling), rate limits, views (a submission's code only for whom may read it).

Every function takes a Session inside a transaction the caller owns (Database.write() or .read()).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import asdict, dataclass
from typing import Any

import yaml
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.db.models import (
    CodeFile,
    Job,
    JobStatus,
    Leaderboard,
    RateLimit,
    Run,
    Submission,
    SubmissionStatus,
    in_id_range,
    utcnow,
)
from swizzlelab.leaderboard.errors import BadRequest, Conflict, Forbidden, NotFound, RateLimited, TooLarge
from swizzlelab.leaderboard.settings import MODES, Settings
from swizzlelab.names import BadName, check_file_name, check_gpu_type
from swizzlelab.tasks.registry import BUILTIN_DIR, SPEC_FILE, builtin_names


# ---------------------------------------------------------------- tasks and leaderboards


@dataclass(frozen=True)
class TaskInfo:
    name: str
    description: str
    ranking: str


def builtin_task_infos() -> list[TaskInfo]:
    """The built-in tasks, read from their task.yml only (importing the kernels would pull in torch)."""
    infos = []
    for name in builtin_names():
        spec = yaml.safe_load((BUILTIN_DIR / name / SPEC_FILE).read_text())
        infos.append(TaskInfo(name=name, description=" ".join(str(spec.get("description", "")).split()),
                              ranking=str(spec.get("ranking", "geometric_mean"))))
    return infos


def leaderboard_name(task: str, gpu_type: str) -> str:
    return f"{task}-{gpu_type}"


def bad_request(check, value):  # type: ignore[no-untyped-def]
    """check(value) (a swizzlelab.names rule), its refusal as an HTTP 400."""
    try:
        return check(value)
    except BadName as err:
        raise BadRequest(str(err)) from None


def create_leaderboard(
    session: Session, task: str, gpu_type: str, deadline: dt.datetime | None = None, visible: bool = True,
    publish_code: bool = False,
) -> Leaderboard:
    """A new leaderboard for a built-in task on one GPU type, with a fresh secret seed."""
    infos = {info.name: info for info in builtin_task_infos()}
    if task not in infos:
        raise NotFound(f"unknown task {task[:64]!r}; known tasks: {', '.join(sorted(infos))}")
    gpu_type = bad_request(check_gpu_type, gpu_type)
    if deadline is not None and deadline.tzinfo is None:
        raise BadRequest("the deadline needs a time zone, e.g. 2026-12-31T23:59:00+00:00")
    if find_leaderboard(session, task, gpu_type, required=False) is not None:
        raise Conflict(f"leaderboard {leaderboard_name(task, gpu_type)} already exists")
    board = Leaderboard(name=leaderboard_name(task, gpu_type), task=task, gpu_type=gpu_type,
                        description=infos[task].description, deadline=deadline,
                        secret_seed=secrets.randbits(63), ranking_rule=infos[task].ranking, visible=visible,
                        publish_code=publish_code)
    session.add(board)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        raise Conflict(f"leaderboard {leaderboard_name(task, gpu_type)} already exists") from None
    return board


def find_leaderboard(
    session: Session, task: str, gpu_type: str, required: bool = True, include_hidden: bool = True
) -> Leaderboard | None:
    """The leaderboard of (task, GPU type). With include_hidden False a hidden one is "not found", and the
    NotFound names only visible leaderboards: a 404 names nothing its reader may not see."""
    board = session.scalar(
        select(Leaderboard).where(Leaderboard.task == task, Leaderboard.gpu_type == gpu_type.strip().upper())
    )
    if board is not None and not board.visible and not include_hidden:
        board = None
    if board is None and required:
        query = select(Leaderboard.name).order_by(Leaderboard.name)
        if not include_hidden:
            query = query.where(Leaderboard.visible.is_(True))
        known = session.scalars(query).all()
        raise NotFound(f"no leaderboard for task {task[:64]!r} on {gpu_type[:32]!r}; known: {', '.join(known) or 'none'}")
    return board


def update_leaderboard(
    session: Session, board: Leaderboard, deadline: dt.datetime | None | str = "keep", visible: bool | None = None,
    publish_code: bool | None = None,
) -> Leaderboard:
    """Change a leaderboard's deadline (None: open forever; "keep": unchanged), visibility or code publishing."""
    if deadline != "keep":
        if isinstance(deadline, dt.datetime) and deadline.tzinfo is None:
            raise BadRequest("the deadline needs a time zone, e.g. 2026-12-31T23:59:00+00:00")
        board.deadline = deadline  # type: ignore[assignment]
    if visible is not None:
        board.visible = visible
    if publish_code is not None:
        board.publish_code = publish_code
    session.flush()
    return board


def seed_fresh_database(db: Database, settings: Settings) -> int:
    """On a database without leaderboards: one per built-in task and configured GPU type, plus the default
    per-user rate limit. Returns how many leaderboards it made (0 on a database that had some)."""
    with db.write() as session:
        if session.scalar(select(func.count(Leaderboard.id))):
            return 0
        made = 0
        for info in builtin_task_infos():
            for gpu_type in settings.gpu_types:
                create_leaderboard(session, info.name, gpu_type)
                made += 1
        if not session.scalar(select(func.count(RateLimit.id))):
            session.add(RateLimit(leaderboard_id=None, mode=None, max_submissions=settings.submissions_per_hour,
                                  window_s=3600))
        return made


def set_rate_limit(
    session: Session, board: Leaderboard | None, mode: str | None, max_submissions: int, window_s: int = 3600
) -> RateLimit:
    """Create or replace the limit for (leaderboard or all, mode or all)."""
    if mode is not None and mode not in MODES:
        raise BadRequest(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if max_submissions < 0 or window_s <= 0:
        raise BadRequest("a rate limit needs max_submissions >= 0 and window_s > 0")
    board_id = board.id if board is not None else None
    board_clause = RateLimit.leaderboard_id.is_(None) if board_id is None else RateLimit.leaderboard_id == board_id
    mode_clause = RateLimit.mode.is_(None) if mode is None else RateLimit.mode == mode
    rule = session.scalar(select(RateLimit).where(board_clause, mode_clause))
    if rule is None:
        rule = RateLimit(leaderboard_id=board_id, mode=mode)
        session.add(rule)
    rule.max_submissions, rule.window_s = max_submissions, window_s
    session.flush()
    return rule


def check_rate_limits(session: Session, user_id: int, board: Leaderboard, mode: str) -> None:
    """RateLimited (with the seconds until a slot frees) when any applicable limit is used up."""
    now = utcnow()
    rules = session.scalars(select(RateLimit).where(
        (RateLimit.leaderboard_id.is_(None)) | (RateLimit.leaderboard_id == board.id),
        (RateLimit.mode.is_(None)) | (RateLimit.mode == mode),
    )).all()
    for rule in rules:
        since = now - dt.timedelta(seconds=rule.window_s)
        query = select(Submission.created_at).where(Submission.user_id == user_id, Submission.created_at >= since)
        if rule.leaderboard_id is not None:
            query = query.where(Submission.leaderboard_id == rule.leaderboard_id)
        if rule.mode is not None:
            query = query.where(Submission.mode == rule.mode)
        times = sorted(session.scalars(query).all())
        if len(times) >= rule.max_submissions:
            oldest = times[len(times) - rule.max_submissions] if rule.max_submissions else now
            wait = max(1, int((oldest + dt.timedelta(seconds=rule.window_s) - now).total_seconds()) + 1)
            scope = f"on {board.name}" if rule.leaderboard_id is not None else "on all leaderboards"
            what = f"{rule.mode} " if rule.mode else ""
            raise RateLimited(f"rate limit: at most {rule.max_submissions} {what}submissions per {rule.window_s} s "
                              f"{scope}; retry in {wait} s", retry_after_s=wait)


# ---------------------------------------------------------------- submissions


def store_code(session: Session, code: str) -> CodeFile:
    """The CodeFile holding `code`, inserted once per distinct content."""
    digest = hashlib.sha256(code.encode("utf-8")).hexdigest()
    found = session.scalar(select(CodeFile).where(CodeFile.sha256 == digest))
    if found is not None:
        return found
    row = CodeFile(sha256=digest, code=code, size_bytes=len(code.encode("utf-8")))
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError:  # another transaction stored the same content first
        found = session.scalar(select(CodeFile).where(CodeFile.sha256 == digest))
        assert found is not None
        return found
    return row


def create_submission(
    session: Session, settings: Settings, user_id: int, task: str, gpu_type: str, mode: str, code: str, filename: str,
    may_see_hidden: bool = True,
) -> Submission:
    """Validate, apply limits, store the code and enqueue the jobs: one run, plus a secret run when ranked.
    Callers acting for a user who is no admin pass may_see_hidden=False."""
    if mode not in MODES:
        raise BadRequest(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    size = len(code.encode("utf-8"))
    if size > settings.max_code_bytes:
        raise TooLarge(f"code is {size} bytes; the limit is {settings.max_code_bytes} bytes")
    if not code.strip():
        raise BadRequest("code is empty; submit a .py file defining custom_kernel(data)")
    if "\x00" in code:
        raise BadRequest("code contains NUL bytes; submit a UTF-8 text .py file")
    bad_request(check_file_name, filename)
    board = find_leaderboard(session, task, gpu_type, include_hidden=may_see_hidden)
    assert board is not None
    if board.deadline is not None and utcnow() > board.deadline:
        raise Forbidden(f"leaderboard {board.name} closed at {board.deadline.isoformat()}")
    if session.get_bind().dialect.name == "postgresql":
        # Serialise one user's submissions so that two at once cannot both pass the same rate limit.
        session.execute(select(func.pg_advisory_xact_lock(user_id)))
    check_rate_limits(session, user_id, board, mode)
    sub = Submission(user_id=user_id, leaderboard=board, code=store_code(session, code), filename=filename,
                     mode=mode, status=SubmissionStatus.QUEUED)
    session.add(sub)
    session.add(Job(submission=sub, mode=mode, secret=False, gpu_type=board.gpu_type))
    if mode == "ranked":
        session.add(Job(submission=sub, mode=mode, secret=True, gpu_type=board.gpu_type))
    session.flush()
    return sub


def get_submission(session: Session, submission_id: int, user_id: int | None, is_admin: bool) -> Submission:
    """The submission if it exists and is the caller's (or the caller is an admin); else NotFound."""
    sub = session.get(Submission, submission_id) if in_id_range(submission_id, session) else None
    if sub is None or (not is_admin and sub.user_id != user_id):
        raise NotFound(f"submission {submission_id} not found")
    return sub


def get_run(session: Session, run_id: int, user_id: int | None, is_admin: bool) -> Run:
    run = session.get(Run, run_id) if in_id_range(run_id, session) else None
    if run is None or (not is_admin and run.submission.user_id != user_id):
        raise NotFound(f"run {run_id} not found")
    return run


def cancel_submission(session: Session, sub: Submission) -> Submission:
    """Cancel a submission none of whose jobs a worker has claimed yet. The jobs are cancelled with one UPDATE of
    the queued ones: a claim that wins the race leaves its job running, and then nothing is cancelled."""
    if sub.status in SubmissionStatus.FINISHED:
        raise Conflict(f"submission {sub.id} is {sub.status} already")
    n_jobs = len(sub.jobs)
    # In a savepoint: when a job was claimed already, the refusal undoes the cancelling of its queued siblings
    # whatever the caller does with the error.
    with session.begin_nested():
        cancelled = session.execute(
            update(Job).where(Job.submission_id == sub.id, Job.status == JobStatus.QUEUED)
            .values(status=JobStatus.CANCELLED, finished_at=utcnow(), error="cancelled by its owner")
        ).rowcount
        if cancelled != n_jobs:
            raise Conflict(f"submission {sub.id} is running already; only a queued submission can be cancelled")
    sub.status, sub.finished_at, sub.error = SubmissionStatus.CANCELLED, utcnow(), "cancelled by its owner"
    session.flush()
    session.expire(sub, ["jobs"])
    return sub


def code_visible(sub: Submission, user_id: int | None, is_admin: bool) -> bool:
    """The privacy rule: a submission's code is its owner's and the admins'; everyone's once its leaderboard
    publishes code and its deadline has passed."""
    return is_admin or (user_id is not None and sub.user_id == user_id) or sub.leaderboard.code_published(utcnow())


# ---------------------------------------------------------------- views (plain dicts at the API's edge)


def leaderboard_view(board: Leaderboard) -> dict[str, Any]:
    return {"id": board.id, "name": board.name, "task": board.task, "gpu_type": board.gpu_type,
            "description": board.description, "ranking_rule": board.ranking_rule, "visible": board.visible,
            "deadline": board.deadline.isoformat() if board.deadline else None,
            "open": board.deadline is None or utcnow() <= board.deadline, "publish_code": board.publish_code,
            "code_published": board.code_published(utcnow())}


def run_summary(run: Run) -> dict[str, Any]:
    """A run without its bulky fields: for lists."""
    return {"id": run.id, "mode": run.mode, "secret": run.secret, "passed": run.passed, "score_ms": run.score_ms,
            "reason": run.reason, "gpu": run.gpu, "worker": run.worker, "duration_s": run.duration_s,
            "started_at": run.started_at.isoformat(), "ended_at": run.ended_at.isoformat()}


def run_view(run: Run, include_secret_report: bool) -> dict[str, Any]:
    """A run in full. A secret run's report is withheld from its author: it would reveal the secret inputs."""
    view = run_summary(run)
    hide = run.secret and not include_secret_report
    view.update({
        "submission_id": run.submission_id,
        "system": run.system,
        "result": {} if hide else run.result,
        "report_text": "(secret run: report withheld)\n" if hide else run.report_text,
        "stdout_tail": "" if hide else run.stdout_tail,
        "stderr_tail": "" if hide else run.stderr_tail,
        "profile": run.profile,
        "profile_files": [{"id": f.id, "name": f.name, "size_bytes": f.size_bytes} for f in run.profile_files],
    })
    return view


def submission_view(sub: Submission, waiting: str = "") -> dict[str, Any]:
    """A submission as its owner (or an admin) sees it; `waiting` says why its queued jobs wait, if they do."""
    jobs = [{"id": j.id, "secret": j.secret, "status": j.status, "attempts": j.attempts, "error": j.error}
            for j in sub.jobs]
    return {
        "id": sub.id, "user": sub.user.name, "leaderboard": sub.leaderboard.name, "task": sub.leaderboard.task,
        "gpu_type": sub.leaderboard.gpu_type, "mode": sub.mode, "filename": sub.filename,
        "code_sha256": sub.code.sha256, "status": sub.status, "passed": sub.passed, "score_ms": sub.score_ms,
        "flagged": sub.flagged, "flag_reason": sub.flag_reason, "error": sub.error,
        "created_at": sub.created_at.isoformat(),
        "finished_at": sub.finished_at.isoformat() if sub.finished_at else None,
        "jobs": jobs, "runs": [run_summary(r) for r in sub.runs], "waiting": waiting,
        "suggestion": suggestion_state(sub),
    }


def suggestion_state(sub: Submission) -> dict[str, Any] | None:
    """The state of the submission's suggestion (which block order would be faster), for its owner's view."""
    row = sub.suggestion
    if row is None:
        return None
    return {"status": row.status, "outcome": row.outcome, "headline": row.headline, "note": row.note}


def code_view(sub: Submission) -> dict[str, Any]:
    return {"submission_id": sub.id, "filename": sub.filename, "sha256": sub.code.sha256, "code": sub.code.code}


def task_views() -> list[dict[str, Any]]:
    return [asdict(info) for info in builtin_task_infos()]
