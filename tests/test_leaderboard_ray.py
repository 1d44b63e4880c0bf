"""The Ray backend on the CPU: a local Ray instance (2 CPUs, an H100 accelerator label) runs test-mode jobs as Ray
tasks; the dispatcher records their runs in SQLite, which stays the record."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from leaderboard_support import kernel_source
from swizzlelab.leaderboard import service
from swizzlelab.leaderboard.auth import create_user
from swizzlelab.leaderboard.db import Run, Submission, open_database
from swizzlelab.leaderboard.outcome import JobSpec
from swizzlelab.leaderboard.ray_backend import RayDispatcher, cluster_gpu_types, connect, task_options
from swizzlelab.leaderboard.settings import Settings


def test_resources_of_a_ray_task():
    spec = JobSpec(job_id=1, claim_token="t", submission_id=1, task="histogram", mode="ranked", secret=False,
                   secret_seed=None, code="", filename="k.py", gpu_type="H200", attempt=1)
    assert task_options(spec) == {"num_cpus": 1, "num_gpus": 1, "resources": {"accelerator_type:H200": 0.001}}
    test_spec = JobSpec(**{**spec.__dict__, "mode": "test"})
    assert task_options(test_spec) == {"num_cpus": 1, "num_gpus": 0}


def test_ray_runs_test_jobs(tmp_path):
    ray = pytest.importorskip("ray")
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'lb.db'}", heartbeat_interval_s=0.5, heartbeat_timeout_s=30)
    db = open_database(settings.db_url)
    service.seed_fresh_database(db, settings)
    with db.write() as session:
        user, _ = create_user(session, "alice")
        ids = [service.create_submission(session, settings, user.id, "histogram", "H100", "test",
                                         kernel_source(correct), f"{name}.py").id
               for correct, name in ((True, "good"), (False, "bad"))]
    handle = connect("local", num_cpus=2, resources={"accelerator_type:H100": 1})
    try:
        assert cluster_gpu_types(handle, settings.gpu_types) == ("H100",)
        recorded = RayDispatcher(db, settings, "ray-test", handle, log=False).run(max_jobs=2)
    finally:
        ray.shutdown()
    assert recorded == 2
    with db.read() as session:
        subs = [session.get(Submission, i) for i in ids]
        assert [(s.status, s.passed) for s in subs] == [("done", True), ("done", False)]
        workers = session.scalars(select(Run.worker)).all()
        assert len(workers) == 2 and all(w.startswith("ray-test@") for w in workers)
    db.dispose()
