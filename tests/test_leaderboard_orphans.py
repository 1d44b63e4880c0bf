"""Issue 57: every process of an evaluation ends with its worker and with the service, however they end: a worker
killed with SIGKILL, Ctrl-C of `serve` (its job goes back to the queue, uncounted), SIGKILL of serve's whole process
group (the next serve sweeps the folders it left); and an honest submission passes after it all.

A real `swizzlelab serve --workers 1` on 127.0.0.1 (one CPU worker), a real SQLite database; the submission starts a
`sleep` of its own (no longer the sandbox's program) and then sleeps in every call.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import tempfile

import pytest

from leaderboard_support import (
    ADMIN_TOKEN,
    kernel_source,
    processes_with_argument,
    start_service,
    wait_for,
    worker_pids,
)
from swizzlelab.harness.isolate import reaper
from swizzlelab.harness.isolate.sandbox import private_root_works

pytestmark = pytest.mark.skipif(not private_root_works(), reason="no PID and mount namespaces on this machine")


def _sleeper(mark: str) -> str:
    return ("import subprocess\nimport time\n\nsubprocess.Popen(['sleep', '" + mark + "'])\n\n\n"
            "def custom_kernel(data):\n    time.sleep(600)\n")


def _left(mark: str, workers: list[int]) -> list[int]:
    """Processes of the evaluation still alive: the submission's own `sleep`, and every process still running the
    sandbox's program for one of `workers`."""
    return processes_with_argument(mark) + [pid for pid, parent in reaper.sandboxed_processes().items()
                                            if parent in workers]


def _folders(pid: int) -> list[str]:
    """The evaluator `pid`'s folders: its children's, its jobs', its kept Triton caches."""
    return [path for path in glob.glob(os.path.join(tempfile.gettempdir(), f"swizzlelab-*-{pid}*"))
            if os.path.basename(path).split("-")[2] == str(pid)]


def test_nothing_of_an_evaluation_outlives_its_worker_or_the_service(tmp_path):
    mark = f"{random.randrange(10**6, 10**7)}.5"
    db_url = f"sqlite:///{tmp_path / 'lb.db'}"
    options = ("--workers", "1", "--heartbeat-timeout", "6")
    svc = start_service(db_url, tmp_path, *options)
    killed: list[int] = []
    try:
        with svc.client(ADMIN_TOKEN) as admin:
            token = admin.post("/api/users", json={"name": "mallory"}).json()["token"]
        with svc.client(token) as api:
            slow = api.post("/api/submissions", json={"task": "histogram", "mode": "test", "code": _sleeper(mark),
                                                      "filename": "sleeper.py"}).json()["id"]
        # 1. SIGKILL of the worker mid-run.
        wait_for(lambda: processes_with_argument(mark), 120, "the evaluation to start")
        worker = worker_pids(svc.process.pid)[0]
        os.kill(worker, signal.SIGKILL)
        killed.append(worker)
        wait_for(lambda: not _left(mark, killed), 15, "the evaluation to end with its killed worker")
        wait_for(lambda: not _folders(worker), 15, "serve to remove the dead worker's folders")
        # 2. Ctrl-C of serve (SIGINT to its process group, as a terminal sends it) while the job runs again.
        wait_for(lambda: processes_with_argument(mark), 120, "the job to run again")
        workers = worker_pids(svc.process.pid)
        os.killpg(svc.process.pid, signal.SIGINT)
        svc.process.wait(timeout=40)
        killed += workers
        assert not _left(mark, killed) and not _folders(workers[0])
        log = (tmp_path / "serve.log").read_text()
        assert "given back to the queue" in log, log[-2000:]

        # 3. SIGKILL of the whole process group of a new serve: no one left to clean up but the kernel.
        svc = start_service(db_url, tmp_path, *options)
        wait_for(lambda: processes_with_argument(mark), 120, "the given-back job to run again")
        workers = worker_pids(svc.process.pid)
        os.killpg(svc.process.pid, signal.SIGKILL)
        svc.process.wait(timeout=20)
        killed += workers
        wait_for(lambda: not _left(mark, killed), 15, "the evaluation to end with the killed service")
        assert _folders(workers[0])  # nobody removed its folder ...

        svc = start_service(db_url, tmp_path, *options)  # ... until the next serve sweeps it
        assert not _folders(workers[0]) and "swept what dead evaluators left" in (tmp_path / "serve.log").read_text()
        with svc.client(token) as api:
            honest = api.post("/api/submissions", json={"task": "histogram", "mode": "test",
                                                        "code": kernel_source(correct=True)}).json()["id"]
            for sub in (slow, honest):
                wait_for(lambda: api.get(f"/api/submissions/{sub}").json()["status"] == "done", 180, f"{sub} done")
            verdict = api.get(f"/api/submissions/{slow}").json()
            # Killed twice (the worker, the service): a verdict. The Ctrl-C was not counted.
            assert verdict["passed"] is False and "killed its evaluator" in verdict["runs"][0]["reason"]
            assert [j["attempts"] for j in verdict["jobs"]] == [2]
            assert api.get(f"/api/submissions/{honest}").json()["passed"] is True
        assert not _left(mark, killed)
    finally:
        svc.stop()
        for pid in processes_with_argument(mark):  # only if the test failed: its own submission's processes
            os.kill(pid, signal.SIGKILL)
