"""The four evaluation modes of a task's kernel or a user's submission: test, benchmark, ranked, profile.

Each mode returns an EvalReport (report.py renders it as leaderboard-shaped text and as JSON).
"""

from __future__ import annotations

import inspect
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.harness.ncu import NAMED_METRIC_IDS, run_ncu
from swizzlelab.harness.correctness import CaseResult, check_correctness, derive_seed
from swizzlelab.harness.sysinfo import SystemInfo, system_info
from swizzlelab.harness.requests import LIBRARY_BUDGET_S, time_requests
from swizzlelab.harness.timing import NO_GPU_MESSAGE, Comparison, Timing, compare_unpaired, geometric_mean
from swizzlelab.hw import resolve_target
from swizzlelab.io import atomic_write_text, load_module, module_name_for
from swizzlelab.scenario import load_scenario

MODES = ("test", "benchmark", "ranked", "profile")
# eval measures on the local GPU and predicts nothing: its scenarios carry the H100 model only as a placeholder.
NO_TARGET = resolve_target("h100", gpu_name="")
ProgressFn = Callable[[str], None]


@dataclass
class Candidate:
    """What is evaluated: the task's own kernel (optionally with an order) or a submission's custom_kernel."""

    fn: Callable[[Any], Any]
    source: str  # "task kernel <path>" or the submission path
    order_spec: str | None = None
    formula: Any = None  # swizzlelab.swizzle.Formula when an order was given
    submission: str | None = None

    def describe_order(self) -> str:
        if self.order_spec:
            return self.order_spec
        return "the submission's own" if self.submission else "default (the kernel's own site)"


@dataclass
class ExtraBaseline:
    """A further library row of a ranked case (e.g. cuDNN attention), timed as the candidate is and compared."""

    name: str
    description: str
    timing: Timing | None = None
    comparison: Comparison | None = None  # a = this library, b = candidate: speedup > 1 means faster than it
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "name": self.name,
            "description": self.description,
            "timing": self.timing.to_dict() if self.timing else None,
            "speedup_vs_baseline": (
                {"speedup": c.speedup, "ci95": [c.ci_low, c.ci_high], "method": c.method,
                 "is_improvement": c.is_improvement} if c else None
            ),
            "error": self.error,
        }


@dataclass
class BenchRow:
    """One timed case: its correctness, the candidate's timing and the library baseline's (same loop)."""

    case: dict[str, Any]
    seed: int
    check: CaseResult
    candidate: Timing | None = None
    baseline: Timing | None = None
    comparison: Comparison | None = None  # a = baseline, b = candidate: speedup > 1 means faster than library
    order: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    baseline_error: str = ""
    extra_baselines: list[ExtraBaseline] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": dict(self.case),
            "seed": self.seed,
            "check": self.check.to_dict(),
            "candidate": self.candidate.to_dict() if self.candidate else None,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup_vs_baseline": (
                {"speedup": self.comparison.speedup, "ci95": [self.comparison.ci_low, self.comparison.ci_high],
                 "method": self.comparison.method, "is_improvement": self.comparison.is_improvement}
                if self.comparison else None
            ),
            "order": self.order,
            "error": self.error,
            "baseline_error": self.baseline_error,
            "extra_baselines": [extra.to_dict() for extra in self.extra_baselines],
        }


@dataclass
class ProfileRow:
    """One profiled case: the ncu metrics of each kernel the candidate launched."""

    case: dict[str, Any]
    kernels: list[Any]  # list[KernelMetrics]
    report_path: str
    check_message: str
    check_passed: bool
    order: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": dict(self.case),
            "kernels": [k.to_dict() for k in self.kernels],
            "report_path": self.report_path,
            "check": {"passed": self.check_passed, "message": self.check_message},
            "order": self.order,
        }


@dataclass
class EvalReport:
    """Everything one `swizzlelab eval` run found, in the order the text report prints it."""

    task: str
    mode: str
    candidate: Candidate
    system: SystemInfo
    command: str = ""
    tests: list[CaseResult] = field(default_factory=list)
    benchmarks: list[BenchRow] = field(default_factory=list)
    ranked: list[BenchRow] = field(default_factory=list)
    profiles: list[ProfileRow] = field(default_factory=list)
    score_ms: float | None = None
    budget_s: float = 0.0

    @property
    def tests_passed(self) -> bool:
        return all(result.passed for result in self.tests)

    @property
    def success(self) -> bool:
        rows = self.benchmarks + self.ranked
        return (
            self.tests_passed
            and all(row.check.passed and not row.error for row in rows)
            and all(p.check_passed for p in self.profiles)
        )


# ---------------------------------------------------------------- candidates


def load_submission(path: str | Path) -> Callable[..., Any]:
    """The custom_kernel of a submission file; one-line UserError when the file is missing or lacks it."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"submission file {path} does not exist; give the path of a .py file defining custom_kernel(data)")
    module = load_module(file, module_name_for(file, "swizzlelab_submission"), what=f"submission {path} failed to import")
    kernel = getattr(module, "custom_kernel", None)
    if not callable(kernel):
        raise UserError(f"submission {path} defines no custom_kernel(data); add one that writes into data['out'] and returns it")
    return kernel


def _accepts_order(fn: Callable[..., Any]) -> bool:
    try:
        return "order" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def make_candidate(
    task: Any, submission: str | None = None, order_spec: str | None = None, outputs: list[str] | None = None
) -> Candidate:
    """Build the function under evaluation; the order is parsed (and fitted to the kernel's launch) up front."""
    formula = None
    if order_spec:
        formula = load_scenario(task, target=NO_TARGET, config="backend").parse_order(order_spec, outputs=outputs)
    if submission is None:
        return Candidate(
            fn=lambda data: task.custom_kernel(data, formula),
            source=f"task kernel {Path(task.path) / 'kernel.py'}",
            order_spec=order_spec,
            formula=formula,
        )
    kernel = load_submission(submission)
    if formula is not None and not _accepts_order(kernel):
        raise UserError(
            f"--order needs a submission whose custom_kernel takes `order`; {submission} sets its own order "
            "(drop --order, or add an `order=None` parameter)"
        )
    fn = (lambda data: kernel(data, order=formula)) if formula is not None else (lambda data: kernel(data))
    return Candidate(fn=fn, source=str(submission), order_spec=order_spec, formula=formula, submission=str(submission))


def order_info(task: Any, candidate: Candidate, case: dict[str, Any]) -> dict[str, Any]:
    """Grid and permutation id of the candidate's order on one case (proves the order; raises if not a bijection).
    The grid is the one this process's backend launches (the scenario's "backend" configuration)."""
    info: dict[str, Any] = {"spec": candidate.describe_order()}
    try:
        scenario = load_scenario(task, case, target=NO_TARGET, config="backend")
    except UserError as err:  # a submission may use other tile sizes; the grid is informational here
        info["grid_error"] = str(err)
        return info
    info["grid"] = list(scenario.grid)
    if candidate.formula is not None:
        perm = scenario.permutation(candidate.formula)
        info["permutation_id"] = perm.id
        info["formula"] = candidate.formula.normalized_source().strip()
    return info


# ---------------------------------------------------------------- modes


def _note(progress: ProgressFn | None, text: str) -> None:
    if progress is not None:
        progress(text)


def run_tests(task: Any, candidate: Candidate, progress: ProgressFn | None = None) -> list[CaseResult]:
    """Correctness on every test case (case seed, then a derived seed against cached results)."""
    results = []
    for case in task.cases("tests"):
        order = order_info(task, candidate, case)
        result = check_correctness(task, candidate.fn, case)
        result.order = order
        results.append(result)
        _note(progress, task.case_label(case))
    return results


# How the trusted path compares library rows with the candidate: each timed by the same request loop, apart.
TRUSTED_UNPAIRED_METHOD = ("unpaired delta method: the library timed by the same request loop after the "
                           "candidate, on inputs from the same seed")


def time_extra_baselines(task: Any, candidate: Timing | None, case: dict[str, Any], seed: int) -> list[ExtraBaseline]:
    """Each of the task's extra library rows, timed by the request loop on inputs from `seed` and compared with
    the candidate's figure; a library that cannot run the case (e.g. no cuDNN attention here) becomes a row with
    its one-line error."""
    extras = getattr(task, "extra_baselines", None)
    rows = []
    for name, (description, fn) in (extras() if extras is not None else {}).items():
        row = ExtraBaseline(name=name, description=description)
        try:
            row.timing = time_requests(task, fn, case, seed, LIBRARY_BUDGET_S)
            if candidate is not None:
                row.comparison = compare_unpaired(row.timing, candidate, TRUSTED_UNPAIRED_METHOD)
        except NoGpuError:
            raise
        except Exception as err:  # the library row is informative; the candidate's row stands without it
            row.error = f"{name} not timed: {type(err).__name__}: {err}".splitlines()[0]
        rows.append(row)
    return rows


def time_case(
    task: Any, candidate: Candidate, case: dict[str, Any], seed: int, budget_s: float, extra_baselines: bool = False
) -> BenchRow:
    """Check the candidate on inputs of `seed`, then time it by the request loop the isolated evaluator uses
    (harness.requests), then the task's library baseline the same way (and, with `extra_baselines`, each
    further library row of the task)."""
    row = BenchRow(case=dict(case), seed=seed, check=check_correctness(task, candidate.fn, case, seed=seed),
                   order=order_info(task, candidate, case))
    if not row.check.passed:
        row.error = "not timed: the output is wrong"
        return row
    try:
        row.candidate = time_requests(task, candidate.fn, case, seed, budget_s)
    except NoGpuError:
        raise
    except UserError as err:
        row.error = str(err)
    except Exception as err:  # a kernel that crashes only under repetition: reported, the run goes on
        row.error = f"timing failed: {type(err).__name__}: {err}".splitlines()[0]
    if row.error:
        return row
    baseline = getattr(task, "baseline", None)
    if baseline is not None:
        try:
            row.baseline = time_requests(task, baseline, case, seed, LIBRARY_BUDGET_S)
            row.comparison = compare_unpaired(row.baseline, row.candidate, TRUSTED_UNPAIRED_METHOD)
        except NoGpuError:
            raise
        except Exception as err:  # the library may not support a case; the candidate's figure stands
            row.baseline_error = f"baseline not timed: {type(err).__name__}: {err}".splitlines()[0]
    if extra_baselines:
        row.extra_baselines = time_extra_baselines(task, row.candidate, case, seed)
    return row


def run_benchmarks(
    task: Any, candidate: Candidate, budget_s: float, salt: str | None = None, progress: ProgressFn | None = None
) -> list[BenchRow]:
    """Every benchmark case: correctness, then timing. With `salt`, inputs come from a seed derived from the
    case's seed (the ranked run), so a submission tuned to the benchmark inputs gains nothing, and the task's
    extra library rows are timed too."""
    rows = []
    for case in task.cases("benchmarks"):
        seed = derive_seed(case["seed"], salt) if salt else int(case["seed"])
        rows.append(time_case(task, candidate, case, seed, budget_s, extra_baselines=bool(salt)))
        _note(progress, task.case_label(case))
    return rows


def profile_case(
    task: Any, candidate: Candidate, case: dict[str, Any], out_dir: Path, index: int
) -> ProfileRow:
    """Profile one case in a child process under ncu; the child checks the profiled output."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / f"{task.name}-profile-case{index}.ncu-rep"
    with tempfile.TemporaryDirectory(prefix="swizzlelab-profile-") as tmp:
        result_path = Path(tmp) / "child.json"
        cmd = [sys.executable, "-m", "swizzlelab.harness.profile_child", "--task", str(task.path),
               "--case", json.dumps(case), "--result", str(result_path)]
        if candidate.submission:
            cmd += ["--submission", str(Path(candidate.submission).resolve())]
        if candidate.order_spec:
            cmd += ["--order", candidate.order_spec]
        kernels = run_ncu(cmd, list(NAMED_METRIC_IDS), profile_from_start=False, report_path=report)
        try:
            child = json.loads(result_path.read_text())
        except (OSError, ValueError):
            child = {"passed": False, "message": "the profiled child process wrote no result"}
    return ProfileRow(case=dict(case), kernels=kernels, report_path=str(report),
                      check_message=str(child.get("message", "")), check_passed=bool(child.get("passed")),
                      order=order_info(task, candidate, case))


def profile(
    task: Any, case: dict[str, Any], order: Any = None, out_dir: str | Path | None = None
) -> list[Any]:
    """ncu metrics (NAMED_METRICS) of each kernel the task's kernel launches on `case` with `order`
    (a spec string, a Formula, or None for the kernel's own site); needs a GPU and `ncu`."""
    if system_info().runtime != "CUDA":
        raise NoGpuError("profiling needs a CUDA GPU and Nsight Compute; run --mode test on the CPU")
    target = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="swizzlelab-ncu-"))
    spec = order
    if order is not None and not isinstance(order, str):
        # The child process re-parses the order, so a Formula travels as a formula file.
        spec = str(atomic_write_text(target / f"order-{order.key}.py", order.normalized_source()))
    candidate = make_candidate(task, None, spec)
    return profile_case(task, candidate, case, target, 0).kernels


def run_mode(
    task: Any,
    candidate: Candidate,
    mode: str,
    out_dir: Path | None = None,
    budget_s: float = 3.0,
    progress: ProgressFn | None = None,
    command: str = "",
) -> EvalReport:
    """Run one mode. `test` works under the CPU interpreter; the others need CUDA (NoGpuError otherwise)."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    info = system_info()
    if mode != "test" and not info.is_gpu:
        raise NoGpuError(f"--mode {mode} needs a CUDA GPU; run --mode test on the CPU")
    report = EvalReport(task=task.name, mode=mode, candidate=candidate, system=info, command=command,
                        budget_s=budget_s)
    if mode in ("test", "ranked"):
        report.tests = run_tests(task, candidate, progress)
    if mode == "benchmark":
        report.benchmarks = run_benchmarks(task, candidate, budget_s, None, progress)
    if mode == "ranked":
        report.ranked = run_benchmarks(task, candidate, budget_s, "ranked", progress)
        means = [row.candidate.mean_ms for row in report.ranked if row.candidate is not None]
        if means and len(means) == len(report.ranked):
            report.score_ms = geometric_mean(means)
    if mode == "profile":
        target = out_dir if out_dir is not None else Path(tempfile.mkdtemp(prefix="swizzlelab-ncu-"))
        for index, case in enumerate(task.cases("benchmarks")):
            report.profiles.append(profile_case(task, candidate, case, target, index))
            _note(progress, task.case_label(case))
    return report


def case_count(task: Any, mode: str) -> int:
    """How many progress steps a mode takes (for the progress bar)."""
    n_tests = len(task.cases("tests"))
    n_bench = len(task.cases("benchmarks"))
    return {"test": n_tests, "benchmark": n_bench, "ranked": n_tests + n_bench, "profile": n_bench}[mode]


__all__ = [
    "MODES",
    "BenchRow",
    "Candidate",
    "ExtraBaseline",
    "EvalReport",
    "ProfileRow",
    "case_count",
    "run_mode",
    "load_submission",
    "make_candidate",
    "order_info",
    "profile",
    "profile_case",
    "run_benchmarks",
    "run_tests",
    "time_case",
    "time_extra_baselines",
    "NO_GPU_MESSAGE",
]
