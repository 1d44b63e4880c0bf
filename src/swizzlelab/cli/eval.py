"""CLI sub-command `eval TASK [SUBMISSION.py] --mode ... [--order] [--out]`: check, time, rank or profile a kernel.

The harness does the work; this module turns options into a candidate and prints the report.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from swizzlelab.cli.common import console, echo, outputs_option, progress_bar, split_outputs
from swizzlelab.errors import UserError
from swizzlelab.harness.evaluate import MODES, case_count, make_candidate, run_mode
from swizzlelab.harness.isolate import TASK_KERNEL_CODE, evaluate_isolated
from swizzlelab.harness.report import render_text, write_reports
from swizzlelab.io import atomic_write_text
from swizzlelab.cli import userkernel as uk_cli
from swizzlelab.tasks import load_task


def _eval_isolated(task, submission: Optional[str], mode: str, order: Optional[str], outputs: Optional[list[str]],
                   out: Optional[Path], budget_s: float, command: str) -> None:
    """The default path: the submission (or the task's kernel) runs in a sandboxed child; exit 1 unless passed."""
    if submission is None:
        code, filename = TASK_KERNEL_CODE, "task_kernel.py"
    else:
        path = Path(submission)
        if not path.is_file():
            raise UserError(f"submission file {submission} does not exist; give the path of a .py file defining custom_kernel(data)")
        try:
            code = path.read_text()
        except UnicodeDecodeError:
            raise UserError(f"submission {submission} is not UTF-8 text; give a .py file defining custom_kernel(data)") from None
        filename = path.name if path.name.endswith(".py") else "submission.py"
    err_console = console(stderr=True)
    total = case_count(task, mode) + (len(task.cases("tests")) if mode == "profile" else 0)
    with progress_bar(err_console, label=f"[bold]{task.name}[/] {mode} (isolated)") as progress:
        bar = progress.add_task("", total=total)
        run = evaluate_isolated(task.path, code, mode, filename=filename, progress=lambda label: progress.update(
            bar, advance=1, description=label), budget_s=budget_s, command=command, out_dir=out, order=order,
            outputs=outputs, source=submission)
    echo(run.report_text, nl=False)  # the report holds what the submission printed and raised
    if out is not None:
        stem = f"{task.name}-{mode}"
        text_path = atomic_write_text(out / f"{stem}.txt", run.report_text)
        json_path = atomic_write_text(out / f"{stem}.json", json.dumps(run.report, indent=2) + "\n")
        err_console.print(f"reports: {text_path} {json_path}", highlight=False)
    if not run.passed:
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the main app."""

    @app.command("eval")
    def eval_command(
        task: Optional[str] = typer.Argument(None, help="A task name (see `swizzlelab tasks`) or a task folder; with --kernel, the task whose generate_input makes the wrapper's inputs."),
        submission: Optional[str] = typer.Argument(
            None, help="A .py file defining custom_kernel(data); omit to evaluate the task's own kernel."
        ),
        mode: str = typer.Option("test", "--mode", help="test | benchmark | ranked | profile"),
        order: Optional[str] = typer.Option(
            None, "--order", help="block order: a family spec (grouped:GROUP_M=8) or a formula .py file"
        ),
        outputs: Optional[str] = typer.Option(None, "--outputs", help=outputs_option()),
        out: Optional[Path] = typer.Option(
            None, "--out", help="folder for <task>-<mode>.txt/.json (and .ncu-rep files in profile mode)"
        ),
        budget_s: float = typer.Option(
            3.0, "--budget-s", help="timing budget per benchmark case, seconds (stops earlier at 0.1% sem)"
        ),
        kernel: Optional[str] = uk_cli.kernel_opt(),
        config: list[str] = uk_cli.config_opt(),
        autotune_config: Optional[int] = uk_cli.autotune_opt(),
        launch: Optional[str] = uk_cli.launch_opt(),
        tensor: list[str] = uk_cli.tensor_opt(),
        arg: list[str] = uk_cli.arg_opt(),
        site: Optional[str] = uk_cli.site_opt(),
        inputs: Optional[str] = uk_cli.inputs_opt(),
        size: list[str] = typer.Option([], "--size", help="with --kernel: sizes NAME=N of the wrapper's inputs"),
        trusted: bool = typer.Option(
            False, "--trusted",
            help="run the kernel inside this process (fast, for your own kernels); default: an isolated sandboxed "
                 "child whose outputs and clock this process checks",
        ),
    ) -> None:
        """Check, time, rank or profile a kernel on a task's cases; prints a leaderboard-shaped report."""
        opened = uk_cli.load_kernel_option(kernel, "auto")
        if opened is not None and opened.is_task_kernel:
            raise UserError(f"--kernel {kernel} is a task kernel module (custom_kernel, tile_grid, swizzle_args): "
                            "evaluate it as the SUBMISSION argument, e.g. swizzlelab eval TASK FILE")
        if opened is not None:
            out_console = console(stderr=True)
            # a benchmark times the kernel: at the config its own autotuner picks (on a GPU); a test checks outputs
            options = uk_cli.KernelOptions(task, config, autotune_config, launch, tensor, arg, size, site, inputs,
                                           own_autotune=mode == "benchmark")
            scenario = uk_cli.user_scenario(out_console, opened, options, target="auto", occupancy=None,
                                            simulates=False)
            if not uk_cli.eval_user_kernel(scenario, order, split_outputs(outputs), mode, budget_s, console()):
                raise typer.Exit(code=1)
            return
        if task is None:
            raise UserError("name a task (see `swizzlelab tasks`), or give --kernel FILE")
        if mode not in MODES:
            raise UserError(f"unknown --mode {mode!r}: use one of {', '.join(MODES)}")
        if budget_s <= 0:
            raise UserError(f"--budget-s must be > 0, got {budget_s}")
        loaded = load_task(task)
        command = "swizzlelab " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        if not trusted:
            _eval_isolated(loaded, submission, mode, order, split_outputs(outputs), out, budget_s, command)
            return
        candidate = make_candidate(loaded, submission, order, split_outputs(outputs))
        candidate.source += " (trusted: run inside the evaluating process, not isolated)"
        err_console = console(stderr=True)
        with Progress(
            TextColumn(f"[bold]{loaded.name}[/] {mode}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=err_console,
            transient=True,
        ) as progress:
            bar = progress.add_task("", total=case_count(loaded, mode))

            def advance(label: str) -> None:
                progress.update(bar, advance=1, description=label)

            report = run_mode(loaded, candidate, mode, out, budget_s, advance, command)
        echo(render_text(report), nl=False)
        if out is not None:
            text_path, json_path = write_reports(report, out)
            err_console.print(f"reports: {text_path} {json_path}", highlight=False)
        if not report.success:
            raise typer.Exit(code=1)
