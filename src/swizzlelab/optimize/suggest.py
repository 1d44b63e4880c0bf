"""Which block order would make a leaderboard submission's kernel faster: its site found and its kernel traced at the
benchmark cases, orders ranked by the time model, in sandboxed children (the code is hostile); the best few checked
and, on the leaderboard's GPU, timed against the submission's own order, interleaved, through the isolated evaluator.

`suggest(...)` runs in the trusted parent (a leaderboard worker): it never imports the submission. The children
run swizzlelab.optimize.suggest_child, whose answers are validated here (Reply) like any untrusted input.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError

from swizzlelab.harness.isolate import Limits, evaluate_isolated
from swizzlelab.harness.isolate.disk import remove_workdir
from swizzlelab.harness.isolate.runner import ChildFailed, ChildProcess, child_workdir, timed_rows
from swizzlelab.harness.timing import t_quantile_975
from swizzlelab.optimize.state import group_of_spec
from swizzlelab.sim.simulate import default_workers

CHILD_ENTRY = "swizzlelab.optimize.suggest_child"
# The site's replacement is timed for at most this many orders (those predicted to gain, then the best-ranked of each
# other family: the time model misses what many orders change, benchmarks/time_model), interleaved with the
# submission's own file: round r runs own, A, B then B, A, own, so a drift of the GPU over the rounds cancels; after
# each round but the last the slower half of the orders leaves (successive halving), so the leaders get the runs.
TOP = 6
ROUNDS = 2
MEASURE_METHOD = ("interleaved isolated runs (the submission's own file and the file with only its site replaced, "
                  "each in ranked mode with the task's tests): speedup of the mean run score, 95% interval from the "
                  "run-to-run spread pooled over the files (Student's t)")
TEXT = 4000  # longest one-line text taken from a child
CODE = 512 * 1024  # longest patched file taken from a child (submissions are at most 64 KiB)

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Line = Annotated[str, Field(max_length=TEXT)]


# ---------------------------------------------------------------- what the children answer (validated here)


class Resources(BaseModel):
    """The compiled kernel's resources per program, as the compiling child read them."""

    n_regs: int = Field(ge=1, le=65536)
    shared_bytes: int = Field(ge=0, le=1 << 24)
    num_warps: int = Field(ge=1, le=64)
    how: Line


class CasePrediction(BaseModel):
    """An order's predicted speedup on one benchmark case, and the DRAM bytes the simulator predicts there."""

    case: Line
    speedup: Positive
    low: Positive
    high: Positive
    dram_bytes: FiniteFloat


class RankedOrder(BaseModel):
    """One order the ranking child proposes: family spec, formula, its bijection proof on every case's grid, the
    predicted speedup of the score over the submission's own order, and the file with only the site replaced."""

    spec: Annotated[str, Field(max_length=300)]
    formula: Line
    proof: Line
    speedup: Positive
    low: Positive
    high: Positive
    cases: list[CasePrediction] = Field(max_length=64)
    patched: Annotated[str, Field(max_length=CODE)]


class CaseRank(BaseModel):
    """What the ranking child did at one benchmark case: the traced size, occupancy, time model, why it stopped."""

    case: Line
    grid: list[Annotated[int, Field(ge=1)]] = Field(max_length=3)
    trace: Line
    occupancy: Line
    time_model: Line
    anchor: Line
    stop_reason: Line
    search: list[Line] = Field(default_factory=list, max_length=20)  # what the search said (rejections, ...)
    noise: Annotated[float, Field(ge=0, le=1)]


class Ranking(BaseModel):
    """The ranking child's answer: the kernel and site, each case's search, and the best orders."""

    kernel: Line
    site: Line
    model: Annotated[str, Field(max_length=64)]
    noise: Annotated[float, Field(ge=0, le=1)]
    cases: list[CaseRank] = Field(min_length=1, max_length=64)
    orders: list[RankedOrder] = Field(max_length=20)
    elapsed_s: FiniteFloat


class Reply(BaseModel):
    """One frame from a suggestion child: ok with a result, or a one-line error."""

    ok: bool
    error: Line = ""
    sandbox: dict[str, list[Annotated[str, Field(max_length=TEXT)]]] = Field(default_factory=dict)
    resources: Resources | None = None
    ranking: Ranking | None = None


# ---------------------------------------------------------------- what the parent stores


@dataclass
class Figure:
    """A speedup over the submission's own order (> 1: faster) with its 95% interval."""

    speedup: float
    low: float
    high: float

    def text(self) -> str:
        return f"{self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}]"


@dataclass
class Measured:
    """A candidate timed against the submission's own order on the GPU: the score's speedup with its 95% interval,
    each case's, and the runs behind them."""

    score: Figure
    gpu: str
    cases: list[dict[str, Any]]
    runs: dict[str, int]  # file ("own", order spec) -> runs that passed
    method: str = MEASURE_METHOD

    def text(self) -> str:
        return f"{self.score.text()} measured ({self.gpu})"


@dataclass
class Candidate:
    """An order tried for the submission: what the ranking child said of it, and what the evaluator found."""

    spec: str
    formula: str
    proof: str
    predicted: Figure
    predicted_cases: list[dict[str, Any]]
    patched: str
    tests: str = ""  # "passed", or why the patched file failed the task's tests
    measured: Measured | None = None

    @property
    def passed(self) -> bool:
        return self.tests == "passed"

    def predicted_text(self, model: str) -> str:
        return f"{self.predicted.text()} predicted (time model {model})"


@dataclass
class Suggestion:
    """The outcome for one submission: `order` (the best candidate, formula and figures) or `none` (no order is
    predicted, or measured, to beat the submission's own), with the one line that says which."""

    outcome: str  # "order" | "none"
    headline: str
    kernel: str = ""
    site: str = ""
    model: str = ""  # the time model's hardware model: every prediction is "predicted (time model MODEL)"
    cases: list[dict[str, Any]] = field(default_factory=list)  # CaseRank dicts
    best: Candidate | None = None
    candidates: list[Candidate] = field(default_factory=list)
    gpu: str = ""  # the GPU that measured, "" when nothing was measured
    notes: list[str] = field(default_factory=list)
    phases_s: dict[str, float] = field(default_factory=dict)

    @property
    def patched(self) -> str:
        return self.best.patched if self.best is not None and self.outcome == "order" else ""

    def to_dict(self) -> dict[str, Any]:
        """JSON for the database, without the patched files (the suggested one is kept apart, for download)."""
        out = asdict(self)
        for cand in [out["best"], *out["candidates"]]:
            if cand is not None:
                cand.pop("patched", None)
        return out


class SuggestFailed(Exception):
    """No suggestion could be made (a note for the submitter, never a verdict on the submission)."""


class SuggestYielded(Exception):
    """A submission's job is waiting for this worker: the suggestion stops between evaluator runs, to be made
    again later (suggestions run at lower priority than submissions)."""


# ---------------------------------------------------------------- the sandboxed children


def _ask(code: str, filename: str, message: dict[str, Any], limits: Limits, on_gpu: bool, interpret: bool
         ) -> Reply:
    """Start a sandboxed child (the evaluator's BOOT, jail and limits) running suggest_child, send one frame, take
    its validated answer. SuggestFailed with one line when it dies, overruns or answers nonsense."""
    workdir, path, drop_to = child_workdir(code, filename, disk_bytes=limits.disk_bytes)
    child = ChildProcess(limits, on_gpu, workdir, drop_to, entry=CHILD_ENTRY)
    # The ranking traces under the interpreter even on a GPU machine (its inputs stay on the GPU, so a file that
    # picks its blocks by the tensors' device picks the GPU's); the compiling child builds the kernel as the GPU
    # (or, without one, Triton for sm_90) would.
    child.extra_env["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        child.start()
        deadline = time.monotonic() + limits.compile_s + limits.run_s
        raw, _ = child.request({**message, "path": str(path)}, deadline, "run")
    except ChildFailed as failure:
        raise SuggestFailed(_tail_reason(failure.reason, child)) from None
    finally:
        child.close()
        remove_workdir(workdir)
    try:
        reply = Reply.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise SuggestFailed(f"the suggestion child answered out of bounds ({where}: {first.get('msg')})") from None
    if not reply.ok:
        raise SuggestFailed(reply.error or "the suggestion child failed")
    return reply


def _tail_reason(reason: str, child: ChildProcess) -> str:
    last = (child.stderr.text().strip().splitlines() or [""])[-1][:300]
    return f"{reason}" + (f" (last line of its stderr: {last})" if last and last not in reason else "")


def child_limits(limits: Limits, wall_s: float, mem_bytes: int | None = None) -> Limits:
    """A suggestion child's limits: the evaluator's, with `wall_s` for its whole answer, CPU time for every
    thread it may run (the simulator screens orders on all usable CPUs) and `mem_bytes` of resident memory where
    given."""
    out = replace(limits, compile_s=wall_s, run_s=1.0, cpu_s=wall_s * default_workers())
    return out if mem_bytes is None else replace(out, host_mem_bytes=mem_bytes)


# ---------------------------------------------------------------- measuring on the GPU


def _log_mean(values: list[float]) -> float:
    return sum(math.log(v) for v in values) / len(values)


def _pooled_figure(groups: list[list[float]], own: int, other: int) -> tuple[Figure | None, int]:
    """Speedup of group `other` over group `own` (ratio of geometric means of their run values) with a 95%
    interval whose run-to-run variance is pooled over every group (each a file's runs, interleaved); (None, 0)
    when either side has no run or no group has two."""
    logs = [[math.log(v) for v in g] for g in groups]
    df = sum(len(g) - 1 for g in logs if g)
    if not logs[own] or not logs[other] or df < 1:
        return None, df
    ss = sum((x - sum(g) / len(g)) ** 2 for g in logs if g for x in g)
    se = math.sqrt(ss / df * (1 / len(logs[own]) + 1 / len(logs[other])))
    diff = sum(logs[own]) / len(logs[own]) - sum(logs[other]) / len(logs[other])
    half = t_quantile_975(df) * se
    return Figure(math.exp(diff), math.exp(diff - half), math.exp(diff + half)), df


def compare_runs(runs: list[list[dict[str, Any]]], labels: list[str], gpu: str, specs: list[str]
                 ) -> list[Measured | None]:
    """Each candidate's measured speedup over the submission's own order (runs[0]) from the runs' scores and case
    means; runs[f] holds file f's passed runs as {"score_ms", "cases_ms"}. A run is one observation: what varies
    between runs (clock, calibration, placement) is in the interval, not only the spread of one run's samples."""
    scores = [[r["score_ms"] for r in file_runs] for file_runs in runs]
    out: list[Measured | None] = []
    for index in range(1, len(runs)):
        score, df = _pooled_figure(scores, 0, index)
        if score is None:
            out.append(None)
            continue
        cases = []
        for c, label in enumerate(labels):
            means = [[r["cases_ms"][c] for r in file_runs] for file_runs in runs]
            figure, _ = _pooled_figure(means, 0, index)
            if figure is not None:
                cases.append({"case": label, **asdict(figure), "own_ms": math.exp(_log_mean(means[0])),
                              "order_ms": math.exp(_log_mean(means[index]))})
        out.append(Measured(score, gpu, cases, {"own": len(runs[0]), specs[index - 1]: len(runs[index]),
                                                "pooled degrees of freedom": df}))
    return out


def _timed(run: Any, n_cases: int) -> dict[str, Any] | None:
    """A passed ranked run's score and case means, or None."""
    cases = [(row.get("candidate") or {}).get("mean_ms") for row in timed_rows(run.report, "ranked")]
    if (not run.passed or run.score_ms is None or run.score_ms <= 0 or len(cases) != n_cases
            or not all(isinstance(c, (int, float)) and c > 0 for c in cases)):
        return None
    return {"score_ms": float(run.score_ms), "cases_ms": [float(c) for c in cases]}


def _device(system: dict[str, Any]) -> str:
    gpu = str(system.get("gpu") or "")
    return gpu if gpu and gpu != "none" else f"CPU ({system.get('runtime') or 'interpreter'}, wall times: tests only)"


def measure(ask: Ask, code: str, filename: str, candidates: list[Candidate], limits: Limits,
            note: Callable[[str], None], should_yield: Callable[[], bool] = lambda: False) -> str:
    """Time the submission's own file and each candidate's in ROUNDS interleaved rounds through the isolated
    evaluator (ranked mode with the task's tests, no library rows); fills each candidate's `measured` and `tests`.
    A candidate that fails once is dropped; SuggestYielded before a run when `should_yield()`. Returns the GPU's
    name."""
    files = [code] + [c.patched for c in candidates]
    runs: list[list[dict[str, Any]]] = [[] for _ in files]
    dropped: set[int] = set()
    gpu = ""
    for round_index in range(ask.rounds):
        if round_index:
            dropped |= _halved(runs, dropped, candidates, note)
        order = list(range(len(files)))
        for index in order if round_index % 2 == 0 else reversed(order):
            if index in dropped:
                continue
            if should_yield():
                raise SuggestYielded("a submission's job is waiting")
            who = "the submission's own file" if index == 0 else f"order {candidates[index - 1].spec}"
            run = evaluate_isolated(ask.task, files[index], "ranked", filename=filename, limits=limits,
                                    budget_s=ask.budget_s, with_baseline=False, kept_caches=ask.kept_caches,
                                    cpu_timing=ask.cpu_timing,
                                    command=f"suggestion timing, round {round_index + 1}: {who}")
            timed = _timed(run, len(ask.labels))
            if timed is None:
                note(f"round {round_index + 1}: {who} failed: {run.reason or 'no score'}")
                if index:
                    candidates[index - 1].tests = f"failed in the evaluator: {run.reason or 'no score'}"
                    dropped.add(index)
                continue
            if index and not candidates[index - 1].tests:
                candidates[index - 1].tests = "passed"
            gpu = gpu or _device(run.system or {})
            runs[index].append(timed)
    for cand, measured in zip(candidates, compare_runs(runs, ask.labels, gpu, [c.spec for c in candidates])):
        cand.measured = measured if cand.passed else None
    return gpu


def _halved(runs: list[list[dict[str, Any]]], dropped: set[int], candidates: list[Candidate],
            note: Callable[[str], None]) -> set[int]:
    """The file indices that leave before the next round: the slower half of the live orders by their last run's
    score against the own file's last run (never the last one standing)."""
    live = [i for i in range(1, len(runs)) if i not in dropped and runs[i]]
    if len(live) < 2 or not runs[0]:
        return set()
    own = runs[0][-1]["score_ms"]
    ranked = sorted(live, key=lambda i: runs[i][-1]["score_ms"])
    out = set(ranked[math.ceil(len(ranked) / 2):])
    for index in sorted(out):
        cand = candidates[index - 1]
        cand.tests = cand.tests or "passed"
        note(f"order {cand.spec} halved out after round {len(runs[0])}: {own / runs[index][-1]['score_ms']:.3f}x "
             "in its last run, slower than the other half")
    return out


# ---------------------------------------------------------------- the whole suggestion


@dataclass(frozen=True)
class Ask:
    """What a suggestion is for: the task, the benchmark cases to rank at (seed, sizes, label and the measured time
    of the submission's own order there when a GPU measured it), the hardware model, whether to time the best
    orders on this GPU, and the budgets."""

    task: str  # a task name or folder
    cases: list[dict[str, Any]]  # {"label", "seed", "sizes", "anchor": [ms, where] | None}, the ranked ones
    labels: list[str]  # every benchmark case's label (the measured score covers them all)
    target: str  # hardware model name ("h100") or "auto"
    measure: bool = False
    top: int = TOP
    rounds: int = ROUNDS
    screen_s: float = 30.0  # the search's screening, over all ranked cases
    sim_engine: str = "auto"
    budget_s: float = 3.0  # per benchmark case and timing run
    kept_caches: Path | None = None  # the evaluator's kept Triton caches (round 2 reuses round 1's compiles)
    cpu_timing: bool = False  # tests of the timed flow without a GPU: interpreter wall times, labelled CPU
    # resident memory of a ranking child (None: the evaluator's): a trace at a benchmark size (545 M line accesses
    # of an attention case) outgrows what a submission's own run needs
    child_mem_bytes: int | None = None


def _candidate(order: RankedOrder) -> Candidate:
    return Candidate(order.spec, order.formula, order.proof, Figure(order.speedup, order.low, order.high),
                     [c.model_dump() for c in order.cases], order.patched)


def _candidates(ranking: Ranking, top: int, spread: bool = False) -> list[Candidate]:
    """The orders predicted to gain more than the time model resolves (its noise), best first; with `spread` (a
    GPU times them), then the best-ranked order of each family not in the list yet, since the model misses what
    many orders change; at most `top`."""
    picked = [o for o in ranking.orders if o.speedup > 1.0 + ranking.noise]
    if spread:
        groups = {group_of_spec(o.spec) for o in picked}
        for order in ranking.orders:
            if group_of_spec(order.spec) not in groups and order not in picked:
                groups.add(group_of_spec(order.spec))
                picked.append(order)
    return [_candidate(o) for o in picked[:top]]


def _none_predicted(ranking: Ranking) -> str:
    best = max(ranking.orders, key=lambda o: o.speedup, default=None)
    stops = [c.stop_reason.removesuffix(", stopping") for c in ranking.cases if c.stop_reason]
    if best is None:
        said = [line for c in ranking.cases for line in c.search if "rejected" in line]
        return "no order is predicted to beat yours" + (f": {stops[0]}" if stops else ": no order could be ranked"
                                                          + (f" ({said[0]})" if said else ""))
    return (f"no order is predicted to beat yours by more than the time model resolves ({ranking.noise:.1%}): the "
            f"best, {best.spec}, {best.speedup:.3f}x [{best.low:.3f}, {best.high:.3f}] predicted (time model "
            f"{ranking.model})")


def suggest(ask: Ask, code: str, filename: str, limits: Limits, child_s: float, on_gpu: bool,
            on_note: Callable[[str], None] = lambda text: None,
            should_yield: Callable[[], bool] = lambda: False) -> Suggestion:
    """The suggestion for `code`: rank in sandboxed children (each given `child_s` wall seconds), then time the best
    orders against the submission's own on this GPU (ask.measure) or check their patched files with the task's
    tests (predicted only), through the evaluator under `limits`. SuggestFailed (one line) when none can be made;
    SuggestYielded between children when `should_yield()` says a submission's job waits."""
    children = child_limits(limits, child_s, ask.child_mem_bytes)
    phases: dict[str, float] = {}
    mark = time.perf_counter()
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        on_note(text)

    base = {"task": ask.task, "cases": ask.cases, "target": ask.target}
    resources = None
    try:
        resources = _ask(code, filename, {"op": "resources", **base}, children, on_gpu, interpret=False).resources
    except SuggestFailed as err:
        note(f"occupancy: the kernel's resources could not be read ({err}); 1 program per SM assumed")
    phases["compile (resources)"] = time.perf_counter() - mark
    if should_yield():
        raise SuggestYielded("a submission's job is waiting")
    mark = time.perf_counter()
    # a case whose trace has to interpret every program may take a quarter of the child's time
    message = {"op": "rank", **base, "top": ask.top, "sweep": ask.top if ask.measure else 0,
               "screen_s": ask.screen_s, "sim_engine": ask.sim_engine,
               "resources": resources.model_dump() if resources else None, "interpret_s": child_s / 4}
    ranking = _ask(code, filename, message, children, on_gpu, interpret=True).ranking
    phases["trace and rank (sandboxed child)"] = time.perf_counter() - mark
    if ranking is None:
        raise SuggestFailed("the ranking child sent no ranking")
    result = Suggestion(outcome="none", headline="", kernel=ranking.kernel, site=ranking.site, model=ranking.model,
                        cases=[c.model_dump() for c in ranking.cases], notes=notes, phases_s=phases)
    if len(ask.cases) < len(ask.labels):
        note(f"ranked at {len(ask.cases)} of the {len(ask.labels)} benchmark cases "
             f"({', '.join(c['label'] for c in ask.cases)})" + ("; timed at every case" if ask.measure else ""))
    result.candidates = _candidates(ranking, ask.top, spread=ask.measure)
    if ask.measure and not _candidates(ranking, ask.top) and result.candidates:
        note(f"{_none_predicted(ranking)}; {len(result.candidates)} orders of different families are timed anyway: "
             "this GPU is otherwise idle, the model can miss what an order changes, and only a measured gain is "
             "shown")
    if not result.candidates:
        result.headline = _none_predicted(ranking)
        return result
    mark = time.perf_counter()
    if ask.measure:
        result.gpu = measure(ask, code, filename, result.candidates, limits, note, should_yield)
        phases["interleaved timing on the GPU"] = time.perf_counter() - mark
        return _measured_outcome(result, ranking)
    for cand in result.candidates:
        if should_yield():
            raise SuggestYielded("a submission's job is waiting")
        run = evaluate_isolated(ask.task, cand.patched, "test", filename=filename, limits=limits,
                                command=f"suggestion check of {cand.spec}")
        cand.tests = "passed" if run.passed else f"failed the task's tests: {run.reason}"
        if not run.passed:
            note(f"order {cand.spec}: the patched file {cand.tests}")
    phases["tests of the patched files"] = time.perf_counter() - mark
    passing = [c for c in result.candidates if c.passed]
    if not passing:
        raise SuggestFailed("no ranked order's patched file passed the task's tests: "
                            + "; ".join(f"{c.spec}: {c.tests}" for c in result.candidates))
    result.best, result.outcome = passing[0], "order"
    result.headline = (f"order {passing[0].spec}: {passing[0].predicted_text(ranking.model)}; not measured (no GPU "
                       "of the leaderboard's type made this suggestion)")
    return result


def _measured_outcome(result: Suggestion, ranking: Ranking) -> Suggestion:
    """The measured verdict: the best timed order is suggested only when its whole interval lies above 1.0."""
    timed = [c for c in result.candidates if c.measured is not None]
    if not timed:
        raise SuggestFailed("no order could be timed against the submission's own: "
                            + "; ".join(result.notes[-3:] or ["no run passed"]))
    best = max(timed, key=lambda c: c.measured.score.speedup)  # type: ignore[union-attr]
    result.best = best
    assert best.measured is not None
    if best.measured.score.low > 1.0:
        result.outcome = "order"
        result.headline = f"order {best.spec}: {best.measured.text()}; {best.predicted_text(ranking.model)}"
    else:
        result.headline = (f"no order beats yours: the best of {len(timed)} timed, {best.spec}, "
                           f"{best.measured.text()}, is not faster with 95% confidence")
    return result


__all__ = ["Ask", "Candidate", "Figure", "Measured", "SuggestFailed", "SuggestYielded", "Suggestion", "child_limits",
           "compare_runs", "suggest"]
