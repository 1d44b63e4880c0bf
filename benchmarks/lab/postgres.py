"""A throw-away Postgres cluster on a free local port: Debian's initdb and pg_ctl (as the `postgres` user when run
as root), for the studies and the tests that need the real database (tests/leaderboard_support.py uses it).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path


def pg_bin() -> Path | None:
    """The folder of initdb and pg_ctl (Debian keeps them under /usr/lib/postgresql/VERSION/bin), or None."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None


def unavailable() -> str | None:
    """Why no cluster can be started here (a line naming the fix), or None."""
    if pg_bin() is None:
        return "Postgres binaries (initdb, pg_ctl) are not installed here: apt-get install -y postgresql"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run the Postgres server as"
    return None


@dataclass
class Cluster:
    """A running cluster: `new_database()` gives a SQLAlchemy URL of a fresh, empty database in it."""

    port: int
    user: str
    root: Path
    bindir: Path
    run_as: list[str] = field(default_factory=list)

    def new_database(self) -> str:
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        subprocess.run(self.run_as + [str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate",
                                      "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def start() -> Cluster:
    """initdb and start a cluster in a fresh temporary folder (no fsync: it is thrown away); RuntimeError with
    unavailable()'s line where that cannot be done."""
    reason = unavailable()
    if reason is not None:
        raise RuntimeError(reason)
    bindir = pg_bin()
    assert bindir is not None
    run_as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    root = Path(tempfile.mkdtemp(prefix="swizzlelab-pg-"))
    if run_as:
        shutil.chown(root, "postgres")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = root / "data"
    subprocess.run(run_as + [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                             "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120)
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    subprocess.run(run_as + [str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"),
                             "-w", "-t", "60", "start"], check=True, capture_output=True, timeout=90)
    return Cluster(port=port, user="postgres", root=root, bindir=bindir, run_as=run_as)
