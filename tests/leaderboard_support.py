"""Real services for the leaderboard tests: a Postgres 15 cluster in a temp dir, a `swizzlelab serve` process on a
free 127.0.0.1 port, worker processes, and submission files (a correct and a wrong Triton histogram).

Import the fixtures from here (`from leaderboard_support import postgres_server, db_url`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from benchmarks.lab import postgres
from benchmarks.lab.serve import processes_with_argument, workers_of as worker_pids  # noqa: F401 - for the tests

ROOT = Path(__file__).resolve().parents[1]
ADMIN_TOKEN = "test-admin-token-" + uuid.uuid4().hex

PASSING_KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def channel_histogram(x_ptr, out_ptr, n_rows, n_channels, BLOCK_R: tl.constexpr):
    c = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = rows < n_rows
    values = tl.load(x_ptr + rows.to(tl.int64) * n_channels + c, mask=ok, other=0).to(tl.int32)
    counts = tl.histogram(values, 256, mask=ok)
    tl.atomic_add(out_ptr + c * 256 + tl.arange(0, 256), counts + OFFSET, sem="relaxed")


def custom_kernel(data):
    x, out = data["x"], data["out"]
    rows, channels = x.shape
    block_r = 64 if x.device.type == "cpu" else 4096
    out.zero_()
    channel_histogram[(channels, triton.cdiv(rows, block_r))](x, out, rows, channels, BLOCK_R=block_r)
    return out
'''


def kernel_source(correct: bool = True) -> str:
    """A per-channel tl.histogram kernel; the wrong one adds 1 to every bin of every program."""
    return PASSING_KERNEL.replace("OFFSET", "0" if correct else "1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SWIZZLELAB_TOKEN", None)
    env.pop("SWIZZLELAB_SERVER", None)
    env.update(extra)
    return env


def swizzlelab(*args: str, timeout: float = 240, env: dict[str, str] | None = None, cwd: Path | None = None
               ) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess."""
    return subprocess.run([sys.executable, "-m", "swizzlelab.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or child_env(), cwd=cwd)


# ---------------------------------------------------------------- Postgres


@pytest.fixture(scope="session")
def postgres_server():
    """A throw-away Postgres cluster on a free port (benchmarks.lab.postgres: initdb + pg_ctl as the `postgres` user
    when run as root); `new_database()` gives a fresh database's URL."""
    reason = postgres.unavailable()
    if reason is not None:
        pytest.skip(f"{reason} (.ci/run installs it, so these tests run in CI)")
    cluster = postgres.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def schema_at(db_url: str, revision: str, *rows_sql: str) -> None:
    """A database at an older schema `revision` (the migrations up to it), with rows inserted by `rows_sql`: what
    an upgrade finds on a deployment that ran that version."""
    from alembic import command

    from swizzlelab.leaderboard.db.engine import alembic_config, make_engine, normalize_url

    engine = make_engine(normalize_url(db_url))
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    with engine.begin() as connection:
        for sql in rows_sql:
            connection.exec_driver_sql(sql)
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    """A fresh, empty database of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'leaderboard.db'}"
    return request.getfixturevalue("postgres_server").new_database()


# ---------------------------------------------------------------- server and workers


@dataclass
class Service:
    url: str
    db_url: str
    process: subprocess.Popen[str]
    workdir: Path
    workers: list[subprocess.Popen[str]] = field(default_factory=list)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def start_worker(self, name: str, *extra: str) -> subprocess.Popen[str]:
        log = open(self.workdir / f"worker-{name}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "swizzlelab.cli", "worker", "--db", self.db_url, "--id", name, *extra],
            stdout=log, stderr=subprocess.STDOUT, text=True, env=child_env(), cwd=self.workdir,
            start_new_session=True)
        self.workers.append(proc)
        return proc

    def stop(self) -> None:
        # Workers (and any evaluator children in their process groups) are killed outright: a job they held is
        # the database's to hand out again, which is what the service promises.
        for proc in self.workers:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def start_service(db_url: str, workdir: Path, *extra: str) -> Service:
    """`swizzlelab serve` on a free port (API only unless extra says otherwise); waits for /api/health."""
    port = free_port()
    log = open(workdir / "serve.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "swizzlelab.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--db", db_url,
         "--admin-token", ADMIN_TOKEN, "--data-dir", str(workdir / "data"), *extra],
        stdout=log, stderr=subprocess.STDOUT, text=True, env=child_env(), cwd=workdir, start_new_session=True)
    service = Service(url=f"http://127.0.0.1:{port}", db_url=db_url, process=proc, workdir=workdir)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited with {proc.returncode}: {(workdir / 'serve.log').read_text()[-3000:]}")
        try:
            if httpx.get(service.url + "/api/health", timeout=2).status_code == 200:
                return service
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    service.stop()
    raise AssertionError("serve did not answer /api/health within 90 s")


def wait_for(predicate, timeout: float, what: str, every: float = 0.2):
    """The predicate's first truthy value, polled every `every` s; AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
