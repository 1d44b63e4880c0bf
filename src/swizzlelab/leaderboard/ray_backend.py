"""Ray scale-out: a dispatcher claims jobs from the database and runs each evaluation as a Ray task that needs one
GPU of the leaderboard's type (test jobs need one CPU); results come back to the dispatcher, which records them.

The database stays the record: Ray only executes. Ray is imported here only, and only when --ray is used.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.leaderboard import presence, queue
from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.execute import describe_failure, execute
from swizzlelab.leaderboard.outcome import JobSpec, Outcome
from swizzlelab.leaderboard.queue import WorkerCaps
from swizzlelab.leaderboard.settings import Settings

ACCELERATOR_PREFIX = "accelerator_type:"


def connect(address: str, num_cpus: int | None = None, resources: dict[str, float] | None = None) -> Any:
    """ray.init: address 'local' starts a Ray instance in this process tree; else an existing cluster's address."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs the ray package: pip install -e '.[serve]'") from None
    if ray.is_initialized():
        return ray
    try:
        if address == "local":
            ray.init(num_cpus=num_cpus, resources=resources or None, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except ConnectionError as err:
        raise UserError(f"cannot connect to Ray at {address}: {str(err).splitlines()[0]}") from None
    return ray


def cluster_gpu_types(ray: Any, gpu_types: tuple[str, ...]) -> tuple[str, ...]:
    """The configured GPU types the cluster has nodes for (Ray labels NVIDIA nodes accelerator_type:H100 etc.)."""
    present = {key[len(ACCELERATOR_PREFIX):].upper() for key in ray.cluster_resources() if key.startswith(ACCELERATOR_PREFIX)}
    return tuple(t for t in gpu_types if t.upper() in present)


def task_options(spec: JobSpec) -> dict[str, Any]:
    """Ray resources of one evaluation: a whole GPU of the leaderboard's type, or one CPU for the interpreter."""
    if spec.mode == "test":
        return {"num_cpus": 1, "num_gpus": 0}
    return {"num_cpus": 1, "num_gpus": 1, "resources": {f"{ACCELERATOR_PREFIX}{spec.gpu_type}": 0.001}}


def _remote_execute(spec: JobSpec, max_profile_bytes: int, budget_s: float) -> Outcome:
    # Runs in a Ray worker process; execute() hands the code to the isolated evaluator's own child process.
    return execute(spec, max_profile_bytes, budget_s)


@dataclass
class RayDispatcher:
    """Keeps up to `max_inflight` Ray tasks running, heartbeats their jobs, records their outcomes."""

    db: Database
    settings: Settings
    worker_id: str
    ray: Any
    max_inflight: int = 0  # 0: the cluster's GPU count, or its CPU count when it has no GPU
    stop: threading.Event = field(default_factory=threading.Event)
    log: bool = True

    def _say(self, text: str) -> None:
        if self.log:
            print(f"[ray {self.worker_id}] {text}", flush=True)

    def capacity(self) -> int:
        if self.max_inflight > 0:
            return self.max_inflight
        resources = self.ray.cluster_resources()
        return max(1, int(resources.get("GPU", 0)) or int(resources.get("CPU", 1)))

    def run(self, max_jobs: int | None = None) -> int:
        """Dispatch until stopped (or until max_jobs jobs were handled); returns how many runs were recorded."""
        remote = self.ray.remote(_remote_execute)
        caps = WorkerCaps(worker_id=self.worker_id, gpu_type=None,
                          gpu_types=cluster_gpu_types(self.ray, self.settings.gpu_types))
        self._say(f"ready: GPU types {', '.join(caps.gpu_types) or 'none (test jobs only)'}, "
                  f"{self.capacity()} evaluations at a time")
        with presence.announced(self.db, caps, self.settings):
            return self._dispatch(remote, caps, max_jobs)

    def _dispatch(self, remote: Any, caps: WorkerCaps, max_jobs: int | None) -> int:
        inflight: dict[Any, JobSpec] = {}
        handled = recorded = 0
        last_beat = time.monotonic()
        while not self.stop.is_set() and (max_jobs is None or handled < max_jobs or inflight):
            while len(inflight) < self.capacity() and (max_jobs is None or handled < max_jobs):
                spec = queue.claim(self.db, caps, self.settings)
                if spec is None:
                    break
                handled += len(spec.specs())  # a paired claim holds two jobs
                ref = remote.options(**task_options(spec)).remote(spec, self.settings.max_profile_bytes,
                                                                  self.settings.eval_budget_s)
                inflight[ref] = spec
                self._say(f"job {spec.job_id} -> Ray ({spec.task} {spec.mode}{' secret' if spec.secret else ''})")
            if time.monotonic() - last_beat >= self.settings.heartbeat_interval_s:
                for spec in list(inflight.values()):
                    queue.heartbeat(self.db, spec)
                last_beat = time.monotonic()
            if not inflight:
                self.stop.wait(self.settings.poll_interval_s)
                continue
            ready, _ = self.ray.wait(list(inflight), num_returns=1, timeout=self.settings.poll_interval_s)
            for ref in ready:
                spec = inflight.pop(ref)
                try:
                    outcome = self.ray.get(ref)
                except Exception as err:  # the Ray task itself failed (node lost, ...): the job goes back
                    queue.release(self.db, spec, describe_failure(err), self.settings)
                    continue
                ok = queue.complete(self.db, spec, outcome, f"{self.worker_id}@{outcome.host}", self.settings)
                recorded += len(spec.specs()) if ok else 0
                self._say(f"job {spec.job_id}: {'passed' if outcome.passed else 'failed'}"
                          f"{'' if ok else ' (not recorded: claim lost)'}")
        return recorded
