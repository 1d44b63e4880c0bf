"""The optimizer loop: propose -> parse -> prove -> dedupe -> predict -> measure (GPU) -> record -> feed back.

Every iteration is appended (fsynced) to iterations.jsonl as it ends, so a rerun resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.io import append_line, atomic_write_text
from swizzlelab.optimize import assess
from swizzlelab.optimize.measure import CACHE_FILE, MeasureCache, Measurer, cache_key
from swizzlelab.scenario import Scenario
from swizzlelab.optimize.reasons import pct, reasons_dict, why_old_was_slow
from swizzlelab.optimize.records import (
    DUPLICATE,
    EVALUATED,
    NO_FORMULA,
    NOT_BIJECTIVE,
    UNPARSABLE,
    Attempt,
    Proposal,
)
from swizzlelab.fmt import fmt_bytes
from swizzlelab.sim import analyze, footprint_of
from swizzlelab.sim.simulate import default_workers

PROPOSERS = ("search", "llm", "both")
JSONL = "iterations.jsonl"
PREDICTIONS = "predictions.json"


@dataclass
class Options:
    """How one run goes: budget (iterations after the baseline), proposer, where outputs go."""

    out_dir: Path
    budget: int = 20
    proposer: str = "search"
    remeasure: bool = False
    screen_s: float = 90.0
    measure_s: float = 4.0
    use_ncu: bool = True
    llm: Any = None  # optimize.llm.LlmConfig; None reads the environment
    cache_path: Path | None = None  # default: OUT/measure-cache.json
    workers: int | None = None  # threads that screen candidates with the simulator (default: usable CPUs)
    command: str = ""

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        if self.budget < 1:
            raise UserError(f"--budget {self.budget}: give at least 1 iteration")
        if self.workers is not None and self.workers < 1:
            raise UserError(f"--workers {self.workers}: give at least 1 thread")
        if self.proposer not in PROPOSERS:
            raise UserError(f"--proposer {self.proposer!r} is unknown: use one of {', '.join(PROPOSERS)}")


@dataclass
class RunState:
    """What the loop knows: attempts so far (baseline first), run notes, and where files go."""

    scenario: Scenario
    options: Options
    attempts: list[Attempt] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    predictions: dict[str, dict[str, Any]] = field(default_factory=dict)
    resumed_from: int = 0
    measured_note: str = ""
    device: str = ""
    _analysis: Any = None
    _footprint: Any = None

    def analysis(self) -> Any:
        """The memory analysis of the task's trace (sim.analyze), computed once per run."""
        if self._analysis is None:
            self._analysis = analyze(self.scenario.trace, self.scenario.model,
                                     occupancy=self.scenario.occupancy.programs)
        return self._analysis

    def footprint(self) -> Any:
        """The trace's footprint (sim.footprint_of), computed once per run and shared by every prediction."""
        if self._footprint is None:
            self._footprint = footprint_of(self.scenario.trace)
        return self._footprint

    def memory_text(self) -> str:
        """The task's memory facts (analysis of the trace) for reasoning sections and prompts."""
        from swizzlelab.optimize.reasons import memory_summary

        return memory_summary(self.scenario, self.analysis())

    def sharing_periods(self) -> tuple[int, ...]:
        """Sharing periods of a 1-D trace, the tensor with the most requested bytes first."""
        requested = {t.name: t.requested_bytes for t in self.analysis().tensors}
        periods = sorted(self.analysis().periods, key=lambda p: -requested.get(p.tensor, 0))
        return tuple(p.period for p in periods)

    @property
    def baseline(self) -> Attempt:
        return self.attempts[0]

    def seen(self) -> dict[str, int]:
        """Permutation id -> first iteration that evaluated it (non-bijective ids never count as seen)."""
        out: dict[str, int] = {}
        for a in self.attempts:
            if a.status == EVALUATED and a.permutation_id and a.permutation_id not in out:
                out[a.permutation_id] = a.iteration
        return out

    def best_measured(self) -> Attempt | None:
        """The fastest attempt whose speedup CI lies above 1.0 (None when nothing beat the baseline)."""
        wins = [
            a for a in self.attempts
            if a.iteration > 0 and a.measured and a.measurement["comparison"]["ci95"][0] > 1.0
        ]
        return max(wins, key=lambda a: a.measurement["comparison"]["speedup"]) if wins else None

    def best_predicted(self) -> Attempt:
        from swizzlelab.optimize.search import score

        evaluated = [a for a in self.attempts if a.status == EVALUATED and a.prediction]
        return min(evaluated, key=lambda a: (score(a.prediction), a.iteration))

    def best(self) -> Attempt:
        """Measured best when this run measures (the baseline if nothing won), else the predicted best."""
        if self.device:
            return self.best_measured() or self.baseline
        return self.best_predicted()


# ---------------------------------------------------------------------------------------------- resume


def read_jsonl(path: Path) -> tuple[dict[str, Any] | None, list[Attempt]]:
    """The run header and the complete iteration records of a JSONL file (a torn last line is ignored)."""
    header, attempts = None, []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # an interrupted append leaves at most one partial line
        if record.get("type") == "run" and header is None:
            header = record
        elif record.get("type") == "iteration":
            attempts.append(Attempt.from_dict(record))
    # Keep one record per iteration number, in order (a rerun never rewrites, but be strict).
    by_iteration: dict[int, Attempt] = {}
    for attempt in attempts:
        by_iteration.setdefault(attempt.iteration, attempt)
    ordered = [by_iteration[k] for k in sorted(by_iteration)]
    contiguous = [a for i, a in enumerate(ordered) if a.iteration == i]
    return header, contiguous


def _drop_torn_tail(path: Path) -> None:
    """Cut a partial last line (an append interrupted mid-write) so new records start on a line of their own."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)
            handle.flush()
            os.fsync(handle.fileno())


def _load_or_start(state: RunState) -> None:
    out = state.options.out_dir
    out.mkdir(parents=True, exist_ok=True)
    path = out / JSONL
    identity = state.scenario.identity()
    if path.is_file() and path.stat().st_size > 0:
        _drop_torn_tail(path)
        header, attempts = read_jsonl(path)
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
        if attempts:
            state.notes.append(f"resumed from {path}: {len(attempts)} iteration(s) already recorded (baseline included)")
    else:
        append_line(path, json.dumps({"type": "run", "identity": identity, "started": time.time(),
                                      "command": state.options.command}))
    pred_path = out / PREDICTIONS
    if pred_path.is_file():
        try:
            state.predictions = dict(json.loads(pred_path.read_text()).get("by_permutation", {}))
        except (OSError, ValueError):
            state.predictions = {}


def _save_predictions(state: RunState) -> None:
    atomic_write_text(
        state.options.out_dir / PREDICTIONS,
        json.dumps({"model": state.scenario.target.model.name, "occupancy": state.scenario.occupancy.programs,
                    "by_permutation": state.predictions}, default=float),
    )


# ---------------------------------------------------------------------------------------------- evaluation


def _predict(
    state: RunState, permutation_id: str, perm: Any, workers: int | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    cached = state.predictions.get(permutation_id)
    if cached is None:
        cached = {
            "prediction": assess.predict(state.scenario, perm, state.footprint(), workers),
            "wave": assess.wave_stats(state.scenario, perm).to_dict(),
        }
        state.predictions[permutation_id] = cached
    return cached["prediction"], cached["wave"]


def screen_text(state: RunState, sim_workers: int | None = None) -> Callable[[str], tuple[str | None, Any, Any, str]]:
    """The search proposer's cheap evaluator: parse, prove, predict (cached by permutation id). Safe to call
    from several threads: at worst two threads predict the same permutation once each."""

    # CPython 3.11's ast.parse is not thread-safe (SystemError "AST constructor recursion depth mismatch"):
    # parsing and proving take turns, only the simulation runs on several threads.
    parse_lock = threading.Lock()

    def screen(text: str) -> tuple[str | None, Any, Any, str]:
        try:
            with parse_lock:
                formula = state.scenario.formula(text)
                checked = state.scenario.check(formula)
        except UserError as err:
            return None, None, None, str(err)
        if not checked.proof.is_bijection:
            return None, None, None, checked.proof.message()
        prediction, wave = _predict(state, checked.permutation_id, checked.perm, sim_workers)
        return checked.permutation_id, prediction, wave, ""

    return screen


def _measure(state: RunState, measurer: Measurer | None, cache: MeasureCache, checked: Any, baseline: bool) -> Any:
    if measurer is None:
        return None
    scenario = state.scenario
    key = cache_key(scenario.kernel.source_hash, checked.permutation_id + ("|baseline" if baseline else ""),
                    scenario.model.name, scenario.sizes)
    hit = cache.get(key)
    if hit is not None and not state.options.remeasure:
        return {**hit, "cached": True}
    try:
        result = measurer.measure_baseline() if baseline else measurer.measure(checked.formula)
    except UserError as err:
        result = {"device": measurer.device, "kind": f"measured ({measurer.device})", "comparison": None,
                  "error": f"measurement failed: {err}"}
    result = {**result, "cached": False}
    cache.put(key, result)
    return result


def evaluate(
    state: RunState, iteration: int, proposal: Proposal, measurer: Measurer | None, cache: MeasureCache
) -> Attempt:
    """Take one proposal through every gate; never raises on a bad proposal (it is recorded instead)."""
    started = time.perf_counter()
    history = list(state.attempts)
    best_measured = state.best_measured() if state.device else None
    vendor = state.scenario.target.model.vendor
    attempt = Attempt(
        iteration=iteration,
        status=EVALUATED,
        proposer=proposal.proposer,
        label=proposal.label,
        formula=proposal.formula_text,
        hypothesis=proposal.hypothesis,
        reasoning=proposal.reasoning,
        summary=proposal.summary,
        why_better=proposal.why_better,
        tokens=proposal.tokens,
        reasons_old=reasons_dict(history, history[0] if history else None, best_measured, vendor),
    )
    if proposal.reply_problem or not proposal.formula_text.strip():
        attempt.status, attempt.message = NO_FORMULA, proposal.reply_problem or "empty formula"
        return _finish(attempt, started)
    try:
        formula = state.scenario.formula(proposal.formula_text)
        checked = state.scenario.check(formula)
    except UserError as err:
        attempt.status, attempt.message = UNPARSABLE, str(err)
        return _finish(attempt, started)
    attempt.formula = formula.source if iteration else proposal.formula_text
    attempt.proof = assess.proof_dict(checked)
    attempt.permutation_id = checked.permutation_id
    if not checked.proof.is_bijection:
        attempt.status, attempt.message = NOT_BIJECTIVE, checked.proof.message()
        return _finish(attempt, started)
    seen = state.seen()
    if checked.permutation_id in seen:
        attempt.status, attempt.duplicate_of = DUPLICATE, seen[checked.permutation_id]
        attempt.message = f"same permutation as iteration {attempt.duplicate_of}; not evaluated again"
        return _finish(attempt, started)
    attempt.prediction, attempt.wave = _predict(state, checked.permutation_id, checked.perm)
    attempt.measurement = _measure(state, measurer, cache, checked, baseline=iteration == 0)
    attempt.message = (
        f"{checked.proof.message()}; predicted hit {pct(attempt.prediction['l2_hit_rate'])}, DRAM read "
        f"{fmt_bytes(attempt.prediction['dram_read_bytes'])} ({attempt.prediction['kind']})"
    )
    comparison = (attempt.measurement or {}).get("comparison")
    if comparison:
        from swizzlelab.optimize.reasons import ci_text, verdict

        attempt.message += (
            f"; {ci_text(comparison)} measured ({attempt.measurement['device']}): {verdict(comparison)}"
        )
    elif attempt.measurement and attempt.measurement.get("correctness", {}).get("passed") is False:
        attempt.message += f"; WRONG OUTPUT on {attempt.measurement['device']}: {attempt.measurement['correctness']['message']}"
    elif attempt.measurement and attempt.measurement.get("error"):
        attempt.message += f"; {attempt.measurement['error']}"
    return _finish(attempt, started)


def _finish(attempt: Attempt, started: float) -> Attempt:
    attempt.elapsed_s = time.perf_counter() - started
    return attempt


def baseline_proposal(scenario: Scenario) -> Proposal:
    text = scenario.kernel.site_text()
    return Proposal(
        formula_text=text,
        hypothesis="the kernel's own order (its swizzle site as written)",
        proposer="baseline",
        label="kernel default site",
        reasoning="Reference point: every later order is compared with this one.",
        summary="No change: the order written at the kernel's swizzle site.",
    )


# ---------------------------------------------------------------------------------------------- the loop


@dataclass
class RunResult:
    state: RunState
    files: dict[str, Path]

    @property
    def best(self) -> Attempt:
        return self.state.best()


def _default_measurer(state: RunState) -> Measurer | None:
    target = state.scenario.target
    if not target.can_measure:
        state.measured_note = (
            f"the local GPU {target.local_gpu} is not a {target.model.name}" if target.local_gpu
            else "no CUDA GPU on this machine"
        )
        return None
    from swizzlelab.optimize.measure import GpuMeasurer

    return GpuMeasurer(state.scenario, budget_s=state.options.measure_s, use_ncu=state.options.use_ncu,
                       ncu_dir=state.options.out_dir / "ncu")


def run(
    scenario: Scenario,
    options: Options,
    measurer: Measurer | None | str = "auto",
    on_note: Callable[[str], None] = lambda text: None,
    on_iteration: Callable[[Attempt], None] = lambda attempt: None,
) -> RunResult:
    """Run (or resume) the optimizer until `options.budget` iterations after the baseline are recorded."""
    from swizzlelab.optimize import report

    state = RunState(scenario, options)
    _load_or_start(state)
    for note in state.notes:
        on_note(note)
    state.notes.insert(0, scenario.target.note)
    active = _default_measurer(state) if measurer == "auto" else measurer
    state.device = getattr(active, "device", "") if active is not None else ""
    if state.device and not scenario.target.can_measure:
        state.notes[0] = f"target {scenario.model.name}; measured with {state.device}"
    if active is None and not state.measured_note:
        state.measured_note = "no measurer"
    cache = MeasureCache.open(options.cache_path or options.out_dir / CACHE_FILE)
    jsonl = options.out_dir / JSONL

    def record(attempt: Attempt) -> None:
        state.attempts.append(attempt)
        append_line(jsonl, json.dumps(attempt.to_dict(), default=float))
        _save_predictions(state)
        report.write_progress(state)
        on_iteration(attempt)

    if not state.attempts:
        base = evaluate(state, 0, baseline_proposal(scenario), active, cache)
        if base.status != EVALUATED:
            raise UserError(f"the kernel's own order cannot be evaluated: {base.message}")
        base.reasons_old = {}
        record(base)

    proposers = _make_proposers(state, on_note)
    while len(state.attempts) - 1 < options.budget:
        iteration = len(state.attempts)
        proposer = proposers.pick(iteration)
        try:
            proposal = proposer.propose(state.attempts, state.best())
        except UserError as err:
            # e.g. no candidate could be ranked: the log says why (its notes hold the rejection summary)
            state.notes.append(str(err))
            report.write_progress(state)
            raise
        if proposal is None:
            proposal = proposers.fallback(iteration, state)
            if proposal is None:
                on_note("search: every enumerated order has been tried; stopping before the budget")
                state.notes.append("search ran out of untried orders before the budget")
                break
        record(evaluate(state, iteration, proposal, active, cache))
    files = report.write_all(state)
    return RunResult(state, files)


@dataclass
class _Proposers:
    """Which proposer acts at each iteration (`both` alternates llm and search; llm falls back to search)."""

    mode: str
    search: Any
    llm: Any

    def pick(self, iteration: int) -> Any:
        if self.llm is not None and self.llm.available and (self.mode == "llm" or iteration % 2 == 1):
            return self.llm
        return self.search

    def fallback(self, iteration: int, state: RunState) -> Proposal | None:
        """When the llm had nothing (it became unavailable this turn) the search proposes instead."""
        return self.search.propose(state.attempts, state.best())


def _make_proposers(state: RunState, on_note: Callable[[str], None]) -> _Proposers:
    from swizzlelab.optimize.search import SearchProposer

    model = state.scenario.target.model

    def note(text: str) -> None:
        if text not in state.notes:
            state.notes.append(text)
            on_note(text)

    workers = state.options.workers or default_workers()
    jsonl = state.options.out_dir / JSONL
    lock = threading.Lock()

    def rejected(spec: str, text: str, reason: str) -> None:
        with lock:
            append_line(jsonl, json.dumps({"type": "rejected", "spec": spec, "formula": text, "reason": reason}))

    search = SearchProposer(
        grid=state.scenario.grid,
        n_domains=model.n_domains,
        # Candidates run on all threads, each simulated on one (no nested thread pools).
        screen=screen_text(state, sim_workers=1 if workers > 1 else None),
        workers=workers,
        vendor=model.vendor,
        screen_budget_s=state.options.screen_s,
        notes=note,
        explore=bool(state.device),
        context=state.memory_text,
        periods=state.sharing_periods,
        rejected=rejected,
    )
    llm = None
    if state.options.proposer in ("llm", "both"):
        from swizzlelab.optimize.llm import LlmProposer, config_from_env

        config = state.options.llm or config_from_env()
        llm = LlmProposer(config=config, state=state, notes=note)
    return _Proposers(state.options.proposer, search, llm)


def describe_best(state: RunState) -> str:
    """One line on the best order, labelled measured or predicted."""
    best = state.best()
    if best.iteration == 0:
        if state.device:
            return f"no order beat the kernel's default with 95% confidence, measured ({state.device})"
        return "the kernel's own order is the best predicted"
    pred = best.prediction or {}
    text = (
        f"best: iteration {best.iteration} {best.label} (permutation {best.permutation_id}): predicted hit "
        f"{pct(pred.get('l2_hit_rate'))} vs {pct(state.baseline.prediction['l2_hit_rate'])}, DRAM read "
        f"{fmt_bytes(pred.get('dram_read_bytes', 0))} vs {fmt_bytes(state.baseline.prediction['dram_read_bytes'])} "
        f"({pred.get('kind', '')})"
    )
    comparison = (best.measurement or {}).get("comparison")
    if comparison:
        from swizzlelab.optimize.reasons import ci_text

        text += f"; {ci_text(comparison)} measured ({best.measurement['device']})"
    return text


__all__ = ["Options", "RunResult", "RunState", "describe_best", "evaluate", "read_jsonl", "run", "why_old_was_slow"]
