"""Suggestion jobs in the database: queued with a passing ranked run, claimed by a worker only when no submission's
job waits, heartbeated and re-claimed like jobs; their result or their note, and views.

A suggestion never touches its submission's verdict, score or rank; a failed one is a note on its own row.
"""

from __future__ import annotations

import datetime as dt
import math
import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.db.claims import oldest_claimable
from swizzlelab.leaderboard.db.models import (
    Submission,
    SubmissionStatus,
    Suggestion,
    SuggestionStatus,
    utcnow,
)
from swizzlelab.leaderboard.errors import NotFound
from swizzlelab.leaderboard.service import get_submission
from swizzlelab.leaderboard.settings import Settings
from swizzlelab.swizzle.site import reads_program_id

RANKED_RUN = "ranked run"
TEST_RUN = "test run"  # Settings.suggest_test_runs: a CPU-only deployment's predicted suggestions


@dataclass(frozen=True)
class SuggestSpec:
    """A claimed suggestion: what the worker needs to make it (plain values: it may travel to a Ray task)."""

    suggestion_id: int
    claim_token: str
    submission_id: int
    task: str
    code: str
    filename: str
    gpu_type: str
    measure: bool
    # The submission's own order as the leaderboard measured it, per benchmark case: (mean ms, where) or None.
    anchors: list[tuple[float, str] | None]
    attempt: int


# ---------------------------------------------------------------- queueing


NO_SITE = ("no suggestion: the code defines no @triton.jit kernel that reads its program id, so there is no block "
           "order to change")


def queue_after(session: Session, sub: Submission, settings: Settings) -> Suggestion | None:
    """In the transaction that finalises `sub`: a suggestion job for a passing, unflagged ranked submission (timed
    on the leaderboard's GPU), or with settings.suggest_test_runs for a passing test one (predicted only, any
    worker); a code without a program-id read gets its note at once. None when it gets neither."""
    if not settings.suggestions or not sub.passed or sub.flagged or sub.suggestion is not None:
        return None
    if not (sub.mode == "ranked" or (sub.mode == "test" and settings.suggest_test_runs)):
        return None
    has_site = reads_program_id(sub.code.code)
    row = Suggestion(submission=sub, requested_by=RANKED_RUN if sub.mode == "ranked" else TEST_RUN,
                     measure=sub.mode == "ranked", gpu_type=sub.leaderboard.gpu_type)
    session.add(row)
    if not has_site:
        _close(row, SuggestionStatus.FAILED, note=NO_SITE)
    return row


# ---------------------------------------------------------------- claims


def _eligible(types: tuple[str, ...]):  # type: ignore[no-untyped-def]
    if not types:
        return Suggestion.measure.is_(False)
    return or_(Suggestion.measure.is_(False), Suggestion.gpu_type.in_(types))


def anchors_of(sub: Submission) -> list[tuple[float, str] | None]:
    """The measured mean time of the submission's own order at each benchmark case, from its public ranked run
    ([] for any other mode; None for a case without that figure)."""
    run = next((r for r in sub.runs if not r.secret and r.passed), None)
    if run is None or sub.mode != "ranked":
        return []
    out: list[tuple[float, str] | None] = []
    # the stored report's ranked rows (harness.isolate.runner.timed_rows reads the same; importing the evaluator
    # here would load the simulator into the API server)
    for row in ((run.result or {}).get("ranked") or {}).get("cases") or []:
        mean = ((row if isinstance(row, dict) else {}).get("candidate") or {}).get("mean_ms")
        ok = isinstance(mean, (int, float)) and math.isfinite(mean) and mean > 0
        out.append((float(mean), f"{run.gpu}, the leaderboard's ranked run #{run.id}") if ok else None)
    return out


def claim(db: Database, worker_id: str, types: tuple[str, ...], settings: Settings) -> SuggestSpec | None:
    """Take the oldest queued suggestion this worker can make (or one whose holder stopped heartbeating). The worker
    asks only after queue.claim found no submission's job: suggestions run at lower priority."""
    while True:
        with db.write() as session:
            now = utcnow()
            expired = now - dt.timedelta(seconds=settings.heartbeat_timeout_s)
            row = oldest_claimable(session, Suggestion, SuggestionStatus, _eligible(types), expired)
            if row is None:
                return None
            if row.attempts >= settings.max_attempts:
                _close(row, SuggestionStatus.FAILED, note=f"no suggestion: its worker failed {row.attempts} times "
                       f"({row.note or 'no result'}); the submission's result stands")
                continue
            row.status, row.claimed_by, row.claim_token = SuggestionStatus.RUNNING, worker_id, secrets.token_hex(16)
            row.claimed_at = row.heartbeat_at = now
            row.attempts += 1
            sub = row.submission
            return SuggestSpec(suggestion_id=row.id, claim_token=row.claim_token, submission_id=sub.id,
                               task=sub.leaderboard.task, code=sub.code.code, filename=sub.filename,
                               gpu_type=row.gpu_type, measure=row.measure, anchors=anchors_of(sub),
                               attempt=row.attempts)


def _held(session: Session, spec: SuggestSpec) -> Suggestion | None:
    row = session.get(Suggestion, spec.suggestion_id)
    if row is None or row.claim_token != spec.claim_token or row.status != SuggestionStatus.RUNNING:
        return None
    return row


def _close(row: Suggestion, status: str, **values: Any) -> None:
    row.status, row.finished_at, row.claim_token = status, utcnow(), ""
    for key, value in values.items():
        setattr(row, key, value)


def heartbeat(db: Database, spec: SuggestSpec) -> bool:
    with db.write() as session:
        done = session.execute(
            update(Suggestion)
            .where(Suggestion.id == spec.suggestion_id, Suggestion.claim_token == spec.claim_token,
                   Suggestion.status == SuggestionStatus.RUNNING)
            .values(heartbeat_at=utcnow()))
        return done.rowcount == 1


def complete(db: Database, spec: SuggestSpec, result: Any) -> bool:
    """Store an optimize.suggest.Suggestion; False (nothing written) when the claim was lost."""
    with db.write() as session:
        row = _held(session, spec)
        if row is None:
            return False
        _close(row, SuggestionStatus.DONE, outcome=result.outcome, headline=result.headline[:4000],
               note="; ".join(result.notes)[:4000], gpu=result.gpu[:128], result=result.to_dict(),
               patched_code=result.patched)
        return True


def fail(db: Database, spec: SuggestSpec, note: str, settings: Settings, retry: bool) -> None:
    """No suggestion: a note on the row. `retry` (the service's own failure): queued again until max_attempts."""
    with db.write() as session:
        row = _held(session, spec)
        if row is None:
            return
        if retry and row.attempts < settings.max_attempts:
            row.status, row.claim_token, row.note = SuggestionStatus.QUEUED, "", note[:4000]
        else:
            _close(row, SuggestionStatus.FAILED, note=note[:4000])


def yielded(db: Database, spec: SuggestSpec) -> bool:
    """The worker stopped the suggestion for a submission's job: queued again, the claim not counted."""
    with db.write() as session:
        row = _held(session, spec)
        if row is None:
            return False
        row.status, row.claim_token, row.attempts = SuggestionStatus.QUEUED, "", max(row.attempts - 1, 0)
        row.note = "gave way to a submission's job; made again once none waits"
        return True


def worker_lost(db: Database, worker_id: str) -> list[int]:
    """A supervised worker died: the suggestions it held are claimable now."""
    with db.write() as session:
        rows = session.scalars(select(Suggestion).where(Suggestion.claimed_by == worker_id,
                                                        Suggestion.status == SuggestionStatus.RUNNING)).all()
        for row in rows:
            row.heartbeat_at = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
            row.note = f"worker {worker_id} died while making it (claim {row.attempts})"
        return [row.id for row in rows]


# ---------------------------------------------------------------- views


def find(session: Session, submission_id: int, user_id: int | None, is_admin: bool) -> Suggestion:
    """The suggestion of the caller's submission (an admin's: any); NotFound for anyone else (as for its code), or
    when it has none."""
    sub = get_submission(session, submission_id, user_id, is_admin)
    if sub.suggestion is None:
        raise NotFound(f"submission {submission_id} has no suggestion: one is made after a passing ranked run "
                       "(not flagged)")
    return sub.suggestion


def _figure(data: dict[str, Any] | None) -> dict[str, float] | None:
    return {k: float(data[k]) for k in ("speedup", "low", "high")} if data else None


def view(row: Suggestion) -> dict[str, Any]:
    """The suggestion as its owner sees it (JSON at the API's edge). `order` is the suggested (or, for "none", the
    best tried) order with its predicted figures (time model `model`) and, when a GPU timed it, its measured ones;
    `result` holds everything, each case and candidate included."""
    finished = row.finished_at
    result = row.result or {}
    best = result.get("best") or None
    order = None
    if best:
        measured = best.get("measured") or None
        order = {"spec": best.get("spec", ""), "formula": best.get("formula", ""), "proof": best.get("proof", ""),
                 "tests": best.get("tests", ""), "predicted": _figure(best.get("predicted")),
                 "measured": {**_figure(measured.get("score")), "gpu": measured.get("gpu", ""),  # type: ignore[dict-item]
                              "cases": measured.get("cases", [])} if measured else None}
    return {
        "submission_id": row.submission_id, "status": row.status, "outcome": row.outcome, "headline": row.headline,
        "note": row.note, "model": result.get("model", ""), "gpu": row.gpu, "measured": bool(row.gpu),
        "order": order, "requested_by": row.requested_by, "created_at": row.created_at.isoformat(),
        "finished_at": finished.isoformat() if finished else None,
        "seconds": (finished - row.created_at).total_seconds() if finished else None,
        "attempts": row.attempts, "has_patched_code": bool(row.patched_code), "result": result,
    }

