"""The harness's one timing loop: a warm-up, then timed requests of the size a plan picks until the plan's stop
rule holds. Pure Python: what one request is (CUDA events in-process, a frame to the isolated child) is a callable.

Three callers share it: `timing.time_fn` / `compare_interleaved` (repetitions in batches, `timing.RepetitionPlan`),
`requests.time_requests` and the isolated runner (requests of k calls on fresh inputs, `requests.RequestPlan`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

Clock = Callable[[], float]


@dataclass
class LoopState:
    """What the loop has collected: one list of samples per stream (A and B of an interleaved comparison are
    two), the requests made, the seconds since the loop began, and why it stopped ("" while it runs)."""

    streams: tuple[list[float], ...]
    n_requests: int = 0
    elapsed_s: float = 0.0
    stopped_by: str = ""

    @property
    def samples(self) -> list[float]:
        return self.streams[0]


class Plan(Protocol):
    """How many calls the next request makes, and when the loop stops (checked before every request)."""

    def stop(self, state: LoopState) -> str | None: ...

    def next_size(self, state: LoopState) -> int: ...


def warm_up(run: Callable[[], Any], seconds: float, min_runs: int, max_runs: int, clock: Clock | None = None) -> int:
    """Call `run()` at least `min_runs` and at most `max_runs` times, no more once `seconds` of wall time have
    passed; its figures are the caller's to drop. Returns how many runs were made."""
    clock = clock or time.perf_counter
    start = clock()
    runs = 0
    while runs < max_runs and (runs < min_runs or clock() - start < seconds):
        run()
        runs += 1
    return runs


def run_loop(request: Callable[[int], Sequence[Sequence[float]]], plan: Plan, n_streams: int = 1,
             clock: Clock | None = None) -> LoopState:
    """Timed requests until `plan.stop` names a reason: `request(k)` makes one request of k calls and returns
    its figures, one sequence per stream (it raises to end the loop on a failure)."""
    clock = clock or time.perf_counter
    state = LoopState(tuple([] for _ in range(n_streams)))
    start = clock()
    while True:
        state.elapsed_s = clock() - start
        reason = plan.stop(state)
        if reason is not None:
            state.stopped_by = reason
            return state
        figures = request(plan.next_size(state))
        for stream, values in zip(state.streams, figures):
            stream.extend(values)
        state.n_requests += 1


__all__ = ["LoopState", "Plan", "run_loop", "warm_up"]
