"""SQLAlchemy 2 models of the leaderboard: users and tokens, web sessions, leaderboards, code, submissions, runs,
jobs, limits, the workers that announce themselves, and suggestions (which block order would be faster).

The schema itself is created by the Alembic migrations in db/migrations; a test checks they agree with these models.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from swizzlelab.names import user_name_key


# The largest id a row can have: ids are INTEGER columns, 64-bit in SQLite and 32-bit in Postgres. Larger ones in a
# URL name no row (the database could not even bind them), so lookups answer "not found" without asking it.
MAX_ID = {"sqlite": 2**63 - 1, "postgresql": 2**31 - 1}


def in_id_range(value: int, session: Session) -> bool:
    return 0 < value <= MAX_ID.get(session.get_bind().dialect.name, 2**31 - 1)


# Characters neither database stores in text: NUL (Postgres refuses it) and lone surrogates (no UTF-8 encoding).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` with what neither database can store replaced by U+FFFD (a kernel's output, an exception message)."""
    return _UNSTORABLE.sub("\ufffd", text)


def _storable_json(value: Any) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(str(k)): _storable_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_storable_json(v) for v in value]
    return value


class SafeText(TypeDecorator[str]):
    """Text that stores on SQLite and Postgres alike, whatever a submission printed or raised (storable)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return None if value is None else storable(value)


class SafeJSON(TypeDecorator[Any]):
    """JSON whose strings are made storable (Postgres refuses \\u0000 in JSON text as well)."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return _storable_json(value)


def utcnow() -> dt.datetime:
    """Now, timezone-aware UTC (the only kind of time the database holds)."""
    return dt.datetime.now(dt.timezone.utc)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Stores UTC without a zone (SQLite has none) and returns aware UTC datetimes, so comparisons agree on both
    backends."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use swizzlelab.leaderboard.db.models.utcnow()")
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=dt.timezone.utc)


# Named constraints keep Alembic migrations identical on SQLite and Postgres.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class SubmissionStatus:
    """Values of Submission.status."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"  # every run finished; see Submission.passed
    ERROR = "error"  # the service could not evaluate it (e.g. workers died too often); not the submission's fault
    CANCELLED = "cancelled"  # its owner cancelled it while every job was still queued
    FINISHED = (DONE, ERROR, CANCELLED)


class JobStatus:
    """Values of Job.status."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"
    CANCELLED = "cancelled"  # never claimed: claims take queued jobs only


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    # names.user_name_key(name): one user per name whatever its case ('Alice' beside 'alice' is refused).
    name_key: Mapped[str] = mapped_column(String(80), unique=True, index=True,
                                          default=lambda ctx: user_name_key(ctx.get_current_parameters()["name"]))
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    banned: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user")
    submissions: Mapped[list[Submission]] = relationship(back_populates="user")


class ApiToken(Base):
    """A bearer token, kept only as its sha256 (tokens are 256 random bits, so a fast hash is enough)."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # the first characters, to tell tokens apart in listings
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)

    user: Mapped[User] = relationship(back_populates="tokens")


class Leaderboard(Base):
    """One task on one GPU type; its submissions are ranked by `ranking_rule` over the task's benchmark cases."""

    __tablename__ = "leaderboards"
    __table_args__ = (UniqueConstraint("task", "gpu_type", name="uq_leaderboards_task_gpu"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)  # "histogram-H100"
    task: Mapped[str] = mapped_column(String(64), index=True)
    gpu_type: Mapped[str] = mapped_column(String(32))
    description: Mapped[str] = mapped_column(SafeText, default="")
    deadline: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # 63-bit so that it fits a signed BIGINT; never shown to users.
    secret_seed: Mapped[int] = mapped_column(BigInteger)
    ranking_rule: Mapped[str] = mapped_column(String(32), default="geometric_mean")
    visible: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Code is private to its owner and admins; with this set, everyone may read it once the deadline has passed.
    publish_code: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    submissions: Mapped[list[Submission]] = relationship(back_populates="leaderboard")

    def code_published(self, now: dt.datetime) -> bool:
        return self.publish_code and self.deadline is not None and now > self.deadline


class CodeFile(Base):
    """Submitted source, stored once per distinct content."""

    __tablename__ = "code_files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    code: Mapped[str] = mapped_column(SafeText)
    size_bytes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (Index("ix_submissions_lb_user", "leaderboard_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    leaderboard_id: Mapped[int] = mapped_column(ForeignKey("leaderboards.id"))
    code_id: Mapped[int] = mapped_column(ForeignKey("code_files.id"))
    filename: Mapped[str] = mapped_column(String(255))
    mode: Mapped[str] = mapped_column(String(16))  # test | benchmark | ranked | profile
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    status: Mapped[str] = mapped_column(String(16), default=SubmissionStatus.QUEUED, index=True)
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    score_ms: Mapped[float | None] = mapped_column(Float, nullable=True)  # the public ranked run's score
    # A ranked submission whose secret run failed or disagreed in time beyond noise: shown, never ranked.
    flagged: Mapped[bool] = mapped_column(Boolean, default=False)
    flag_reason: Mapped[str] = mapped_column(SafeText, default="")
    error: Mapped[str] = mapped_column(SafeText, default="")

    user: Mapped[User] = relationship(back_populates="submissions")
    leaderboard: Mapped[Leaderboard] = relationship(back_populates="submissions")
    code: Mapped[CodeFile] = relationship()
    runs: Mapped[list[Run]] = relationship(back_populates="submission", order_by="Run.id")
    jobs: Mapped[list[Job]] = relationship(back_populates="submission", order_by="Job.id")
    suggestion: Mapped[Suggestion | None] = relationship(back_populates="submission")


class Job(Base):
    """One evaluation to do (a submission's public run, or its secret run); workers claim and heartbeat it."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_id", "status", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    mode: Mapped[str] = mapped_column(String(16))
    secret: Mapped[bool] = mapped_column(Boolean, default=False)
    gpu_type: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)
    claimed_by: Mapped[str] = mapped_column(String(128), default="")
    # A fresh value per claim: only the holder of the current claim may heartbeat or complete the job.
    claim_token: Mapped[str] = mapped_column(String(64), default="")
    claimed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str] = mapped_column(SafeText, default="")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)

    submission: Mapped[Submission] = relationship(back_populates="jobs")


class SuggestionStatus:
    """Values of Suggestion.status."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"  # see Suggestion.outcome
    FAILED = "failed"  # no suggestion could be made: Suggestion.note says why (a note, never a verdict)
    FINISHED = (DONE, FAILED)


class Suggestion(Base):
    """Which block order would make a submission's kernel faster: a job of its own (claimed, heartbeated and
    re-claimed like a Job, but only when no submission's job waits) and its result. It never changes the
    submission's verdict, score or rank; it is shown to the submission's owner and the admins only."""

    __tablename__ = "suggestions"
    __table_args__ = (Index("ix_suggestions_status_id", "status", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), unique=True)
    # "ranked run": queued when the ranked run passed; "admin NAME": asked for (a test-mode submission on a CPU-only
    # deployment gets a predicted suggestion this way).
    requested_by: Mapped[str] = mapped_column(String(128), default="")
    # Time the best orders on a GPU of gpu_type (the leaderboard's); without it any worker ranks and checks only.
    measure: Mapped[bool] = mapped_column(Boolean, default=False)
    gpu_type: Mapped[str] = mapped_column(String(32), default="")
    status: Mapped[str] = mapped_column(String(16), default=SuggestionStatus.QUEUED)
    claimed_by: Mapped[str] = mapped_column(String(128), default="")
    claim_token: Mapped[str] = mapped_column(String(64), default="")
    claimed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    outcome: Mapped[str] = mapped_column(String(16), default="")  # "order" | "none" (done); "" otherwise
    headline: Mapped[str] = mapped_column(SafeText, default="")  # the one line: the order and its figures, or why none
    note: Mapped[str] = mapped_column(SafeText, default="")  # why it failed, or what was left out on the way
    gpu: Mapped[str] = mapped_column(String(128), default="")  # the GPU that measured; "" when nothing was measured
    result: Mapped[dict[str, Any]] = mapped_column(SafeJSON, default=dict)  # optimize.suggest.Suggestion.to_dict()
    patched_code: Mapped[str] = mapped_column(SafeText, default="")  # the submission's file with only its site replaced

    submission: Mapped[Submission] = relationship(back_populates="suggestion")


class Run(Base):
    """The result of one finished job: verdict, score, the evaluator's full JSON result and text report."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), unique=True)  # one run per job, ever
    mode: Mapped[str] = mapped_column(String(16))
    secret: Mapped[bool] = mapped_column(Boolean, default=False)
    worker: Mapped[str] = mapped_column(String(128))
    gpu: Mapped[str] = mapped_column(String(128))  # the device the run measured on, e.g. "NVIDIA H100 80GB HBM3"
    system: Mapped[dict[str, Any]] = mapped_column(SafeJSON, default=dict)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    duration_s: Mapped[float] = mapped_column(Float)
    passed: Mapped[bool] = mapped_column(Boolean)
    score_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason: Mapped[str] = mapped_column(SafeText, default="")  # one line: why it failed (empty when it passed)
    result: Mapped[dict[str, Any]] = mapped_column(SafeJSON, default=dict)  # the evaluator's report as JSON
    report_text: Mapped[str] = mapped_column(SafeText, default="")
    stdout_tail: Mapped[str] = mapped_column(SafeText, default="")
    stderr_tail: Mapped[str] = mapped_column(SafeText, default="")
    # Profile mode: per case, the ncu metrics of each kernel (the report's profiling section as JSON).
    profile: Mapped[list[Any] | None] = mapped_column(SafeJSON, nullable=True)

    submission: Mapped[Submission] = relationship(back_populates="runs")
    profile_files: Mapped[list[ProfileFile]] = relationship(back_populates="run", order_by="ProfileFile.id")


class ProfileFile(Base):
    """An .ncu-rep written by a profile run (size-limited by the settings)."""

    __tablename__ = "profile_files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    size_bytes: Mapped[int] = mapped_column(Integer)
    content: Mapped[bytes] = mapped_column(LargeBinary)

    run: Mapped[Run] = relationship(back_populates="profile_files")


class RateLimit(Base):
    """At most `max_submissions` per user per `window_s`, on one leaderboard (or all when leaderboard_id is NULL)
    and one mode (or all when mode is NULL)."""

    __tablename__ = "rate_limits"
    __table_args__ = (UniqueConstraint("leaderboard_id", "mode", name="uq_rate_limits_lb_mode"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    leaderboard_id: Mapped[int | None] = mapped_column(ForeignKey("leaderboards.id"), nullable=True)
    mode: Mapped[str | None] = mapped_column(String(16), nullable=True)
    max_submissions: Mapped[int] = mapped_column(Integer)
    window_s: Mapped[int] = mapped_column(Integer, default=3600)


class WebSession(Base):
    """A browser's login: the cookie's sha256 and the sha256 of the API token it was opened with. Every page
    load checks that token again, so revoking the token or banning its user ends the session at once."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)


class WorkerPresence(Base):
    """A worker (or Ray dispatcher) that announced itself; it refreshes last_seen_at while it runs, so the
    service can tell a waiting user whether any connected worker can run their job."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)  # the worker id written into runs
    gpu_types: Mapped[str] = mapped_column(String(255), default="")  # "H100" or "H100,H200"; "" = test jobs only
    host: Mapped[str] = mapped_column(String(255), default="")
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)

    def types(self) -> tuple[str, ...]:
        return tuple(t for t in self.gpu_types.split(",") if t)
