"""The claim condition jobs and suggestions share, and the query for the oldest row a worker may take.

A row may be taken while queued, or while running under a holder that stopped heartbeating (it is re-claimed).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

Row = TypeVar("Row")


def claimable(model: Any, status: Any, expired: dt.datetime) -> ColumnElement[bool]:
    """Rows of `model` (Job or Suggestion) that are status.QUEUED, or status.RUNNING with no heartbeat since
    `expired`."""
    return or_(model.status == status.QUEUED, and_(model.status == status.RUNNING, model.heartbeat_at < expired))


def oldest_claimable(session: Session, model: type[Row], status: Any, eligible: Any,
                     expired: dt.datetime) -> Row | None:
    """The oldest claimable row of `model` that matches `eligible`. Postgres locks it FOR UPDATE and skips rows
    another claim holds; SQLite runs the caller's claim in one writer transaction."""
    table: Any = model  # the mapped columns of either model (mypy sees only the TypeVar)
    return session.scalar(
        select(model)
        .where(claimable(model, status, expired))
        .where(eligible)
        .order_by(table.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
