"""`serve`'s local workers, supervised: each runs as a child process; one that dies is reaped, its jobs are made
claimable at once, its temporary folders are removed, and it is started again (with a back-off if it keeps dying).

A job whose evaluation kills its worker twice gets a verdict from the queue (queue.KILLS_FOR_VERDICT).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from swizzlelab.leaderboard import queue
from swizzlelab.leaderboard.db import Database

# The evaluator and the job runner name their temporary folders after the process that made them.
TEMP_PATTERNS = ("swizzlelab-isolate-{pid}-*", "swizzlelab-job-{pid}-*", "swizzlelab-ncu-{pid}-*",
                 "swizzlelab-tcache-{pid}")
# A worker that dies sooner than this after its start is restarted after a back-off that doubles each time.
STABLE_S = 30.0
MAX_BACKOFF_S = 60.0


@dataclass
class Slot:
    """One supervised worker: how to start it, the running process, and its history."""

    index: int
    command: list[str]
    env: dict[str, str]
    label: str
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
        removed = remove_temp_folders(pid)
        slot.quick_deaths = slot.quick_deaths + 1 if now - slot.started < STABLE_S else 0
        delay = 0.0 if slot.quick_deaths == 0 else min(MAX_BACKOFF_S, 2.0 ** (slot.quick_deaths - 1))
        slot.restart_at = now + delay
        held = f"; job(s) {', '.join(map(str, jobs))} will run again" if jobs else ""
        self.say(f"worker {dead_id} (pid {pid}) exited with {how}{held}; removed {removed} temporary folder(s); "
                 f"restarting in {delay:.0f} s")

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
            remove_temp_folders(proc.pid)


def remove_temp_folders(pid: int) -> int:
    """Remove what a (dead) worker process left in the temporary directory; returns how many folders."""
    count = 0
    for pattern in TEMP_PATTERNS:
        for path in glob.glob(os.path.join(tempfile.gettempdir(), pattern.format(pid=pid))):
            shutil.rmtree(path, ignore_errors=True)
            count += not os.path.exists(path)
    return count
