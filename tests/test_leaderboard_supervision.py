"""`serve` supervises its workers: a worker killed mid-job is reaped, its temporary folders removed and a new one
started; its job runs again exactly once, and a job that takes its worker down twice gets a verdict.

A real `swizzlelab serve --workers 1` on 127.0.0.1 (one CPU worker, test jobs), a real SQLite database."""

from __future__ import annotations

import glob
import os
import signal
import tempfile
import time

from sqlalchemy import select

from leaderboard_support import ADMIN_TOKEN, kernel_source, start_service, wait_for, worker_pids
from swizzlelab.leaderboard.db import open_database
from swizzlelab.leaderboard.db.models import Job, Run, Submission

# Sleeps in every call, so a test can kill its worker while the evaluation runs.
SLOW_KERNEL = kernel_source(correct=True).replace("def custom_kernel(data):\n",
                                                   "def custom_kernel(data):\n    import time\n    time.sleep(60)\n")


def test_serve_restarts_killed_workers_and_judges_a_job_that_kills_them_twice(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'lb.db'}"
    svc = start_service(db_url, tmp_path, "--workers", "1", "--heartbeat-timeout", "6")
    db = open_database(db_url)
    try:
        with svc.client(ADMIN_TOKEN) as admin:
            token = admin.post("/api/users", json={"name": "mallory"}).json()["token"]
        with svc.client(token) as api:
            slow = api.post("/api/submissions", json={"task": "histogram", "mode": "test", "code": SLOW_KERNEL,
                                                      "filename": "slow.py"}).json()["id"]

            def running_attempt(n: int):
                def check():
                    with db.read() as session:
                        job = session.scalar(select(Job).where(Job.submission_id == slow))
                        return job if job.status == "running" and job.attempts == n else None
                return check

            killed = []
            for attempt in (1, 2):
                job = wait_for(running_attempt(attempt), 120, f"attempt {attempt} to run")
                time.sleep(3)  # the evaluation is under way: its isolated child has started
                pids = wait_for(lambda: worker_pids(svc.process.pid), 30, "a worker process")
                assert len(pids) == 1 and job.claimed_by.startswith("serve")
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            # The job is judged, never run a third time; serve has a live worker again and it works.
            verdict = wait_for(lambda: api.get(f"/api/submissions/{slow}").json().get("status") == "done", 120,
                                "the verdict on the job that killed its worker twice")
            assert verdict
            view = api.get(f"/api/submissions/{slow}").json()
            assert view["passed"] is False and "killed its evaluator" in view["runs"][0]["reason"]
            honest = api.post("/api/submissions", json={"task": "histogram", "mode": "test",
                                                        "code": kernel_source(correct=True)}).json()["id"]
            wait_for(lambda: api.get(f"/api/submissions/{honest}").json().get("status") == "done", 180,
                      "an honest submission after the kills")
            assert api.get(f"/api/submissions/{honest}").json()["passed"] is True
        with db.read() as session:
            job = session.scalar(select(Job).where(Job.submission_id == slow))
            runs = session.scalars(select(Run).where(Run.submission_id == slow)).all()
            assert job.attempts == 2 and len(runs) == 1 and session.get(Submission, slow).status == "done"
        assert svc.process.poll() is None and len(worker_pids(svc.process.pid)) == 1
        for pid in killed:  # the dead workers' isolated dirs (with the submission's code) are gone
            assert not glob.glob(os.path.join(tempfile.gettempdir(), f"swizzlelab-*-{pid}-*"))
        log = (tmp_path / "serve.log").read_text()
        assert log.count("exited with signal SIGKILL") == 2 and "will run again" in log
    finally:
        db.dispose()
        svc.stop()
