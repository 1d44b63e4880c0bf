"""Which workers are connected: each worker (or Ray dispatcher) announces itself in the workers table and a
thread of its own refreshes last_seen_at; the service reads it to refuse, or explain, jobs nobody can run.

A worker that ends cleanly removes its row; one that was killed ages out after Settings.heartbeat_timeout_s, as a job it held would.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.db.models import JobStatus, Submission, WorkerPresence, utcnow
from swizzlelab.leaderboard.queue import WorkerCaps
from swizzlelab.leaderboard.settings import Settings


# ---------------------------------------------------------------- the worker's side


def announce(db: Database, caps: WorkerCaps, host: str | None = None) -> None:
    """Insert (or refresh, for a worker id seen before) this worker's row."""
    now = utcnow()
    values = {"gpu_types": ",".join(caps.types()), "host": (host or socket.gethostname())[:255],
              "started_at": now, "last_seen_at": now}
    with db.write() as session:
        row = session.scalar(select(WorkerPresence).where(WorkerPresence.name == caps.worker_id))
        if row is None:
            session.add(WorkerPresence(name=caps.worker_id, **values))
            try:
                with session.begin_nested():
                    session.flush()
                return
            except IntegrityError:  # announced at the same moment under the same id: refresh that row
                row = session.scalar(select(WorkerPresence).where(WorkerPresence.name == caps.worker_id))
        if row is not None:
            for key, value in values.items():
                setattr(row, key, value)


def seen(db: Database, worker_id: str) -> bool:
    """Refresh last_seen_at; False when the row is gone (then the caller announces again)."""
    with db.write() as session:
        done = session.execute(update(WorkerPresence).where(WorkerPresence.name == worker_id)
                               .values(last_seen_at=utcnow()))
        return bool(done.rowcount)


def leave(db: Database, worker_id: str) -> None:
    with db.write() as session:
        session.execute(delete(WorkerPresence).where(WorkerPresence.name == worker_id))


@contextlib.contextmanager
def announced(db: Database, caps: WorkerCaps, settings: Settings) -> Iterator[None]:
    """The worker is listed while the block runs: announced on entry, refreshed every heartbeat interval by a
    daemon thread (busy or idle), removed on exit. A database hiccup skips one refresh; the timeout has slack."""
    stop = threading.Event()

    def refresh() -> None:
        while not stop.wait(settings.heartbeat_interval_s):
            try:
                if not seen(db, caps.worker_id):
                    announce(db, caps)
            except SQLAlchemyError:
                continue

    announce(db, caps)
    thread = threading.Thread(target=refresh, name=f"presence-{caps.worker_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        try:
            leave(db, caps.worker_id)
        except SQLAlchemyError:
            pass  # it ages out instead


# ---------------------------------------------------------------- the service's side


@dataclass(frozen=True)
class Connected:
    """The workers seen within the timeout: how many, and which GPU types they serve."""

    count: int
    gpu_types: frozenset[str]
    starting: frozenset[str] = frozenset()  # GPU types of serve's own workers that are still coming up

    def can_run(self, mode: str, gpu_type: str) -> bool:
        # Test jobs run on any worker (the Triton interpreter); the others only on a GPU of the board's type.
        return self.count > 0 if mode == "test" else gpu_type in self.gpu_types


def connected(session: Session, settings: Settings) -> Connected:
    since = utcnow() - dt.timedelta(seconds=settings.heartbeat_timeout_s)
    rows = session.scalars(select(WorkerPresence).where(WorkerPresence.last_seen_at >= since)).all()
    starting = settings.workers_starting() if settings.workers_starting is not None else frozenset()
    return Connected(count=len(rows), gpu_types=frozenset(t for row in rows for t in row.types()), starting=starting)


def worker_views(session: Session, settings: Settings) -> list[dict[str, Any]]:
    """Every announced worker, with whether it counts as connected now."""
    since = utcnow() - dt.timedelta(seconds=settings.heartbeat_timeout_s)
    rows = session.scalars(select(WorkerPresence).order_by(WorkerPresence.name)).all()
    return [{"name": r.name, "gpu_types": list(r.types()), "host": r.host, "started_at": r.started_at.isoformat(),
             "last_seen_at": r.last_seen_at.isoformat(), "connected": r.last_seen_at >= since} for r in rows]


def missing_worker(mode: str, gpu_type: str) -> str:
    """What a job of `mode` on `gpu_type` waits for, as the user reads it ('an H100 worker', 'a B200 worker')."""
    if mode == "test":
        return "a worker"
    # GPU types are spoken letter by letter: "an" before the letters whose names start with a vowel sound.
    return f"{'an' if gpu_type[:1] in 'AEFHILMNORSX8' else 'a'} {gpu_type} worker"


def refusal(session: Session, settings: Settings, mode: str, gpu_type: str) -> str | None:
    """The one-line reason to refuse a new submission no connected worker can run, or None. Only GPU modes are
    refused: a test job runs on any worker, and a server whose workers are restarting gets them back in seconds,
    so a test submission made with none connected is taken and shown as waiting; so is one for a GPU type whose
    worker serve started and is still coming up."""
    now = connected(session, settings)
    if mode == "test" or now.can_run(mode, gpu_type) or gpu_type in now.starting:
        return None
    return (f"no {gpu_type} worker connected: benchmark/ranked/profile submissions need one; "
            "test mode runs on any worker")


def waiting_reason(session: Session, settings: Settings, sub: Submission, now: Connected | None = None) -> str:
    """For a submission with queued jobs that no connected worker can run: 'waiting for an H100 worker; none
    connected'; else ''."""
    queued = [job for job in sub.jobs if job.status == JobStatus.QUEUED]
    if not queued:
        return ""
    now = now or connected(session, settings)
    for job in queued:
        if not now.can_run(job.mode, job.gpu_type):
            state = "it is starting" if job.gpu_type in now.starting else "none connected"
            return f"waiting for {missing_worker(job.mode, job.gpu_type)}; {state}"
    return ""

