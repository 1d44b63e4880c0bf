"""A local worker: claim a job, heartbeat while the isolated evaluator runs it, write the run; repeat.

One worker per GPU (CUDA_VISIBLE_DEVICES picks it); a worker without a GPU takes only test jobs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from dataclasses import dataclass, field

from swizzlelab.harness.isolate import Limits
from swizzlelab.leaderboard import presence, queue
from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.execute import describe_failure, execute
from swizzlelab.leaderboard.outcome import JobSpec
from swizzlelab.leaderboard.queue import WorkerCaps
from swizzlelab.leaderboard.settings import Settings


def visible_gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs this process may use (nvidia-smi, restricted to CUDA_VISIBLE_DEVICES); [] if none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = [(idx.strip(), name.strip()) for idx, name in
            (line.split(",", 1) for line in out.splitlines() if "," in line)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        gpus = [g for g in gpus if g[0] in wanted]
    return [name for _, name in gpus]


def gpu_type_of(device_name: str, gpu_types: tuple[str, ...]) -> str | None:
    """The configured GPU type named in a device name ('NVIDIA H100 80GB HBM3' -> 'H100'), else None."""
    upper = device_name.upper()
    for gpu_type in sorted(gpu_types, key=len, reverse=True):
        if gpu_type.upper() in upper:
            return gpu_type
    return None


def default_worker_id(gpu: str | None) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{gpu or 'cpu'}"


@dataclass
class Worker:
    """Runs jobs one at a time until `stop` is set (or, with max_jobs, after that many)."""

    db: Database
    settings: Settings
    caps: WorkerCaps
    stop: threading.Event = field(default_factory=threading.Event)
    log: bool = True

    def _say(self, text: str) -> None:
        if self.log:
            print(f"[worker {self.caps.worker_id}] {text}", flush=True)

    def _heartbeat_until(self, spec: JobSpec, done: threading.Event) -> None:
        while not done.wait(self.settings.heartbeat_interval_s):
            try:
                if not queue.heartbeat(self.db, spec):
                    self._say(f"job {spec.job_id}: claim lost (re-claimed after a missed heartbeat)")
                    return
            except Exception as err:  # a database hiccup: the next beat may succeed; the timeout has slack
                self._say(f"job {spec.job_id}: heartbeat failed: {describe_failure(err)}")

    def run_one(self, spec: JobSpec) -> bool:
        """Evaluate a claimed job and record it; True if this worker's run was the one recorded."""
        self._say(f"job {spec.job_id} (submission {spec.submission_id}, {spec.task} {spec.mode}"
                  f"{' secret' if spec.secret else ''}, attempt {spec.attempt})")
        done = threading.Event()
        beat = threading.Thread(target=self._heartbeat_until, args=(spec, done), daemon=True)
        beat.start()
        outcome, error = None, ""
        try:
            outcome = execute(spec, self.settings.max_profile_bytes, self.settings.eval_budget_s,
                              Limits(compile_s=self.settings.compile_s, run_s=self.settings.run_s))
        except Exception as err:  # the service's own failure (a bad submission is a failed Outcome instead)
            error = describe_failure(err)
        finally:
            done.set()
            beat.join()
        if outcome is None:
            queue.release(self.db, spec, error, self.settings)
            return False
        recorded = queue.complete(self.db, spec, outcome, self.caps.worker_id, self.settings)
        self._say(f"job {spec.job_id}: {'passed' if outcome.passed else 'failed'}"
                  f"{'' if recorded else ' (not recorded: another worker holds the job now)'}")
        return recorded

    def run(self, max_jobs: int | None = None) -> int:
        """Poll and run jobs, listed in the workers table meanwhile; returns how many runs it recorded."""
        with presence.announced(self.db, self.caps, self.settings):
            return self._poll(max_jobs)

    def _poll(self, max_jobs: int | None) -> int:
        recorded = 0
        handled = 0
        backend = "Triton interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "CUDA"
        self._say(f"ready ({'GPU ' + self.caps.gpu_type if self.caps.gpu_type else 'no GPU: test jobs only'}; "
                  f"kernels run on {backend})")
        while not self.stop.is_set() and (max_jobs is None or handled < max_jobs):
            try:
                spec = queue.claim(self.db, self.caps, self.settings)
            except Exception as err:  # the database is briefly unreachable: wait and try again
                self._say(f"claim failed: {describe_failure(err)}")
                spec = None
            if spec is None:
                self.stop.wait(self.settings.poll_interval_s)
                continue
            handled += 1
            recorded += int(self.run_one(spec))
        return recorded

