"""Engine and sessions for SQLite (WAL, one writer transaction at a time) and Postgres, and schema upgrades.

Alembic's migrations ship inside the package (db/migrations) and run on every start: a fresh database is created,
an old one is brought to the newest schema.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from swizzlelab.errors import UserError
from swizzlelab.leaderboard.settings import sqlite_file

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_S = 30.0
_UPGRADE_LOCK = threading.Lock()


def _sqlite_setup(engine: Engine) -> None:
    """WAL journal, foreign keys, and explicit BEGINs: pysqlite's own transaction handling would start a write
    transaction lazily at the first write, where two writers can deadlock; BEGIN IMMEDIATE takes the lock first."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None  # SQLAlchemy's begin event below issues BEGIN itself
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@dataclass
class Database:
    """An engine plus two session factories: `read()` for queries, `write()` for transactions that change rows
    (on SQLite a write transaction holds the database's one writer lock from its first statement)."""

    url: str
    engine: Engine
    _reader: sessionmaker[Session]
    _writer: sessionmaker[Session]

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        with self._reader() as session:
            yield session

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """A session whose transaction commits when the block ends and rolls back if it raises."""
        with self._writer() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def normalize_url(url: str) -> str:
    """A SQLAlchemy URL from what a user typed: a bare path ending in .db/.sqlite means a SQLite file;
    postgres:// means psycopg 3. Anything else is refused with one line."""
    if "://" not in url:
        return f"sqlite:///{sqlite_file(url)}"
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def make_engine(url: str) -> Engine:
    """An engine for `url` (SQLite or Postgres); one-line UserError for a URL it cannot use."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UserError(f"database URL {url!r} is not valid; use a file path, sqlite:///PATH or "
                        "postgresql+psycopg://USER@HOST:PORT/DB") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            # A new database's own folder is its owner's alone: it holds token hashes and submissions.
            Path(parsed.database).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False})
        _sqlite_setup(engine)
        return engine
    if backend == "postgresql":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    raise UserError(f"database {backend!r} is not supported; use SQLite (a file path) or postgresql+psycopg://...")


def alembic_config(engine: Engine) -> Config:
    """An Alembic config pointing at the packaged migrations, without an alembic.ini."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return config


def upgrade_schema(engine: Engine) -> None:
    """Apply every migration not yet applied (a no-op on an up-to-date database)."""
    config = alembic_config(engine)
    with _UPGRADE_LOCK, engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            # Several processes may start at once (server and workers): one upgrades, the others wait.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(727272)")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def open_database(url: str, upgrade: bool = True) -> Database:
    """Connect to `url`, upgrade the schema (unless told not to) and return the Database."""
    url = normalize_url(url)
    engine = make_engine(url)
    try:
        if upgrade:
            upgrade_schema(engine)
        else:
            with engine.connect():
                pass
    except OperationalError as err:
        engine.dispose()
        first = str(err.orig).strip().splitlines()[0] if err.orig else str(err).splitlines()[0]
        raise UserError(f"cannot open database {make_url(url).render_as_string(hide_password=True)}: {first}") from None
    reader = sessionmaker(engine, expire_on_commit=False)
    writer = sessionmaker(engine.execution_options(sqlite_immediate=True), expire_on_commit=False)
    return Database(url=url, engine=engine, _reader=reader, _writer=writer)
