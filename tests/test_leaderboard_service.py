"""End to end on the CPU: a real `swizzlelab serve` (uvicorn on 127.0.0.1, random port) on a fresh SQLite file and on
Postgres, CPU workers, two users, a passing and a failing Triton submission through `swizzlelab submit`; a worker
killed with SIGKILL mid-job whose job a second worker finishes; 401, 413 and 429 answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest
from sqlalchemy import select

from leaderboard_support import (  # noqa: F401 - fixtures
    ADMIN_TOKEN,
    child_env,
    db_url,
    kernel_source,
    postgres_server,
    start_service,
    wait_for,
)
from swizzlelab.leaderboard.db import Job, Run, Submission, User, open_database


@pytest.fixture
def service_env(db_url, tmp_path):  # noqa: F811
    svc = start_service(db_url, tmp_path, "--workers", "0", "--requests-per-minute", "100000")
    yield svc
    svc.stop()


def _spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "swizzlelab.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or child_env())


def _finish(proc: subprocess.Popen[str], code: int) -> subprocess.CompletedProcess[str]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == code, f"exit {proc.returncode} (wanted {code}): {out[-2000:]} {err[-2000:]}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_end_to_end(service_env, tmp_path):
    svc = service_env
    db = open_database(svc.db_url, upgrade=False)
    try:
        _end_to_end(svc, db, tmp_path)
    finally:
        db.dispose()


def _end_to_end(svc, db, tmp_path):
    # Two users: one made on the database directly, one through the API; the token is the last word. (CLI
    # processes run side by side where they can: each one spends seconds importing torch.)
    add_alice = _spawn("user", "add", "alice", "--db", svc.db_url)
    add_bob = _spawn("user", "add", "bob", "--server", svc.url, "--token", ADMIN_TOKEN)
    alice, bob = (_finish(p, 0).stdout.split()[-1] for p in (add_alice, add_bob))
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(kernel_source(correct=True))
    bad.write_text(kernel_source(correct=False))

    # Worker A claims alice's job and is killed with SIGKILL mid-job; worker B re-runs it after the heartbeat expires.
    worker_a = svc.start_worker("worker-a", "--heartbeat-interval", "0.5", "--heartbeat-timeout", "4")
    submit = _spawn("submit", "histogram", str(good), "--mode", "test", "--gpu", "H100", "--server", svc.url,
                    env=child_env(SWIZZLELAB_TOKEN=alice))

    def claimed_by_a():
        with db.read() as session:
            return session.scalar(select(Job.id).where(Job.claimed_by == "worker-a", Job.status == "running"))

    job_id = wait_for(claimed_by_a, 90, "worker A to claim the job")
    os.kill(worker_a.pid, signal.SIGKILL)
    worker_a.wait(timeout=10)
    svc.start_worker("worker-b", "--heartbeat-interval", "0.5", "--heartbeat-timeout", "4")
    out = _finish(submit, 0).stdout
    assert "passed" in out.splitlines()[-1] and "Passed 4/4" in out, out

    # Bob's wrong kernel fails: exit 1, with the failing verdict in the output. Meanwhile a bad token and a bad
    # mode get exit 2 with one line, and `leaderboard show` finds no ranked run yet.
    failing = _spawn("submit", "histogram", str(bad), "--mode", "test", "--server", svc.url,
                     env=child_env(SWIZZLELAB_TOKEN=bob))
    bad_token = _spawn("submit", "histogram", str(good), "--server", svc.url, env=child_env(SWIZZLELAB_TOKEN="nope"))
    bad_mode = _spawn("submit", "histogram", str(good), "--mode", "fast", "--server", svc.url,
                      env=child_env(SWIZZLELAB_TOKEN=alice))
    show = _spawn("leaderboard", "show", "histogram", "--gpu", "H100", "--db", svc.db_url)
    refused = _finish(bad_token, 2)
    assert "401" in refused.stderr and "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert "fast" in _finish(bad_mode, 2).stderr
    assert "no ranked runs yet" in _finish(show, 0).stdout
    failed = _finish(failing, 1)
    assert "FAILED" in failed.stdout.splitlines()[-1] and "elements differ" in failed.stdout, failed.stdout

    # The same verdicts through the API ...
    with svc.client(alice) as api:
        mine = api.get("/api/submissions").json()
        assert [(s["user"], s["status"], s["passed"]) for s in mine] == [("alice", "done", True)]
        run = api.get(f"/api/runs/{mine[0]['runs'][0]['id']}").json()
        assert run["passed"] is True and run["worker"] == "worker-b" and "Passed 4/4" in run["report_text"]
        assert api.get(f"/api/submissions/{mine[0]['id'] + 1}").status_code == 404  # bob's is not alice's
    with svc.client(bob) as api:
        theirs = api.get("/api/submissions").json()
        assert [(s["user"], s["status"], s["passed"]) for s in theirs] == [("bob", "done", False)]
        assert theirs[0]["runs"][0]["reason"]

    # ... and in the database: one run per job, the killed worker's job finished once, by worker B.
    with db.read() as session:
        verdicts = {(s.user.name, s.passed, s.status) for s in session.scalars(select(Submission))}
        assert verdicts == {("alice", True, "done"), ("bob", False, "done")}
        job = session.get(Job, job_id)
        assert job.status == "done" and job.attempts == 2 and job.claimed_by == "worker-b"
        runs = session.scalars(select(Run)).all()
        assert sorted(r.job_id for r in runs) == sorted({r.job_id for r in runs}) and len(runs) == 2
        assert session.scalar(select(User.name).where(User.name == "bob")) == "bob"

    # Bad tokens: 401 from the API.
    assert httpx.get(svc.url + "/api/me", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(svc.url + "/api/submissions").status_code == 401

    # Limits: code size -> 413; a per-leaderboard limit of two test submissions per hour (alice made one) -> 429 +
    # Retry-After. A benchmark needs an H100 worker, and only CPU workers are connected: 409, one line.
    with svc.client(ADMIN_TOKEN) as admin:
        assert admin.put("/api/rate-limits", json={"task": "histogram", "gpu_type": "H100", "mode": "test",
                                                   "max_submissions": 2}).status_code == 200
    with svc.client(alice) as api:
        big = api.post("/api/submissions", json={"task": "histogram", "mode": "test", "code": "#" * 70_000})
        assert big.status_code == 413 and "limit" in big.json()["detail"]
        benchmark = api.post("/api/submissions", json={"task": "histogram", "mode": "benchmark", "code": "x = 1\n"})
        assert benchmark.status_code == 409 and benchmark.json()["detail"].startswith("no H100 worker connected")
        body = {"task": "histogram", "gpu_type": "H100", "mode": "test", "code": good.read_text()}
        assert api.post("/api/submissions", json=body).status_code == 201
        limited = api.post("/api/submissions", json=body)
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) > 0
        assert "rate limit" in limited.json()["detail"]
        garbled = api.post("/api/submissions", content=b"{not json", headers={"Content-Type": "application/json"})
        assert garbled.status_code == 422 and "\n" not in garbled.json()["detail"]
