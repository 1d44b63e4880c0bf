"""The timed-request design both evaluation paths share: requests of k back-to-back calls on fresh seeded inputs,
outputs checked between requests, one stop rule (RequestPlan on harness.loop); run in-process here for one's own
(trusted) kernels.

The isolated evaluator (harness.isolate.timed_requests) drives the same plan across a process boundary. Sharing it
matters beyond code reuse: the duty cycle of the loop sets the GPU's clock (measured on an H100: an 8192^3 GEMM
ran at ~1600 MHz in a sustained loop and ~1900 MHz when outputs were checked between requests, 7% apart), so a
trusted figure and an isolated one only mean the same thing when both come from this loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from swizzlelab.errors import UserError
from swizzlelab.harness.timers import HOST_CLOCK_DEVICE, HostClock, TrustedClock
from swizzlelab.harness.correctness import case_sizes, derive_seed, poison_
from swizzlelab.harness.clock_sampler import ClockSampler, sampler_for, wait_for_first_sample
from swizzlelab.harness.loop import LoopState, run_loop, warm_up
from swizzlelab.harness.timing import DEFAULT_REL_SEM, Timing, sem_target_reached, summarize

CHECK_FRACTION = 0.5  # share of timed calls whose output is checked, chosen after each request
MIN_TIMED_REPS = 10
MIN_REQUESTS = 16
# Input sets a case cycles through: enough that memoising by pointer or content cannot pay, within memory.
MAX_POOL = 32
MAX_POOL_CPU = 4
POOL_BYTES_GPU = 16 << 30  # and at most a fifth of the GPU's memory
POOL_BYTES_CPU = 256 << 20
WARMUP_S = 0.2  # full-pool requests (at most 3) until this much wall time: compiles, autotunes, fills caches
WARMUP_REQUESTS = 3
# Library rows are informative: they get at most this budget per case, on both paths.
LIBRARY_BUDGET_S = 1.0


def pool_size(input_bytes: int, on_gpu: bool, gpu_memory_bytes: int = 0) -> int:
    """How many input sets a case's requests rotate through."""
    cap = POOL_BYTES_GPU if on_gpu else POOL_BYTES_CPU
    if on_gpu and gpu_memory_bytes:
        cap = min(cap, gpu_memory_bytes // 5)
    return max(2, min(MAX_POOL if on_gpu else MAX_POOL_CPU, cap // max(1, input_bytes)))


def next_request_size(design: list[int], rng: random.Random, pool: int) -> int:
    """k for the next request: every size 1..pool once per round, in an order drawn after the previous round."""
    if not design:
        design.extend(rng.sample(range(1, pool + 1), pool))
    return design.pop()


def stop_reason(n_requests: int, samples: list[float], pool: int, elapsed_s: float, budget_s: float) -> str | None:
    """Why to stop now: `sem` once every request size ran and the mean is known to DEFAULT_REL_SEM, `budget`
    once the budget is spent (after the minimum of requests and calls either way); None to go on."""
    if n_requests < MIN_REQUESTS or len(samples) < MIN_TIMED_REPS:
        return None
    if n_requests >= pool and sem_target_reached(np.asarray(samples), DEFAULT_REL_SEM, MIN_TIMED_REPS):
        return "sem"
    return "budget" if elapsed_s >= budget_s else None


@dataclass
class RequestPlan:
    """The timed requests' rule for the one loop (harness.loop): request sizes in shuffled rounds of 1..pool,
    `stop_reason` to stop; `hold(elapsed_s)` keeps a loop going past its budget (the isolated runner, until its
    clocks can be judged)."""

    budget_s: float
    pool: int
    rng: random.Random
    hold: Callable[[float], bool] | None = None
    design: list[int] = field(default_factory=list)

    def stop(self, state: LoopState) -> str | None:
        reason = stop_reason(state.n_requests, state.samples, self.pool, state.elapsed_s, self.budget_s)
        if reason == "budget" and self.hold is not None and self.hold(state.elapsed_s):
            return None
        return reason

    def next_size(self, state: LoopState) -> int:
        return next_request_size(self.design, self.rng, self.pool)


def warm_up_requests(request: Callable[[], Any]) -> None:
    """The warm-up of both paths: full-pool requests (their figures dropped) until WARMUP_S of wall time, at
    least one and at most WARMUP_REQUESTS."""
    warm_up(request, WARMUP_S, 1, WARMUP_REQUESTS)


def tensor_bytes(data: dict[str, Any]) -> int:
    return sum(int(v.numel()) * int(v.element_size()) for v in data.values() if hasattr(v, "element_size"))


def _into_out(fn: Callable[[Any], Any], slot: dict[str, Any]) -> Any:
    """One call whose result ends in slot["out"]: a kernel that returns another tensor has it copied inside the
    timed interval, as the isolated child does."""
    result = fn(slot)
    out = slot["out"]
    if result is out or result is None:
        return out
    if not hasattr(result, "shape") or tuple(result.shape) != tuple(out.shape) or result.dtype != out.dtype:
        raise UserError(f"the kernel returned {getattr(result, 'shape', type(result).__name__)}, expected a tensor "
                        f"of shape {tuple(out.shape)} {out.dtype}")
    out.copy_(result)
    return out


def _load(task: Any, slot: dict[str, Any], seed: int, sizes: dict[str, Any]) -> dict[str, Any]:
    """Fresh inputs of `seed` copied into the slot's own buffers (the kernel always sees the same addresses, as
    across the process boundary), its output poisoned; returns the fresh set, which the check reads."""
    fresh = task.generate_input({"seed": seed, **sizes})
    for key, value in fresh.items():
        if key != "out" and hasattr(value, "copy_"):
            slot[key].copy_(value)
    poison_(slot["out"])
    return fresh


def time_requests(
    task: Any,
    fn: Callable[[Any], Any],
    case: dict[str, Any],
    seed: int,
    budget_s: float,
    *,
    clock: TrustedClock | HostClock | None = None,
    rng: random.Random | None = None,
    check_fraction: float = CHECK_FRACTION,
) -> Timing:
    """Time `fn` on `case` by timed requests; inputs come from seeds derived from `seed`. The first call and a
    random `check_fraction` of the others are checked with the task's check, and one last call after timing;
    a wrong output raises UserError. Without `clock`, CUDA events (TrustedClock) on the current GPU."""
    torch = None
    if clock is None:
        import torch

        clock = TrustedClock(torch)
    rng = rng if rng is not None else random.Random(derive_seed(seed, "design"))
    sizes = case_sizes(case)
    on_gpu = isinstance(clock, TrustedClock)
    first = task.generate_input({"seed": derive_seed(seed, "rep0"), **sizes})
    total = int(torch.cuda.get_device_properties(0).total_memory) if torch is not None else 0
    pool = [first] + [{key: (value.clone() if hasattr(value, "clone") else value) for key, value in first.items()}
                      for _ in range(pool_size(tensor_bytes(first), on_gpu, total) - 1)]
    no_seal = [lambda: None] * len(pool)
    n_calls = 0

    def request(group: list[dict[str, Any]], tag: str) -> tuple[list[dict[str, Any]], list[float]]:
        nonlocal n_calls
        fresh = [_load(task, slot, derive_seed(seed, f"{tag}{n_calls + j + 1}"), sizes) for j, slot in enumerate(group)]
        calls = [(lambda slot=slot: _into_out(fn, slot)) for slot in group]
        _, figures, _ = clock.time_calls(calls, no_seal[:len(group)])
        n_calls += len(group)
        return fresh, figures

    def judge(fresh: dict[str, Any], slot: dict[str, Any], where: str) -> str:
        verdict = task.check(fresh, slot["out"])
        ok = bool(getattr(verdict, "ok", verdict))
        message = str(getattr(verdict, "message", "passed" if ok else "failed"))
        if not ok:
            raise UserError(f"output wrong on {where} (the kernel breaks when repeated): {message}")
        return message

    warm_up_requests(lambda: request(pool, "warm"))
    n_calls = 0
    plan = RequestPlan(budget_s, len(pool), rng)

    def timed(k: int) -> tuple[list[float]]:
        group = pool[:k]
        fresh, figures = request(group, "rep")
        for j, (data, slot) in enumerate(zip(fresh, group)):
            if n_calls - len(group) + j == 0 or rng.random() < check_fraction:
                judge(data, slot, f"timed call {n_calls - len(group) + j + 1}")
        return (figures,)

    with (sampler_for(torch) if torch is not None else ClockSampler(None)) as gpu_clock:
        wait_for_first_sample(gpu_clock)
        state = run_loop(timed, plan)
    fresh, _ = request(pool[:1], "last")
    device = str(torch.cuda.get_device_name(torch.cuda.current_device())) if torch is not None else HOST_CLOCK_DEVICE
    timing = summarize(np.asarray(state.samples), state.stopped_by, device=device)
    timing.check_after = judge(fresh[0], pool[0], "the last call")
    timing.gpu_clock = gpu_clock.summary()
    return timing


__all__ = [
    "CHECK_FRACTION",
    "LIBRARY_BUDGET_S",
    "MIN_REQUESTS",
    "MIN_TIMED_REPS",
    "RequestPlan",
    "WARMUP_REQUESTS",
    "next_request_size",
    "pool_size",
    "stop_reason",
    "time_requests",
    "warm_up_requests",
]
