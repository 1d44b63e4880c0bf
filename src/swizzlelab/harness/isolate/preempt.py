"""Work that gives way: isolated children started inside a `GiveWay` scope are killed when it is cancelled, so a
worker's low-priority work (library rows timed ahead, suggestions) never holds a submission's job back."""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Any, Iterator, Protocol

# The scope of the thread that starts children: a worker runs its work in its own thread, and local workers share a
# process, so the scope cannot be process-wide.
_local = threading.local()


class Killable(Protocol):
    proc: Any

    def kill(self, reason: str | None = None) -> None: ...


class GiveWay:
    """Children started while this scope is active; `cancel` kills the live ones and any started after it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self._children: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._cancelled = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def started(self, child: Killable) -> None:
        with self._lock:
            self._children.add(child)
        if self.cancelled:
            _kill_live(child, self.reason)

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            children = list(self._children)
        for child in children:
            _kill_live(child, self.reason)


def _kill_live(child: Killable, reason: str) -> None:
    # Only a child not yet reaped: its pid (and process group) cannot have been reused by another process.
    if child.proc is not None and child.proc.poll() is None:
        child.kill(reason)


def child_started(child: Killable) -> None:
    """Called by every isolated child once started: it joins the starting thread's scope, if any."""
    scope = getattr(_local, "scope", None)
    if scope is not None:
        scope.started(child)


@contextmanager
def giving_way(scope: GiveWay) -> Iterator[GiveWay]:
    """Children this thread starts inside the block belong to `scope` (scopes nest: the inner one wins)."""
    outer = getattr(_local, "scope", None)
    _local.scope = scope
    try:
        yield scope
    finally:
        _local.scope = outer
