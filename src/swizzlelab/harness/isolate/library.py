"""Library rows of an isolated run: each of the task's library implementations timed through the same isolated
loop in a child of its own (kept a while by the evaluating process), compared unpaired with the submission.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import swizzlelab
from swizzlelab.harness.evaluate import ExtraBaseline
from swizzlelab.harness.isolate import caches
from swizzlelab.harness.isolate.caches import KeptCaches
from swizzlelab.harness.isolate.options import IsolatedOptions
from swizzlelab.harness.isolate.outcome import IsolatedRun
from swizzlelab.harness.isolate.sandbox import one_line
from swizzlelab.harness.requests import LIBRARY_BUDGET_S
from swizzlelab.harness.sysinfo import system_info
from swizzlelab.harness.timing import Timing, compare_unpaired

# (code, options) -> the run of that code on the task in the mode at hand: the runner's evaluate_isolated.
Evaluate = Callable[[str, IsolatedOptions], IsolatedRun]
UNPAIRED_METHOD = ("unpaired delta method: the library timed through the same isolated loop in a child of its own, "
                   "after the submission, on inputs from the same secret")
# The evaluator's code a kept row depends on: the isolated loop's modules and the shared loop and plan.
EVALUATOR_FILES = (*sorted(Path(__file__).resolve().parent.glob("*.py")),
                   Path(__file__).resolve().parents[1] / "loop.py", Path(__file__).resolve().parents[1] / "requests.py")
# A library row of the task (its `baseline`, or one of its EXTRA_BASELINES), run through the isolated loop like a
# submission, so that it is timed the way the submission was: the loop's duty cycle sets the GPU's clock (measured
# on an H100: a sustained in-process loop ran an 8192^3 GEMM at ~1600 MHz, the isolated loop at ~1900 MHz).
BASELINE_CODE = (
    "# the task's library implementation {name!r}, run isolated like any submission\n"
    "import os\n"
    "from swizzlelab.tasks import load_task\n"
    "_task = load_task(os.environ['SWIZZLELAB_TASK'])\n"
    "_fn = _task.baseline if {name!r} == 'baseline' else _task.extra_baselines()[{name!r}][1]\n\n\n"
    "def custom_kernel(data, order=None):\n"
    "    return _fn(data)\n"
)



def _library_key(task: Any, name: str, mode: str, secret: bytes | None, budget_s: float) -> str:
    """What a kept library row depends on: the task's files, the row, the mode, the inputs' secret, the budget,
    the GPU and this evaluator's code."""
    digest = hashlib.sha256()
    folder = Path(task.path).resolve()
    for path in sorted(folder.glob("*.py")) + sorted(folder.glob("*.yml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for path in EVALUATOR_FILES:
        digest.update(path.read_bytes())
    info = system_info()
    digest.update(json.dumps([str(folder), name, mode, secret.hex() if secret else "", float(budget_s), info.gpu,
                              getattr(swizzlelab, "__version__", "")]).encode())
    return digest.hexdigest()[:32]


def library_names(loaded: Any, mode: str) -> list[tuple[str, str]]:
    """The task's library rows shown in `mode`: (name, description)."""
    names = [("baseline", "")] if getattr(loaded, "baseline", None) is not None else []
    if mode == "ranked":
        names += [(name, description) for name, (description, _) in loaded.extra_baselines().items()]
    return names


def library_cases(evaluate: Evaluate, loaded: Any, name: str, mode: str,
                  options: IsolatedOptions) -> tuple[list[Any], str, float | None]:
    """One library row's timed cases (candidate dicts), why a case has none, and the age of kept rows (None:
    timed now). Rows are kept by an evaluating process for caches.LIBRARY_KEEP_S. Of `options`, the row's run
    takes the secret, limits, budget (at most LIBRARY_BUDGET_S), Triton cache seed, CPU timing and kept caches."""
    kept = KeptCaches(options.kept_caches)
    budget = min(options.budget_s, LIBRARY_BUDGET_S)
    key = _library_key(loaded, name, mode, options.secret, budget)
    found = kept.library(key)
    if found is not None:
        return found[0], "not timed when it was kept", found[1]
    run = evaluate(BASELINE_CODE.format(name=name), IsolatedOptions(
        filename=f"library_{name}.py", secret=options.secret, limits=options.limits, budget_s=budget,
        with_baseline=False, triton_cache_seed=options.triton_cache_seed, tests=False, cpu_timing=options.cpu_timing,
        kept_caches=options.kept_caches))
    cases = [row.get("candidate") for row in timed_rows(run.report, mode)]
    if run.passed and cases and all(c and c.get("samples_ms") for c in cases):
        kept.keep_library(key, cases)
    return cases, run.reason or "no figure for this case", None


def time_library_rows(evaluate: Evaluate, loaded: Any, report: Any, mode: str, options: IsolatedOptions) -> str:
    """The task's library rows for each timed case: each library implementation in a child of its own through
    the same loop (same secret, so the same inputs when one is given), compared unpaired with the submission.
    Returns where the rows came from, for the report."""
    rows = report.ranked if mode == "ranked" else report.benchmarks
    names = library_names(loaded, mode)
    ages: list[float] = []
    for name, description in names:
        lib_cases, run_reason, age = library_cases(evaluate, loaded, name, mode, options)
        if age is not None:
            ages.append(age)
        for index, row in enumerate(rows):
            cand = (lib_cases[index] if index < len(lib_cases) else None) or None
            timing = comparison = None
            error = ""
            if cand and cand.get("samples_ms"):
                timing = Timing.from_dict(cand)
                if row.candidate is not None:
                    comparison = compare_unpaired(timing, row.candidate, UNPAIRED_METHOD)
            else:
                error = one_line(f"{name} not timed: {run_reason}")
            if name == "baseline":
                row.baseline, row.comparison = timing, comparison
                row.baseline_error = error
            else:
                row.extra_baselines.append(ExtraBaseline(name=name, description=description, timing=timing,
                                                         comparison=comparison, error=error))
    if not ages:
        return "timed in this run"
    return (f"{len(ages)} of {len(names)} kept by this evaluating process from runs {min(ages):.0f}-{max(ages):.0f} s "
            f"earlier on the same GPU (trusted code; timed again after {caches.LIBRARY_KEEP_S:.0f} s)")



def timed_rows(report: dict[str, Any] | None, mode: str) -> list[dict[str, Any]]:
    """The timed case rows of an isolated run's report dict, one per benchmark case (ranked mode keeps them under
    ranked.cases, benchmark mode as the benchmarks list)."""
    rows = (report or {}).get("ranked" if mode == "ranked" else "benchmarks")
    if isinstance(rows, dict):
        rows = rows.get("cases")
    return [row if isinstance(row, dict) else {} for row in rows or []]



__all__ = ["BASELINE_CODE", "Evaluate", "library_cases", "library_names", "time_library_rows", "timed_rows"]
