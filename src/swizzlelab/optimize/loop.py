"""The optimizer loop: propose -> parse -> prove -> dedupe -> predict -> measure (GPU) -> record -> feed back.

Every iteration is appended (fsynced) to iterations.jsonl as it ends, so a rerun resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swizzlelab.errors import UserError
from swizzlelab.fmt import fmt_bytes, pct
from swizzlelab.io import append_line
from swizzlelab.optimize import assess, report
from swizzlelab.optimize.llm import LlmProposer, config_from_env
from swizzlelab.optimize.measure import CACHE_FILE, GpuMeasurer, MeasureCache, Measurer, cache_key
from swizzlelab.optimize.reasons import reasons_dict, why_old_was_slow
from swizzlelab.optimize.records import (
    DUPLICATE,
    EVALUATED,
    NO_FORMULA,
    NOT_BIJECTIVE,
    UNPARSABLE,
    Attempt,
    Measurement,
    Prediction,
    ProofSummary,
    Proposal,
    Wave,
)
from swizzlelab.optimize.search import Screened, SearchProposer
from swizzlelab.optimize.sweep import SWEEP_SIZE, Sweep, default_time_budget
from swizzlelab.optimize.state import (
    JSONL,
    PREDICTIONS,
    PROPOSERS,
    Options,
    RunState,
    best_of,
    describe_best,
    load_or_start,
    read_jsonl,
    record_attempt,
)
from swizzlelab.runtime import available_memory_bytes
from swizzlelab.scenario import Checked, Scenario
from swizzlelab.sim import Engine, default_workers
from swizzlelab.sim.gpu import release_device
from swizzlelab.sim.setup import screening_bytes, trace_known
from swizzlelab.sim.timemodel import stop_reason

# ---------------------------------------------------------------------------------------------- evaluation


# Traces above this many line accesses are screened on a sample of the L2 sets on the CPU (4x faster); the order chosen
# is predicted exactly when it is evaluated. On the GPU engine the walk is a small part of an order's time (its CPU
# schedule is most of it): screening every set there ranked as many candidates a minute on matmul 8192 as a quarter
# of them (258 against 254 on an H100 host, benchmarks/sim_speed), so the GPU screens exactly.
SCREEN_SAMPLE_ACCESSES = 50_000_000
SCREEN_SET_FRACTION = {"auto": 0.25, "gpu": 1.0}


def _predict(state: RunState, permutation_id: str, perm: Any, workers: int | None = None,
             screening: bool = False) -> tuple[Prediction, Wave]:
    cached = state.predictions.get(permutation_id)
    fraction = SCREEN_SET_FRACTION[state.engine]
    if (cached is None and screening and fraction < 1.0
            and int(state.scenario.trace.lines.size) > SCREEN_SAMPLE_ACCESSES):
        estimate = state.screen_estimates.get(permutation_id)
        if estimate is None:
            estimate = (assess.predict(state.scenario, perm, state.footprint(), Engine(state.engine, workers, fraction),
                                       state.sim_params),
                        assess.wave_stats(state.scenario, perm))
            state.screen_estimates[permutation_id] = estimate
        return estimate
    if cached is None:
        cached = (assess.predict(state.scenario, perm, state.footprint(), Engine(state.engine, workers),
                                 state.sim_params),
                  assess.wave_stats(state.scenario, perm))
        state.predictions[permutation_id] = cached
    return cached


def screen_text(state: RunState, sim_workers: int | None = None) -> Callable[[str], Screened]:
    """The search proposer's cheap evaluator: parse, prove, predict (cached by permutation id). Safe to call
    from several threads: at worst two threads predict the same permutation once each."""

    # CPython 3.11's ast.parse is not thread-safe (SystemError "AST constructor recursion depth mismatch"):
    # parsing and proving take turns, only the simulation runs on several threads.
    parse_lock = threading.Lock()

    def screen(text: str) -> tuple[str | None, Prediction | None, Wave | None, str]:
        try:
            with parse_lock:
                formula = state.scenario.formula(text)
                checked = state.scenario.check(formula)
        except UserError as err:
            return None, None, None, str(err)
        if not checked.proof.is_bijection:
            return None, None, None, checked.proof.message()
        prediction, wave = _predict(state, checked.permutation_id, checked.perm, sim_workers, screening=True)
        return checked.permutation_id, prediction, wave, ""

    return screen


def screening_threads(state: RunState, wanted: int, note: Callable[[str], None]) -> int:
    """How many orders the search may screen at once: `wanted`, fewer where the trace's shared caches still to be
    built and that many orders' own memory would not fit in what is available (runtime.available_memory_bytes: under a sandboxed
    child's limit, the limit); says so in one line when capped."""
    if wanted <= 1:
        return 1
    trace = state.scenario.trace
    n_access = int(trace.lines.size)
    sampled = SCREEN_SET_FRACTION.get(state.engine, 1.0) < 1.0 and n_access > SCREEN_SAMPLE_ACCESSES
    shared, per_order = screening_bytes(n_access, trace_known(trace), sampled)
    available = available_memory_bytes()
    fits = max(1, (available - shared) // per_order)
    if fits >= wanted:
        return wanted
    note(f"search: screening on {fits} thread{'s' if fits > 1 else ''} of {wanted} (memory: {fmt_bytes(available)} "
         f"available, {fmt_bytes(shared)} for the trace's shared caches, {fmt_bytes(per_order)} per order screened "
         "at once)")
    return int(fits)


def _measure_key(state: RunState, permutation_id: str, baseline: bool) -> str:
    """The measure cache's key of an order (the kernel's own order is timed alone, so it has a key of its own)."""
    scenario = state.scenario
    return cache_key(scenario.kernel_key(), permutation_id + ("|baseline" if baseline else ""), scenario.model.name,
                     scenario.sizes)


def _measure(
    state: RunState, measurer: Measurer | None, cache: MeasureCache, checked: Checked, baseline: bool
) -> Measurement | None:
    if measurer is None:
        return None
    key = _measure_key(state, checked.permutation_id, baseline)
    hit = cache.get(key)
    if hit is not None and not state.options.remeasure:
        return dataclasses.replace(hit, cached=True)
    if state.engine == "gpu":
        release_device()  # the kernel's timing and ncu get the whole GPU's memory
    try:
        result = measurer.measure_baseline() if baseline else measurer.measure(checked.formula)
    except UserError as err:
        result = Measurement(device=measurer.device, error=f"measurement failed: {err}")
    cache.put(key, result)
    return result


def profile_at_end(state: RunState, measurer: Measurer | None, cache: MeasureCache) -> str:
    """ncu's figures of the kernel's own order and of the best measured order, after the search: they validate
    the predicted traffic beside the measured speedups, and no measurement waits for them. Returns a note."""
    profile = getattr(measurer, "profile", None)
    if profile is None or not state.options.use_ncu or len(state.attempts) < 2:
        return ""
    best = state.best_measured()
    targets = [state.attempts[0]] + ([best] if best is not None and best.iteration != 0 else [])
    done = []
    for attempt in targets:
        if attempt.measurement is None or attempt.measurement.ncu is not None:
            continue
        formula = None if attempt.iteration == 0 else state.scenario.formula(attempt.formula)
        figures = profile(formula)
        if figures is None:
            continue
        attempt.measurement = dataclasses.replace(attempt.measurement, ncu=figures)
        cache.put(_measure_key(state, attempt.permutation_id, attempt.iteration == 0), attempt.measurement)
        done.append("the kernel's own order" if attempt.iteration == 0 else f"iteration {attempt.iteration}")
    return f"ncu profiled {' and '.join(done)} after the search" if done else ""


def evaluate(
    state: RunState, iteration: int, proposal: Proposal, measurer: Measurer | None, cache: MeasureCache
) -> Attempt:
    """Take one proposal through every gate; never raises on a bad proposal (it is recorded instead)."""
    started = time.perf_counter()
    history = list(state.attempts)
    best_measured = state.best_measured() if state.device else None
    vendor = state.scenario.model.vendor
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
        prompt=proposal.prompt,
        reply=proposal.reply,
        reply_s=proposal.reply_s,
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
    attempt.proof = ProofSummary.of(checked.proof, checked.permutation_id)
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
    attempt.time = state.time_figures(attempt.prediction) if iteration else None
    attempt.measurement = _measure(state, measurer, cache, checked, baseline=iteration == 0)
    pred = attempt.prediction
    attempt.message = (
        f"{checked.proof.message()}; predicted hit {pct(pred.l2_hit_rate)}, DRAM read "
        f"{fmt_bytes(pred.dram_read_bytes)} (model {pred.model})"
    )
    if attempt.time is not None:
        attempt.message += f"; speedup {attempt.time.text()}"
    measurement = attempt.measurement
    if measurement is not None and measurement.comparison is not None:
        comparison = measurement.comparison
        attempt.message += f"; {comparison.ci_text()} measured ({measurement.device}): {comparison.verdict()}"
    elif measurement is not None and measurement.passed is False:
        attempt.message += f"; WRONG OUTPUT on {measurement.device}: {measurement.check_message}"
    elif measurement is not None and measurement.error:
        attempt.message += f"; {measurement.error}"
    return _finish(attempt, started)


def _finish(attempt: Attempt, started: float) -> Attempt:
    attempt.elapsed_s = time.perf_counter() - started
    return attempt


def baseline_proposal(scenario: Scenario) -> Proposal:
    return Proposal(
        formula_text=scenario.kernel.site_text(),
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
    stop_reason: str = ""  # the time model's one line when it stopped the run: nothing predicted to gain
    # (formula, family spec) of the best-ranked untried order when it stopped: what it would have tried next
    next_untried: list[tuple[str, str]] = field(default_factory=list)

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
    return GpuMeasurer(state.scenario, budget_s=state.options.measure_s, use_ncu=state.options.use_ncu,
                       ncu_dir=state.options.out_dir / "ncu")


def run(
    scenario: Scenario,
    options: Options,
    measurer: Measurer | None | str = "auto",
    on_note: Callable[[str], None] = lambda text: None,
    on_iteration: Callable[[Attempt], None] = lambda attempt: None,
    on_screen: Callable[[int, int], None] = lambda done, total: None,
) -> RunResult:
    """Run (or resume) the optimizer until `options.budget` iterations after the baseline are recorded.
    `on_screen(done, total)` follows the search's ranking of candidates with the simulator."""
    started = time.perf_counter()
    state = RunState(scenario, options)
    load_or_start(state)
    for note in state.notes:
        on_note(note)
    engine_note = state.pick_engine()
    on_note(engine_note)
    state.notes[0:0] = [scenario.target.note, *scenario.about, engine_note]
    active = _default_measurer(state) if measurer == "auto" else measurer
    state.device = getattr(active, "device", "") if active is not None else ""
    if state.device and not scenario.target.can_measure:
        state.notes[0] = f"target {scenario.model.name}; measured with {state.device}"
    if active is None and not state.measured_note:
        state.measured_note = "no measurer"
    proposers = _make_proposers(state, on_note, on_screen)
    stopped = ""
    untried: list[tuple[str, str]] = []
    cache = MeasureCache.open(options.cache_path or options.out_dir / CACHE_FILE)

    def record(attempt: Attempt) -> None:
        record_attempt(state, attempt)
        state.learn(attempt)
        report.write_progress(state)
        on_iteration(attempt)

    mark = time.perf_counter()
    if not any(a.iteration == 0 for a in state.attempts):
        if scenario.task.has_access_model:
            scenario.trace  # noqa: B018 -- built here so the timeline tells the trace from the baseline's run
            mark = _mark(state, "trace of the kernel's accesses", mark)
        base = evaluate(state, 0, baseline_proposal(scenario), active, cache)
        if base.status != EVALUATED:
            raise UserError(f"the kernel's own order cannot be evaluated: {base.message}")
        base.reasons_old = {}
        record(base)
        state.attempts.sort(key=lambda a: a.iteration)  # a resumed log may have lost only its baseline record
        mark = _mark(state, "the kernel's own order: simulated" + (", measured" if active is not None else ""), mark)
    time_note = state.start_time_model()
    if time_note:
        on_note(time_note)
        state.notes.append(time_note)
    _rank_by_time(state, proposers.search)
    # Sized once the trace and the caches the kernel's own order built are resident (runtime.available_memory_bytes
    # then counts them), before the first screening
    proposers.search.workers = screening_threads(state, proposers.search.workers, proposers.note)

    if _measures_broadly(state, active):
        sweep = _sweep(state, proposers, active, cache, record, started)
        stopped = sweep.run()
        on_note(stopped)
        state.notes.append(stopped)
        mark = time.perf_counter()
    while len(state.attempts) - 1 < options.budget and not (stopped and options.proposer == "search"):
        iteration = state.next_iteration()
        proposer = proposers.pick(iteration)
        try:
            proposal = proposer.propose(state.attempts, state.best())
            if proposal is None and proposer is not proposers.search:
                proposal = proposers.search.propose(state.attempts, state.best())
            mark = _mark(state, f"iteration {iteration}: proposed ({'llm' if proposer is proposers.llm else 'search'})", mark)
        except UserError as err:
            # e.g. no candidate could be ranked: the log says why (its notes hold the rejection summary)
            state.notes.append(str(err))
            report.write_progress(state)
            raise
        if proposal is None and proposers.search.stop_reason:
            check = _check_before_stopping(state, proposers.search, active)
            if check is not None:
                proposal, why = check
                on_note(why)
                state.notes.append(why)
                record(evaluate(state, iteration, proposal, active, cache))
                mark = _mark(state, f"iteration {iteration}: the check before stopping, simulated, measured", mark)
                continue
            stopped = proposers.search.stop_reason
            untried = proposers.search.best_untried(state.attempts)
            on_note(stopped)
            state.notes.append(stopped)
            break
        if proposal is None:
            on_note("search: every enumerated order has been tried; stopping before the budget")
            state.notes.append("search ran out of untried orders before the budget")
            break
        record(evaluate(state, iteration, proposal, active, cache))
        mark = _mark(state, f"iteration {iteration}: simulated" + (", measured" if active is not None else ""), mark)
    if options.report_untried:
        proposers.search.start()
        picks = proposers.search.picks(set(state.seen()), options.report_untried)
        untried += [(s.text, s.candidate.spec) for s in picks if (s.text, s.candidate.spec) not in untried]
    profiled = profile_at_end(state, active, cache)
    if profiled:
        on_note(profiled)
        state.notes.append(profiled)
        _mark(state, "ncu profiles", mark)
    state.notes.append("time: " + "; ".join(f"{what} {seconds:.1f} s" for what, seconds in state.timeline))
    files = report.write_all(state)
    return RunResult(state, files, stopped, untried)


def _measures_broadly(state: RunState, measurer: Measurer | None) -> bool:
    """Whether this run takes the measurement-led search (optimize.sweep): a local GPU that can race orders, a
    search proposer, and an anchored time model to order the visits."""
    return (measurer is not None and hasattr(measurer, "race") and state.options.proposer in ("search", "both")
            and state.time_model is not None and state.time_model.base_ms is not None)


def _sweep(state: RunState, proposers: _Proposers, measurer: Any, cache: MeasureCache,
           record: Callable[[Attempt], None], started: float) -> Sweep:
    """The measured search of this run, its deadline counted from the run's start."""
    if state.options.time_budget_s is None:
        state.options.time_budget_s = default_time_budget(state.time_model.base_ms)
    deadline = started + state.options.time_budget_s
    search = proposers.search
    last = [time.perf_counter()]
    # The first sweep is ranked before anything is raced: its slices go on while fewer orders than a sweep are
    # ranked, for at most a quarter of the time budget.
    search.start(want=SWEEP_SIZE, until=time.perf_counter() + state.options.time_budget_s / 4)

    def mark(what: str) -> None:
        last[0] = _mark(state, what, last[0])

    mark("the first sweep ranked with the simulator")

    def confirm(attempt: Attempt) -> Measurement | None:
        checked = state.scenario.check(state.scenario.formula(attempt.formula))
        return _measure(state, measurer, cache, checked, baseline=False)

    return Sweep(state=state, search=search, measurer=measurer,
                 evaluate=lambda iteration, proposal: evaluate(state, iteration, proposal, None, cache),
                 confirm=confirm, record=record, note=proposers.note, mark=mark, deadline=deadline,
                 keep_going=not state.options.stop_without_gain)


def _mark(state: RunState, what: str, since: float) -> float:
    """Add the seconds since `since` to the run's timeline under `what`; returns now."""
    now = time.perf_counter()
    state.timeline.append((what, now - since))
    return now


def _check_before_stopping(state: RunState, search: SearchProposer,
                           measurer: Measurer | None) -> tuple[Proposal, str] | None:
    """Where the time model would stop a measuring run before any candidate was measured: the best untried order,
    to measure once first. The model can miss what an order changes (on an H200 it put a diagonal-order matmul's
    best order at 1.03x; it measured 1.11x at 4096^3 and 1.93x at 8192^3); one measurement costs seconds. Returns it
    with the run's one-line note; None once a candidate was measured, without a measurer, or with nothing untried."""
    if measurer is None or any(a.measured for a in state.attempts[1:]):
        return None
    untried = search.best_untried(state.attempts)
    if not untried:
        return None
    text, spec = untried[0]
    reason, search.stop_reason = search.stop_reason, ""  # the next proposal decides again, with this measurement
    why = (f"{reason.removesuffix(', stopping')}; one check first: the best untried order, {spec}, is measured (the "
           "model can miss what an order changes)")
    return Proposal(formula_text=text, hypothesis=f"{spec}: the best-ranked untried order, measured once before "
                    "the time model's stop", proposer="search", label=spec), why


# Seconds of screening before each measured proposal while the first sweep is unfinished.
SLICE_S = 15.0


# The stop rule looks at this many of the best-ranked untried orders.
STOP_RULE_TOP = 24


def _rank_by_time(state: RunState, search: SearchProposer) -> None:
    """Once a GPU measured the kernel's own order, the search ranks by the time model's predicted speedup
    (corrected by the run's measurements), skips families that measured slower, and stops when nothing is
    predicted to gain more than the measurement resolves. Without that anchor it keeps ranking by traffic."""
    model = state.time_model
    if model is None or model.base_ms is None:
        return
    search.rank_key = lambda pred: (-state.expected_speedup(pred), *pred.score())
    search.excluded = lambda group: state.correction is not None and state.correction.excluded(group)
    if state.options.stop_without_gain:
        search.stop_rule = lambda ranked: stop_reason(
            model, [state.expected_speedup(s.prediction) for s in ranked[:STOP_RULE_TOP] if s.prediction is not None])


@dataclass
class _Proposers:
    """Which proposer acts at each iteration (`both` alternates llm and search)."""

    mode: str
    search: SearchProposer
    llm: LlmProposer | None
    note: Callable[[str], None]  # adds a line to the run's notes once

    def pick(self, iteration: int) -> Any:
        if self.llm is not None and self.llm.available and (self.mode == "llm" or iteration % 2 == 1):
            return self.llm
        return self.search


def _make_proposers(
    state: RunState, on_note: Callable[[str], None], on_screen: Callable[[int, int], None]
) -> _Proposers:
    model = state.scenario.model

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
        # Measuring runs propose after a first slice of screening and rank the rest between measurements, so the
        # first measured order comes early (spmv's 4M-program grid: 17 orders took 90 s to rank up front).
        slice_s=SLICE_S if state.device else 0.0,
        context=state.memory_text,
        periods=state.sharing_periods,
        resident=model.units_per_domain * state.scenario.occupancy.programs,
        rejected=rejected,
        on_screen=on_screen,
        best_of=lambda attempts: best_of(attempts, state.device),
    )
    llm = None
    if state.options.proposer in ("llm", "both"):
        llm = LlmProposer(config=state.options.llm or config_from_env(), state=state, notes=note)
    return _Proposers(state.options.proposer, search, llm, note)


__all__ = [
    "JSONL", "PREDICTIONS", "PROPOSERS", "Options", "RunResult", "RunState", "describe_best", "evaluate",
    "read_jsonl", "run", "screen_text", "why_old_was_slow",
]
