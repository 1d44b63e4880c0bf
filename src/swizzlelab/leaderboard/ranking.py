"""The ranking of a leaderboard: each user's best passed, non-secret ranked run, ordered by score, ties by time.

Runs of flagged submissions (secret run failed or disagreed) and of banned users are never ranked.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from swizzlelab.leaderboard.db.models import Leaderboard, Run, Submission, SubmissionStatus, User


@dataclass(frozen=True)
class RankRow:
    rank: int
    user: str
    score_ms: float
    submission_id: int
    run_id: int
    submitted_at: dt.datetime
    filename: str
    gpu: str

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "user": self.user, "score_ms": self.score_ms, "submission_id": self.submission_id,
                "run_id": self.run_id, "submitted_at": self.submitted_at.isoformat(), "filename": self.filename,
                "gpu": self.gpu}


def ranking(session: Session, board: Leaderboard) -> list[RankRow]:
    """The ranked table, best first (one row per user)."""
    best = (
        select(
            Run.id.label("run_id"), Run.score_ms, Run.gpu, Submission.id.label("submission_id"),
            Submission.created_at, Submission.filename, User.name,
            func.row_number().over(
                partition_by=Submission.user_id, order_by=(Run.score_ms, Submission.created_at, Run.id)
            ).label("nth"),
        )
        .join(Submission, Run.submission_id == Submission.id)
        .join(User, Submission.user_id == User.id)
        .where(
            Submission.leaderboard_id == board.id,
            Submission.mode == "ranked",
            Submission.status == SubmissionStatus.DONE,
            Submission.flagged.is_(False),
            Run.mode == "ranked",
            Run.secret.is_(False),
            Run.passed.is_(True),
            Run.score_ms.is_not(None),
            User.banned.is_(False),
        )
        .subquery()
    )
    rows = session.execute(
        select(best).where(best.c.nth == 1).order_by(best.c.score_ms, best.c.created_at, best.c.run_id)
    ).all()
    return [RankRow(rank=i + 1, user=r.name, score_ms=float(r.score_ms), submission_id=r.submission_id,
                    run_id=r.run_id, submitted_at=r.created_at, filename=r.filename, gpu=r.gpu)
            for i, r in enumerate(rows)]
