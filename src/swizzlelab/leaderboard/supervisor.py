"""`serve`'s local workers, supervised: each runs as a child process; one that dies is reaped (every process of its
evaluation killed, its cgroups and temporary folders removed), its jobs are made claimable at once, and it is
started again (with a back-off if it keeps dying). Which GPU types its workers will serve once they are up.

A job whose evaluation kills its worker twice gets a verdict from the queue (queue.KILLS_FOR_VERDICT).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import select

from swizzlelab.harness.isolate import reaper
from swizzlelab.leaderboard import queue
from swizzlelab.leaderboard.db import Database
from swizzlelab.leaderboard.db.models import WorkerPresence
# A worker that dies sooner than this after its start is restarted after a back-off that doubles each time.
STABLE_S = 30.0
MAX_BACKOFF_S = 60.0
# A worker that keeps dying this many times in a row at start counts no longer as starting: its GPU type is then
# refused as having no worker, as for any other deployment.
STARTING_DEATHS = 3


@dataclass
class Slot:
    """One supervised worker: how to start it, the running process, and its history."""

    index: int
    command: list[str]
    env: dict[str, str]
    label: str
    gpu_type: str | None = None  # the leaderboard GPU type it will serve (None: test jobs only)
    announced: str = ""  # the worker id last seen announced in the workers table
    proc: subprocess.Popen[bytes] | None = None
    worker_id: str = ""
    generation: int = 0
    started: float = 0.0
    deaths: int = 0
    quick_deaths: int = 0
    restart_at: float = 0.0


@dataclass
class Supervisor:
    """Starts the workers and watches them from a thread until `stop()`."""

    db: Database
    slots: list[Slot]
    say: Callable[[str], None] = print
    preexec: Callable[[], None] | None = None
    interval_s: float = 0.5
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)
        self._thread = threading.Thread(target=self._watch, name="worker-supervisor", daemon=True)
        self._thread.start()

    def _spawn(self, slot: Slot) -> None:
        slot.generation += 1
        # A fresh id per start: a claim of the dead process can never be taken for the new one's.
        slot.worker_id = f"serve{os.getpid()}-w{slot.index}.{slot.generation}{slot.label}"
        slot.proc = subprocess.Popen(slot.command + ["--id", slot.worker_id], env=slot.env, preexec_fn=self.preexec)
        slot.started = time.monotonic()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            for slot in self.slots:
                self.check(slot)

    def check(self, slot: Slot) -> None:
        """Reap a dead worker and restart it when its back-off has passed (called by the watcher thread)."""
        now = time.monotonic()
        if slot.proc is not None:
            code = slot.proc.poll()
            if code is None:
                return
            self._bury(slot, code, now)
        if not self._stop.is_set() and now >= slot.restart_at:
            self._spawn(slot)
            self.say(f"worker {slot.worker_id} started again (pid {slot.proc.pid if slot.proc else '?'})")

    def _bury(self, slot: Slot, code: int, now: float) -> None:
        assert slot.proc is not None
        pid, dead_id = slot.proc.pid, slot.worker_id
        slot.proc = None
        slot.deaths += 1
        how = f"signal {signal.Signals(-code).name}" if code < 0 and -code in signal.Signals._value2member_map_ \
            else f"code {code}"
        try:
            jobs = queue.worker_lost(self.db, dead_id)
        except Exception as err:  # the database may be briefly away; the heartbeat timeout still frees the jobs
            jobs = []
            self.say(f"could not release the jobs of worker {dead_id}: {type(err).__name__}: {err}")
        left = reaper.reap(pid)
        slot.quick_deaths = slot.quick_deaths + 1 if now - slot.started < STABLE_S else 0
        delay = 0.0 if slot.quick_deaths == 0 else min(MAX_BACKOFF_S, 2.0 ** (slot.quick_deaths - 1))
        slot.restart_at = now + delay
        held = f"; job(s) {', '.join(map(str, jobs))} will run again" if jobs else ""
        self.say(f"worker {dead_id} (pid {pid}) exited with {how}{held}; ended {left.processes} process(es) of its "
                 f"evaluation, removed {left.folders} temporary folder(s); restarting in {delay:.0f} s")

    def starting_types(self) -> frozenset[str]:
        """The GPU types of workers started here that have not announced themselves yet (nor died at start
        STARTING_DEATHS times in a row): a submission for them waits for them instead of being refused."""
        waiting = {slot.worker_id: slot for slot in self.slots if slot.gpu_type and slot.announced != slot.worker_id
                   and slot.quick_deaths < STARTING_DEATHS and not self._stop.is_set()}
        if not waiting:
            return frozenset()
        with self.db.read() as session:
            for name in session.scalars(select(WorkerPresence.name).where(WorkerPresence.name.in_(waiting))):
                waiting.pop(name).announced = name
        return frozenset(slot.gpu_type for slot in waiting.values() if slot.gpu_type)

    def alive(self) -> int:
        return sum(1 for slot in self.slots if slot.proc is not None and slot.proc.poll() is None)

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        procs = [slot.proc for slot in self.slots if slot.proc is not None]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for proc in procs:
            reaper.reap(proc.pid)
