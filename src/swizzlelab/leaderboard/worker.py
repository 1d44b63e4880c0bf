"""A local worker: claim a job, heartbeat while the isolated evaluator runs it, write the run; repeat. With no job
waiting, it makes a suggestion (which block order would be faster) instead.

One worker per GPU (CUDA_VISIBLE_DEVICES picks it); a worker without a GPU takes only test jobs (and suggestions
that time nothing).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from swizzlelab.harness.isolate import time_library_ahead
from swizzlelab.harness.isolate.preempt import GiveWay, giving_way
from swizzlelab.leaderboard import presence, queue, suggestions
from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.execute import (
    SuggestFailed,
    SuggestYielded,
    describe_failure,
    evaluation_limits,
    execute,
    kept_caches,
    suggestion,
)
from swizzlelab.leaderboard.outcome import JobSpec
from swizzlelab.leaderboard.queue import WorkerCaps
from swizzlelab.leaderboard.settings import Settings
from swizzlelab.leaderboard.suggestions import SuggestSpec
from swizzlelab.runtime import nvidia_gpu_names


def visible_gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs this process may use (nvidia-smi, restricted to CUDA_VISIBLE_DEVICES); [] if none."""
    return nvidia_gpu_names()


def gpu_type_of(device_name: str, gpu_types: tuple[str, ...]) -> str | None:
    """The configured GPU type named in a device name ('NVIDIA H100 80GB HBM3' -> 'H100'), else None."""
    upper = device_name.upper()
    for gpu_type in sorted(gpu_types, key=len, reverse=True):
        if gpu_type.upper() in upper:
            return gpu_type
    return None


def default_worker_id(gpu: str | None) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{gpu or 'cpu'}"


# An idle worker looks again this often for library rows to time ahead (kept rows expire after 30 minutes).
LIBRARY_AHEAD_EVERY_S = 600.0
# ... once it has had no job for this long (a job arriving meanwhile waits for one library child, ~5-15 s).
IDLE_BEFORE_AHEAD_S = 30.0
# How often low-priority work asks whether a submission's job waits (its children are then killed): a job waits at
# most about this long behind it, and one indexed query a second is nothing to the database.
GIVE_WAY_POLL_S = 1.0


@dataclass
class Worker:
    """Runs jobs one at a time until `stop` is set (or, with max_jobs, after that many)."""

    db: Database
    settings: Settings
    caps: WorkerCaps
    stop: threading.Event = field(default_factory=threading.Event)
    log: bool = True
    # Tasks whose library rows this idle GPU worker still has to time ahead, and when that list was last made.
    _ahead: list[str] = field(default_factory=list)
    _ahead_at: float | None = None
    _last_job_end: float = field(default_factory=time.monotonic)
    # The scopes of the work under way (a job, a suggestion, library rows): halt() cancels them.
    _scopes: list[GiveWay] = field(default_factory=list)

    def halt(self) -> None:
        """Stop now (SIGTERM or Ctrl-C of the worker or of serve): the work under way has its children killed and
        goes back to the queue uncounted; the poll loop ends."""
        self.stop.set()
        for scope in list(self._scopes):
            scope.cancel()

    @contextlib.contextmanager
    def _scope(self, reason: str) -> Iterator[GiveWay]:
        scope = GiveWay(reason)
        self._scopes.append(scope)
        try:
            with giving_way(scope):
                if self.stop.is_set():
                    scope.cancel()
                yield scope
        finally:
            self._scopes.remove(scope)

    def _say(self, text: str) -> None:
        if self.log:
            print(f"[worker {self.caps.worker_id}] {text}", flush=True)

    @staticmethod
    @contextlib.contextmanager
    def _every(period_s: float, tick: Callable[[], bool]) -> Iterator[None]:
        """While the block runs, `tick()` every `period_s` in a thread of its own, until it returns False."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(period_s) and tick():
                pass

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _heartbeating(self, beat: Callable[[], bool], what: str) -> contextlib.AbstractContextManager[None]:
        def tick() -> bool:
            try:
                if not beat():
                    self._say(f"{what}: claim lost (re-claimed after a missed heartbeat)")
                    return False
            except Exception as err:  # a database hiccup: the next beat may succeed; the timeout has slack
                self._say(f"{what}: heartbeat failed: {describe_failure(err)}")
            return True

        return self._every(self.settings.heartbeat_interval_s, tick)

    @contextlib.contextmanager
    def _giving_way(self) -> Iterator[GiveWay]:
        """Low-priority work inside the block: its isolated children are killed as soon as a job this worker could
        run is queued (checked every GIVE_WAY_POLL_S), so the job starts within about a second."""

        def tick() -> bool:
            try:
                waiting = queue.job_waiting(self.db, self.caps)
            except Exception:  # the database briefly unreachable: the work goes on
                return True
            if waiting:
                scope.cancel()
            return not waiting

        with self._scope("gave way to a submission's job") as scope, self._every(GIVE_WAY_POLL_S, tick):
            yield scope

    def run_one(self, spec: JobSpec) -> bool:
        """Evaluate a claimed job and record it; True if this worker's run was the one recorded."""
        self._say(f"job {spec.job_id} (submission {spec.submission_id}, {spec.task} {spec.mode}"
                  f"{' secret' if spec.secret else ''}"
                  f"{f' + secret job {spec.paired.job_id} in the same child' if spec.paired else ''}, attempt {spec.attempt})")
        outcome, error = None, ""
        with self._heartbeating(lambda: queue.heartbeat(self.db, spec), f"job {spec.job_id}"), \
                self._scope("the worker is stopping") as scope:
            try:
                outcome = execute(spec, self.settings.max_profile_bytes, self.settings.eval_budget_s,
                                  evaluation_limits(self.settings))
            except Exception as err:  # the service's own failure (a bad submission is a failed Outcome instead)
                error = describe_failure(err)
        if scope.cancelled:  # stopped mid-run: its child was killed by us, not by the code; it runs again later
            queue.give_back(self.db, spec)
            self._say(f"job {spec.job_id}: given back to the queue (the worker is stopping)")
            return False
        if outcome is None:
            queue.release(self.db, spec, error, self.settings)
            return False
        recorded = queue.complete(self.db, spec, outcome, self.caps.worker_id, self.settings)
        self._say(f"job {spec.job_id}: {'passed' if outcome.passed else 'failed'}"
                  f"{'' if recorded else ' (not recorded: another worker holds the job now)'}")
        return recorded

    def run_suggestion(self, spec: SuggestSpec) -> bool:
        """Make a claimed suggestion and store it (or its note); True if this worker's result was stored."""
        what = f"suggestion for submission {spec.submission_id}"
        self._say(f"{what} ({spec.task}{', timed on this GPU' if spec.measure else ', predicted'}, attempt "
                  f"{spec.attempt})")
        with self._heartbeating(lambda: suggestions.heartbeat(self.db, spec), what), self._giving_way() as scope:
            try:
                try:
                    made = suggestion(spec, self.settings, lambda text: self._say(f"{what}: {text}"),
                                      lambda: scope.cancelled or queue.job_waiting(self.db, self.caps))
                except Exception:
                    if scope.cancelled:  # its child was killed to give way: not the code's failure, nor ours
                        raise SuggestYielded(scope.reason) from None
                    raise
                if scope.cancelled:  # a child of it was killed to give way: what it made may lack that child's part
                    raise SuggestYielded(scope.reason)
            except SuggestYielded:  # lower priority: a submission's job came in; the suggestion waits its turn
                suggestions.yielded(self.db, spec)
                self._say(f"{what}: gave way to a submission's job")
                return False
            except SuggestFailed as err:  # the code gave no suggestion: a note, not the service's failure
                suggestions.fail(self.db, spec, f"no suggestion: {err}", self.settings, retry=False)
                self._say(f"{what}: none ({err})")
                return False
            except Exception as err:  # the service's own failure: tried again, then a note
                suggestions.fail(self.db, spec, describe_failure(err), self.settings, retry=True)
                return False
        stored = suggestions.complete(self.db, spec, made)
        self._say(f"{what}: {made.headline}{'' if stored else ' (not stored: claim lost)'}")
        return stored

    def _time_ahead(self) -> bool:
        """While idle, a GPU worker times one task's library rows (the task's own implementations, shown beside
        each ranked result) unless it keeps them already, so a submission does not wait ~15 s for them. One task
        per idle poll; a job that arrives meanwhile has its child killed (it waits about a second). True if it
        worked (or gave way)."""
        if not self.settings.library_ahead or self.caps.gpu_type is None:
            return False
        now = time.monotonic()
        if now - self._last_job_end < IDLE_BEFORE_AHEAD_S:  # a user's next submission often follows the last
            return False
        if not self._ahead and (self._ahead_at is None or now - self._ahead_at > LIBRARY_AHEAD_EVERY_S):
            self._ahead, self._ahead_at = queue.gpu_tasks(self.db, self.caps), now
        while self._ahead:
            task = self._ahead.pop(0)
            with self._giving_way() as scope:
                try:
                    timed = time_library_ahead(task, "ranked", limits=evaluation_limits(self.settings),
                                               budget_s=self.settings.eval_budget_s, kept_caches=kept_caches())
                except Exception as err:  # a library that cannot be timed here: its rows are timed with the job
                    timed = 0
                    if not scope.cancelled:
                        self._say(f"library rows of {task} not timed ahead: {describe_failure(err)}")
                        continue
            if scope.cancelled:  # a killed row is not kept; this task comes first the next time the worker idles
                self._ahead.insert(0, task)
                self._say(f"library rows of {task}: gave way to a submission's job")
                return True
            if timed:
                self._say(f"timed {timed} library row(s) of {task} ahead of its submissions")
                return True
        return False

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
            wish = None
            try:
                spec = queue.claim(self.db, self.caps, self.settings)
                # suggestions only when no submission's job waits for this worker: they run at lower priority
                if spec is None and self.settings.suggestions:
                    wish = suggestions.claim(self.db, self.caps.worker_id, self.caps.types(), self.settings)
            except Exception as err:  # the database is briefly unreachable: wait and try again
                self._say(f"claim failed: {describe_failure(err)}")
                spec = None
            if wish is not None:
                handled += 1
                self.run_suggestion(wish)
                self._last_job_end = time.monotonic()
                continue
            if spec is None:
                if not self._time_ahead():
                    self.stop.wait(self.settings.poll_interval_s)
                continue
            handled += len(spec.specs())  # a paired claim holds two jobs
            recorded += len(spec.specs()) if self.run_one(spec) else 0
            self._last_job_end = time.monotonic()
        return recorded

