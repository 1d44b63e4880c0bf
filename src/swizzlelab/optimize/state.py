"""What an optimize run knows and keeps: its options, the attempts so far, notes, and the iterations.jsonl log it
resumes from (a torn or corrupt line is reported and skipped; every valid record is kept, none duplicated).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.fmt import fmt_bytes, pct
from swizzlelab.io import append_line, atomic_write_text
from swizzlelab.optimize.reasons import memory_summary
from swizzlelab.optimize.learn import Correction
from swizzlelab.optimize.records import EVALUATED, Attempt, Prediction, TimeFigures, Wave
from swizzlelab.scenario import Scenario
from swizzlelab.sim import Analysis, SimParams, analyze, footprint_of, periods_by_traffic
from swizzlelab.sim.agreement import RESOLUTION_TEXT, within_resolution
from swizzlelab.sim.gpu import ENGINES, choose_engine
from swizzlelab.sim.timemodel import TimeModel, Traffic, calibration_for


def traffic_of(prediction: Prediction) -> Traffic:
    """The time model's input from a simulated order: DRAM bytes both ways, far-partition bytes, Infinity Cache hits and
    partial-line writes."""
    return Traffic.of(prediction)


def group_of_spec(spec: str) -> str:
    """The family group of an order spec (search.Candidate.group's names), for labels of any proposer."""
    xcd = spec.startswith("xcd:") and "+" in spec
    body = spec.split("+", 1)[1] if xcd else spec
    name = f"{body.split('>', 1)[0]}>{body.split('>', 1)[1].split('@', 1)[0]}" if ">" in body else body.split(":", 1)[0]
    return ("xcd+" if xcd else "") + name

PROPOSERS = ("search", "llm", "both")
JSONL = "iterations.jsonl"
PREDICTIONS = "predictions.json"


@dataclass
class Options:
    """How one run goes: budget (iterations after the baseline), proposer, where outputs go."""

    out_dir: Path
    budget: int = 20
    # False when --budget was not given: a measuring run (optimize.sweep) then takes as many orders as its sweep
    # and refinements use (MEASURED_BUDGET), and its time budget ends it; 20 is the budget without a GPU.
    budget_given: bool = True
    proposer: str = "search"
    remeasure: bool = False
    screen_s: float = 90.0
    measure_s: float = 4.0
    use_ncu: bool = True
    llm: Any = None  # optimize.llm.LlmConfig; None reads the environment
    cache_path: Path | None = None  # default: OUT/measure-cache.json
    workers: int | None = None  # threads that screen candidates with the simulator (default: usable CPUs)
    sim_engine: str = "auto"  # sim.gpu.ENGINES: "auto" simulates on a GPU where one is usable
    command: str = ""
    # Stop when the time model predicts no order gains more than the measurement resolves (--keep-going: measure
    # the budget's orders anyway).
    stop_without_gain: bool = True
    # A measurement of the kernel's own order made elsewhere, (mean ms, where): e.g. the leaderboard's ranked run of
    # a submission. It anchors the time model when this run measures nothing itself.
    anchor: tuple[float, str] | None = None
    # Wall seconds a measuring run may take from its start (--time-budget; None: optimize.sweep sizes it to the
    # kernel's measured time). No new race starts after it; what is running finishes and is confirmed.
    time_budget_s: float | None = None
    # Untried orders the run names at its end, the best-ranked of each family group first (RunResult.next_untried):
    # a leaderboard suggestion times them on its GPU (0: only the best untried one where the time model stopped).
    report_untried: int = 0

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        if self.budget < 1:
            raise UserError(f"--budget {self.budget}: give at least 1 iteration")
        if self.workers is not None and self.workers < 1:
            raise UserError(f"--workers {self.workers}: give at least 1 thread")
        if self.sim_engine not in ENGINES:
            raise UserError(f"--sim-engine {self.sim_engine!r} is unknown: use one of {', '.join(ENGINES)}")
        if self.time_budget_s is not None and self.time_budget_s <= 0:
            raise UserError(f"--time-budget {self.time_budget_s:g} s: give a positive time (e.g. 3m or 90s)")
        if self.proposer not in PROPOSERS:
            raise UserError(f"--proposer {self.proposer!r} is unknown: use one of {', '.join(PROPOSERS)}")


@dataclass
class RunState:
    """What the loop knows: attempts so far (baseline first), run notes, and where files go."""

    scenario: Scenario
    options: Options
    attempts: list[Attempt] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    predictions: dict[str, tuple[Prediction, Wave]] = field(default_factory=dict)
    # Screening estimates from a sample of the L2 sets (large traces); never reported as an order's prediction.
    screen_estimates: dict[str, tuple[Prediction, Wave]] = field(default_factory=dict)
    resumed_from: int = 0
    measured_note: str = ""
    device: str = ""
    engine: str = "auto"  # simulate()'s engine for this run: pick_engine() sets it from options.sim_engine
    sim_params: SimParams = field(default_factory=SimParams)  # simulate()'s progress model (default: the target's)
    # The time model of this kernel and case (set once the baseline is evaluated) and what the run's own
    # measurements taught it (optimize.learn).
    time_model: TimeModel | None = None
    correction: Correction | None = None
    # Where the run's wall time went, in order: (what, seconds); the log and report.json show it.
    timeline: list[tuple[str, float]] = field(default_factory=list)
    _analysis: Analysis | None = None
    _footprint: Any = None

    def analysis(self) -> Analysis:
        """The memory analysis of the task's trace (sim.analyze), computed once per run."""
        if self._analysis is None:
            self._analysis = analyze(self.scenario.trace, self.scenario.model,
                                     occupancy=self.scenario.occupancy.programs)
        return self._analysis

    def pick_engine(self) -> str:
        """Set `engine` from options.sim_engine (sim.gpu.choose_engine: it may probe for a GPU, so once per run) and
        return the line saying which engine and why."""
        self.engine, note = choose_engine(self.options.sim_engine)
        return note

    def footprint(self) -> Any:
        """The trace's footprint (sim.footprint_of), computed once per run and shared by every prediction."""
        if self._footprint is None:
            self._footprint = footprint_of(self.scenario.trace)
        return self._footprint

    def memory_text(self) -> str:
        """The task's memory facts (analysis of the trace) for reasoning sections and prompts."""
        return memory_summary(self.scenario, self.analysis())

    def sharing_periods(self) -> tuple[int, ...]:
        """Sharing periods of a 1-D trace, the tensor with the most requested bytes first."""
        return tuple(p.period for p in periods_by_traffic(self.scenario.trace))

    @property
    def baseline(self) -> Attempt:
        return self.attempts[0]

    def start_time_model(self) -> str:
        """Build the time model from the baseline (its predicted traffic; its measured time, where a GPU measured
        it) and replay what earlier measured attempts of a resumed run teach; returns the line saying so."""
        base = self.baseline
        if base.prediction is None:
            return ""
        timing = base.measurement.timing if base.measurement is not None else None
        base_ms = timing.mean_ms if timing is not None else None
        anchor = (f"anchored on the kernel's own order, measured {timing.mean_ms:.4g} ms ({base.measurement.device})"
                  if timing is not None else "")
        if base_ms is None and self.options.anchor is not None:
            base_ms, where = self.options.anchor
            anchor = f"anchored on the kernel's own order, measured {base_ms:.4g} ms ({where})"
        model = self.scenario.model
        cal = calibration_for(model)
        self.time_model = TimeModel(model, cal, traffic_of(base.prediction), base_ms, anchor)
        self.correction = Correction(sigma=cal.sigma)
        for attempt in self.attempts[1:]:
            self.learn(attempt)
        bound = self.time_model.bound()
        how = (f"{bound} ({anchor})" if base_ms is not None else
               "compute share unknown without a GPU measurement: orders are ranked by predicted DRAM traffic")
        return (f"time model {model.name} ({cal.source}; held-out spread {cal.sigma:.1%}, noise {cal.noise:.1%}): "
                f"the kernel is {how}" if base_ms is not None else f"time model {model.name}: {how}")

    def time_figures(self, prediction: Prediction) -> TimeFigures | None:
        """The time model's prediction of an order from its simulated traffic (None before the baseline)."""
        if self.time_model is None:
            return None
        pred = self.time_model.predict(traffic_of(prediction))
        corrected = self.correction.adjust(pred.speedup) if self.correction is not None else None
        return TimeFigures(speedup=pred.speedup, low=pred.low, high=pred.high, model=pred.model, anchor=pred.anchor,
                           corrected=corrected)

    def expected_speedup(self, prediction: Prediction) -> float:
        """What the run expects of an order: the corrected predicted speedup (1.0 without a time model)."""
        figures = self.time_figures(prediction)
        if figures is None:
            return 1.0
        return figures.corrected if figures.corrected is not None else figures.speedup

    def learn(self, attempt: Attempt) -> None:
        """Feed a measured attempt to the run's correction (and its family group, if it measured slower)."""
        comparison = attempt.timed
        if self.correction is None or comparison is None or attempt.prediction is None or attempt.iteration == 0:
            return
        figures = self.time_model.predict(traffic_of(attempt.prediction)) if self.time_model else None
        if figures is not None:
            self.correction.observe(figures.speedup, comparison.speedup, comparison.ci95,
                                    group_of_spec(attempt.label))

    def next_iteration(self) -> int:
        """The number the next attempt gets (after the highest recorded, even when a record was lost)."""
        return max((a.iteration for a in self.attempts), default=-1) + 1

    def seen(self) -> dict[str, int]:
        """Permutation id -> first iteration that evaluated it (non-bijective ids never count as seen)."""
        out: dict[str, int] = {}
        for a in self.attempts:
            if a.status == EVALUATED and a.permutation_id and a.permutation_id not in out:
                out[a.permutation_id] = a.iteration
        return out

    def best_measured(self) -> Attempt | None:
        """The fastest attempt whose speedup CI lies above 1.0 (None when nothing beat the baseline)."""
        return best_measured(self.attempts)

    def best_predicted(self) -> Attempt:
        return best_predicted(self.attempts)

    def best(self) -> Attempt:
        """Measured best when this run measures (the baseline if nothing won), else the predicted best."""
        return best_of(self.attempts, self.device)


def best_measured(attempts: list[Attempt]) -> Attempt | None:
    """The fastest attempt whose speedup CI lies above 1.0 (None when nothing beat the baseline)."""
    wins = [a for a in attempts if a.iteration > 0 and a.comparison and a.comparison.ci95[0] > 1.0]
    return max(wins, key=lambda a: a.comparison.speedup) if wins else None


def best_predicted(attempts: list[Attempt]) -> Attempt:
    evaluated = [a for a in attempts if a.status == EVALUATED and a.prediction is not None]
    return min(evaluated, key=lambda a: (a.prediction.score(), a.iteration))


def best_of(attempts: list[Attempt], device: str) -> Attempt:
    """RunState.best over `attempts` (the baseline first): measured best when `device` measures, else predicted."""
    if device:
        return best_measured(attempts) or attempts[0]
    return best_predicted(attempts)


def describe_best(state: RunState) -> str:
    """One line on the best order, labelled measured or predicted."""
    best = state.best()
    if best.iteration == 0:
        if state.device:
            return f"no order beat the kernel's default with 95% confidence, measured ({state.device})"
        return "the kernel's own order is the best predicted"
    pred, base = best.prediction, state.baseline.prediction
    text = f"best: iteration {best.iteration} {best.label} (permutation {best.permutation_id})"
    if pred is not None and base is not None:
        text += (
            f": predicted hit {pct(pred.l2_hit_rate)} vs {pct(base.l2_hit_rate)}, DRAM read "
            f"{fmt_bytes(pred.dram_read_bytes)} vs {fmt_bytes(base.dram_read_bytes)} (model {pred.model})"
        )
        if best.comparison is None and within_resolution(pred.dram_read_bytes, base.dram_read_bytes,
                                                         100 * pred.l2_hit_rate, 100 * base.l2_hit_rate):
            text += (f"; below the model's resolution ({RESOLUTION_TEXT} of the kernel's order): measure before "
                     "trusting it")
    if best.comparison is not None and best.measurement is not None:
        text += f"; {best.comparison.ci_text()} measured ({best.measurement.device})"
    return text


# ---------------------------------------------------------------------------------------------- the log


def read_jsonl(path: Path, warnings: list[str] | None = None) -> tuple[dict[str, Any] | None, list[Attempt]]:
    """The run header and every valid iteration record of a JSONL file, in iteration order. A line that is
    not a record (torn or corrupted) is skipped and, with `warnings`, named there; the first record of an
    iteration number wins, so nothing is counted twice."""
    header, by_iteration = None, {}
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
            if record.get("type") == "run":
                header = header or record
            elif record.get("type") == "iteration":
                attempt = Attempt.from_dict(record)
                by_iteration.setdefault(attempt.iteration, attempt)
            else:
                raise ValueError("no record type")
        except (ValueError, TypeError, KeyError) as err:
            if warnings is not None:
                warnings.append(f"{path} line {number} is not a valid record ({type(err).__name__}); skipped")
    return header, [by_iteration[k] for k in sorted(by_iteration)]


def _drop_torn_tail(path: Path) -> None:
    """Cut a partial last line (an append interrupted mid-write) so new records start on a line of their own."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)
            handle.flush()
            os.fsync(handle.fileno())


def load_or_start(state: RunState) -> None:
    """Resume from OUT/iterations.jsonl when it holds this scenario's run, else start a new log."""
    out = state.options.out_dir
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file: give a folder (it will hold log.txt, iterations.jsonl, reports)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".swizzlelab-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UserError(f"--out {out}: cannot write there ({err.strerror or err}); give a writable folder") from None
    path = out / JSONL
    identity = state.scenario.identity()
    if path.is_file() and path.stat().st_size > 0:
        _drop_torn_tail(path)
        warnings: list[str] = []
        header, attempts = read_jsonl(path, warnings)
        if header is None:
            raise UserError(f"{path} has no run header: it is not a swizzlelab optimize log; use another --out")
        if header.get("identity") != identity:
            differing = [k for k in identity if header.get("identity", {}).get(k) != identity[k]]
            raise UserError(
                f"{out} holds a run of a different scenario ({', '.join(differing)} differ): give another --out "
                "or delete that folder"
            )
        state.attempts = attempts
        state.resumed_from = len(attempts)
        state.notes.extend(warnings)
        if attempts:
            state.notes.append(
                f"resumed from {path}: {len(attempts)} iteration(s) already recorded (baseline included)")
    else:
        append_line(path, json.dumps({"type": "run", "identity": identity, "started": time.time(),
                                      "command": state.options.command}))
    pred_path = out / PREDICTIONS
    if pred_path.is_file():
        try:
            stored = json.loads(pred_path.read_text()).get("by_permutation", {})
            state.predictions = {
                key: (Prediction.from_dict(value["prediction"]), Wave.from_dict(value["wave"]))
                for key, value in stored.items()
            }
        except (OSError, ValueError, TypeError, KeyError):
            state.predictions = {}  # a damaged cache only costs re-simulating


def save_predictions(state: RunState) -> None:
    by_permutation = {key: {"prediction": pred.to_dict(), "wave": wave.to_dict()}
                      for key, (pred, wave) in state.predictions.items()}
    atomic_write_text(
        state.options.out_dir / PREDICTIONS,
        json.dumps({"model": state.scenario.model.name, "occupancy": state.scenario.occupancy.programs,
                    "by_permutation": by_permutation}, default=float),
    )


def record_attempt(state: RunState, attempt: Attempt) -> None:
    """Keep `attempt` in memory and append it (fsynced) to the JSONL log."""
    state.attempts.append(attempt)
    append_line(state.options.out_dir / JSONL, json.dumps(attempt.to_dict(), default=float))
    save_predictions(state)
