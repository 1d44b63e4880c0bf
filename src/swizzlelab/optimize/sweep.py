"""The measurement-led search of a run with a local GPU: a broad first sweep of orders raced against the kernel's
own, refinement around the families that measured fastest, and the leader confirmed alone before it is kept.

The time model only picks and orders what is measured (it cannot see every effect of an order: benchmarks/time_model);
the measurements decide. Only an order whose own A/B timing lies above 1.0 is ever reported as a gain.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.optimize.records import EVALUATED, Attempt, Measurement, Proposal, Speedup
from swizzlelab.optimize.search import Screened, SearchProposer
from swizzlelab.optimize.state import RunState

# Orders in the first sweep: one per family group, then the next best-ranked (a round of 26 calls of a 5 ms
# kernel takes 0.13 s, so a race of all of them resolves 0.5% in seconds).
SWEEP_SIZE = 24
# New orders per refinement race: neighbours of the families that measured fastest.
REFINE_SIZE = 8
# A family is refined only where it measured at least this much faster than the kernel's own order (or its interval
# lies above 1.0), and a refinement race must beat the leader by this much to earn another: the measured noise of
# a raced figure is a few tenths of a percent.
GAIN_FLOOR = 0.01
IMPROVEMENT = 0.005
# A race's wall seconds: at least MIN_RACE_S, at most MAX_RACE_S, else half of what is left of the time budget.
MIN_RACE_S = 3.0
MAX_RACE_S = 30.0
# Orders a measuring run may time when --budget is not given: the sweep and four refinement races (the time
# budget usually ends it first). A given --budget counts, as without a GPU.
MEASURED_BUDGET = SWEEP_SIZE + 4 * REFINE_SIZE
# Leaders confirmed alone per race, fastest first, until one holds.
CONFIRMATIONS = 2


def default_time_budget(base_ms: float | None) -> float:
    """Seconds a measuring run may take from the command's start when --time-budget is not given, sized to the
    kernel's measured time (slower kernels take longer to time): 75 s for a sub-millisecond kernel, up to 150 s."""
    if base_ms is None:
        return 150.0
    return float(min(150.0, max(75.0, 60.0 + 15.0 * base_ms)))


@dataclass
class Sweep:
    """One run's measured search. `evaluate(iteration, proposal)` proves, dedupes and predicts an order without
    measuring it; `confirm(attempt)` times it alone against the kernel's own order (A/B interleaved);
    `record(attempt)` keeps it in the log; `mark(what)` closes a span of the run's timeline."""

    state: RunState
    search: SearchProposer
    measurer: Any  # optimize.measure.RaceMeasurer
    evaluate: Callable[[int, Proposal], Attempt]
    confirm: Callable[[Attempt], Measurement | None]
    record: Callable[[Attempt], None]
    note: Callable[[str], None]
    mark: Callable[[str], None]
    deadline: float  # time.perf_counter() value after which no new race starts
    keep_going: bool = False
    _refined: set[str] = field(default_factory=set)
    _raced: int = 0

    def budget_left(self) -> int:
        options = self.state.options
        budget = options.budget if options.budget_given else max(options.budget, MEASURED_BUDGET)
        return budget - (len(self.state.attempts) - 1)

    def time_left(self) -> float:
        return self.deadline - time.perf_counter()

    def run(self) -> str:
        """Measure, refine, confirm; returns the run's one line on how the search ended."""
        picks = self.search.picks(set(self.state.seen()), min(SWEEP_SIZE, self.budget_left()))
        if not picks:
            return "measured search: no untried order to measure"
        self._race(picks, "sweep")
        quiet = self._nothing_to_gain()
        if quiet and not self.keep_going:
            return quiet
        while self.budget_left() > 0:
            if self.time_left() <= 0:
                return self._ended(f"time budget spent ({self.state.options.time_budget_s or 0:.0f} s from the start)")
            anchors = self._anchors()
            if not anchors:
                return self._ended("no family left to refine")
            self._refined.update(anchors)
            seen = set(self.state.seen())
            picks = self.search.refinements(anchors, seen, min(REFINE_SIZE, self.budget_left()),
                                            seconds=max(min(self.time_left() / 4, 30.0), 5.0))
            if not picks:
                continue
            before = self._leader_speedup()
            self._race(picks, "refine")
            if self._leader_speedup() < before * (1 + IMPROVEMENT) and not self.keep_going:
                return self._ended(f"refining {', '.join(anchors)} found nothing measurably faster")
        return self._ended("iteration budget spent")

    # -- one race -------------------------------------------------------------------------------------------
    def _race(self, picks: list[Screened], mode: str) -> None:
        state = self.state
        ranked = self.search.ranked(set(state.seen()))
        first = state.next_iteration()
        attempts = [self.evaluate(first + i, self.search.proposal(pick, mode, ranked, state.best()))
                    for i, pick in enumerate(picks)]
        formulas = {str(a.iteration): state.scenario.formula(a.formula) for a in attempts if a.status == EVALUATED}
        checked = self.measurer.prepare_many(formulas)
        ready: dict[str, tuple[Attempt, Any]] = {}
        for attempt in attempts:
            key = str(attempt.iteration)
            if key not in formulas:
                continue
            failed = checked[key]
            if failed is not None:
                attempt.measurement = failed
                attempt.message += f"; WRONG OUTPUT on {failed.device}: {failed.check_message}"
                continue
            ready[key] = (attempt, formulas[key])
        self.mark(f"{mode}: {len(ready)} of {len(attempts)} orders compiled and checked on the GPU")
        if ready:
            seconds = min(MAX_RACE_S, max(MIN_RACE_S, self.time_left() / 2))
            try:
                results = self.measurer.race({key: formula for key, (_, formula) in ready.items()}, seconds)
            except UserError as err:  # e.g. an order that passed its check fails when repeated: recorded, not fatal
                failed = Measurement(device=self.state.device, error=f"race failed: {err}")
                results = {key: failed for key in ready}
            for key, (attempt, _) in ready.items():
                attempt.measurement = results[key]
                attempt.message += "; " + _raced_text(results[key])
            self._raced += len(ready)
            self.mark(f"{mode}: {len(ready)} orders raced against the kernel's own")
            self._confirm([attempt for attempt, _ in ready.values()])
        for attempt in attempts:
            self.record(attempt)

    def _confirm(self, raced: list[Attempt]) -> None:
        """Time the race's fastest orders alone against the kernel's own (fastest first, up to CONFIRMATIONS, each
        only while its raced interval reaches above the best confirmed so far): a race picks the best of many noisy
        figures, so its leader's figure is biased upwards, and two orders can swap places alone (on an H100 a
        compute-bound kernel's raced figures ran up to 17% above the same orders timed alone); the A/B timing is
        what a gain is reported on."""
        leaders = sorted((a for a in raced if a.timed is not None and a.timed.ci95[0] > 1.0),
                         key=lambda a: -a.timed.speedup)
        best = self.state.best_measured()  # this race's attempts are recorded after it: its confirmations count here
        floor = best.comparison.speedup if best is not None and best.comparison is not None else 1.0
        for attempt in leaders[:CONFIRMATIONS]:
            if attempt.timed.ci95[1] <= floor:
                continue
            raced_figure = attempt.timed
            confirmed = self.confirm(attempt)
            if confirmed is None or confirmed.comparison is None:
                continue
            attempt.measurement = dataclasses.replace(confirmed, raced=raced_figure)
            attempt.message += f"; confirmed alone: {confirmed.comparison.ci_text()} ({confirmed.comparison.verdict()})"
            self.mark(f"iteration {attempt.iteration}: confirmed alone against the kernel's own order")
            if confirmed.comparison.ci95[0] > 1.0:
                floor = max(floor, confirmed.comparison.speedup)

    # -- when to go on --------------------------------------------------------------------------------------
    def _timed(self) -> list[Attempt]:
        return [a for a in self.state.attempts[1:] if a.timed is not None]

    def _leader_speedup(self) -> float:
        return max((a.timed.speedup for a in self._timed()), default=1.0)

    def _nothing_to_gain(self) -> str:
        """The stop line when no timed order measured a gain above the noise (and none's interval lies above 1.0)."""
        timed = self._timed()
        if any(a.timed.ci95[0] > 1.0 and a.timed.speedup >= 1 + GAIN_FLOOR for a in timed):
            return ""
        best = max(timed, key=lambda a: a.timed.speedup, default=None)
        figure = (f"the fastest, {best.label}, {best.timed.ci_text()} measured ({self.state.device})"
                  if best is not None else "none could be timed")
        return (f"nothing measurable to gain: {len(timed)} orders timed against the kernel's own, {figure}; "
                f"none {GAIN_FLOOR:.0%} faster with 95% confidence, so the kernel's own order stays")

    def _anchors(self) -> list[str]:
        """Up to two family specs to refine: the fastest timed orders not refined yet that measured a gain."""
        good = sorted((a for a in self._timed() if a.label not in self._refined
                       and (a.timed.ci95[0] > 1.0 or a.timed.speedup >= 1 + GAIN_FLOOR)),
                      key=lambda a: -a.timed.speedup)
        return [a.label for a in good[:2]]

    def _ended(self, why: str) -> str:
        best = self.state.best_measured()
        found = (f"best {best.label}, {best.comparison.ci_text()} confirmed alone, measured ({self.state.device})"
                 if best is not None and best.comparison is not None else "no order confirmed faster than the kernel's own")
        return f"measured search: {self._raced} orders raced; {why}; {found}"


def _raced_text(measurement: Measurement) -> str:
    figure: Speedup | None = measurement.raced
    if figure is None:
        return f"not raced: {measurement.error or measurement.check_message}"
    left = f" ({figure.note})" if figure.note else ""
    return f"raced {figure.ci_text()} over {figure.n_pairs} rounds{left}, measured ({measurement.device})"


__all__ = ["MEASURED_BUDGET", "REFINE_SIZE", "SWEEP_SIZE", "Sweep", "default_time_budget"]
