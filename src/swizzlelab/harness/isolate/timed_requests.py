"""The timed requests of an isolated run: every benchmark case bound and its clocks calibrated before the
submission is imported, then timed through the harness's one loop with each request sent to the child.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import theilslopes

from swizzlelab.harness.clock_sampler import sampler_for, wait_for_first_sample
from swizzlelab.harness.correctness import CaseResult, case_sizes
from swizzlelab.harness.evaluate import BenchRow
from swizzlelab.harness.isolate.clock_stats import (
    CALIBRATION_POOL,
    CALIBRATION_REQUESTS,
    EXTEND_FACTOR,
    EXTEND_S,
    TAIL_SLACK_MS,
    Calibration,
    clock_verdict,
    residual_ci_ok,
)
from swizzlelab.harness.isolate.sandbox import ChildFailed, one_line
from swizzlelab.harness.isolate.session import Prepared, Session, secret_seed
from swizzlelab.harness.isolate.transport import SlotSet
from swizzlelab.harness.loop import run_loop
from swizzlelab.harness.requests import CHECK_FRACTION, RequestPlan, warm_up_requests
from swizzlelab.harness.timing import summarize


class Refused(Exception):
    """The parent refuses a request (a failed call, impossible figures, a broken seal, a wrong output); the
    message is one line for the report."""


@dataclass
class _Kept:
    """What the loop keeps of each accepted request besides its figures: its size, the parent's wall time, the
    sum of its figures and the child's tail; and the calls made and checked so far."""

    ks: list[int] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    sums: list[float] = field(default_factory=list)
    tails: list[float] = field(default_factory=list)
    n_calls: int = 0
    n_checked: int = 0


def prepare_cases(ev: Session, bench_salt: str | None) -> None:
    """Every benchmark case mapped and calibrated before the submission exists in the child, so the stand-in
    calls that calibrate the clocks run trusted code only."""
    for index, case in enumerate(ev.task.cases("benchmarks")):
        prep = ev.bind_case(case, ev.bench_seed(case, bench_salt), None)
        # A few sets are enough to fit the empty requests' line; the full pool is bound when the case is
        # timed, so memory holds one case's pool at a time.
        pool = prep.pool
        while len(pool) < min(prep.pool_size, CALIBRATION_POOL):
            pool.append(ev.bind(prep.data0))
        prep.calibration = ev.calibrations[index] = calibrate(ev, pool, case, prep.seed)
        for extra in pool[1:]:
            ev.unbind(extra)
        del pool[1:]
        ev.prepared[index] = prep


def calibrate(ev: Session, pool: list[SlotSet], case: dict[str, Any], seed: int) -> Calibration:
    """The residual over trusted requests of every size through the case's own buffers, made the way timed
    requests are: fresh inputs, outputs poisoned and seals armed before each, the parent's flush, and after
    each the parent's checks on a random half of the outputs (their verdicts are ignored: the stand-in
    calls write nothing). The parent's work between requests changes what the child's first steps cost
    (measured on an H100: +0.3..0.8 ms per request when the calibration skipped it)."""
    ks, walls, tails = [], [], []
    sizes = case_sizes(case)
    rounds = max(2, math.ceil(CALIBRATION_REQUESTS / len(pool)))
    for n, k in enumerate([k for _ in range(rounds) for k in ev.rng.sample(range(1, len(pool) + 1), len(pool))]):
        group = pool[:k]
        seeds = [secret_seed(ev.secret, seed, f"cal{n}.{j}") for j in range(k)]
        inputs = ev.load_group(group, seeds, sizes)
        reply, wall_ms = ev.request(group, null=True)
        if not reply.get("ok"):
            raise ChildFailed(one_line(reply.get("error", "calibration failed")))
        for slots, data, rep_seed in zip(group, inputs, seeds):
            slots.seal_intact()
            if ev.rng.random() < CHECK_FRACTION:
                ev.judge(slots, data, {"ok": True, "returned": "out"}, rep_seed)
        ks.append(k)
        walls.append(wall_ms - sum(float(t) for t in reply["t_ms"]))
        tails.append(float(reply["tail_ms"]))
    fit = theilslopes(walls, ks)
    return Calibration(slope_ms=float(fit[0]), intercept_ms=float(fit[1]), tail_ms=float(np.median(tails)),
                       n=len(ks))


def time_cases(ev: Session) -> tuple[list[BenchRow], str | None]:
    """Every benchmark case timed in turn; stops at the first that fails (its reason returned)."""
    rows: list[BenchRow] = []
    for index, case in enumerate(ev.task.cases("benchmarks")):
        mark = time.perf_counter()
        if index not in ev.prepared:  # the secret phase: the same case, the leaderboard's inputs
            ev.prepared[index] = ev.bind_case(case, ev.bench_seed(case, "ranked"), ev.calibrations[index])
        row = time_case(ev, case, index)
        ev.phase(f"benchmark {index} (first call, warm-up, timed requests, checks)", mark)
        rows.append(row)
        ev.note(ev.task.case_label(case))
        if row.error or not row.check.passed:
            return rows, ev.verdicts[-1].get("reason") or row.error
    return rows, None


def time_case(ev: Session, case: dict[str, Any], index: int) -> BenchRow:
    """One benchmark case: its first call judged, then (when right) the timed requests over its full pool."""
    prep = ev.prepared.pop(index)
    seed, data0, slots = prep.seed, prep.data0, prep.pool[0]
    verdict: dict[str, Any] = {"case": dict(case), "kind": "benchmark", "seed": seed}
    try:
        check = CaseResult(case=dict(case))
        check.runs.append(ev.judge(slots, data0, ev.call(slots, data0, timed=False), seed))
        row = BenchRow(case=dict(case), seed=seed, check=check, order=ev.order_info(case))
        if not check.passed:
            row.error = "not timed: the output is wrong"
            verdict.update(passed=False, reason=f"benchmark {index}: {check.message}")
            return row
        while len(prep.pool) < prep.pool_size:
            prep.pool.append(ev.bind(data0))
        _sampled(ev, row, prep, case, verdict)
    finally:
        for bound in prep.pool:
            ev.unbind(bound)
        ev.verdicts.append(verdict)
    return row


def _sampled(ev: Session, row: BenchRow, prep: Prepared, case: dict[str, Any], verdict: dict[str, Any]) -> None:
    """The timed requests with the GPU's SM clock sampled over them (the parent's nvidia-smi, not the child)."""
    torch = None
    if ev.on_gpu:
        import torch
    with sampler_for(torch) as clock:
        wait_for_first_sample(clock)
        _timed_requests(ev, row, prep, case, verdict)
    if row.candidate is not None:
        row.candidate.gpu_clock = clock.summary()
        verdict["gpu_clock"] = row.candidate.gpu_clock


def _timed_requests(ev: Session, row: BenchRow, prep: Prepared, case: dict[str, Any], verdict: dict[str, Any]) -> None:
    """Warm-up and timed requests through the one loop (harness.loop, RequestPlan); past the budget the loop goes
    on, up to EXTEND_FACTOR x the budget + EXTEND_S, until the residual can be judged. Fills `row` and `verdict`."""
    sizes, seed, pool = case_sizes(case), prep.seed, prep.pool
    attempts = itertools.count()

    def warm() -> None:  # compiles, autotunes, fills caches over every slot set; its figures are dropped
        attempt = next(attempts)
        ev.load_group(pool, [secret_seed(ev.secret, seed, f"warm{attempt}.{j}") for j in range(len(pool))], sizes)
        reply, _ = ev.request(pool)
        if not reply.get("ok"):
            raise Refused(one_line(reply.get("error", "the call failed")))

    try:
        warm_up_requests(warm)
    except Refused as failure:
        row.error = str(failure)
        verdict.update(passed=False, reason=f"warm-up: {row.error}")
        return
    kept = _Kept()

    def hold(elapsed_s: float) -> bool:
        return not (elapsed_s >= ev.budget_s * EXTEND_FACTOR + EXTEND_S
                    or residual_ci_ok(kept.ks, kept.walls, kept.sums, ev.on_gpu))

    try:
        state = run_loop(lambda k: (_request(ev, pool[:k], seed, sizes, prep, kept),),
                         RequestPlan(ev.budget_s, len(pool), ev.rng, hold))
    except Refused as failure:
        row.error = f"refused: {failure}"
        verdict.update(passed=False, reason=f"benchmark: {failure}")
        return
    _judged(ev, row, prep, sizes, kept, state.samples, state.stopped_by, verdict)


def _request(ev: Session, group: list[SlotSet], seed: int, sizes: dict[str, Any], prep: Prepared,
             kept: _Kept) -> list[float]:
    """One timed request of len(group) calls on fresh inputs: its figures, or Refused."""
    k = len(group)
    seeds = [secret_seed(ev.secret, seed, f"rep{kept.n_calls + j + 1}") for j in range(k)]
    inputs = ev.load_group(group, seeds, sizes)
    reply, wall_ms = ev.request(group)
    if not reply.get("ok"):
        raise Refused(one_line(reply.get("error", "the call failed")))
    figures, tail_ms, returned = reply.get("t_ms"), reply.get("tail_ms"), reply.get("returned")
    if not (isinstance(figures, list) and isinstance(returned, list) and len(figures) == k == len(returned)
            and all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in figures)
            and isinstance(tail_ms, (int, float)) and math.isfinite(tail_ms) and tail_ms >= 0):
        raise Refused(f"the child reported impossible times ({str(figures)[:80]} ms)")
    figures = [float(t) for t in figures]
    if sum(figures) + tail_ms > wall_ms:
        raise Refused(f"the child reported {sum(figures) + tail_ms:.4g} ms for a request the parent saw take "
                      f"{wall_ms:.4g} ms")
    assert prep.calibration is not None
    if tail_ms > prep.calibration.tail_ms + TAIL_SLACK_MS:
        figures[-1] += tail_ms  # work was still running on another stream after the last end mark: it counts
    for j, (slots, data, rep_seed) in enumerate(zip(group, inputs, seeds)):
        kept.n_calls += 1
        if not slots.seal_intact():
            raise Refused(f"timed call {kept.n_calls} (seed {rep_seed}): its output changed after the call returned "
                          f"(work left running on another stream or thread, or finished by a later call)")
        # The parent decides after the request which outputs to look at, so the child cannot know.
        if kept.n_calls == 1 or ev.rng.random() < CHECK_FRACTION:
            kept.n_checked += 1
            result = ev.judge(slots, data, {"ok": True, "returned": returned[j]}, rep_seed)
            if not result.passed:
                raise Refused(f"timed call {kept.n_calls} (seed {rep_seed}): {result.message}")
    kept.ks.append(k)
    kept.walls.append(wall_ms)
    kept.sums.append(sum(figures))
    kept.tails.append(float(tail_ms))
    return figures


def _judged(ev: Session, row: BenchRow, prep: Prepared, sizes: dict[str, Any], kept: _Kept, samples: list[float],
            stopped_by: str, verdict: dict[str, Any]) -> None:
    """After the loop: the last call checked too (a kernel that breaks late), the clocks' verdict, the row."""
    pool, cal = prep.pool, prep.calibration
    assert cal is not None
    data = ev.task.generate_input({"seed": secret_seed(ev.secret, prep.seed, "last"), **sizes})
    reply = ev.call(pool[0], data, timed=True)
    last = ev.judge(pool[0], data, reply, -1)
    kept.n_checked += 1
    if not last.passed:
        row.error = f"refused: the last timed call's output is wrong: {last.message}"
        verdict.update(passed=False, reason=row.error)
        return
    clocks, error = clock_verdict(kept.ks, kept.walls, kept.sums, cal, ev.on_gpu)
    clocks.update(calibration_tail_ms=cal.tail_ms, median_tail_ms=float(np.median(kept.tails)),
                  n_checked=kept.n_checked, n_timed=len(samples), n_requests=len(kept.ks), pool=len(pool),
                  check_fraction=CHECK_FRACTION)
    verdict["clocks"] = clocks
    if error:
        row.error = f"refused: {error}"
        verdict.update(passed=False, reason=row.error)
        return
    row.candidate = summarize(np.asarray(samples), stopped_by, device=str(ev.child_system.get("gpu", "")))
    row.candidate.check_after = last.message
    verdict.update(passed=True, reason=None, mean_ms=row.candidate.mean_ms, std_ms=row.candidate.std_ms,
                   best_ms=row.candidate.best_ms, worst_ms=row.candidate.worst_ms, n=row.candidate.n)


__all__ = ["Refused", "calibrate", "prepare_cases", "time_case", "time_cases"]
