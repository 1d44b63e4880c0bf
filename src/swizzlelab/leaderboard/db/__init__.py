"""The leaderboard's database: SQLAlchemy 2 models, engine set-up (SQLite WAL or Postgres) and Alembic upgrades.

`open_database(url)` returns a Database whose schema is at the newest migration.
"""

from swizzlelab.leaderboard.db.engine import Database, open_database, upgrade_schema
from swizzlelab.leaderboard.db.models import (
    ApiToken,
    Base,
    CodeFile,
    Job,
    JobStatus,
    Leaderboard,
    ProfileFile,
    RateLimit,
    Run,
    Submission,
    SubmissionStatus,
    Suggestion,
    SuggestionStatus,
    User,
    WebSession,
    WorkerPresence,
)

__all__ = [
    "ApiToken",
    "Base",
    "CodeFile",
    "Database",
    "Job",
    "JobStatus",
    "Leaderboard",
    "ProfileFile",
    "RateLimit",
    "Run",
    "Submission",
    "SubmissionStatus",
    "Suggestion",
    "SuggestionStatus",
    "User",
    "WebSession",
    "WorkerPresence",
    "open_database",
    "upgrade_schema",
]
