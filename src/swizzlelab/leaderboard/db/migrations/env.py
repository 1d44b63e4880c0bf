"""Alembic environment of the leaderboard database: runs migrations on the connection the caller passes in.

swizzlelab.leaderboard.db.engine.upgrade_schema sets config.attributes["connection"]; there is no alembic.ini.
"""

from alembic import context
from sqlalchemy import create_engine

from swizzlelab.leaderboard.db.models import Base

config = context.config


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    # Batch mode lets later migrations alter SQLite tables (SQLite has no ALTER COLUMN).
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                      compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:  # `alembic revision --autogenerate` run by a developer with -x/sqlalchemy.url set
    with create_engine(config.get_main_option("sqlalchemy.url")).connect() as fresh:
        _run(fresh)
        fresh.commit()
