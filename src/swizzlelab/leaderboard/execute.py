"""One job's evaluation, the same for a local worker and a Ray task: hand the code to the isolated evaluator
(which runs it in a child process with limits) and package what comes back as an Outcome; and one suggestion
(optimize.suggest, whose children trace and rank in the same sandbox).

Nothing here imports the submission: evaluate_isolated and the suggestion's children do that in their own.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swizzlelab.harness.isolate import IsolatedRun, Limits, evaluate_isolated
from swizzlelab.harness.isolate.limits import GIB
from swizzlelab.hw import TARGETS
from swizzlelab.leaderboard.outcome import JobSpec, Outcome
from swizzlelab.leaderboard.settings import Settings
from swizzlelab.leaderboard.suggestions import SuggestSpec
from swizzlelab.optimize.suggest import Ask, SuggestFailed, Suggestion, SuggestYielded, suggest


def _gpu_label(system: dict[str, Any]) -> str:
    gpu = str(system.get("gpu") or "none")
    runtime = str(system.get("runtime") or "")
    return gpu if runtime == "CUDA" or gpu != "none" else f"none ({runtime or 'CPU'})"


def _profile_rows(report: dict[str, Any]) -> list[Any] | None:
    rows = report.get("profiles")
    if not rows:
        return None
    return [{"case": row.get("case"), "kernels": row.get("kernels"), "check": row.get("check")} for row in rows]


def outcome_from_run(run: IsolatedRun, started: dt.datetime, max_profile_bytes: int) -> Outcome:
    """Package an IsolatedRun; .ncu-rep files over the size limit are dropped with a note."""
    files: list[tuple[str, bytes]] = []
    notes: list[str] = []
    for path in run.profile_files or []:
        file = Path(path)
        try:
            size = file.stat().st_size
        except OSError:
            notes.append(f"profile file {file.name} vanished before it was stored")
            continue
        if size > max_profile_bytes:
            notes.append(f"profile file {file.name} is {size} bytes, over the {max_profile_bytes}-byte limit: not stored")
            continue
        files.append((file.name, file.read_bytes()))
    ended = dt.datetime.now(dt.timezone.utc)
    report = dict(run.report or {})
    system = dict(run.system or {})
    return Outcome(
        passed=bool(run.passed), score_ms=run.score_ms, reason=(run.reason or "").strip().splitlines()[0]
        if run.reason else "", report_text=run.report_text or "", result=report,
        stdout_tail=run.stdout_tail or "", stderr_tail=run.stderr_tail or "", system=system,
        gpu=_gpu_label(system), started_at=started, ended_at=ended,
        duration_s=float(run.duration_s if run.duration_s is not None else (ended - started).total_seconds()),
        host=socket.gethostname(), profile=_profile_rows(report), profile_files=files, notes=notes,
    )


def execute(spec: JobSpec, max_profile_bytes: int, budget_s: float = 3.0, limits: Limits | None = None) -> Outcome:
    """Evaluate one job in an isolated child process. A bad submission is a failed Outcome, never an exception;
    an exception here is the service's own failure (the caller retries the job)."""
    started = dt.datetime.now(dt.timezone.utc)
    # Profile mode writes .ncu-rep files here; they are read into the Outcome before the folder goes.
    with tempfile.TemporaryDirectory(prefix=f"swizzlelab-job-{os.getpid()}-") as out_dir:
        # The secret run exists to confirm the public run's score; the library rows (timed in children of their
        # own) are shown from the public run only. A paired secret job runs as the same child's secret phase.
        secret_phase = spec.paired.secret_bytes() if spec.paired is not None else None
        run = evaluate_isolated(spec.task, spec.code, spec.mode, filename=spec.filename, secret=spec.secret_bytes(),
                                out_dir=Path(out_dir), budget_s=budget_s, limits=limits, with_baseline=not spec.secret,
                                command=f"leaderboard job {spec.job_id} ({spec.mode})", kept_caches=kept_caches(),
                                secret_phase=secret_phase)
        outcome = outcome_from_run(run, started, max_profile_bytes)
        if spec.paired is not None:
            secret = run.secret_run
            if secret is None:  # the evaluator always returns one when asked; a missing one is the service's bug
                raise RuntimeError(f"job {spec.job_id}: the paired secret job {spec.paired.job_id} got no run")
            outcome.paired = outcome_from_run(secret, started, max_profile_bytes)
        return outcome


def target_for(gpu_type: str) -> str:
    """The hardware model a leaderboard's GPU type names ("H100" -> "h100"); "auto" for a type without one."""
    key = gpu_type.strip().lower()
    return key if key in TARGETS else "auto"


def suggestion(spec: SuggestSpec, settings: Settings, on_note: Callable[[str], None],
               should_yield: Callable[[], bool] = lambda: False) -> Suggestion:
    """Make a claimed suggestion: trace the submission at the task's benchmark cases and rank orders in sandboxed
    children, then time the best against the submission's own order on this worker's GPU (spec.measure) or check
    their patched files (predicted only). SuggestFailed (a note for the submitter) when none can be made; another
    exception is the service's own failure. SuggestYielded when `should_yield()` (a submission's job waits)."""
    from swizzlelab.runtime import device
    from swizzlelab.tasks import load_task

    loaded = load_task(spec.task)
    cases = loaded.cases("benchmarks")
    if not cases:
        raise SuggestFailed(f"task {spec.task} has no benchmark case to trace at")
    ranked = cases[:settings.suggest_cases] if settings.suggest_cases else cases
    asked = [{"label": loaded.case_label(case), "seed": int(case.get("seed", 0)),
              "sizes": {k: v for k, v in case.items() if k != "seed"},
              "anchor": list(spec.anchors[i]) if i < len(spec.anchors) and spec.anchors[i] else None}
             for i, case in enumerate(ranked)]
    ask = Ask(task=spec.task, cases=asked, labels=[loaded.case_label(c) for c in cases],
              target=target_for(spec.gpu_type), measure=spec.measure, top=settings.suggest_top,
              rounds=settings.suggest_rounds, screen_s=settings.suggest_screen_s,
              sim_engine=settings.suggest_sim_engine, budget_s=settings.eval_budget_s, kept_caches=kept_caches(),
              child_mem_bytes=suggest_child_mem_bytes(settings))
    limits = evaluation_limits(settings)
    return suggest(ask, spec.code, spec.filename, limits, settings.suggest_child_s, on_gpu=device() == "cuda",
                   on_note=on_note, should_yield=should_yield)


def evaluation_limits(settings: Settings) -> Limits:
    """The isolated child's limits of every evaluation a worker runs: its wall times, host memory, disk quota."""
    return Limits(compile_s=settings.compile_s, run_s=settings.run_s, host_mem_bytes=settings.host_mem_bytes(),
                  disk_bytes=int(settings.disk_gib * GIB))


def suggest_child_mem_bytes(settings: Settings) -> int:
    """A ranking child's resident memory: as set, else an evaluation's (every local worker may rank at once)."""
    if settings.suggest_child_mem_gib:
        return int(settings.suggest_child_mem_gib * GIB)
    return settings.host_mem_bytes()


def kept_caches() -> Path:
    """This worker's kept Triton caches (a submission's secret run reuses what its public run compiled)."""
    return Path(tempfile.gettempdir()) / f"swizzlelab-tcache-{os.getpid()}"


def describe_failure(err: BaseException) -> str:
    """One line for a job the service could not evaluate (kept in Job.error; the traceback goes to the log)."""
    traceback.print_exception(err)
    return f"{type(err).__name__}: {err}".splitlines()[0]
