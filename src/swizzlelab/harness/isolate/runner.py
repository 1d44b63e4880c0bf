"""The trusted side of an isolated run: check the arguments, start the sandboxed child, run the mode's phases
(tests, timed requests, profiles, the secret phase, library rows) and build the same EvalReport the in-process
path builds. The jobs live in sandbox, session, timed_requests, clock_stats, secret, library and outcome.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from swizzlelab.errors import NoGpuError, UserError
from swizzlelab.harness.evaluate import MODES, Candidate, EvalReport
from swizzlelab.harness.isolate import caches, disk
from swizzlelab.harness.isolate.caches import KeptCaches
from swizzlelab.harness.isolate.clock_stats import Calibration, clock_verdict, residual_ci_ok
from swizzlelab.harness.isolate.library import library_cases, library_names, time_library_rows, timed_rows
from swizzlelab.harness.isolate.limits import Limits
from swizzlelab.harness.isolate.options import IsolatedOptions, ProgressFn
from swizzlelab.harness.isolate.outcome import IsolatedRun, finished_run
from swizzlelab.harness.isolate.profiling import profile_isolated
from swizzlelab.harness.isolate.sandbox import ChildFailed, ChildProcess, child_workdir, private_root_works
from swizzlelab.harness.isolate.secret import SecretPart, secret_phase, secret_run
from swizzlelab.harness.isolate.session import Session, secret_seed
from swizzlelab.harness.isolate.timed_requests import prepare_cases, time_cases
from swizzlelab.harness.sysinfo import SystemInfo, system_info
from swizzlelab.names import check_file_name

# The code a submission-less `eval TASK` runs in the child: the task's own kernel (the parent adds the order).
TASK_KERNEL_CODE = (
    "# the task's own kernel, run isolated like any submission\n"
    "import os\n"
    "from swizzlelab.tasks import load_task\n"
    "_task = load_task(os.environ['SWIZZLELAB_TASK'])\n\n\n"
    "def custom_kernel(data, order=None):\n"
    "    return _task.custom_kernel(data, order)\n"
)



def evaluate_isolated(task: str | Path, code: str, mode: str, options: IsolatedOptions | None = None,
                      **fields: Any) -> IsolatedRun:
    """Evaluate submission `code` on `task` in `mode` inside a sandboxed child process; `options` (or its fields
    by keyword: filename=, secret=, limits=, budget_s=, ... see IsolatedOptions) say how.

    Never raises for a bad submission (that is a failed IsolatedRun with a one-line reason); raises UserError
    for bad arguments (unknown task or mode, a bad file name, a mode that needs a GPU on a CPU machine).
    With `secret_phase` (ranked only), the same child then times every benchmark case on inputs from that secret,
    returned as the run's `secret_run`.
    """
    opts = replace(options or IsolatedOptions(), **fields)
    opts = replace(opts, limits=opts.limits or Limits())
    loaded, name, formula, info = _checked(task, code, mode, opts)
    started = time.perf_counter()
    workdir, submission, drop_to = child_workdir(code, name, profiling=mode == "profile",
                                                 disk_bytes=opts.limits.disk_bytes)
    kept = _seed_caches(workdir, drop_to, code, opts)
    own = code == TASK_KERNEL_CODE
    label = opts.source or (f"task kernel {Path(loaded.path) / 'kernel.py'}" if own else name)
    candidate = Candidate(fn=lambda data: None, source=label, order_spec=opts.order, formula=formula,
                          submission=None if own else name)
    report = EvalReport(task=loaded.name, mode=mode, candidate=candidate, system=info, command=opts.command,
                        budget_s=opts.budget_s)
    ev = Session(loaded, mode, opts.limits, opts.secret, opts.budget_s, opts.progress, opts.with_baseline, workdir,
                 drop_to)
    ev.formula, ev.order_spec, ev.own_kernel = formula, opts.order, own
    ev.cpu_timing = opts.cpu_timing and not info.is_gpu
    ev.child.extra_env["SWIZZLELAB_TASK"] = str(Path(loaded.path).resolve())
    ev.child.extra_env["SWIZZLELAB_SUBMISSION_TRITON_CACHE"] = str(workdir / caches.SUBMISSION)
    ev.on_started = lambda: kept.keep_trusted(workdir / caches.TRUSTED)
    reason: str | None = None
    profile_files: list[Path] = []
    secret_part: SecretPart | None = None
    try:
        try:
            reason, profile_files = _public_part(ev, report, submission, opts)
        except ChildFailed as failure:
            reason = failure.reason
        reason = reason or ev.child.disk_breach()
        if opts.secret_phase is not None:
            secret_part = secret_phase(ev, opts.secret_phase, reason)
    finally:
        for prep in ev.prepared.values():
            for slots in prep.pool:
                slots.close()
        ev.child.close()
    library = ""
    if reason is None and opts.with_baseline and (ev.on_gpu or ev.cpu_timing) and mode in ("benchmark", "ranked"):
        mark = time.perf_counter()
        library = time_library_rows(lambda lib_code, lib_opts: evaluate_isolated(task, lib_code, mode, lib_opts),
                                    loaded, report, mode, replace(opts, cpu_timing=ev.cpu_timing))
        ev.phase("library rows (each in a child of its own)", mark)
    run = finished_run(report, reason, ev, opts.limits, opts.secret, started, profile_files,
                       {"library_rows": library} if library else {},
                       secret_part.tails if secret_part is not None else None)
    if secret_part is not None and opts.secret_phase is not None:
        run.secret_run = secret_run(secret_part, report, ev, opts.limits, opts.secret_phase)
    if ev.first_call_done:
        kept.keep_code(code, workdir / caches.SUBMISSION)
    disk.remove_workdir(workdir)
    return run


def _checked(task: str | Path, code: str, mode: str, opts: IsolatedOptions) -> tuple[Any, str, Any, SystemInfo]:
    """The loaded task, the checked file name, the proved order (or None) and this machine; UserError (or
    NoGpuError) for a bad argument, before anything is started."""
    from swizzlelab.tasks import load_task

    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if not isinstance(code, str):
        raise UserError("the submission code must be text")
    if opts.budget_s <= 0:
        raise UserError(f"budget_s must be > 0, got {opts.budget_s}")
    loaded = load_task(task)
    name = check_file_name(opts.filename)
    # The order is read and proved here, in the parent: a bad one is a bad argument, not a bad submission.
    formula = None
    if opts.order:
        from swizzlelab.harness.evaluate import NO_TARGET
        from swizzlelab.scenario import load_scenario

        formula = load_scenario(loaded, target=NO_TARGET, config="backend").parse_order(opts.order,
                                                                                        outputs=opts.outputs)
    if formula is not None:
        from swizzlelab.swizzle import to_permutation

        for case in loaded.cases("tests") + loaded.cases("benchmarks"):
            args, consts = loaded.swizzle_args(case)
            to_permutation(formula, loaded.tile_grid(case), args, consts)
    info = system_info()
    if mode in ("benchmark", "ranked") and opts.cpu_timing and not info.is_gpu:
        pass  # tests of the timed flow: interpreter wall times, labelled as CPU figures in the report
    elif mode != "test" and not info.is_gpu:
        raise NoGpuError(f"--mode {mode} needs a CUDA GPU; run --mode test on the CPU")
    elif mode != "test":
        from swizzlelab.runtime import device

        if device() != "cuda":  # e.g. a process that picked the Triton interpreter before it saw the GPU
            raise NoGpuError(f"--mode {mode}: this process sees {info.gpu} but runs kernels on the CPU "
                             f"(TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r}); unset it to time on the GPU")
    if opts.secret_phase is not None and mode != "ranked":
        raise UserError("a secret phase belongs to a ranked run")
    return loaded, name, formula, info


def _seed_caches(workdir: Path, drop_to: int | None, code: str, opts: IsolatedOptions) -> KeptCaches:
    """Triton caches are copied in, never shared: the trusted kernels' (kept from an earlier child, snapshotted
    before its submission ran) and this code's own from its earlier run (else a given seed); what a submission
    writes into its copies dies with the run."""
    kept = KeptCaches(opts.kept_caches)
    caches.copy_tree(kept.trusted() or workdir / "-", workdir / caches.TRUSTED)
    code_cache = kept.of_code(code)
    seed = code_cache if code_cache is not None and code_cache.is_dir() else opts.triton_cache_seed
    caches.copy_tree(Path(seed) if seed is not None else workdir / "-", workdir / caches.SUBMISSION)
    if drop_to is not None:
        for tree in (caches.TRUSTED, caches.SUBMISSION):
            for root, dirs, files in os.walk(workdir / tree):
                for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
                    os.chown(name, drop_to, drop_to, follow_symlinks=False)
    return kept


def _public_part(ev: Session, report: EvalReport, submission: Path,
                 opts: IsolatedOptions) -> tuple[str | None, list[Path]]:
    """The mode's phases in the child: start (and, for timed modes, every case bound and calibrated before the
    submission is imported), tests, timed cases or profiles. Returns the reason it failed (None) and the profile
    files."""
    mode = report.mode
    mark = ev.start_child()
    if mode in ("benchmark", "ranked"):
        prepare_cases(ev, "ranked" if mode == "ranked" else None)
        mark = ev.phase("inputs and clock calibration", mark)
    ev.load_submission(submission)
    ev.phase("import of the submission", mark)
    reason: str | None = None
    if mode in ("test", "ranked", "profile") and opts.tests:
        mark = time.perf_counter()
        report.tests = ev.run_tests()
        ev.phase("tests", mark)
        if not report.tests_passed:
            failed = next(v for v in ev.verdicts if not v["passed"])
            reason = failed["reason"]
    if reason is None and mode in ("benchmark", "ranked"):
        rows, reason = time_cases(ev)
        if mode == "ranked":
            report.ranked = rows
        else:
            report.benchmarks = rows
    profile_files: list[Path] = []
    if reason is None and mode == "profile":
        rows, profile_files = profile_isolated(ev, submission, opts.out_dir)
        report.profiles = rows
        bad = [r for r in rows if not r.check_passed]
        if bad:
            reason = f"profile: {bad[0].check_message}"
    return reason, profile_files


def time_library_ahead(task: str | Path, mode: str, *, limits: Limits, budget_s: float, kept_caches: Path,
                       cpu_timing: bool = False) -> int:
    """Time the library rows of `task` a later run in `mode` (public inputs) would show, unless kept already: an
    idle worker does this so a submission does not wait for them. Returns how many rows were timed now."""
    from swizzlelab.tasks import load_task

    loaded = load_task(task)
    options = IsolatedOptions(limits=limits, budget_s=budget_s, kept_caches=kept_caches, cpu_timing=cpu_timing)
    timed = 0
    for name, _ in library_names(loaded, mode):
        _, _, age = library_cases(lambda code, opts: evaluate_isolated(task, code, mode, opts), loaded, name, mode,
                                  options)
        timed += age is None
    return timed


# Names callers import from here (the CLI, the leaderboard, optimize.suggest, tests, benchmarks) next to the
# runner's own; each lives in the module of its job.
__all__ = ["TASK_KERNEL_CODE", "Calibration", "ChildFailed", "ChildProcess", "IsolatedOptions", "IsolatedRun",
           "ProgressFn", "child_workdir", "clock_verdict", "evaluate_isolated", "private_root_works",
           "residual_ci_ok", "secret_seed", "time_library_ahead", "timed_rows"]
